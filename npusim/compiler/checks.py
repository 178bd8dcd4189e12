"""Checks a recipe's mapping lists, shared by the recipes: the ISA's field limits and the rules every
feature-map operand meets. A check is a function (graph, node) -> None when the node passes, else the
reason (one line) its node runs on the CPU; its docstring is the rule as the docs table states it.
"""

from __future__ import annotations

import numpy as np

from ..program.spec import load_isa
from .ir import FLOAT_ELEMS, Graph, Node, hwc


def field_limit(cmd: str, field: str) -> int:
    return load_isa().command(cmd).field(field).mask


def conv_kernel_limit() -> int:
    """The largest kernel side the CONV fields hold (a fully connected layer on a map is a kernel covering it)."""
    return field_limit("CONV", "kh")


def conv_stride_limit() -> int:
    """The largest stride the CONV fields hold (compiler/rewrites/conv_forms.py rewrites larger ones)."""
    return field_limit("CONV", "sh")


def _activations(g: Graph, n: Node) -> list[str]:
    return [t for t in n.inputs if t and t not in g.consts] + [t for t in n.outputs if t]


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
    top_hw, top_c = field_limit("ACT", "h"), field_limit("ACT", "c")
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
    if max(kh, kw) > field_limit("CONV", "kh"):
        return f"kernel {kh}x{kw} exceeds the CA's {field_limit('CONV', 'kh')}"
    for key, field in (("strides", "sh"), ("dilations", "dh")):
        v = [int(x) for x in n.attrs.get(key, [1, 1])]
        if max(v) > field_limit("CONV", field):
            return f"{key} {v} exceed the CA's {field_limit('CONV', field)}"
    pads = [int(x) for x in n.attrs.get("pads", [0, 0, 0, 0])]
    if pads and max(pads) > field_limit("CONV", "pad_t"):
        return f"pads {pads} exceed the CA's {field_limit('CONV', 'pad_t')}"
    if int(n.attrs.get("group", 1)) > field_limit("CONV", "groups"):
        return f"group {n.attrs['group']} exceeds the CA's {field_limit('CONV', 'groups')}"
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


def channel_vector(v: np.ndarray, c: int) -> bool:
    """A constant a C-channel map takes per channel: a scalar, [C], or C along the channel axis."""
    return v.size == 1 or (v.size == c and (v.ndim == 1 or v.ndim >= 2 and v.shape[-3 if v.ndim >= 3 else -1] == c))


MAP = (batch1_maps, map_fits_units)
