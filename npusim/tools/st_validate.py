"""`npusim validate ST_OUTPUT --reference MODEL`: the values ST's program computes, unit by unit on the
flashed weights, against the source model run by its own runtime (TFLite interpreter or ONNX Runtime).

Inputs are the model's own (its layout and dtype: NHWC uint8/int8 images for TFLite), seeded by default;
`st_inputs` turns them into the bytes of ST's input buffers (quantised by a buffer's scale and zero point
when given as floats). Each output is dequantised by its buffer's parameters (float outputs as they are)
and compared with the reference's output of the same shape: cosine, the share of values on the same
quantisation step, and the largest distance in steps (the step of an output's int8 grid: its scale, or
for a float output the scale its software dequantisation reads).

Why one module of ~530 lines: the output comparison and `--per-layer` (buffers paired with the reference's
tensors, each layer chained and alone) share the input binding, the pairing and the step metrics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import DataError

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


def seeded_model_inputs(model: str, seed: int = 0) -> list:
    """The model's inputs, seeded: uniform over the integer range, or standard normal floats."""
    ins, _ = _reference_io(model)
    rng = np.random.default_rng(seed)
    out = []
    for _, shape, dt in ins:
        if dt.kind in "iu":
            info = np.iinfo(dt)
            out.append(rng.integers(info.min, int(info.max) + 1, shape, dtype=dt))
        else:
            out.append(rng.standard_normal(shape).astype(dt))
    return out


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

    def line(self) -> str:
        q = (f"exact {self.exact:.2%}, max {self.max_steps:g} step(s) of {self.step:.4g}"
             if self.step else "no quantisation step known")
        spread = ("" if not self.reference_spread else "\n    the reference against itself on its other kernel "
                  "sets: " + ", ".join(f"{k} cosine {v:.6f}" for k, v in self.reference_spread.items()))
        return (f"  {self.name} vs {self.reference} {list(self.shape)}: cosine {self.cosine:.6f}, {q}, "
                f"max |diff| {self.max_abs:.4g}{spread}")


@dataclass
class StValidation:
    outputs: list = field(default_factory=list)
    min_cosine: float = 0.99
    notes: list = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(m.cosine >= self.min_cosine for m in self.outputs)

    def text(self) -> str:
        head = "validate: " + ("PASS" if self.passed else "FAIL") + f" (cosine >= {self.min_cosine} per output)"
        return "\n".join([head] + [m.line() for m in self.outputs] + [f"  note: {n}" for n in self.notes])

    def to_dict(self) -> dict:
        return {"passed": self.passed, "min_cosine": self.min_cosine, "notes": self.notes,
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
    rep = StValidation(min_cosine=min_cosine, notes=notes)
    ref = reference_outputs(reference, arrays)
    for b, f, (rname, rv, rstep) in _pair(sim, ref):
        step = _output_step(out, res, b) or rstep
        rep.outputs.append(metrics(b.name, rname, f.reshape(rv.shape), rv, step))
    failing = [m for m in rep.outputs if m.cosine < min_cosine]
    if failing and layout == "NHWC":
        _reference_spread(reference, arrays, dict((n, v) for n, v, _ in ref), failing)
        if any(min(m.reference_spread.values()) < min_cosine for m in failing if m.reference_spread):
            rep.notes.append("the interpreter's own kernel sets part as much on these inputs: the output is "
                             "ill-conditioned here (the per-layer report shows each layer's own error)")
    return rep


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

    def line(self) -> str:
        own = ("" if self.alone is None else
               f" | alone {self.alone.cosine:.5f}, {self.alone.exact:.1%}, max {self.alone.max_steps:g}")
        return (f"  epoch {self.epoch:4d}  {self.buffer[:44]:44s} ~ {self.reference[-44:]:44s} {list(self.shape)}: "
                f"cosine {self.cosine:.5f}, exact {self.exact:.1%}, max {self.max_steps:g} step(s){own}")

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "alone"}
        d["shape"] = list(self.shape)
        if self.alone is not None:
            d["alone"] = {"cosine": self.alone.cosine, "exact": self.alone.exact, "max_steps": self.alone.max_steps}
        return d


@dataclass
class LayerReport:
    rows: list = field(default_factory=list)
    unmatched: list = field(default_factory=list)  # ST buffers with no reference tensor of their shape and scale
    min_cosine: float = 0.999
    max_steps: float | None = None  # None: judged by cosine only (ST rounds per stage: steps drift with depth)
    own_steps: float = 2  # a layer fed the reference's inputs and further off than this is wrong by itself

    def first_outside(self):
        return next((r for r in self.rows if r.cosine < self.min_cosine
                     or (self.max_steps is not None and r.max_steps > self.max_steps)), None)

    def wrong_alone(self) -> list:
        """The rows whose own error (fed the reference's inputs) exceeds `own_steps`."""
        return [r for r in self.rows if r.alone is not None and r.alone.max_steps > self.own_steps]

    def text(self) -> str:
        bad = self.first_outside()
        steps = "" if self.max_steps is None else f", <= {self.max_steps:g} steps"
        head = (f"per layer: {len(self.rows)} of ST's buffers matched to reference tensors (same shape and "
                f"quantisation scale, in graph order), {len(self.unmatched)} unmatched; tolerance cosine >= "
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
        if self.unmatched:
            lines.append("  unmatched: " + ", ".join(self.unmatched[:12]) + (" ..." if len(self.unmatched) > 12 else ""))
        return "\n".join(lines)

    def to_dict(self) -> dict:
        bad = self.first_outside()
        return {"rows": [r.to_dict() for r in self.rows], "unmatched": self.unmatched,
                "first_outside": None if bad is None else bad.buffer,
                "wrong_alone": [r.buffer for r in self.wrong_alone()]}


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
    """A quantised 4-D activation buffer the epoch produces, whole in its table row."""
    from ..importers.stedgeai.sw_exec import channel_block

    return not (b.epoch != epoch or b.is_param or b.role == "input" or not b.scale
                or b.dtype not in ("INT8", "UINT8") or len(b.shape) != 4
                or b.shape[3] % max(channel_block(b), 1) or int(np.prod(b.shape)) != b.size)


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


def _monotone_pairs(score: np.ndarray) -> list:
    """[(i, j)] pairing rows with columns in order (i and j both increasing): as many pairs as the shorter
    side allows, and among those the largest total score (scores in [-1, 1])."""
    n, m = score.shape
    bonus = 2.0 * (min(n, m) + 1)  # one pair more always outweighs any scores
    best = np.zeros((n + 1, m + 1))
    for i in range(n):
        for j in range(m):
            best[i + 1, j + 1] = max(best[i, j + 1], best[i + 1, j], best[i, j] + bonus + score[i, j])
    pairs, i, j = [], n, m
    while i and j:
        if best[i, j] == best[i - 1, j]:
            i -= 1
        elif best[i, j] == best[i, j - 1]:
            j -= 1
        else:
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
    return pairs[::-1]


CONFIDENT_COSINE = 0.99  # a pair this close is taken whatever the order (parallel branches run in either order)


def _confident_then_ordered(score: np.ndarray) -> list:
    """[(row, column)]: the unambiguous pairs (each the other's closest, cosine >= CONFIDENT_COSINE); then
    the rows and columns left (layers gone wrong and those after them, near-twin branches) aligned in order
    (`_monotone_pairs`)."""
    if not score.size:
        return []
    pairs = [(i, int(j)) for i, j in enumerate(score.argmax(axis=1))
             if score[i, j] >= CONFIDENT_COSINE and int(score[:, j].argmax()) == i]
    used_i, used_j = {i for i, _ in pairs}, {j for _, j in pairs}
    rest_i = [i for i in range(score.shape[0]) if i not in used_i]
    rest_j = [j for j in range(score.shape[1]) if j not in used_j]
    if rest_i and rest_j:
        pairs += [(rest_i[a], rest_j[b]) for a, b in _monotone_pairs(score[np.ix_(rest_i, rest_j)])]
    return pairs


def _pair_layers(taken: list, refs: list, rep: LayerReport) -> dict:
    """{index in taken: (metrics, (reference record, its dequantised values))}. Per (shape, scale) group:
    the unambiguous close pairs first (each the other's closest, cosine >= CONFIDENT_COSINE: parallel
    branches may run in either order), then the rest of ST's buffers (epoch order) and of the reference's tensors (graph order) in
    order, as many as possible: a layer gone wrong, and those after it, cannot pull a partner from
    another stage. A buffer equal to an earlier one of its group (a layout copy) takes that one's partner."""
    rows: dict = {}
    groups: dict = {}
    for i, (_, b, _) in enumerate(taken):
        groups.setdefault((tuple(b.shape), round(float(b.scale[0]), 9)), []).append(i)
    for (shape, scale), idx in groups.items():
        cands = [r for r in refs if tuple(r[2].shape) == shape and abs(r[3] - scale) <= 1e-6 * r[3]]
        deq = [(r, (r[2].astype(np.float64) - r[4]) * r[3]) for r in cands]
        twins = {i: next(k for k in idx if k < i and np.array_equal(taken[k][2], taken[i][2]))
                 for i in idx if any(k < i and np.array_equal(taken[k][2], taken[i][2]) for k in idx)}
        own = [i for i in idx if i not in twins]
        scored = [[metrics(taken[i][1].name, r[1], taken[i][2], f, r[3]) for r, f in deq] for i in own]
        score = np.array([[m.cosine for m in row] for row in scored]).reshape(len(own), len(deq))
        for a, j in _confident_then_ordered(score):
            rows[own[a]] = (scored[a][j], deq[j])
        for i in idx:
            if i in twins and twins[i] in rows:
                rows[i] = rows[twins[i]]
            elif i not in rows:
                rep.unmatched.append(taken[i][1].name)
    return rows


def per_layer(st_path, reference, arrays: list | None = None, seed: int = 0, min_cosine: float = 0.999,
              max_steps: float | None = None, alone: bool = True) -> LayerReport:
    """Where ST's run and the reference part. Every quantised 4-D buffer an epoch produces is taken when
    it is produced and matched to a reference tensor of the same NHWC shape and quantisation scale (ST
    carries the source model's scales). Tensors sharing shape and scale (every ReLU6 output of a stage)
    are paired in graph order (`_pair_layers`), each reference tensor once; a buffer equal to one already
    paired (a copy to another layout) takes its partner. Buffers with no candidate are listed as unmatched.
    With `alone`, a second run measures each layer's own error: before every epoch, each paired buffer
    whose bytes are still live (produced earlier, not yet overlapped by a later buffer) is overwritten
    with its reference tensor, so the epoch computes from the reference's inputs."""
    from ..importers.stedgeai import load
    from ..importers.stedgeai.execute import run
    from ..importers.stedgeai.sw_exec import read_logical, write_logical

    if not str(reference).lower().endswith(".tflite"):
        raise DataError("--per-layer on an ST output takes a .tflite reference")
    out = _st_output(st_path, load)
    if arrays is None:
        arrays = seeded_model_inputs(reference, seed)
    refs = _reference_quantised_tensors(reference, arrays)
    feed = st_inputs(out, arrays)

    def taker(into: list):
        def after(epoch, mem, bufs):
            for b in bufs:
                if _layer_buffer(b, epoch):
                    into.append((epoch, b, (read_logical(mem, b).astype(np.float64) - _zero_point(b)) * b.scale[0]))
        return after

    taken: list = []  # (epoch, buffer, dequantised values)
    run(out, feed, seed=seed, after_epoch=taker(taken))
    rep = LayerReport(min_cosine=min_cosine, max_steps=max_steps)
    rows = _pair_layers(taken, refs, rep)
    own: dict = {}
    if alone:
        partner = {taken[i][1].name: ref for i, (_, (ref, _)) in rows.items()}
        expected = {taken[i][1].name: f for i, (_, (_, f)) in rows.items()}
        live: dict = {}
        solo: list = []

        def before(epoch, mem, bufs):
            if not live:
                live.update(_live_epochs(bufs, partner))
            for b in bufs:
                span = live.get(b.name)
                if span and span[0] <= epoch <= span[1]:
                    write_logical(mem, b, _requantised(partner[b.name], b))

        run(out, feed, seed=seed, after_epoch=taker(solo), before_epoch=before)
        for epoch, b, v in solo:
            if b.name in expected:
                own[(epoch, b.name)] = metrics(b.name, partner[b.name][1], v, expected[b.name], partner[b.name][3])
    for i in sorted(rows):
        epoch, b, _ = taken[i]
        m = rows[i][0]
        rep.rows.append(LayerRow(epoch, b.name, m.reference, tuple(b.shape), m.cosine, m.exact, m.max_steps,
                                 own.get((epoch, b.name))))
    return rep


def load_model_inputs(items: list, model: str) -> list | None:
    """--input NAME=FILE.npy arguments bound to the model's inputs, in the model's order (None: none given)."""
    from ..model_inputs import ImageTarget
    from .inputs import load_inputs

    if not items:
        return None
    ins, kind = _reference_io(model)
    layout = {4: "NHWC" if kind == "tflite" else "NCHW"}
    given = load_inputs(items, {n: ImageTarget(shape, layout.get(len(shape), ""), dt.name) for n, shape, dt in ins})
    missing = [n for n, _, _ in ins if n not in given]
    if missing:
        raise DataError(f"--input: no value for the model's input(s) {', '.join(missing)}")
    return [np.asarray(given[n]) for n, _, _ in ins]

