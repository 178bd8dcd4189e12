"""Convolutions and fully connected layers: one CONV step on a CA (weights in the weights pool, a
pre-quantized model's own weight scales and int32 biases kept, `model_quant`).
"""

from __future__ import annotations

import numpy as np

from ...errors import ModelError
from ..checks import MAP, conv_2d, conv_fields, const_weights, fc_operand, model_weights, rank4_maps
from ..ir import Graph, Node, Step, hwc
from ..recipe import Recipe, one_step


def conv_pads(n: Node, ih, iw, kh, kw, sh, sw, dh, dw) -> tuple[int, int, int, int]:
    ap = n.attrs.get("auto_pad", "NOTSET")
    if ap in ("NOTSET", ""):
        p = list(n.attrs.get("pads", [0, 0, 0, 0]))
        return p[0], p[1], p[2], p[3]
    if ap == "VALID":
        return 0, 0, 0, 0
    out = []
    for size, k, s, d in ((ih, kh, sh, dh), (iw, kw, sw, dw)):
        total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small = total // 2
        out.append((small, total - small) if ap == "SAME_UPPER" else (total - small, small))
    return out[0][0], out[1][0], out[0][1], out[1][1]


def const_input(g: Graph, n: Node, i: int, what: str):
    """The constant value of optional input `i` of `n` (None when absent); ModelError if it is computed."""
    if len(n.inputs) <= i or not n.inputs[i]:
        return None
    if n.inputs[i] not in g.consts:
        raise ModelError(f"{n.op} {n.name!r}: input {what} ({n.inputs[i]!r}) must be a constant")
    return g.consts[n.inputs[i]]


def conv_step(g: Graph, n: Node) -> Step:
    x, wname = n.inputs[0], n.inputs[1]
    if wname not in g.consts:
        raise ModelError(f"Conv {n.name!r}: weights must be constant")
    w = g.consts[wname]

    if w.ndim != 4:
        raise ModelError(f"Conv {n.name!r}: only 2-D convolutions are supported (weights rank {w.ndim})")
    bias = const_input(g, n, 2, "bias B")
    bias = np.zeros(w.shape[0], np.float32) if bias is None else bias
    ih, iw, ic = hwc(g.shapes[x])
    kh, kw = w.shape[2], w.shape[3]
    sh, sw = n.attrs.get("strides", [1, 1])
    dh, dw = n.attrs.get("dilations", [1, 1])
    pads = conv_pads(n, ih, iw, kh, kw, sh, sw, dh, dw)
    return Step("CONV", n.outputs[0], dict(
        weights=w.transpose(0, 2, 3, 1), bias=bias.astype(np.float32).reshape(-1),  # a view: quantised as read
        kh=kh, kw=kw, sh=sh, sw=sw, dh=dh, dw=dw, pads=pads, groups=int(n.attrs.get("group", 1)),
        act="none", act_range=None, **model_quant(g, wname, 0, n.inputs[2] if len(n.inputs) > 2 else "", w.shape[0])))


def model_quant(g: Graph, wname: str, axis: int, bname: str, oc: int, alpha: float = 1.0) -> dict:
    """The pre-quantized model's own weight scales per output channel (`w_scale`) and int32 biases
    (`bias_q`), when the weights are stored as integers that fit int8 after their zero point."""
    out = {}
    q = g.wq.get(wname)
    per = q.along(axis, oc) if q is not None and alpha == 1.0 else None
    if per is not None:
        w = np.asarray(g.consts[wname], np.float64)
        s = per[0].reshape([-1 if i == axis else 1 for i in range(w.ndim)])
        k = w / s
        r = np.rint(k)
        if np.all(np.abs(k - r) < 1e-3) and r.min(initial=0) >= -128 and r.max(initial=0) <= 127:
            out["w_scale"] = per[0]
    b = g.wq.get(bname) if bname else None
    if b is not None and "w_scale" in out and b.values.dtype.kind == "i" and b.values.size in (1, oc) and \
            not np.any(b.zero_point):
        out["bias_q"] = np.broadcast_to(np.asarray(b.values, np.int64).reshape(-1), (oc,)).copy()
    return out


def fc_step(g: Graph, n: Node, src: str) -> Step:
    """Gemm/MatMul on the map `src` (before Flatten) as a CONV whose kernel covers the whole map."""
    b = n.inputs[1]
    if b not in g.consts:
        raise ModelError(f"{n.op} {n.name!r}: the weight operand must be constant")

    B = np.asarray(g.consts[b])
    if B.dtype.kind != "f":  # integers round once, to float64 (the float32 weights below round again)
        B = B.astype(np.float64)
    if n.op == "Gemm":
        if n.attrs.get("transA", 0):
            raise ModelError(f"Gemm {n.name!r}: transA=1 is not supported")
        wfc = B if n.attrs.get("transB", 0) else B.T
        alpha, beta = float(n.attrs.get("alpha", 1.0)), float(n.attrs.get("beta", 1.0))
        if alpha != 1.0:  # scaled in float64 (x * 1.0 is x: float weights go to float32 unscaled)
            wfc = wfc.astype(np.float64) * alpha
        c = const_input(g, n, 2, "bias C")
        bias = np.zeros(wfc.shape[0]) if c is None else np.broadcast_to(
            np.asarray(c, np.float64).reshape(-1) * beta, (wfc.shape[0],))
        mq = model_quant(g, b, 0 if n.attrs.get("transB", 0) else 1, n.inputs[2] if len(n.inputs) > 2 and beta == 1.0
                         else "", wfc.shape[0], alpha)
    else:
        if B.ndim != 2:
            raise ModelError(f"MatMul {n.name!r}: only a 2-D constant right operand is supported")
        wfc, bias = B.T, np.zeros(B.shape[1])
        mq = model_quant(g, b, 1, "", wfc.shape[0])
    h, w, c = hwc(g.shapes[src])
    if wfc.shape[1] != h * w * c:
        raise ModelError(f"{n.op} {n.name!r}: weight width {wfc.shape[1]} != flattened input {h * w * c}")
    weights = wfc.reshape(wfc.shape[0], c, h, w).transpose(0, 2, 3, 1)
    return Step("CONV", n.outputs[0], dict(
        weights=np.ascontiguousarray(weights, dtype=np.float32), bias=bias.astype(np.float32),
        kh=h, kw=w, sh=1, sw=1, dh=1, dw=1, pads=(0, 0, 0, 0), groups=1, act="none", act_range=None, **mq))


def _fc_lower(ctx, n: Node, x: str):
    return ctx.layer(n, x, [fc_step(ctx.g, n, x)])


RECIPES = [
    Recipe("Conv", "CONV (1-D as 1 x k; a stride past 7: SpaceToDepth, then a stride-1 CONV)",
           (const_weights, conv_2d) + MAP + (rank4_maps, conv_fields, model_weights), one_step(conv_step)),
    Recipe("Gemm", "CONV (fully connected)", (fc_operand,) + MAP + (model_weights,), _fc_lower),
]
