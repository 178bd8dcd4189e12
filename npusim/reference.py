"""Reference runs and the metrics that compare simulator outputs with them.

The reference is the model's own runtime: ONNX Runtime for an ONNX model (float, or a QDQ /
QOperator model running its own quantized kernels), the TFLite interpreter for a .tflite model
(`reference_tflite`). For a quantized reference the comparison is also on the int8 outputs: the
share of exactly equal values and the largest difference in quantization steps, next to the cosine
of the dequantized values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import DataError, ModelError

__all__ = ["Metrics", "Thresholds", "ValidationReport", "DEFAULT_THRESHOLDS", "PRECISIONS", "ort_run", "compare", "validate",
           "default_thresholds", "program_precision", "quantized_metrics", "reference_kind"]


@dataclass(frozen=True)
class Metrics:
    max_abs: float
    max_rel: float  # max |sim - ref| / max |ref| (relative to the output's range, robust to zeros)
    cosine: float
    top1: bool  # argmax of the flattened outputs agree
    exact: float | None = None  # quantized reference: share of int8 outputs equal to the reference's
    max_steps: int | None = None  # quantized reference: largest |sim - ref| in quantization steps

    def to_dict(self) -> dict:
        d = {"max_abs": self.max_abs, "max_rel": self.max_rel, "cosine": self.cosine, "top1": self.top1}
        if self.exact is not None:
            d.update(exact=self.exact, max_steps=self.max_steps)
        return d

    def text(self) -> str:
        head = "" if self.exact is None else f"exact={100 * self.exact:.2f}% max_steps={self.max_steps} "
        return (f"{head}max_abs={self.max_abs:.4g} max_rel={self.max_rel:.4g} cosine={self.cosine:.6f} "
                f"top1={'yes' if self.top1 else 'no'}")


@dataclass(frozen=True)
class Thresholds:
    """A metric passes when max_rel <= max_rel and cosine >= min_cosine (top1 only if require_top1; the
    exact-match share of int8 outputs only if min_exact is set and the reference is quantized)."""

    max_rel: float
    min_cosine: float
    require_top1: bool = False
    min_exact: float | None = None

    def check(self, m: Metrics) -> list[str]:
        bad = []
        if self.min_exact is not None and m.exact is not None and not m.exact >= self.min_exact:
            bad.append(f"exact {100 * m.exact:.2f}% < {100 * self.min_exact:g}%")
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


_ORT_TYPES = {"float": np.float32, "float16": np.float16, "double": np.float64, "int8": np.int8, "uint8": np.uint8,
              "int16": np.int16, "uint16": np.uint16, "int32": np.int32, "uint32": np.uint32, "int64": np.int64,
              "uint64": np.uint64, "bool": np.bool_}


def _feed(name: str, value, ort_type: str) -> np.ndarray:
    """`value` as the element type the model declares for input `name` (ONNX Runtime converts nothing)."""
    dtype = _ORT_TYPES.get(ort_type.removeprefix("tensor(").removesuffix(")"))
    if dtype is None:
        raise DataError(f"reference run: input {name!r} has type {ort_type}, which the reference cannot feed")
    a = np.asarray(value)
    if a.dtype.kind == "f" and np.dtype(dtype).kind in "iub" and not np.array_equal(a, np.round(a)):
        raise DataError(f"reference run: input {name!r} is {ort_type} but the values given are not whole numbers")
    return a.astype(dtype, copy=False)


def ort_run(model, inputs: dict, threads: int = 1, fused: bool = True) -> dict[str, np.ndarray]:
    """fp32 outputs of `model` (path or ModelProto) on CPUExecutionProvider. `fused=False`: a QDQ
    model is run as its graph says (DequantizeLinear -> float op -> QuantizeLinear), not through
    ONNX Runtime's fused integer kernels, whose results change between its releases (1.32's fused
    QLinearConcat and QDQ MobileNet v2 differ from its own unfused run by up to 66 int8 steps)."""
    import onnx

    if isinstance(model, (str, Path)):
        if not Path(model).is_file():
            raise ModelError(f"{model}: no such model file")
        data = Path(model).read_bytes()
    elif isinstance(model, onnx.ModelProto):
        data = model.SerializeToString()
    else:
        raise ModelError(f"reference model: expected a path or onnx.ModelProto, got {type(model).__name__}")
    from .ort_session import session

    try:
        sess = session(data, threads=max(1, min(int(threads), 2)), optimize=True if fused else "basic")
    except Exception as e:
        raise ModelError(f"reference model: ONNX Runtime cannot load it ({str(e).splitlines()[0][:160]})") from None
    feeds = {}
    for i in sess.get_inputs():
        if i.name not in inputs:
            raise DataError(f"reference run: missing input {i.name!r}")
        feeds[i.name] = _feed(i.name, inputs[i.name], i.type)
    names = [o.name for o in sess.get_outputs()]
    try:
        outs = sess.run(names, feeds)
    except Exception as e:
        raise DataError(f"reference run failed: {str(e).splitlines()[0][:160]}") from None
    return dict(zip(names, outs))


def ort_tensors(model, inputs: dict, fused: bool = True) -> tuple[dict, dict]:
    """(outputs as `ort_run` gives them, {tensor name: {value, scale, zero_point, op, inputs}}): every tensor
    of one ONNX Runtime run (each node output made a graph output; types from ONNX shape inference). A QDQ
    model's float tensor quantized by a QuantizeLinear is given as that node's integer output with its scale
    and zero point under the float tensor's name (the name the compiler keeps), and an operator's inputs
    are named through their DequantizeLinear / QuantizeLinear pairs; scale and zero point are None for a
    float tensor."""
    import onnx
    from onnx import numpy_helper

    proto = _onnx_proto(model)
    try:
        typed = onnx.shape_inference.infer_shapes(proto)
    except Exception:  # noqa: BLE001 - shape inference of a model ONNX Runtime runs: use what is declared
        typed = proto
    g = typed.graph
    kinds = {vi.name: vi for vi in list(g.value_info) + list(g.output)}
    have = {o.name for o in g.output}
    ext = onnx.ModelProto()
    ext.CopyFrom(typed)
    for n in g.node:
        for t in n.output:
            if t and t not in have and t in kinds and kinds[t].type.HasField("tensor_type"):
                ext.graph.output.append(kinds[t])
                have.add(t)
    vals = ort_run(ext, inputs, fused=fused)
    consts = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    made = {t: n for n in g.node for t in n.output}
    consts.update({n.output[0]: numpy_helper.to_array(a.t) for n in g.node if n.op_type == "Constant"
                   for a in n.attribute if a.name == "value"})

    def source(t: str) -> str:
        """The tensor a DequantizeLinear output stands for (its QuantizeLinear's float input)."""
        n = made.get(t)
        if n is not None and n.op_type == "DequantizeLinear":
            q = made.get(n.input[0])
            return q.input[0] if q is not None and q.op_type == "QuantizeLinear" else n.input[0]
        return t

    def param(name: str | None):
        v = consts.get(name) if name else None
        return None if v is None or np.size(v) != 1 else v.reshape(-1)[0]

    out: dict = {}
    for n in g.node:
        if n.op_type == "DequantizeLinear" or not n.output or n.output[0] not in vals:
            continue
        ins = [source(t) for t in n.input if t and t not in consts]
        if n.op_type == "QuantizeLinear":
            x = n.input[0]
            scale, zp = param(n.input[1]), param(n.input[2] if len(n.input) > 2 else None)
            p = made.get(x)
            if scale is not None and p is not None:
                out[x] = {"value": vals[n.output[0]], "scale": float(scale), "zero_point": int(zp or 0),
                          "op": p.op_type, "inputs": [source(t) for t in p.input if t and t not in consts]}
            continue
        for t in n.output:
            if t in vals and t not in out and np.asarray(vals[t]).dtype.kind == "f":
                out[t] = {"value": vals[t], "scale": None, "zero_point": None, "op": n.op_type, "inputs": ins}
    outs = {o.name: vals[o.name] for o in proto.graph.output if o.name in vals}
    return outs, out


def _onnx_proto(model):
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (str, Path)):
        if not Path(model).is_file():
            raise ModelError(f"{model}: no such model file")
        try:
            return onnx.load(str(model))
        except Exception as e:  # noqa: BLE001 - any parse failure is a bad model
            raise ModelError(f"{model}: not an ONNX model ({str(e).splitlines()[0][:120]})") from None
    raise ModelError(f"reference model: expected a path or onnx.ModelProto, got {type(model).__name__}")


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
    reference: str = ""  # which runtime: "ONNX Runtime", "ONNX Runtime (quantized model)", "TFLite interpreter"
    precision: str = ""  # the precision the outputs were computed at (`program_precision`)
    layers: list | None = None  # per_layer.LayerDiff per tensor compared (validate(per_layer=True)), else None

    def thresholds_text(self) -> str:
        """Which thresholds applied: 'thresholds: int8 defaults (outputs computed at int8): ...' or 'given'."""
        th = self.thresholds
        if th is None:
            return ""
        default = DEFAULT_THRESHOLDS.get(self.precision)
        which = (f"{self.precision} defaults" if th == default else "given") if self.precision else "given"
        at = f" (outputs computed at {self.precision})" if self.precision else ""
        parts = [f"max_rel <= {th.max_rel:g}", f"cosine >= {th.min_cosine:g}"]
        if th.min_exact is not None:
            parts.append(f"int8 exact >= {100 * th.min_exact:g}%")
        if th.require_top1:
            parts.append("top-1 agrees")
        return f"thresholds: {which}{at}: " + ", ".join(parts)

    def to_dict(self) -> dict:
        """The report as `validate --json` writes it."""
        th = None if self.thresholds is None else {k: v for k, v in vars(self.thresholds).items()}
        return {"passed": self.passed, "status": getattr(self.run_result, "status", "ok"), "reference": self.reference,
                "precision": self.precision, "thresholds": th, "thresholds_text": self.thresholds_text(),
                "metrics": {k: m.to_dict() for k, m in self.metrics.items()}, "failures": self.failures,
                **({} if self.layers is None else {"layers": [d.to_dict() for d in self.layers]})}

    def text(self) -> str:
        lines = []
        if self.layers is not None:
            from .per_layer import render

            lines.append(render(self.layers))
        for name, m in self.metrics.items():
            mark = "FAIL " + "; ".join(self.failures[name]) if self.failures.get(name) else "ok"
            lines.append(f"{name}: {m.text()}  {mark}")
        if self.failures.get("per-layer"):
            lines.append("per-layer: FAIL " + "; ".join(self.failures["per-layer"]))
        if self.metrics and self.thresholds is not None:
            lines.append(self.thresholds_text())
        status = getattr(self.run_result, "status", "ok")
        against = f" against {self.reference}" if self.reference else ""
        lines.append(f"validate: {'PASS' if self.passed else 'FAIL'} (run {status}){against}")
        return "\n".join(lines)


PRECISIONS = ("int8", "fp16", "fp32")  # coarsest first


def program_precision(program) -> str:
    """"int8", "fp16" or "fp32": the precision the program's outputs were computed at, the coarsest storage of
    the values it computes (every buffer but the weights: inputs, activations, outputs). A quantized model's
    float output (a float Softmax after int8 layers) carries the int8 layers' rounding: int8, not fp32.
    Integer and bool tensors (indices, shapes, masks) set no precision; a program of only those is fp32."""
    dts = {b.dtype for b in program.buffers if b.kind != "weight"}
    return next((p for p in PRECISIONS if p in dts), "fp32")


REFERENCE_LABELS = {"tflite": "the TFLite interpreter", "onnx-quantized": "ONNX Runtime (the quantized model, unfused)",
                    "onnx": "ONNX Runtime fp32"}  # what a reference kind runs, in reports


def reference_kind(model) -> str:
    """"tflite", "onnx-quantized" (QDQ or QOperator) or "onnx" (float) by the model's content."""
    from .compiler.frontends.sources import load_source

    src = load_source(model)
    if src.kind == "tflite":
        return "tflite"
    from .compiler.frontends.qonnx import is_quantized

    return "onnx-quantized" if is_quantized(src.proto) else "onnx"


def quantized_metrics(sim_q: np.ndarray, ref_q: np.ndarray, scale: float, zp: int) -> Metrics:
    """Metrics of int8 outputs: exact-match share and max step difference, plus the float metrics of
    the dequantized values."""
    a, b = np.asarray(sim_q, np.int64).reshape(-1), np.asarray(ref_q, np.int64).reshape(-1)
    if a.shape != b.shape:
        raise DataError(f"output sizes differ: simulator {np.shape(sim_q)}, reference {np.shape(ref_q)}")
    m = metrics((a - zp) * float(scale), (b - zp) * float(scale))
    exact = float(np.mean(a == b)) if a.size else 1.0
    steps = int(np.abs(a - b).max(initial=0))
    return Metrics(m.max_abs, m.max_rel, m.cosine, m.top1, exact, steps)


def _as_int8(ref: np.ndarray, buf) -> np.ndarray:
    """A reference output in the blob's int8 terms: uint8 shifted by -128, float (dequantized by the model)
    quantized back with the output buffer's scale and zero point."""
    ref = np.asarray(ref)
    if ref.dtype == np.int8:
        return ref.astype(np.int64)
    if ref.dtype == np.uint8:
        return ref.astype(np.int64) - 128
    from .kernels.quant import quantize

    return quantize(ref, buf.scale, buf.zero_point).astype(np.int64)


def on_int8_grid(program, inputs: dict) -> dict:
    """Float inputs of int8 input buffers replaced by the values their int8 codes stand for, so the
    simulator and a quantized reference start from the same int8 values (a reference that quantizes in
    float32 would otherwise round an input lying on a rounding tie the other way)."""
    from .kernels.quant import dequantize, quantize

    out = dict(inputs)
    for b in program.buffers_of("input"):
        x = out.get(b.name)
        if b.dtype == "int8" and x is not None and np.asarray(x).dtype.kind == "f":
            out[b.name] = dequantize(quantize(np.asarray(x, np.float64), b.scale, b.zero_point), b.scale, b.zero_point)
    return out


def reference_floats(reference_model, program, inputs: dict, kind: str | None = None) -> dict[str, np.ndarray]:
    """{output: float array} of the model's own runtime (as `validate` runs it) for the inputs the program
    takes: a quantized reference starts from the inputs on the int8 grid, and its int8 outputs (a TFLite
    interpreter's, a QDQ model's requantized ones) are dequantized with the program's output buffer, so
    they compare with the simulator's `outputs`."""
    kind = kind or reference_kind(reference_model)
    if kind == "onnx":
        return ort_run(reference_model, inputs)
    from .kernels.quant import dequantize

    inputs = on_int8_grid(program, inputs)
    if kind == "tflite":
        from .reference_tflite import reference_outputs

        ref = reference_outputs(reference_model, inputs)
    else:
        ref = ort_run(reference_model, inputs, fused=False)
    outs = {b.name: b for b in program.buffers_of("output")}
    return {k: (dequantize(_as_int8(v, outs[k]), outs[k].scale, outs[k].zero_point).astype(np.float32)
                if k in outs and outs[k].dtype == "int8" else np.asarray(v, np.float32)) for k, v in ref.items()}


def validate(program_or_blob, reference_model, inputs: dict, thresholds: Thresholds | None = None,
             run_options=None, profile=None, kernels: str = "auto", per_layer: bool = False) -> ValidationReport:
    """Run inputs through the simulator and the model's own runtime and compare every output.

    `inputs` are the program's, as `runtime.run` binds them (NCHW floats); arrays in the model's own layout
    and type (a TFLite model's NHWC uint8 image) convert with `model_inputs.to_program(program, arrays, model)`.

    `reference_model`: an ONNX model (ONNX Runtime: fp32 for a float model, the quantized model's graph
    for QDQ/QOperator, unfused: `ort_run`) or a .tflite model (the TFLite interpreter, `kernels` as in
    `reference_tflite`). For a quantized reference, the inputs are first put on the int8 grid
    (`on_int8_grid`) and outputs the blob holds as int8 are also compared as int8 (exact share, max steps). A faulting simulated run never passes; thresholds default per
    the program's precision. `per_layer`: every tensor the program keeps is compared too (`per_layer`
    module; `ValidationReport.layers`), from the same reference run as the outputs (the interpreter
    preserving its tensors runs without delegates: "auto" becomes "builtin"); a layer outside its
    tolerance fails the validation."""
    from .runtime import load, run

    prog = load(program_or_blob, profile)
    precision = program_precision(prog)
    thresholds = thresholds or default_thresholds(precision)
    kind = reference_kind(reference_model)
    if kind != "onnx":
        inputs = on_int8_grid(prog, inputs)
    tensors = None
    if not per_layer:
        res = run(prog, inputs, options=run_options, profile=profile)
    if kind == "tflite":
        from .reference_tflite import reference_outputs, reference_tensors

        ran: list = []
        if per_layer:
            ref, tensors = reference_tensors(reference_model, inputs, kernels, ran)
        else:
            ref = reference_outputs(reference_model, inputs, kernels, ran)
        if per_layer:
            label = (f"the TFLite interpreter ({ran[0]} kernels" +
                     (": preserving every tensor turns XNNPACK off)" if kernels == "auto" else ")"))
        else:
            label = REFERENCE_LABELS[kind] + ("" if kernels == "auto" else f" ({kernels} kernels)")
            if ran and ran[0] != kernels:
                label += f" ({ran[0]} kernels: the XNNPACK delegate refused the model)"
    else:
        fused = kind != "onnx-quantized"
        if per_layer:
            ref, tensors = ort_tensors(reference_model, inputs, fused=fused)
        else:
            ref = ort_run(reference_model, inputs, fused=fused)
        label = REFERENCE_LABELS[kind]
    layers = None
    if per_layer:
        from .per_layer import layers as per_layer_diffs

        res, layers = per_layer_diffs(prog, inputs, tensors, run_options, profile, thresholds.min_cosine)
    if res.status != "ok" or not res.outputs:
        return ValidationReport(False, {}, res, thresholds, {}, label, precision)
    outs = {b.name: b for b in prog.buffers_of("output")}
    mets = {}
    for name, r in ref.items():
        if name not in res.outputs:
            raise DataError(f"simulator produced no output {name!r} (has: {', '.join(sorted(res.outputs))})")
        buf = outs.get(name)
        if kind != "onnx" and buf is not None and buf.dtype == "int8":
            mets[name] = quantized_metrics(res.raw_outputs[name], _as_int8(r, buf), buf.scale, buf.zero_point)
        else:
            mets[name] = metrics(res.outputs[name], r)
    fails = {k: thresholds.check(m) for k, m in mets.items()}
    if per_layer:
        from .per_layer import first_outside

        bad = first_outside(layers)
        if bad is not None:
            fails.setdefault("per-layer", []).append(f"{bad.tensor} ({bad.op}, layer {bad.layer}) outside its tolerance")
    return ValidationReport(not any(fails.values()), mets, res, thresholds, fails, label, precision, layers)
