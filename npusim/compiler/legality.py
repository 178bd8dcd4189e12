"""The mapping table: which ONNX operators run on the NPU, which on the host CPU, and why.

One place decides, for every node, "NPU recipe" or "CPU with a reason" (Vela style): each NPU
recipe lists small named checks; the first check that fails gives the reason its node runs as
a software epoch (HOST) instead, e.g. "LRN x2 -> CPU (no NPU unit)". The compile summary,
`--no-cpu-fallback` (strict refusal) and the docs table (`scripts/gen_ops_doc.py`) all derive
from `MAPPINGS`, `REFUSED` and `decide`.

A check is a function (graph, node) -> None when the node passes, else the reason (one line).
Its docstring is the rule as the docs state it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..program.spec import load_isa
from . import lut_ops
from .ir import FLOAT_ELEMS, Graph, Node, hwc

NO_UNIT = "no NPU unit"

# Operators (and operand kinds) refused outright, even on the CPU: the one list of refusals.
REFUSED = {
    # training-only operators
    **{op: "a training operator (not inference)" for op in (
        "Gradient", "Momentum", "Adagrad", "Adam")},
    # random operators: no reference value to validate against, and no seed the board shares
    **{op: "a random operator (values not reproducible against a reference)" for op in (
        "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli", "Multinomial")},
    # sequence and optional types: not tensors in memory
    **{op: "works on sequences or optionals, not tensors" for op in (
        "SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase", "SequenceInsert", "SequenceLength",
        "SequenceMap", "SplitToSequence", "ConcatFromSequence", "Optional", "OptionalGetElement",
        "OptionalHasElement")},
    # string and image-file operators
    **{op: "works on strings or encoded files, not numeric tensors" for op in (
        "StringNormalizer", "StringConcat", "StringSplit", "RegexFullMatch", "TfIdfVectorizer", "ImageDecoder")},
}
# a Dropout in training mode is random too
TRAINING_MODE_OPS = ("Dropout", "BatchNormalization")
TRAINING_MODE = "training_mode=1 (random or training behaviour)"
# operator versions the host cannot run: (op, first opset that works) -> reason
REFUSED_BEFORE = {("Scan", 9): "Scan before opset 9 (its batched form; ONNX's reference implements Scan-9 on)"}


@dataclass(frozen=True)
class Mapping:
    op: str
    recipe: str  # what the NPU runs (docs)
    checks: tuple[Callable, ...]


@dataclass(frozen=True)
class Decision:
    npu: bool
    recipe: str
    reason: str  # why the CPU (empty on the NPU)


def _limit(cmd: str, field: str) -> int:
    return load_isa().command(cmd).field(field).mask


def conv_kernel_limit() -> int:
    """The largest kernel side the CONV fields hold (a fully connected layer on a map is a kernel covering it)."""
    return _limit("CONV", "kh")


def conv_stride_limit() -> int:
    """The largest stride the CONV fields hold (compiler/conv_forms.py rewrites larger ones)."""
    return _limit("CONV", "sh")


def _activations(g: Graph, n: Node) -> list[str]:
    return [t for t in n.inputs if t and t not in g.consts] + [t for t in n.outputs if t]


# ------------------------------------------------------------------ checks (docstring = the rule)

def batch1_maps(g: Graph, n: Node):
    """every computed operand is a float feature map: [1, C, H, W], [1, C, L], [1, C] or [C]"""
    for t in _activations(g, n):
        if g.dtypes.get(t, "fp32") not in FLOAT_ELEMS:
            return f"operand {t!r} is {g.dtypes[t]}, not float"
        if g.compile_dtype == "fp32" and g.dtype(t) == "fp16":
            return f"operand {t!r} is float16 in an fp32 compile (the host keeps its float16 rounding)"
        s = g.shapes[t]
        if 0 in s:
            return f"operand {t!r} is empty {list(s)}"
        if not g.is_map(t):
            return (f"operand {t!r} {list(s)} has batch {s[0]} (the NPU runs batch-1 maps)"
                    if len(s) in (3, 4) and s[0] != 1 else f"operand {t!r} {list(s)} is not a feature map")
    return None


def eltwise_maps(g: Graph, n: Node):
    """every computed operand is a float feature map, or (numpy broadcasting) a float tensor of lower rank
    than the map result: [H, W], [W], [C, 1, 1], [C, H, W] under [1, C, H, W]"""
    out = n.outputs[0]
    if out and g.is_map(out):
        rank = len(g.shapes[out])
        low = {t for t in n.inputs if t and t not in g.consts and len(g.shapes[t]) < rank and g.is_float(t)
               and 0 not in g.shapes[t] and not (g.compile_dtype == "fp32" and g.dtype(t) == "fp16")}
        n = Node(n.name, n.op, [t for t in n.inputs if t not in low], n.outputs, n.attrs, n.proto)
    return batch1_maps(g, n)


def map_fits_units(g: Graph, n: Node):
    """H and W of every operand fit the units' 12-bit fields, C their 16-bit fields"""
    top_hw, top_c = _limit("ACT", "h"), _limit("ACT", "c")
    for t in _activations(g, n):
        h, w, c = hwc(g.shapes[t])
        if max(h, w) > top_hw or c > top_c:
            return f"operand {t!r} {list(g.shapes[t])} exceeds the units' {top_hw} x {top_hw} x {top_c}"
    return None


def rank4_maps(g: Graph, n: Node):
    """the map operands are 4-D [1, C, H, W]"""
    for t in _activations(g, n):
        if len(g.shapes[t]) != 4:
            return f"operand {t!r} {list(g.shapes[t])} is not 4-D"
    return None


def const_weights(g: Graph, n: Node):
    """weights and bias are constants"""
    for t in n.inputs[1:]:
        if t and t not in g.consts:
            return f"input {t!r} is computed (the CA reads constant weights)"
    return None


def conv_2d(g: Graph, n: Node):
    """a 2-D convolution (4-D weights)"""
    w = g.consts.get(n.inputs[1]) if len(n.inputs) > 1 else None
    if w is not None and w.ndim != 4:
        return f"a {w.ndim - 2}-D convolution (the CA runs 2-D)"
    return None


def conv_fields(g: Graph, n: Node):
    """kernel, strides, dilations and pads fit the CONV fields (15x15, 7, 7, 15)"""
    w = g.consts[n.inputs[1]]
    kh, kw = int(w.shape[2]), int(w.shape[3])
    if max(kh, kw) > _limit("CONV", "kh"):
        return f"kernel {kh}x{kw} exceeds the CA's {_limit('CONV', 'kh')}"
    for key, field in (("strides", "sh"), ("dilations", "dh")):
        v = [int(x) for x in n.attrs.get(key, [1, 1])]
        if max(v) > _limit("CONV", field):
            return f"{key} {v} exceed the CA's {_limit('CONV', field)}"
    pads = [int(x) for x in n.attrs.get("pads", [0, 0, 0, 0])]
    if pads and max(pads) > _limit("CONV", "pad_t"):
        return f"pads {pads} exceed the CA's {_limit('CONV', 'pad_t')}"
    if int(n.attrs.get("group", 1)) > _limit("CONV", "groups"):
        return f"group {n.attrs['group']} exceeds the CA's {_limit('CONV', 'groups')}"
    return None


def model_weights(g: Graph, n: Node):
    """pre-quantized weights: per tensor or per output channel, integers minus zero point within int8"""
    w = n.inputs[1] if len(n.inputs) > 1 else ""
    q = g.wq.get(w)
    if q is None:
        return None
    out_axis = 0 if n.op == "Conv" or n.op == "Gemm" and int(n.attrs.get("transB", 0)) else 1
    if q.scale.size > 1 and q.axis != out_axis:
        return f"weights quantized along axis {q.axis} (the CA takes one scale per output channel)"
    vals = np.asarray(q.values, np.int64)
    zp = q.zero_point.reshape(-1)
    if zp.size > 1 and q.axis is not None:
        shape = [1] * vals.ndim
        shape[q.axis] = -1
        zp = zp.reshape(shape)
    d = vals - (zp if zp.size > 1 else int(zp[0]))
    if d.size and (d.min() < -128 or d.max() > 127):
        return "asymmetric weights: their integers minus the zero point leave int8"
    return None


def fc_operand(g: Graph, n: Node):
    """Gemm/MatMul: A is a [1, K] vector, B a constant 2-D matrix, no transA"""
    if len(n.inputs) < 2 or n.inputs[1] not in g.consts:
        return "B is computed (the CA reads constant weights)"
    if g.consts[n.inputs[1]].ndim != 2:
        return f"B has rank {g.consts[n.inputs[1]].ndim} (a 2-D constant is a fully connected layer)"
    a = g.shapes[n.inputs[0]]
    if len(a) != 2 or a[0] != 1:
        return f"A {list(a)} is not a [1, K] vector"
    if n.op == "Gemm" and int(n.attrs.get("transA", 0)):
        return "transA=1"
    if len(n.inputs) > 2 and n.inputs[2] and n.inputs[2] not in g.consts:
        return "bias C is computed"
    return None


def matmul_operands(g: Graph, n: Node):
    """B a constant: the fully connected rule above on feature maps whose H, W and C fit the units' fields,
    or A of rank >= 2 and B 2-D as 1 x 1 CONVs with B^T as weights over A's rows, walked like the
    following; or two computed float tensors of rank >= 2 (batch dimensions broadcast): [1, M, K] @ [1, K, N] maps in
    place (A's M channels in an image map, one partial or whole 16-channel planes), any other shapes as
    grouped, stacked or per-slice CONVs walked by the stream engines in place or through ONNX-order copies
    (the CA streams' padding lanes read from and written to padding of those copies), when estimated faster
    than the host; int8: the kernel operand symmetric (a pre-quantized model's zero point of it 0)"""
    from .matmul import problem

    from .matmul import const_problem

    if len(n.inputs) == 2 and n.inputs[0] not in g.consts and n.inputs[1] not in g.consts:
        return problem(g, n)
    for check in (fc_operand,) + MAP:
        why = check(g, n)
        if why:
            if n.op == "MatMul" and n.inputs[0] not in g.consts and n.inputs[1] in g.consts and \
                    len(g.shapes[n.inputs[0]]) >= 2:
                rows = const_problem(g, n)  # A's rows as slices: 1 x 1 CONVs with B^T as weights
                return f"{why}; as 1 x 1 CONVs over A's rows: {rows}" if rows else None
            return why
    return None


def inference_mode(g: Graph, n: Node):
    """inference form: constant statistics, one output"""
    if len([o for o in n.outputs if o]) != 1:
        return "training outputs (running mean/var) requested"
    for t in n.inputs[1:5]:
        if t not in g.consts:
            return f"statistic {t!r} is computed"
    return None


def clip_const_bounds(g: Graph, n: Node):
    """Clip bounds are constants"""
    for t in n.inputs[1:]:
        if t and t not in g.consts:
            return f"bound {t!r} is computed"
    return None


def channel_vector(v: np.ndarray, c: int) -> bool:
    """A constant a C-channel map takes per channel: a scalar, [C], or C along the channel axis."""
    return v.size == 1 or (v.size == c and (v.ndim == 1 or v.ndim >= 2 and v.shape[-3 if v.ndim >= 3 else -1] == c))


def two_inputs(g: Graph, n: Node):
    """two operands (more are split into a chain of two-input ones): two computed maps (ARITH max / min),
    or a map and a scalar constant (ACT clip), or a map and a constant map (ARITH)"""
    ins = [t for t in n.inputs if t]
    if len(ins) != 2:
        return f"{len(ins)} input(s) (ARITH takes two)"
    return None


def clip_bound(g: Graph, n: Node) -> tuple[str, float] | None:
    """(the computed map, the scalar bound) of a Max / Min of a map and a scalar constant that does not
    grow the map, else None."""
    a, b = n.inputs[0], n.inputs[1]
    if (a in g.consts) == (b in g.consts):
        return None
    x, k = (b, a) if a in g.consts else (a, b)
    v = np.asarray(g.consts[k], np.float64)
    if v.size != 1 or tuple(g.shapes[n.outputs[0]]) != tuple(g.shapes[x]):
        return None
    return x, float(v.reshape(-1)[0])


def eltwise_operands(g: Graph, n: Node):
    """Add/Sub/Mul/Div/Max/Min: a map and a scalar or per-channel constant (Sub and Div: constant right
    operand), or any other constant broadcasting to the map (stored expanded to its shape, up to 2^20
    elements, and streamed into ARITH port 1), or two computed maps of one shape, or broadcast by zero SE strides over H and W (same C;
    a linear [1, C, 1, 1] vector only under an image output or C a multiple of 16; an operand of lower rank
    whose storage is not the map of its padded shape first copied into that map by stream-engine pattern pairs;
    an operand of one channel first expanded to C channels by a 1 x 1 all-ones CONV; both where estimated
    faster than the host), or Mul of a map by
    a computed [1, C, 1, 1] vector; Div of two maps: x * (1 / y), the reciprocal on the ACT unit
    streaming into ARITH mul (int8: y's calibrated range excludes 0)"""
    from .broadcast import problem

    a, b = n.inputs[0], n.inputs[1]
    if a in g.consts and b in g.consts:
        return "both operands constant"
    out = tuple(g.shapes[n.outputs[0]])
    if n.op in ("Sub", "Div") and a in g.consts:
        return f"a constant left operand (ARITH takes x {'-' if n.op == 'Sub' else '/'} k)"
    if n.op == "Div" and b not in g.consts and g.compile_dtype == "int8" and not g.prequantized:
        lo, hi = g.ranges.get(b, (0.0, 0.0))
        if lo <= 0.0 <= hi:
            return f"x / y with y's calibrated range [{lo:.3g}, {hi:.3g}] holding 0 (no int8 scale for 1 / y)"
    elif n.op == "Div" and b not in g.consts and g.prequantized:
        return "x / y in a pre-quantized model (it gives no scale for 1 / y)"
    if a in g.consts:
        a, b = b, a  # commutative: the computed map first
    if b in g.consts:
        sa = tuple(g.shapes[a])
        if sa != out:
            return f"the result {list(out)} is broadcast larger than {list(sa)}"
        k = np.asarray(g.consts[b])
        if n.op == "Div" and not np.all(k != 0):
            return "division by zero"
        if channel_vector(k, hwc(sa)[2]) and n.op not in ("Max", "Min") or k.size == 1:
            return None
        return const_map_problem(k, sa)
    sa, sb = tuple(g.shapes[a]), tuple(g.shapes[b])
    c = hwc(out)[2]
    if n.op == "Mul" and len(out) == 4 and ((sa, sb) == (out, (1, c, 1, 1)) or (sb, sa) == (out, (1, c, 1, 1))):
        return None
    from .broadcast import relayout_plan, relayout_shape
    from .moveconv import expanded_shape, expansion_estimate, host_faster

    y = n.outputs[0]
    relaid = {t: s for t in (a, b) if (s := relayout_shape(g, t, y))}
    copies = 0.0
    for t, s in relaid.items():
        best, why = relayout_plan(g, n, t, s)
        if best is None:
            return f"operand {t!r} {list(g.shapes[t])} copied into a map of {list(s)}: {why}"
        copies += best.cycles
    wide = {t: expanded_shape(g, t, y, relaid.get(t)) for t in (a, b)}
    why = problem(g, a, y, wide[a] or relaid.get(a)) or problem(g, b, y, wide[b] or relaid.get(b))
    if why or not (any(wide.values()) or relaid) or g.profile is None:
        return why
    return host_faster(g, n, expansion_estimate(g, n, relaid) + copies,
                       "for copying a lower-rank operand into a map, broadcasting one channel by a CONV, "
                       "and its ARITH epoch" if relaid else
                       "for broadcasting its one channel by a CONV, and its ARITH epoch")


CONST_MAP_LIMIT = 1 << 20  # elements of a constant operand expanded to the map's shape (octoFlash bytes)


def const_map_problem(k: np.ndarray, shape) -> str | None:
    """Why constant `k` cannot be stored expanded to the map `shape` (an ARITH port-1 map), or None."""
    try:
        full = np.broadcast_shapes(k.shape, tuple(shape))
    except ValueError:
        return f"constant operand {list(k.shape)} does not broadcast to {list(shape)}"
    if full != tuple(shape):
        return f"the result is broadcast larger than {list(shape)} by the constant {list(k.shape)}"
    if int(np.prod(shape)) > CONST_MAP_LIMIT:
        return f"constant operand {list(k.shape)} expanded to {list(shape)} exceeds {CONST_MAP_LIMIT} elements"
    return None


def prelu_slopes(g: Graph, n: Node) -> np.ndarray | None:
    """PRelu's constant slope as float32 [1] (a scalar) or [C] (one per channel of x), else None."""
    v = np.asarray(g.consts[n.inputs[1]], np.float32)
    xs = tuple(g.shapes[n.inputs[0]])
    if v.size == 1:
        return v.reshape(1)
    if v.ndim > len(xs) or len(xs) < 2:
        return None
    padded = (1,) * (len(xs) - v.ndim) + v.shape
    if padded[1] == xs[1] and all(d == 1 for k, d in enumerate(padded) if k != 1):
        return v.reshape(-1)
    return None


def prelu_slope(g: Graph, n: Node):
    """a constant slope: a scalar (ACT leaky) or one per channel (ARITH prelu)"""
    if n.inputs[1] not in g.consts:
        return "the slope is computed"
    if prelu_slopes(g, n) is None:
        return f"slope {list(np.shape(g.consts[n.inputs[1]]))} is neither a scalar nor one per channel of {list(g.shapes[n.inputs[0]])}"
    return None


def reduce_hw(g: Graph, n: Node):
    """a mean or max over the spatial axes of a map: H and W (axes 2, 3) of [1, C, H, W], L (axis 2) of [1, C, L]"""
    rank = len(g.shapes[n.inputs[0]])
    axes = n.attrs.get("axes")
    if axes is None and len(n.inputs) > 1 and n.inputs[1] in g.consts:
        axes = np.asarray(g.consts[n.inputs[1]]).reshape(-1).tolist()
    if rank not in (3, 4) or axes is None or sorted(int(a) % rank for a in axes) != list(range(2, rank)):
        return f"axes {axes} (the POOL unit reduces H and W)"
    return None


def pool_fields(g: Graph, n: Node):
    """a 1-D or 2-D window within the POOL fields (15x15, strides 7, pads 15), no dilation, no indices output,
    no ceil_mode with count_include_pad"""
    k = [int(v) for v in n.attrs.get("kernel_shape", [])]
    if len(k) not in (1, 2) or len(k) + 2 != len(g.shapes[n.inputs[0]]):
        return f"a {len(k)}-D window"
    if any(int(d) != 1 for d in n.attrs.get("dilations", [1] * len(k))):
        return "dilated window"
    if len([o for o in n.outputs if o]) > 1:
        return "the Indices output is requested"
    if int(n.attrs.get("storage_order", 0)):
        return "storage_order=1"
    if max(k) > _limit("POOL", "kh"):
        return f"window {k} exceeds the POOL's {_limit('POOL', 'kh')}"
    if max([int(v) for v in n.attrs.get("strides", [1])]) > _limit("POOL", "sh"):
        return f"strides exceed the POOL's {_limit('POOL', 'sh')}"
    if max([int(v) for v in n.attrs.get("pads", [0])] + [0]) > _limit("POOL", "pad_t"):
        return f"pads exceed the POOL's {_limit('POOL', 'pad_t')}"
    if n.op == "AveragePool" and int(n.attrs.get("count_include_pad", 0)) and int(n.attrs.get("ceil_mode", 0)):
        return "ceil_mode with count_include_pad"
    return None


def resize_rule(g: Graph, n: Node):
    """nearest (a pixel choice the RESIZE unit's floor rule reproduces) or linear (asymmetric, half_pixel,
    align_corners), spatial scales only, the given scales equal to output / input, no antialias"""
    from .resize import resize_problem

    return resize_problem(g, n)


def float_weights(g: Graph, n: Node):
    """weights the model gives as floats (the phases quantize their sub-kernels themselves)"""
    if len(n.inputs) > 1 and n.inputs[1] in g.wq:
        return "pre-quantized weights (a phase would requantize its sub-kernel)"
    return None


def convtranspose_rule(g: Graph, n: Node):
    """a 2-D transposed convolution with a blocked16 output whose output phases are stride-1 convs within
    the CONV fields, each phase map in the output's layout (checked against the host's kernel)"""
    from ..program.layouts import required_layout
    from .convtranspose import plan

    phases, why = plan(g, n)
    if phases is None:
        return why
    out = g.shapes[n.outputs[0]]
    layout = required_layout(*hwc(out))
    for ph in phases:
        if max(len(ph.y.taps), len(ph.x.taps)) > _limit("CONV", "kh"):
            return f"a phase kernel of {len(ph.y.taps)}x{len(ph.x.taps)} exceeds the CA's {_limit('CONV', 'kh')}"
        if max(ph.y.pad_lo, ph.y.pad_hi, ph.x.pad_lo, ph.x.pad_hi) > _limit("CONV", "pad_t"):
            return f"a phase needs pads beyond the CA's {_limit('CONV', 'pad_t')}"
        if required_layout(ph.y.n, ph.x.n, out[1]) != layout:
            return f"a {ph.y.n}x{ph.x.n} phase is not in the output's {layout} layout"
    if layout != "blocked16":  # an image pixel (C <= 4 elements) need not start on a bus word
        return f"its {layout} output (C <= 4) puts phase pixels off the bus-word grid of a write SE's base"
    return None


def concat_resolvable(g: Graph, n: Node):
    """computed maps concatenated on channels (parts on 16-channel blocks written in place, others by a
    chain of ARITH concats) or on rows or columns (each part's first pixel on the bus-word grid, in the
    output's layout)"""
    from .addressing import spatial_concat_problem

    rank = len(g.shapes[n.outputs[0]])
    if any(t in g.consts for t in n.inputs):
        return "a constant part"
    if rank < 2 or int(n.attrs.get("axis", 1)) % rank != 1:
        return spatial_concat_problem(g, n)
    return None


def addressed_box(g: Graph, n: Node):
    """constant forward steps over channels, rows and columns; channels that are whole 16-channel pixels
    (a box starting on a block) or lie in one block or image pixel; the first element on the bus-word grid;
    else (Slice, Split) a grid-aligned cover shifted into place by a one-hot CONV, where estimated faster
    than the host"""
    from .addressing import op_problem

    return op_problem(g, n)


def transpose_rows_columns(g: Graph, n: Node):
    """perm [0, 1, 3, 2] of a [1, C, H, W] map (only axes of length 1 moving: an alias); any other perm between
    maps as an element permutation (stream-engine pattern pairs, or a one-hot CONV gathering channels per
    pixel phase) when the cost model finds it cheaper than the host's copy"""
    from .addressing import op_problem

    return op_problem(g, n)


def depth_to_space_box(g: Graph, n: Node):
    """each phase's channels readable as a box (DCR: C' channels from a 16-channel block or in one block;
    CRD: a channel step within one block) and written from its first row and column on the bus-word grid;
    else an element permutation cheaper than the host's copy (stream-engine pattern pairs, or one-hot CONVs
    gathering each phase's channels, compiler/moveconv.py)"""
    from .addressing import op_problem

    return op_problem(g, n)


def space_to_depth_planes(g: Graph, n: Node):
    """each phase's C channels are whole 16-channel planes of a blocked16 output"""
    from .addressing import op_problem

    return op_problem(g, n)


def pad_border(g: Graph, n: Node):
    """edge or reflect, constant pads of the rows and columns of a map; every row and column copied starts on
    the bus-word grid"""
    from .addressing import op_problem

    return op_problem(g, n)


def softmax_channels(g: Graph, n: Node):
    """over the channel axis of a map (before opset 13 only when H = W = 1); int8: a calibrated model, not a
    pre-quantized one; the shift and sum kernels within 1 MiB"""
    from .softmax import problem

    return problem(g, n)


def identity_copy(g: Graph, n: Node):
    """a copy of a computed map (ARITH copy)"""
    if n.inputs[0] in g.consts:
        return "a copy of a constant"
    return None



MAP = (batch1_maps, map_fits_units)
BROADCAST = ("a smaller map broadcast by zero SE strides; one channel first repeated over C by a CONV; a lower-rank "
             "operand first copied into a map of its padded shape")
MAPPINGS = {m.op: m for m in [
    Mapping("Conv", "CONV (1-D as 1 x k; a stride past 7: SpaceToDepth, then a stride-1 CONV)",
            (const_weights, conv_2d) + MAP + (rank4_maps, conv_fields, model_weights)),
    Mapping("ConvTranspose", "CONV per output phase (stride-1 sub-kernels), written by strided addressing",
            (const_weights,) + MAP + (rank4_maps, float_weights, convtranspose_rule)),
    Mapping("Gemm", "CONV (fully connected)", (fc_operand,) + MAP + (model_weights,)),
    Mapping("MatMul", "CONV (fully connected); of two activations: CONV whose kernel is one operand, read from "
                      "its buffer, per batch slice (compiler/matmul.py)", (matmul_operands, model_weights)),
    Mapping("BatchNormalization", "ARITH affine", (inference_mode,) + MAP),
    Mapping("Relu", "ACT relu (or fused into the conv)", MAP),
    Mapping("Clip", "ACT clip (or fused into the conv)", (clip_const_bounds,) + MAP),
    Mapping("LeakyRelu", "ACT leaky", MAP),
    Mapping("Sigmoid", "ACT sigmoid", MAP),
    Mapping("Tanh", "ACT tanh", MAP),
    Mapping("HardSwish", "ACT hardswish", MAP),
    Mapping("SiLU", "ACT silu (x * Sigmoid(x))", MAP),
    Mapping("HardSigmoid", "ACT hardsigmoid", MAP),
    Mapping("Elu", "ACT elu", MAP),
    Mapping("Softplus", "ACT softplus", MAP),
    Mapping("Gelu", "ACT gelu / gelu_tanh (the Erf form x * 0.5 * (1 + Erf(x / sqrt 2)) too: compiler/gelu.py)", MAP),
    Mapping("Mish", "ACT mish", MAP),
    Mapping("Reciprocal", "ACT reciprocal", MAP),
    *[Mapping(op, lut_ops.RECIPE, MAP + (lut_ops.int8_only,)) for op in lut_ops.LUT_OPS],
    Mapping("PRelu", "ACT leaky (scalar slope) / ARITH prelu (per-channel slope)", MAP + (prelu_slope,)),
    Mapping("Add", f"ARITH add / add_const ({BROADCAST})", (eltwise_maps, map_fits_units, eltwise_operands)),
    Mapping("Sub", f"ARITH sub / add_const ({BROADCAST})", (eltwise_maps, map_fits_units, eltwise_operands)),
    Mapping("Mul", f"ARITH mul / mul_const / mul_channel ({BROADCAST})", (eltwise_maps, map_fits_units, eltwise_operands)),
    Mapping("Div", f"ARITH mul_const; x / y: ACT reciprocal into ARITH mul ({BROADCAST})", (eltwise_maps, map_fits_units, eltwise_operands)),
    Mapping("Max", f"ARITH max ({BROADCAST}); with a scalar: ACT clip", (eltwise_maps, map_fits_units, two_inputs, eltwise_operands)),
    Mapping("Min", f"ARITH min ({BROADCAST}); with a scalar: ACT clip", (eltwise_maps, map_fits_units, two_inputs, eltwise_operands)),
    Mapping("ReduceMean", "POOL global_avg (over the channels: a 1 x 1 CONV C -> 1)", MAP + (reduce_hw,)),
    Mapping("ReduceMax", "POOL global_max", MAP + (reduce_hw,)),
    Mapping("MaxPool", "POOL max", MAP + (pool_fields,)),
    Mapping("AveragePool", "POOL avg", MAP + (pool_fields,)),
    Mapping("GlobalAveragePool", "POOL global_avg", MAP + (rank4_maps,)),
    Mapping("GlobalMaxPool", "POOL global_max", MAP + (rank4_maps,)),
    Mapping("Resize", "RESIZE", MAP + (rank4_maps, resize_rule)),
    Mapping("Upsample", "RESIZE (asymmetric)", MAP + (rank4_maps, resize_rule)),
    Mapping("Concat", "addressing (parts written into the planes, rows or columns) or ARITH concats",
            MAP + (concat_resolvable,)),
    Mapping("Identity", "ARITH copy", MAP + (identity_copy,)),
    Mapping("Slice", "addressing: a view in place, or an ARITH copy whose read SE walks the box, or a CONV "
                     "shifting it from a grid-aligned cover (compiler/moveconv.py)", MAP + (addressed_box,)),
    Mapping("Split", "addressing: per part a view in place, or an ARITH copy whose read SE walks it, or a CONV "
                     "shifting it from a grid-aligned cover (compiler/moveconv.py)", MAP + (addressed_box,)),
    Mapping("Transpose", "ARITH copy whose read SE walks columns as rows; channels moved: ARITH copies between "
                         "stream-engine pattern pairs (compiler/permute.py) or one-hot CONVs gathering channels "
                         "(compiler/moveconv.py)", MAP + (transpose_rows_columns,)),
    Mapping("DepthToSpace", "ARITH copy per phase: its channels read as a box, every b-th pixel written; else "
                            "one-hot CONVs gathering each phase's channels (compiler/moveconv.py) or copies "
                            "between stream-engine pattern pairs", MAP + (rank4_maps, depth_to_space_box)),
    Mapping("Pad", "ARITH copies: the map into the interior, then border rows and columns from written ones "
                   "(edge: a stride-0 read per side; reflect: a copy per row or column)", MAP + (pad_border,)),
    Mapping("Softmax", "CONV channel shifts + ARITH max (the channel maximum), ARITH sub + ACT exp, "
                       "CONV all-ones sum + ACT reciprocal + ARITH mul (compiler/softmax.py)", MAP + (softmax_channels,)),
    Mapping("SpaceToDepth", "ARITH copy per phase: every b-th pixel read, written into channel planes",
            MAP + (rank4_maps, space_to_depth_planes)),
]}
# operators that never need a unit: they name the same bytes under another shape (when they do)
ALIAS_OPS = ("Flatten", "Reshape", "Squeeze", "Unsqueeze")


def refusal(n: Node, opset: int) -> str | None:
    """Why the node cannot be compiled at all (not even on the CPU), or None."""
    if n.op in REFUSED:
        return REFUSED[n.op]
    if n.op in TRAINING_MODE_OPS and int(n.attrs.get("training_mode", 0)):
        return TRAINING_MODE
    for (op, below), why in REFUSED_BEFORE.items():
        if n.op == op and opset < below:
            return why
    return None


def float_island(g: Graph, n: Node):
    """a quantized model's float tensors (no scale between Q/DQ pairs) stay float: the CPU runs them in fp32"""
    for t in list(n.inputs) + list(n.outputs):
        if t in g.float_islands:
            return "float in the quantized model (no scale and zero point)"
    return None


def decide(g: Graph, n: Node) -> Decision:
    """NPU recipe or CPU reason for one node (aliases are decided by the lowering)."""
    m = MAPPINGS.get(n.op)
    if g.float_islands:
        why = float_island(g, n)
        if why:
            return Decision(False, m.recipe if m else "", why)
    if m is None:
        return Decision(False, "", NO_UNIT)
    for check in m.checks:
        why = check(g, n)
        if why:
            return Decision(False, m.recipe, why)
    return Decision(True, m.recipe, "")


def summary(host_ops: list[tuple[str, str]]) -> list[str]:
    """One line per operator class from (op, reason) pairs, in first-seen order: 'LRN x2 -> CPU (no NPU
    unit)'; a class whose nodes have different reasons shows the most frequent and how many others."""
    by_op: dict[str, dict[str, int]] = {}
    for op, why in host_ops:
        reasons = by_op.setdefault(op, {})
        reasons[why] = reasons.get(why, 0) + 1
    out = []
    for op, reasons in by_op.items():
        n = sum(reasons.values())
        top = max(reasons, key=lambda r: reasons[r])  # first seen among the most frequent
        more = f"; {len(reasons) - 1} other reason(s)" if len(reasons) > 1 else ""
        out.append(f"{op} x{n} -> CPU ({top}{more})")
    return out


# kinds of tensors refused outright (frontend / modelcheck raise with these texts)
MAX_RANK = 8  # HTENSOR d0..d7
RANK_LIMIT = f"npusim tensors have rank 0 to {MAX_RANK}"
ELEMENT_TYPES = "npusim stores float32, float16, int8/16/32/64, uint8/16/32/64 and bool tensors"
NOT_TENSORS = "only tensors are supported (not sequences, maps or optionals)"
DYNAMIC_SHAPE = "its shape depends on the input values (npusim plans static buffers)"
UNSUPPORTED_KINDS = {
    "element types": f"float64, bfloat16, float8, 4-bit, 2-bit, string and complex tensors ({ELEMENT_TYPES})",
    "rank": RANK_LIMIT,
    "dynamic shapes": "a tensor whose shape depends on the input values: " + DYNAMIC_SHAPE,
    "non-tensors": NOT_TENSORS,
}
