"""Per-layer comparison (`validate --per-layer`): every tensor the program keeps, against the reference's.

`capture(program, inputs)` runs the program once and reads each activation and output buffer right after
the last epoch (or software epoch) that writes it before anything reads it (its producer's, or the
producers' of buffers nested in it: concat parts), so memory reuse later in the run does not matter.
Tensors inside a fused chain have no buffer and are compared at the chain's output.

`compare(program, captured, ref_tensors)` matches them by name with the reference runtime's tensors
(`reference_tflite.reference_tensors`: the interpreter preserving every tensor; `reference.ort_tensors`:
ONNX Runtime with every node output an output) and measures each in quantization steps of the simulator's
buffer: steps = round(|sim - ref| / scale) of the dequantized values, which is the int8 difference when
both hold the same scale and zero point. A quantized reference tensor is judged against the tolerance of
the operator that computes it (`TOLERANCE_STEPS`, in steps, by TFLite builtin or ONNX op type); an operator
that only moves or selects values (`PASS_THROUGH`) may also carry its inputs' difference on. A float
reference tensor is judged by cosine. `first_outside` names the first layer, in execution order, that
leaves its tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Operators computed exactly alike (up to the rounding rules the ISA follows): 0 steps of their own.
EXACT = ("RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "CONCATENATION", "MAX_POOL_2D", "PAD", "PADV2",
         "MIRROR_PAD", "STRIDED_SLICE", "SLICE", "SPLIT", "SPLIT_V", "GATHER", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH",
         "RESIZE_NEAREST_NEIGHBOR", "REDUCE_MAX", "MAXIMUM", "MINIMUM", "AVERAGE_POOL_2D", "PACK", "UNPACK",
         "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Transpose", "Concat", "MaxPool", "Pad", "Slice", "Split",
         "Gather", "DepthToSpace", "SpaceToDepth", "Identity", "ReduceMax", "GlobalMaxPool", "Max", "Min")
# Operators that only move or select values: their inputs' difference may pass through them.
PASS_THROUGH = ("RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "CONCATENATION", "MAX_POOL_2D", "PAD", "PADV2",
                "MIRROR_PAD", "STRIDED_SLICE", "SLICE", "SPLIT", "SPLIT_V", "GATHER", "DEPTH_TO_SPACE",
                "SPACE_TO_DEPTH", "RESIZE_NEAREST_NEIGHBOR", "REDUCE_MAX", "MAXIMUM", "MINIMUM", "RELU", "RELU6",
                "RELU_N1_TO_1", "PACK", "UNPACK", "AVERAGE_POOL_2D", "MEAN", "Reshape", "Squeeze", "Unsqueeze",
                "Flatten", "Transpose", "Concat", "MaxPool", "Pad", "Slice", "Split", "Gather", "DepthToSpace",
                "SpaceToDepth", "Identity", "ReduceMax", "GlobalMaxPool", "Max", "Min", "Relu", "Clip",
                "AveragePool", "GlobalAveragePool", "ReduceMean", "Resize")
# Everything else: one rounding of its own may differ between kernel sets (TFLite's builtin kernels round
# a convolution's rescale twice, an ADD's three times; the ISA once), and a difference of its inputs grows
# by at most about as much again through one operator.
DEFAULT_STEPS = 2
TOLERANCE_STEPS = {**{op: 0 for op in EXACT}}


def tolerance(op: str) -> int:
    """Steps an operator may differ by on its own (module doc)."""
    return TOLERANCE_STEPS.get(op, DEFAULT_STEPS)


@dataclass(frozen=True)
class LayerDiff:
    """One tensor compared: `layer` is the program's layer that wrote it, `op` the reference's operator. The
    judged metrics are of the layer alone (fed the reference's inputs); `run_*` those of the plain run, where
    the differences of every layer before it add up."""

    tensor: str
    layer: str
    op: str
    size: int
    cosine: float
    max_abs: float
    exact: float | None = None  # quantized reference: share of values equal to the reference's
    max_steps: int | None = None
    allowed: int | None = None  # steps allowed: the operator's tolerance (+ what fused operators pass on)
    within: bool = True
    run_cosine: float | None = None
    run_exact: float | None = None
    run_max_steps: int | None = None

    def text(self) -> str:
        where = "" if self.layer == self.tensor else f", layer {self.layer}"
        q = "" if self.exact is None else (f"exact={100 * self.exact:.2f}% max_steps={self.max_steps} "
                                           f"(allowed {self.allowed}) ")
        ran = ""
        if self.run_cosine is not None:
            ran = "; in the run: " + ("" if self.run_exact is None else
                                      f"exact={100 * self.run_exact:.2f}% max_steps={self.run_max_steps} ")
            ran += f"cosine={self.run_cosine:.6f}"
        return f"{self.tensor} [{self.op}{where}]: alone: {q}cosine={self.cosine:.6f}{ran}"

    def to_dict(self) -> dict:
        return dict(vars(self))


def capture(program, inputs: dict, options=None, profile=None, inject: dict | None = None) -> tuple[object, dict, dict]:
    """(RunResult, {buffer name: native array}, {buffer name: step}) of one run (module doc); `step` is the
    index of the epoch or software epoch after which the value was read (execution order). `inject`
    ({buffer name: native array}): written into those buffers before each step that reads them, so every
    layer computes from these values instead of its producers' (the isolated comparison)."""
    from .runtime import load, run

    prog = load(program, profile)
    steps = [i for i, c in enumerate(prog.commands) if c.op in ("RUN", "HOST")]
    pos = {cmd: k for k, cmd in enumerate(steps)}
    layer_steps: dict[str, list[int]] = {}
    for k, cmd in enumerate(steps):
        layer_steps.setdefault(prog.layer_of(cmd), []).append(k)
    bufs = [b for b in prog.buffers if b.kind in ("activation", "output")]
    by_layer: dict[str, list] = {}
    first_use: dict[str, float] = {}
    for b in bufs:
        writers = {o.producer for o in bufs if o.pool == b.pool and b.offset <= o.offset
                   and o.offset + o.size <= b.offset + b.size and o.producer}
        for w in writers:
            by_layer.setdefault(w, []).append(b)
        first_use[b.name] = min((k for c in b.consumers for k in layer_steps.get(c, ())), default=float("inf"))
    reads: dict[str, list] = {}
    for b in bufs if inject else ():
        if b.name in inject:
            for c in b.consumers:
                reads.setdefault(c, []).append(b)
    got: dict = {}
    when: dict = {}

    def observe(moment, command, io):
        k = pos.get(command)
        if k is None:
            return
        layer = prog.layer_of(command)
        if moment == "before":
            for b in reads.get(layer, ()):
                io.write(b, inject[b.name])
            return
        for b in by_layer.get(layer, ()):
            if k < first_use[b.name]:
                got[b.name], when[b.name] = io.read(b), k

    res = run(prog, inputs, options, profile, observe=observe)
    return res, got, when


def as_buffer_values(buf, r: dict):
    """The reference tensor `r` as the native values of `buf` (int8: the same integers when both hold one
    scale and zero point, else requantized with the buffer's), or None when it cannot stand for them."""
    from .kernels.quant import np_dtype, quantize

    want = np.asarray(r["value"])
    if want.size != int(np.prod(buf.shape, dtype=np.int64)):
        return None
    if buf.dtype != "int8":
        return _float(want, r["scale"], r["zero_point"]).astype(np_dtype(buf.dtype))
    if r["scale"] is not None and want.dtype in (np.int8, np.uint8):
        zp = r["zero_point"] - (128 if want.dtype == np.uint8 else 0)
        if abs(r["scale"] - buf.scale) <= 1e-6 * buf.scale and zp == buf.zero_point:
            return (want.astype(np.int64) - (128 if want.dtype == np.uint8 else 0)).astype(np.int8)
    return quantize(_float(want, r["scale"], r["zero_point"]), buf.scale, buf.zero_point)


def _float(value, scale, zp) -> np.ndarray:
    a = np.asarray(value)
    if scale is None:
        return a.astype(np.float64)
    return (a.astype(np.float64) - float(zp)) * float(scale)


def _measure(buf, sim, r: dict) -> dict | None:
    sim, want = np.asarray(sim), np.asarray(r["value"])
    if sim.size != want.size or sim.size == 0:
        return None
    q = buf.dtype == "int8"
    a = _float(sim, buf.scale if q else None, buf.zero_point).reshape(-1)
    e = _float(want, r["scale"], r["zero_point"]).reshape(-1)
    diff = np.abs(a - e)
    finite = bool(np.all(np.isfinite(diff)))
    na, ne = np.linalg.norm(a), np.linalg.norm(e)
    cos = 1.0 if na == 0 and ne == 0 else (float(a @ e / (na * ne)) if na > 0 and ne > 0 and finite else 0.0)
    m = dict(size=int(sim.size), cosine=cos, max_abs=float(diff.max()) if finite else float("inf"))
    if q and r["scale"] is not None:
        st = np.rint(diff / float(buf.scale)) if finite else np.full(diff.shape, np.inf)
        m.update(exact=float(np.mean(st == 0)), max_steps=int(st.max()) if finite else 2 ** 31)
    return m


def compare(program, alone: dict, when: dict, ref: dict, in_run: dict | None = None,
            min_cosine: float = 0.98) -> list[LayerDiff]:
    """One LayerDiff per captured buffer the reference has a tensor of the same name and size for, in
    execution order (module doc). `alone`: the values of the isolated run (each layer fed the reference's
    values), which are judged; `in_run`: those of the plain run, reported next to them. `ref` is in the
    reference's operator order: a tensor it computes but the simulator keeps no buffer for (inside a fused
    chain) passes its operator's tolerance on to the operator that reads it."""
    bufs = {b.name: b for b in program.buffers}
    measured = {n: m for n in alone if n in ref and (m := _measure(bufs[n], alone[n], ref[n])) is not None}
    bound: dict[str, int] = {}  # steps a tensor read by the next operator may differ by (0: fed the reference's)
    allowed: dict[str, int] = {}
    for name, r in ref.items():
        carried = max((bound.get(i, 0) for i in r.get("inputs", ())), default=0) if r["op"] in PASS_THROUGH else 0
        allowed[name] = tolerance(r["op"]) + carried
        bound[name] = 0 if name in measured else allowed[name]
    out: list[LayerDiff] = []
    for name in sorted(measured, key=lambda n: (when[n], n)):
        m, r = measured[name], ref[name]
        layer = program.layer_of(_step_command(program, when[name]))
        ran = _measure(bufs[name], in_run[name], r) if in_run and name in in_run else None
        extra = {} if ran is None else dict(run_cosine=ran["cosine"], run_exact=ran.get("exact"),
                                            run_max_steps=ran.get("max_steps"))
        if "max_steps" in m:
            out.append(LayerDiff(name, layer, r["op"], m["size"], m["cosine"], m["max_abs"], m["exact"],
                                 m["max_steps"], allowed[name], m["max_steps"] <= allowed[name], **extra))
        else:
            out.append(LayerDiff(name, layer, r["op"], m["size"], m["cosine"], m["max_abs"],
                                 within=m["cosine"] >= min_cosine, **extra))
    return out


def layers(program, inputs: dict, ref: dict, options=None, profile=None,
           min_cosine: float = 0.98) -> tuple[object, list[LayerDiff]]:
    """(RunResult of the plain run, LayerDiffs): the program run as it is (its outputs, each tensor in the
    run) and once more with every tensor the reference has fed to its readers (each layer alone)."""
    from .runtime import load

    prog = load(program, profile)
    res, in_run, _ = capture(prog, inputs, options, profile)
    if res.status != "ok":
        return res, []
    feed = {}
    for b in prog.buffers:
        if b.kind == "activation" and b.name in ref:
            v = as_buffer_values(b, ref[b.name])
            if v is not None:
                feed[b.name] = v
    _, alone, when = capture(prog, inputs, options, profile, inject=feed)
    return res, compare(prog, alone, when, ref, in_run, min_cosine)


def _step_command(program, step: int) -> int:
    steps = program.memo("per-layer steps", (), lambda: [i for i, c in enumerate(program.commands)
                                                          if c.op in ("RUN", "HOST")])
    return steps[step]


def first_outside(diffs: list[LayerDiff]) -> LayerDiff | None:
    return next((d for d in diffs if not d.within), None)


def first_inexact(diffs: list[LayerDiff]) -> LayerDiff | None:
    return next((d for d in diffs if d.exact is not None and d.exact < 1.0), None)


def render(diffs: list[LayerDiff]) -> str:
    """The per-layer table and the verdict line naming the first layer outside its tolerance."""
    lines = [f"per layer ({len(diffs)} tensors compared, in execution order):"]
    for d in diffs:
        lines.append(("  " if d.within else "! ") + d.text())
    bad, off = first_outside(diffs), first_inexact(diffs)
    if off is not None:
        lines.append(f"first inexact tensor: {off.text()}")
    if bad is None:
        lines.append("per layer: every tensor within its operator's tolerance")
    else:
        lines.append(f"per layer: FIRST OUTSIDE TOLERANCE: {bad.text()}")
    return "\n".join(lines)
