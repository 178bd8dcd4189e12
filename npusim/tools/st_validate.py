"""`npusim validate ST_OUTPUT --reference MODEL`: the values ST's program computes, unit by unit on the
flashed weights, against the source model run by its own runtime (TFLite interpreter or ONNX Runtime).

Inputs are the model's own (its layout and dtype: NHWC uint8/int8 images for TFLite), seeded by default;
`st_inputs` turns them into the bytes of ST's input buffers (quantised by a buffer's scale and zero point
when given as floats). Each output is dequantised by its buffer's parameters (float outputs as they are)
and compared with the reference's output of the same shape: cosine, the share of values on the same
quantisation step, and the largest distance in steps (the step of an output's int8 grid: its scale, or
for a float output the scale its software dequantisation reads).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import DataError, StImportError

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


def reference_outputs(model: str, arrays: list) -> list:
    """[(name, float64 array, step)] of the reference on the inputs (dequantised where quantised)."""
    ins, kind = _reference_io(model)
    feed = {n: a for (n, _, _), a in zip(ins, arrays)}
    if kind == "tflite":
        from ..reference_tflite import _interpreter, model_bytes, tflite_run

        outs = tflite_run(model, feed, "auto")
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

    def line(self) -> str:
        q = (f"exact {self.exact:.2%}, max {self.max_steps:g} step(s) of {self.step:.4g}"
             if self.step else "no quantisation step known")
        return (f"  {self.name} vs {self.reference} {list(self.shape)}: cosine {self.cosine:.6f}, {q}, "
                f"max |diff| {self.max_abs:.4g}")


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


def validate_st(st_path, reference, arrays: list | None = None, seed: int = 0,
                min_cosine: float = 0.99) -> StValidation:
    """Run ST's program functionally and compare its outputs with the reference model's."""
    from ..importers.stedgeai import load
    from ..importers.stedgeai.execute import run

    if not Path(reference).is_file():
        raise DataError(f"--reference {reference}: no such model file")
    out = load(st_path)
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
    for b, f, (rname, rv, rstep) in _pair(sim, reference_outputs(reference, arrays)):
        step = _output_step(out, res, b) or rstep
        rep.outputs.append(metrics(b.name, rname, f.reshape(rv.shape), rv, step))
    return rep


def load_model_inputs(items: list, model: str) -> list | None:
    """--input NAME=FILE.npy arguments bound to the model's inputs, in the model's order (None: none given)."""
    from .inputs import load_inputs

    given = load_inputs(items)
    if not given:
        return None
    ins, _ = _reference_io(model)
    missing = [n for n, _, _ in ins if n not in given]
    if missing:
        raise DataError(f"--input: no value for the model's input(s) {', '.join(missing)}")
    return [np.asarray(given[n]) for n, _, _ in ins]


__all__ = ["st_inputs", "validate_st", "seeded_model_inputs", "StValidation", "StImportError"]
