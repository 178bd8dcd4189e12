"""ONNX Runtime reference runs and the metrics that compare simulator outputs with them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import DataError, ModelError

__all__ = ["Metrics", "Thresholds", "ValidationReport", "DEFAULT_THRESHOLDS", "ort_run", "compare", "validate",
           "default_thresholds", "program_precision"]


@dataclass(frozen=True)
class Metrics:
    max_abs: float
    max_rel: float  # max |sim - ref| / max |ref| (relative to the output's range, robust to zeros)
    cosine: float
    top1: bool  # argmax of the flattened outputs agree

    def to_dict(self) -> dict:
        return {"max_abs": self.max_abs, "max_rel": self.max_rel, "cosine": self.cosine, "top1": self.top1}


@dataclass(frozen=True)
class Thresholds:
    """A metric passes when max_rel <= max_rel and cosine >= min_cosine (top1 only if require_top1)."""

    max_rel: float
    min_cosine: float
    require_top1: bool = False

    def check(self, m: Metrics) -> list[str]:
        bad = []
        if not m.max_rel <= self.max_rel:
            bad.append(f"max_rel {m.max_rel:.4g} > {self.max_rel:g}")
        if not m.cosine >= self.min_cosine:
            bad.append(f"cosine {m.cosine:.6f} < {self.min_cosine:g}")
        if self.require_top1 and not m.top1:
            bad.append("top-1 disagrees")
        return bad


DEFAULT_THRESHOLDS = {
    "fp32": Thresholds(max_rel=1e-4, min_cosine=0.99999),
    "fp16": Thresholds(max_rel=0.02, min_cosine=0.999),
    "int8": Thresholds(max_rel=0.25, min_cosine=0.98),
}


def default_thresholds(precision: str) -> Thresholds:
    return DEFAULT_THRESHOLDS[precision]


def ort_run(model, inputs: dict, threads: int = 1) -> dict[str, np.ndarray]:
    """fp32 outputs of `model` (path or ModelProto) on CPUExecutionProvider."""
    import onnx
    import onnxruntime as ort

    if isinstance(model, (str, Path)):
        if not Path(model).is_file():
            raise ModelError(f"{model}: no such model file")
        data = Path(model).read_bytes()
    elif isinstance(model, onnx.ModelProto):
        data = model.SerializeToString()
    else:
        raise ModelError(f"reference model: expected a path or onnx.ModelProto, got {type(model).__name__}")
    so = ort.SessionOptions()
    so.intra_op_num_threads = max(1, min(int(threads), 2))
    so.inter_op_num_threads = 1
    try:
        sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    except Exception as e:
        raise ModelError(f"reference model: ONNX Runtime cannot load it ({str(e).splitlines()[0][:160]})") from None
    feeds = {}
    for i in sess.get_inputs():
        if i.name not in inputs:
            raise DataError(f"reference run: missing input {i.name!r}")
        feeds[i.name] = np.asarray(inputs[i.name], dtype=np.float32)
    names = [o.name for o in sess.get_outputs()]
    try:
        outs = sess.run(names, feeds)
    except Exception as e:
        raise DataError(f"reference run failed: {str(e).splitlines()[0][:160]}") from None
    return dict(zip(names, outs))


def metrics(sim: np.ndarray, ref: np.ndarray) -> Metrics:
    a = np.asarray(sim, np.float64).reshape(-1)
    b = np.asarray(ref, np.float64).reshape(-1)
    if a.shape != b.shape:
        raise DataError(f"output sizes differ: simulator {np.shape(sim)}, reference {np.shape(ref)}")
    if a.size == 0:
        return Metrics(0.0, 0.0, 1.0, True)
    diff = np.abs(a - b)
    max_abs = float(diff.max()) if np.all(np.isfinite(diff)) else float("inf")
    scale = float(np.abs(b).max())
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if not np.isfinite(na) or not np.isfinite(nb):
        cos = 0.0
    elif na == 0 and nb == 0:
        cos = 1.0
    elif na == 0 or nb == 0:
        cos = 0.0
    else:
        cos = float(np.dot(a, b) / (na * nb))
    return Metrics(max_abs, max_rel, cos, bool(np.argmax(a) == np.argmax(b)))


def compare(sim_outputs: dict, ref_outputs: dict) -> dict[str, Metrics]:
    """Metrics per reference output name."""
    out = {}
    for name, ref in ref_outputs.items():
        if name not in sim_outputs:
            raise DataError(f"simulator produced no output {name!r} (has: {', '.join(sorted(sim_outputs))})")
        out[name] = metrics(sim_outputs[name], ref)
    return out


@dataclass
class ValidationReport:
    passed: bool
    metrics: dict[str, Metrics]
    run_result: object
    thresholds: Thresholds | None = None
    failures: dict[str, list[str]] = field(default_factory=dict)

    def text(self) -> str:
        lines = []
        for name, m in self.metrics.items():
            mark = "FAIL " + "; ".join(self.failures[name]) if self.failures.get(name) else "ok"
            lines.append(f"{name}: max_abs={m.max_abs:.4g} max_rel={m.max_rel:.4g} cosine={m.cosine:.6f} "
                         f"top1={'yes' if m.top1 else 'no'}  {mark}")
        status = getattr(self.run_result, "status", "ok")
        lines.append(f"validate: {'PASS' if self.passed else 'FAIL'} (run {status})")
        return "\n".join(lines)


def program_precision(program) -> str:
    """"int8", "fp16" or "fp32": the dtype of the program's I/O buffers."""
    dts = {b.dtype for b in program.buffers if b.kind in ("input", "output")}
    return next(iter(dts)) if len(dts) == 1 else "int8"


def validate(program_or_blob, onnx_model, inputs: dict, thresholds: Thresholds | None = None,
             run_options=None, profile=None) -> ValidationReport:
    """Run inputs through the simulator and ONNX Runtime fp32 and compare every output.

    A faulting simulated run never passes; thresholds default per the program's precision."""
    from .runtime import load, run

    prog = load(program_or_blob, profile)
    thresholds = thresholds or default_thresholds(program_precision(prog))
    res = run(prog, inputs, options=run_options, profile=profile)
    ref = ort_run(onnx_model, inputs)
    if res.status != "ok" or not res.outputs:
        return ValidationReport(False, {}, res, thresholds, {})
    mets = compare(res.outputs, ref)
    fails = {k: thresholds.check(m) for k, m in mets.items()}
    return ValidationReport(not any(fails.values()), mets, res, thresholds, fails)
