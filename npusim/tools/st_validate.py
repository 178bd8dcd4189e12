"""`npusim validate ST_OUTPUT --reference MODEL`: the values ST's program computes, unit by unit on the
flashed weights, against the source model run by its own runtime (TFLite interpreter or ONNX Runtime).

Inputs are the model's own (its layout and dtype: NHWC uint8/int8 images for TFLite), seeded by default;
`st_inputs` turns them into the bytes of ST's input buffers (quantised by a buffer's scale and zero point
when given as floats). Each output is dequantised by its buffer's parameters (float outputs as they are)
and compared with the reference's output of the same shape: cosine, the share of values on the same
quantisation step, and the largest distance in steps (the step of an output's int8 grid: its scale, or
for a float output the scale its software dequantisation reads).

A weight image the compile's own quantisation parameters contradict fails (`weights.parameter_mismatches`);
values that depend on bytes read before written say so (`st_uninit`).

Why one module of ~550 lines: the output comparison and `--per-layer` (each layer chained and alone) share
the input binding and the step metrics; which buffer stands for which tensor is `st_pairing`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import DataError
from .st_pairing import INTERNAL_WIDE, consumers_note, not_compared, pair_layers, same_values_other_order
from .st_uninit import UninitDependence
from .st_uninit import lines as uninit_lines

def _to_buffer_layout(a: np.ndarray, b, source_layout: str) -> np.ndarray:
    """The array in the buffer's memory order: an NCHW model's 4-D input is moved to the buffer's
    channels-last order; any other shape than the buffer's is refused (an NCHW array for an NHWC model
    is not silently reordered: the field's "input fed in NCHW" bug stays visible)."""
    want = tuple(b.mem_shape or b.shape)
    if source_layout == "NCHW" and a.ndim == 4 and tuple(a.shape[p] for p in (0, 2, 3, 1)) == want:
        return np.transpose(a, (0, 2, 3, 1))
    if tuple(a.shape) != want and int(np.prod(want)) == a.size and len(want) == a.ndim:
        raise DataError(f"input '{b.name}': shape {list(a.shape)}, the buffer holds {list(want)} "
                        f"({source_layout} model input expected)")
    return a


def st_inputs(out, arrays: list, source_layout: str = "NHWC") -> dict:
    """{ST input buffer: array of its dtype, in its memory layout} from the model's inputs in order.
    Integer arrays must have the buffer's dtype; float arrays are quantised by the buffer's scale and zero
    point (round half to even, clamped)."""
    from ..importers.stedgeai.execute import buffer_dtype

    bufs = [b for b in out.buffers if b.role == "input" and not b.is_param]
    if len(arrays) != len(bufs):
        raise DataError(f"{len(arrays)} input(s) given, ST's program takes {len(bufs)} "
                        f"({', '.join(b.name for b in bufs)})")
    res = {}
    for a, b in zip(arrays, bufs):
        a = np.asarray(a)
        dt = buffer_dtype(b)
        if a.dtype.kind == "f" and dt.kind in "iu":
            if not b.scale:
                raise DataError(f"input '{b.name}': float values given, the buffer has no scale to quantise them")
            info = np.iinfo(dt)
            zp = int(b.zero_point[0]) if b.zero_point else 0
            a = np.clip(np.rint(a.astype(np.float64) / float(b.scale[0])) + zp, info.min, info.max).astype(dt)
        elif a.dtype != dt:
            raise DataError(f"input '{b.name}': {a.dtype} values given, the buffer holds {dt}")
        a = _to_buffer_layout(a, b, source_layout)
        if a.size * a.itemsize != b.size:
            raise DataError(f"input '{b.name}': {a.size} values of shape {list(a.shape)}, the buffer holds "
                            f"{b.size // max(a.itemsize, 1)} ({list(b.mem_shape or b.shape)})")
        res[b.name] = np.ascontiguousarray(a)
    return res


def _reference_io(model: str):
    """([(name, shape, dtype)], kind) of the reference model's inputs."""
    if str(model).lower().endswith(".tflite"):
        from ..reference_tflite import _interpreter, model_bytes

        it = _interpreter(model_bytes(model), "builtin")
        return [(d["name"], tuple(int(x) for x in d["shape"]), np.dtype(d["dtype"]))
                for d in it.get_input_details()], "tflite"
    from ..ort_session import session  # noqa: PLC0415

    sess = session(model, threads=1)
    kinds = {"tensor(float)": np.float32, "tensor(uint8)": np.uint8, "tensor(int8)": np.int8}
    return [(i.name, tuple(d if isinstance(d, int) else 1 for d in i.shape), np.dtype(kinds.get(i.type, np.float32)))
            for i in sess.get_inputs()], "onnx"


def seeded_array(rng: np.random.Generator, shape, dt: np.dtype) -> np.ndarray:
    """Seeded values of one input: uniform over an integer type's range, else standard normal."""
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, int(info.max) + 1, shape, dtype=dt)
    return rng.standard_normal(shape).astype(dt)


def seeded_model_inputs(model: str, seed: int = 0) -> list:
    """The model's inputs, seeded (`seeded_array`, in the model's input order)."""
    ins, _ = _reference_io(model)
    rng = np.random.default_rng(seed)
    return [seeded_array(rng, shape, dt) for _, shape, dt in ins]


def reference_outputs(model: str, arrays: list, kernels: str = "builtin") -> list:
    """[(name, float64 array, step)] of the reference on the inputs (dequantised where quantised). A
    TFLite model runs on `kernels` (builtin: the set the per-layer reference runs on)."""
    ins, kind = _reference_io(model)
    feed = {n: a for (n, _, _), a in zip(ins, arrays)}
    if kind == "tflite":
        from ..reference_tflite import _interpreter, model_bytes, tflite_run

        outs = tflite_run(model, feed, kernels)
        it = _interpreter(model_bytes(model), "builtin")
        quant = {d["name"]: d["quantization"] for d in it.get_output_details()}
        res = []
        for name, v in outs.items():
            s, z = quant.get(name, (0.0, 0))
            f = (v.astype(np.float64) - z) * s if s else v.astype(np.float64)
            res.append((name, f, float(s) if s else None))
        return res
    from ..reference import ort_run

    return [(n, np.asarray(v, np.float64), None) for n, v in ort_run(model, feed, threads=1).items()]


@dataclass
class OutputMetrics:
    name: str
    reference: str
    shape: tuple
    cosine: float
    exact: float | None  # share of values on the reference's quantisation step
    max_steps: float | None
    step: float | None
    max_abs: float
    # {kernel set: cosine of the reference's own output on that set vs the builtin one}, measured when
    # an output fails: how far the interpreter's own implementations part on these inputs
    reference_spread: dict | None = None
    uninitialised: list = field(default_factory=list)  # `st_uninit.UninitRead` dicts the values depend on

    def line(self) -> str:
        q = (f"exact {self.exact:.2%}, max {self.max_steps:g} step(s) of {self.step:.4g}"
             if self.step else "no quantisation step known")
        spread = ("" if not self.reference_spread else "\n    the reference against itself on its other kernel "
                  "sets: " + ", ".join(f"{k} cosine {v:.6f}" for k, v in self.reference_spread.items()))
        return "\n".join([f"  {self.name} vs {self.reference} {list(self.shape)}: cosine {self.cosine:.6f}, {q}, "
                          f"max |diff| {self.max_abs:.4g}{spread}"] + uninit_lines(self.uninitialised))


@dataclass
class StValidation:
    outputs: list = field(default_factory=list)
    min_cosine: float = 0.99
    notes: list = field(default_factory=list)
    weight_image: list = field(default_factory=list)  # what the weight image contradicts in the compile

    @property
    def passed(self) -> bool:
        return all(m.cosine >= self.min_cosine for m in self.outputs) and not self.weight_image

    def text(self) -> str:
        head = ("validate: " + ("PASS" if self.passed else "FAIL") + f" (cosine >= {self.min_cosine} per output"
                + ("; the weight image contradicts the compile's own parameters)" if self.weight_image else ")"))
        return "\n".join([head] + [m.line() for m in self.outputs]
                         + [f"  weight image: {w} (another compile's image, or a corrupted one?)" for w in self.weight_image]
                         + [f"  note: {n}" for n in self.notes])

    def to_dict(self) -> dict:
        return {"passed": self.passed, "min_cosine": self.min_cosine, "notes": self.notes,
                "weight_image": self.weight_image,
                "outputs": [dict(m.__dict__, shape=list(m.shape)) for m in self.outputs]}


def _output_step(out, run, b) -> float | None:
    """The step of an output's grid: its scale, or the scale the software dequantisation that writes it reads."""
    if b.scale:
        return float(b.scale[0])
    for blk in out.blocks:
        for op in blk.sw_ops:
            if op.kind == "dequantizelinear" and op.param("general.output.mem.start_offset") == b.start:
                addr = op.param("is.mem.start_offset")
                return float(np.frombuffer(run.memory.bytes_at(addr, 4), np.float32)[0])
    return None


def _dequantised(b, v: np.ndarray) -> np.ndarray:
    f = v.astype(np.float64)
    if b.scale and v.dtype.kind in "iu":
        f = (f - (b.zero_point[0] if b.zero_point else 0)) * float(b.scale[0])
    return f


def _pair(sim: list, ref: list) -> list:
    """Match ST's outputs with the reference's: equal shapes first (ST orders outputs its own way), then
    the rest in order."""
    pairs, left = [], list(ref)
    for b, v in sim:
        same = [r for r in left if tuple(r[1].shape) == tuple(v.shape)]
        pick = same[0] if len(same) >= 1 else None
        if pick is not None:
            left.remove(pick)
        pairs.append([b, v, pick])
    for p in pairs:
        if p[2] is None:
            same_size = [r for r in left if r[1].size == p[1].size]
            if not same_size:
                raise DataError(f"output '{p[0].name}': no reference output with its {p[1].size} values")
            p[2] = same_size[0]
            left.remove(p[2])
    return pairs


def metrics(name, ref_name, sim: np.ndarray, ref: np.ndarray, step) -> OutputMetrics:
    a, r = sim.reshape(-1), ref.reshape(-1)
    den = float(np.linalg.norm(a) * np.linalg.norm(r))
    cos = float(a @ r / den) if den > 0 else (1.0 if np.array_equal(a, r) else 0.0)
    d = np.abs(a - r)
    steps = np.rint(d / step) if step else None
    return OutputMetrics(name, ref_name, tuple(sim.shape), cos,
                         float(np.mean(steps == 0)) if step else None,
                         float(steps.max()) if step and steps.size else None, step, float(d.max()) if d.size else 0.0)


def _st_output(st, load):
    """An `StOutput` as given, or the one a folder / C file holds."""
    from ..importers.stedgeai.model import StOutput

    return st if isinstance(st, StOutput) else load(st)


def validate_st(st_path, reference, arrays: list | None = None, seed: int = 0,
                min_cosine: float = 0.99) -> StValidation:
    """Run ST's program functionally and compare its outputs with the reference model's."""
    from ..importers.stedgeai import load
    from ..importers.stedgeai.execute import run
    from ..importers.stedgeai.weights import parameter_mismatches

    if not Path(reference).is_file():
        raise DataError(f"--reference {reference}: no such model file")
    out = _st_output(st_path, load)
    notes = []
    if arrays is None:
        arrays = seeded_model_inputs(reference, seed)
        notes.append(f"seeded inputs (seed {seed}) in the model's own layout and dtype")
    layout = "NHWC" if str(reference).lower().endswith(".tflite") else "NCHW"
    res = run(out, st_inputs(out, arrays, layout), seed=seed)
    bufs = {b.name: b for b in out.buffers}
    sim = []
    for name, v in res.outputs.items():
        b = bufs[name]
        f = _dequantised(b, v)
        sim.append((b, f.reshape(tuple(b.mem_shape) if b.mem_shape and int(np.prod(b.mem_shape)) == f.size else f.shape)))
    notes += reference_provenance(out, reference)
    notes += [f"not attached: {n} (if that is the image flashed, the board reads other bytes)" for n in out.weight_notes]
    rep = StValidation(min_cosine=min_cosine, notes=notes, weight_image=parameter_mismatches(out))
    ref = reference_outputs(reference, arrays)
    uninit = UninitDependence(out, seed)
    for b, f, (rname, rv, rstep) in _pair(sim, ref):
        step = _output_step(out, res, b) or rstep
        rep.outputs.append(metrics(b.name, rname, f.reshape(rv.shape), rv, step))
        rep.outputs[-1].uninitialised = [r.to_dict() for r in uninit.of(b.name)]
    failing = [m for m in rep.outputs if m.cosine < min_cosine]
    if failing and layout == "NHWC":
        _reference_spread(reference, arrays, dict((n, v) for n, v, _ in ref), failing)
        if any(min(m.reference_spread.values()) < min_cosine for m in failing if m.reference_spread):
            rep.notes.append("the interpreter's own kernel sets part as much on these inputs: the output is "
                             "ill-conditioned here (the per-layer report shows each layer's own error)")
    return rep


MAX_C_INFO_BYTES = 64 << 20


def reference_provenance(out, reference) -> list[str]:
    """A note when the compile's `c_info.json` gives the MD5 signature of the model it was made from (ST
    Edge AI Core's `input_model.model_files`) for the reference's format and the reference has another: a
    mismatch then says nothing of the program."""
    import hashlib
    import json

    path = Path(out.files.get("c_info", "")) if getattr(out, "files", None) else None
    if path is None or not path.is_file() or path.stat().st_size > MAX_C_INFO_BYTES:
        return []
    try:
        tools = json.loads(path.read_text(errors="replace")).get("environment", {}).get("tools", [])
    except (ValueError, AttributeError):
        return []
    kind = Path(reference).suffix.lower().lstrip(".")
    sigs = {str(f.get("signature", "")).lower().removeprefix("0x"): f.get("name", "")
            for t in tools if isinstance(t, dict) and isinstance(t.get("input_model"), dict)
            and t["input_model"].get("type") == kind for f in t["input_model"].get("model_files", [])
            if isinstance(f, dict) and f.get("signature")}
    if not sigs:
        return []
    got = hashlib.md5(Path(reference).read_bytes()).hexdigest()
    if got in sigs:
        return []
    return [f"the reference is not the model this compile was made from: its MD5 {got} is not the signature "
            f"{path.name} gives ({', '.join(f'{n}: {s}' for s, n in sigs.items())}); differences may be the model's"]


def _reference_spread(reference: str, arrays: list, builtin: dict, failing: list) -> None:
    """Each failing output's cosine between the builtin reference and the interpreter's other kernel sets
    (optimized: XNNPACK where it applies; reference: TFLite's reference kernels)."""
    for kernels, label in (("auto", "optimized"), ("reference", "reference")):
        other = {n: v for n, v, _ in reference_outputs(reference, arrays, kernels)}
        for m in failing:
            if m.reference in other:
                m.reference_spread = dict(m.reference_spread or {})
                m.reference_spread[label] = metrics(m.name, m.reference, other[m.reference],
                                                    builtin[m.reference], m.step).cosine


@dataclass
class LayerRow:
    epoch: int
    buffer: str
    reference: str
    shape: tuple
    cosine: float
    exact: float
    max_steps: float
    alone: OutputMetrics | None = None  # the epoch fed the reference's tensors: its own error
    reordered: bool = False  # alone, it holds the tensor's values in another order (a layout, not a value, differs)
    uninitialised: list = field(default_factory=list)  # `st_uninit.UninitRead` dicts the values depend on

    def line(self) -> str:
        own = ("" if self.alone is None else
               f" | alone {self.alone.cosine:.5f}, {self.alone.exact:.1%}, max {self.alone.max_steps:g}"
               + (" (its values in another order)" if self.reordered else ""))
        return "\n".join([f"  epoch {self.epoch:4d}  {self.buffer[:44]:44s} ~ {self.reference[-44:]:44s} "
                          f"{list(self.shape)}: cosine {self.cosine:.5f}, exact {self.exact:.1%}, max "
                          f"{self.max_steps:g} step(s){own}"] + uninit_lines(self.uninitialised, "      "))

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "alone"}
        d["shape"] = list(self.shape)
        if self.alone is not None:
            d["alone"] = {"cosine": self.alone.cosine, "exact": self.alone.exact, "max_steps": self.alone.max_steps}
        return d


@dataclass
class LayerReport:
    rows: list = field(default_factory=list)
    unmatched: list = field(default_factory=list)  # [(buffer, why)]: compared buffers no tensor was paired with
    not_compared: dict = field(default_factory=dict)  # {why: [buffer]}: produced buffers not compared
    min_cosine: float = 0.999
    max_steps: float | None = None  # None: judged by cosine only (ST rounds per stage: steps drift with depth)
    own_steps: float = 2  # a layer fed the reference's inputs and further off than this is wrong by itself
    own_cosine: float = 0.99  # ... and below this cosine it computes something else (its parameters, its unit)

    def first_outside(self):
        return next((r for r in self.rows if r.cosine < self.min_cosine
                     or (self.max_steps is not None and r.max_steps > self.max_steps)), None)

    def wrong_alone(self) -> list:
        """The rows whose own error (fed the reference's inputs) exceeds `own_steps`, but for those holding
        the tensor's values in another order (`reordered`: the pairing's layout, not the layer, is off)."""
        return [r for r in self.rows if r.alone is not None and r.alone.max_steps > self.own_steps
                and not r.reordered]

    def reordered_rows(self) -> list:
        return [r for r in self.rows if r.reordered]

    def first_off_alone(self):
        """The first row that, fed the reference's inputs, still computes something else (own cosine below
        `own_cosine` and more than `own_steps` off: a near-zero tensor a step or two off has a low cosine
        too): its parameters, not its activations, are the suspect."""
        return next((r for r in self.wrong_alone() if r.alone.cosine < self.own_cosine), None)

    def text(self) -> str:
        bad = self.first_outside()
        steps = "" if self.max_steps is None else f", <= {self.max_steps:g} steps"
        head = (f"per layer: {len(self.rows)} of ST's buffers matched to reference tensors (same quantisation "
                f"scale and values in a related layout, in graph order), {len(self.unmatched)} unmatched, "
                f"{sum(map(len, self.not_compared.values()))} not compared; tolerance cosine >= "
                f"{self.min_cosine}{steps}")
        if any(r.alone is not None for r in self.rows):
            head += ("; 'alone': the epoch run on the reference's tensors in every paired buffer it finds live "
                     "(its own error)")
        lines = [head] + [r.line() for r in self.rows]
        lines.append("  first layer outside the tolerance: " + (f"epoch {bad.epoch}, {bad.buffer} (~ {bad.reference})"
                                                                 if bad else "none"))
        if any(r.alone is not None for r in self.rows):
            own = self.wrong_alone()
            lines.append(f"  layers off by more than {self.own_steps:g} step(s) on the reference's inputs: "
                         + (", ".join(f"epoch {r.epoch} {r.buffer} ({r.alone.max_steps:g})" for r in own[:12])
                            + (" ..." if len(own) > 12 else "") if own else "none"))
            moved = self.reordered_rows()
            if moved:
                lines.append("  right values in another order alone (not judged: the layout the pairing read them "
                             "in differs from ST's, or the layer moves values to other places): " + ", ".join(f"epoch {r.epoch} {r.buffer}" for r in moved[:12])
                             + (" ..." if len(moved) > 12 else ""))
            off = self.first_off_alone()
            lines.append("  first layer off alone (fed the reference's inputs, own cosine < "
                         f"{self.own_cosine:g} and more than {self.own_steps:g} steps off): " + ("none" if off is None else
                         f"epoch {off.epoch}, {off.buffer} (~ {off.reference}), own cosine "
                         f"{off.alone.cosine:.4f}: " + (
                             "it depends on bytes read before they were written (above): that read, not its "
                             "parameters nor rounding, is the suspect" if off.uninitialised else
                             "off from its own epoch on with right inputs, so its parameters (weights, biases, "
                             "scales), not the activations, are the suspect")))
        for name, why in self.unmatched[:24]:
            lines.append(f"  unmatched: {name}: {why}")
        if len(self.unmatched) > 24:
            lines.append(f"  unmatched: ... {len(self.unmatched) - 24} more")
        for why, names in self.not_compared.items():
            lines.append(f"  not compared ({len(names)}): {why}: " + ", ".join(names[:4])
                         + (" ..." if len(names) > 4 else ""))
        return "\n".join(lines)

    def to_dict(self) -> dict:
        bad = self.first_outside()
        off = self.first_off_alone()
        return {"rows": [r.to_dict() for r in self.rows],
                "unmatched": [{"buffer": n, "why": w} for n, w in self.unmatched],
                "not_compared": self.not_compared,
                "first_outside": None if bad is None else bad.buffer,
                "wrong_alone": [r.buffer for r in self.wrong_alone()],
                "reordered_alone": [r.buffer for r in self.reordered_rows()],
                "first_off_alone": None if off is None else off.buffer}


def _reference_quantised_tensors(model: str, arrays: list) -> list:
    """[(op index, name, NHWC array, scale, zero point)] of every quantised tensor the interpreter computed,
    in graph order (builtin kernels: the per-layer and the output reference share one kernel set)."""
    from ..reference_tflite import _interpreter, model_bytes

    it = _interpreter(model_bytes(model), "builtin", preserve=True)
    for d, a in zip(it.get_input_details(), arrays):
        it.set_tensor(d["index"], a)
    it.invoke()
    order = {}
    for k, op in enumerate(it._get_ops_details()):
        for t in op["outputs"]:
            order.setdefault(int(t), k)
    out = []
    for d in it.get_tensor_details():
        s, z = d["quantization"]
        if d["index"] not in order or not s:
            continue
        try:
            v = it.get_tensor(d["index"])
        except ValueError:
            continue
        out.append((order[d["index"]], d["name"], v, float(s), int(z)))
    return sorted(out, key=lambda r: r[0])


def _zero_point(b) -> int:
    """A buffer's zero point (the table gives none for 0)."""
    return int(b.zero_point[0]) if b.zero_point else 0


def _layer_buffer(b, epoch) -> bool:
    """A quantised buffer the epoch produces, whole in its table row (`st_pairing.not_compared`)."""
    return b.epoch == epoch and not b.is_param and b.role != "input" and not_compared(b) is None


def _live_epochs(bufs, paired: dict) -> dict:
    """{buffer name: (first, last) epoch before which its bytes still hold it}: from the epoch after the
    one producing it to the first later epoch that produces an overlapping buffer (which may read it first)."""
    live = {}
    for b in bufs:
        if b.name not in paired or b.epoch is None:
            continue
        later = [o.epoch for o in bufs if o.epoch is not None and o.epoch > b.epoch and not o.is_param
                 and o.start < b.end and b.start < o.end]
        live[b.name] = (b.epoch + 1, min(later) if later else 1 << 30)
    return live


def _requantised(ref, b) -> np.ndarray:
    """A reference tensor on a buffer's grid (its scale and zero point, clamped to its type)."""
    _, _, v, s, z = ref
    info = np.iinfo(np.dtype(b.numpy_type))
    q = np.rint((v.astype(np.float64) - z) * (s / float(b.scale[0]))) + _zero_point(b)
    return np.clip(q, info.min, info.max)



def per_layer(st_path, reference, arrays: list | None = None, seed: int = 0, min_cosine: float = 0.999,
              max_steps: float | None = None, alone: bool = True) -> LayerReport:
    """Where ST's run and the reference part. Every quantised buffer an epoch produces is taken when it
    is produced and paired with a reference tensor of its quantisation scale (ST carries the source model's
    scales) whose values relate to it (`st_pairing.pair_layers`: same NHWC shape first, then reshaped,
    squeezed or transposed); what stays unmatched, and what is not compared, is listed with the reason.
    With `alone`, a second run measures each layer's own error: before every epoch, each paired buffer
    whose bytes are still live (produced earlier, not yet overlapped by a later buffer) is overwritten
    with its reference tensor, so the epoch computes from the reference's inputs."""
    from ..importers.stedgeai import load
    from ..importers.stedgeai.execute import run
    from ..importers.stedgeai.replay import replay
    from ..importers.stedgeai.sw_exec import read_logical, write_logical

    if not str(reference).lower().endswith(".tflite"):
        raise DataError("--per-layer on an ST output takes a .tflite reference")
    out = _st_output(st_path, load)
    if arrays is None:
        arrays = seeded_model_inputs(reference, seed)
    refs = _reference_quantised_tensors(reference, arrays)
    feed = st_inputs(out, arrays)

    skipped: dict = {}

    def taker(into: list):
        def after(epoch, mem, bufs):
            for b in bufs:
                if b.epoch != epoch or b.is_param or b.role == "input":
                    continue
                why = not_compared(b)
                if why is None:
                    into.append((epoch, b, _dequantised(b, read_logical(mem, b))))
                elif into is taken:
                    skipped.setdefault(why, []).append(b.name)
        return after

    taken: list = []  # (epoch, buffer, dequantised values)
    run(out, feed, seed=seed, after_epoch=taker(taken))
    rep = LayerReport(min_cosine=min_cosine, max_steps=max_steps, not_compared=skipped)
    rows, rep.unmatched, internal = pair_layers(taken, refs, metrics)
    if internal:
        skipped[INTERNAL_WIDE] = internal
    own: dict = {}
    reordered: set = set()
    if alone:
        pairs = {taken[i][1].name: p for i, p in rows.items()}
        live: dict = {}
        solo: list = []

        def before(epoch, mem, bufs):
            if not live:
                live.update(_live_epochs(bufs, pairs))
            for b in bufs:
                span = live.get(b.name)
                if span and span[0] <= epoch <= span[1]:
                    p = pairs[b.name]
                    write_logical(mem, b, p.view.back(_requantised(p.ref, b), tuple(b.shape)))

        run(out, feed, seed=seed, after_epoch=taker(solo), before_epoch=before)
        for epoch, b, v in solo:
            p = pairs.get(b.name)
            if p is not None:
                seen = p.view.of(v)
                own[(epoch, b.name)] = metrics(b.name, p.ref[1], seen, p.expected, p.ref[3])
                if same_values_other_order(seen, p.expected, p.ref[3]):
                    reordered.add((epoch, b.name))
    traffic = replay(out)
    uninit = UninitDependence(out, seed, traffic)
    for i in sorted(rows):
        epoch, b, _ = taken[i]
        m = rows[i].metrics
        rep.rows.append(LayerRow(epoch, b.name, m.reference, tuple(b.shape), m.cosine, m.exact, m.max_steps,
                                 own.get((epoch, b.name)), (epoch, b.name) in reordered,
                                 [r.to_dict() for r in uninit.of(b.name, epoch)]))
    rep.unmatched = consumers_note(rep.unmatched, traffic.epochs, out.buffers,
                                   {r.buffer: r.reference for r in rep.rows})
    return rep


def load_model_inputs(items: list, model: str) -> list | None:
    """--input NAME=FILE arguments (a .npy array or a photo) bound to the model's inputs, in the model's order
    (None: none given)."""
    from ..model_inputs import image_targets, model_specs
    from .inputs import load_inputs

    if not items:
        return None
    given = load_inputs(items, image_targets(model_specs(model).values()))
    ins, _ = _reference_io(model)
    missing = [n for n, _, _ in ins if n not in given]
    if missing:
        raise DataError(f"--input: no value for the model's input(s) {', '.join(missing)}")
    return [np.asarray(given[n]) for n, _, _ in ins]

