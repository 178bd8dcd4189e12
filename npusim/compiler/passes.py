"""Graph passes: pattern rewrites (SiLU, Pad and BN folding), lowering ONNX nodes to NPU layers or
software epochs (the mapping table, legality.py, decides), chain fusion.

Each ONNX node becomes one single-step Layer (or an alias, or a Concat, or a host Layer); fusion
then merges a producer layer into its only consumer (conv-act, conv-add, add-act, conv-pool), so
one epoch runs a chain (CA -> ACT/ARITH/POOL -> write SE through the stream switch) and the tensors
inside it never reach memory. A rewrite only fires on nodes the NPU runs, so a host layer always runs the node as
the model gave it.
"""

from __future__ import annotations

import numpy as np

from ..errors import ModelError
from . import addressing, broadcast, conv_forms, gemm, legality, lut_ops, matmul, moveconv, permute, softmax
from .gelu import rewrite_gelu
from .ir import Concat, Graph, HostOp, Layer, Node, Step, hwc
from .memplan import storage_layout
from .resize import resize_plan

ACT_FUNCS = {"Relu": "relu", "Clip": "clip", "LeakyRelu": "leaky", "Sigmoid": "sigmoid", "Tanh": "tanh",
             "HardSwish": "hardswish", "SiLU": "silu", "HardSigmoid": "hardsigmoid", "Elu": "elu",
             "Softplus": "softplus", "Gelu": "gelu", "Mish": "mish", "Reciprocal": "reciprocal"}
ACT_ALPHA = {"LeakyRelu": 0.01, "Elu": 1.0, "HardSigmoid": 0.2}  # ONNX's default alpha
ALIAS_OPS = legality.ALIAS_OPS
ADDRESSED = ("Slice", "Split", "Transpose", "DepthToSpace", "SpaceToDepth", "Pad")  # compiler/addressing.py


def _single_consumer(g: Graph, t: str) -> Node | None:
    cons = g.consumers(t)
    if len(cons) != 1 or t in g.outputs:
        return None
    return cons[0]


def rewrite_silu(g: Graph) -> None:
    """x * Sigmoid(x) -> SiLU(x) (named after the Mul)."""
    for sig in [n for n in g.nodes if n.op == "Sigmoid"]:
        x, s = sig.inputs[0], sig.outputs[0]
        mul = _single_consumer(g, s)
        if mul is None or mul.op != "Mul" or sorted(mul.inputs) != sorted([x, s]) or \
                not legality.decide(g, sig).npu or s in g.qdq:  # the model quantizes Sigmoid(x): keep both ops
            continue
        i = g.nodes.index(mul)
        g.nodes[i] = Node(mul.name, "SiLU", [x], list(mul.outputs), {"_fused": [sig.name]})
        g.nodes.remove(sig)


def fold_pad(g: Graph) -> None:
    """Pad(constant 0, H/W only) -> Conv(s) the NPU runs: the pads move into the convs' own pads.
    Any other Pad stays (a software epoch)."""
    for pad in [n for n in g.nodes if n.op == "Pad"]:
        cons = g.consumers(pad.outputs[0])
        pads = g.consts.get(pad.inputs[1]) if len(pad.inputs) > 1 and pad.inputs[1] else None
        pads = pad.attrs.get("pads") if pads is None else pads
        if pads is None:
            continue
        pads = np.asarray(pads).reshape(-1)
        value = g.consts.get(pad.inputs[2]) if len(pad.inputs) > 2 and pad.inputs[2] else \
            np.float32(pad.attrs.get("value", 0.0))
        ok = (pad.attrs.get("mode", "constant") == "constant" and value is not None and np.asarray(value).size == 1
              and float(np.asarray(value).reshape(-1)[0]) == 0.0 and (len(pad.inputs) < 4 or not pad.inputs[3])
              and pads.size == 8 and not pads[[0, 1, 4, 5]].any() and (pads >= 0).all() and cons
              and pad.outputs[0] not in g.outputs
              and all(c.op == "Conv" and c.inputs[0] == pad.outputs[0] and
                      c.attrs.get("auto_pad", "NOTSET") in ("NOTSET", "") for c in cons))
        if not ok:
            continue
        t, l, b, r = (int(v) for v in pads[[2, 3, 6, 7]])
        trial = []
        for c in cons:
            p0 = list(c.attrs.get("pads", [0, 0, 0, 0]))
            moved = Node(c.name, c.op, [pad.inputs[0]] + c.inputs[1:], c.outputs,
                         {**c.attrs, "pads": [p0[0] + t, p0[1] + l, p0[2] + b, p0[3] + r]})
            trial.append(moved)
        if not all(legality.decide(g, m).npu for m in trial):
            continue
        for c, m in zip(cons, trial):
            c.attrs["pads"] = m.attrs["pads"]
            c.inputs[0] = pad.inputs[0]
            c.attrs.setdefault("_fused", []).append(pad.name)
        g.nodes.remove(pad)


def _bn_affine(g: Graph, bn: Node) -> tuple[np.ndarray, np.ndarray]:
    names = bn.inputs[1:5]
    for t in names:
        if t not in g.consts:
            raise ModelError(f"BatchNormalization {bn.name!r}: scale/bias/mean/var must be constants")
    gamma, beta, mean, var = (g.consts[t].astype(np.float64).reshape(-1) for t in names)
    den = var + float(bn.attrs.get("epsilon", 1e-5))
    if not (np.isfinite(den).all() and (den > 0).all() and np.isfinite(gamma).all() and np.isfinite(beta).all()
            and np.isfinite(mean).all()):
        raise ModelError(f"BatchNormalization {bn.name!r}: statistics must be finite with var + epsilon > 0")
    k = gamma / np.sqrt(den)
    return k, beta - mean * k


def fold_bn(g: Graph) -> None:
    """Conv -> BN folds into the conv's weights and bias; the conv takes over the BN's output."""
    for conv in [n for n in g.nodes if n.op == "Conv"]:
        bn = _single_consumer(g, conv.outputs[0])
        if bn is None or bn.op != "BatchNormalization" or conv.inputs[1] not in g.consts or conv.outputs[0] in g.qdq or \
                not legality.decide(g, conv).npu or not legality.decide(g, bn).npu:
            continue
        k, b = _bn_affine(g, bn)
        cb = _const_input(g, conv, 2, "bias B")
        bias = 0.0 if cb is None else cb.astype(np.float64)
        wname, bname = conv.outputs[0] + "::w_bn", conv.outputs[0] + "::b_bn"
        g.consts[wname] = _scaled(g.consts[conv.inputs[1]], k)
        g.consts[bname] = (bias * k + b).astype(np.float32)
        conv.inputs = [conv.inputs[0], wname, bname]
        conv.outputs = list(bn.outputs[:1])
        conv.attrs.setdefault("_fused", []).append(bn.name)
        g.nodes.remove(bn)


SCALE_CHUNK = 1 << 15  # float64 elements of one block of _scaled (256 KiB)


def _scaled(w: np.ndarray, k: np.ndarray) -> np.ndarray:
    """float32 of w[oc, ...] * k[oc], multiplied in float64, a cache-sized block of channels at a time."""
    w = np.asarray(w)
    k = np.asarray(k, np.float64).reshape((-1,) + (1,) * (w.ndim - 1))
    out = np.empty(np.broadcast_shapes(w.shape, k.shape), np.float32)
    per = max(1, out[0].size) if out.ndim else 1
    step = max(1, SCALE_CHUNK // per)
    if out.ndim == 0 or out.shape[0] != len(k) or w.shape[0] not in (1, len(k)):  # not one row per channel
        out[...] = w.astype(np.float64) * k
        return out
    for r in range(0, len(k), step):
        wr = w if w.shape[0] == 1 else w[r:r + step]
        np.multiply(wr, k[r:r + step], out=out[r:r + step], dtype=np.float64, casting="same_kind")
    return out


def _conv_pads(n: Node, ih, iw, kh, kw, sh, sw, dh, dw) -> tuple[int, int, int, int]:
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


def _const_input(g: Graph, n: Node, i: int, what: str):
    """The constant value of optional input `i` of `n` (None when absent); ModelError if it is computed."""
    if len(n.inputs) <= i or not n.inputs[i]:
        return None
    if n.inputs[i] not in g.consts:
        raise ModelError(f"{n.op} {n.name!r}: input {what} ({n.inputs[i]!r}) must be a constant")
    return g.consts[n.inputs[i]]


def _conv_step(g: Graph, n: Node) -> Step:
    x, wname = n.inputs[0], n.inputs[1]
    if wname not in g.consts:
        raise ModelError(f"Conv {n.name!r}: weights must be constant")
    w = g.consts[wname]

    if w.ndim != 4:
        raise ModelError(f"Conv {n.name!r}: only 2-D convolutions are supported (weights rank {w.ndim})")
    bias = _const_input(g, n, 2, "bias B")
    bias = np.zeros(w.shape[0], np.float32) if bias is None else bias
    ih, iw, ic = hwc(g.shapes[x])
    kh, kw = w.shape[2], w.shape[3]
    sh, sw = n.attrs.get("strides", [1, 1])
    dh, dw = n.attrs.get("dilations", [1, 1])
    pads = _conv_pads(n, ih, iw, kh, kw, sh, sw, dh, dw)
    return Step("CONV", n.outputs[0], dict(
        weights=np.ascontiguousarray(w.transpose(0, 2, 3, 1)), bias=bias.astype(np.float32).reshape(-1),
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


def _convtranspose_steps(g: Graph, n: Node) -> list[Step]:
    """One CONV step per output phase (compiler/convtranspose.py); each phase tensor is a strided view
    of the output (Graph.strided), written where its pixels belong."""
    from .convtranspose import phase_weights, plan

    phases, _ = plan(g, n)
    w = g.consts[n.inputs[1]]
    groups = int(n.attrs.get("group", 1))
    out = n.outputs[0]
    o = g.shapes[out][1]
    bias = _const_input(g, n, 2, "bias B")
    bias = np.zeros(o, np.float32) if bias is None else np.asarray(bias, np.float32).reshape(-1)
    steps = []
    for k, ph in enumerate(phases):
        t = f"{out}::phase{k}"
        g.shapes[t] = (1, o, ph.y.n, ph.x.n)
        g.dtypes[t] = g.dtype(out)
        g.strided[t] = (out, ph.y.first, ph.x.first, ph.sy, ph.sx)
        wc = phase_weights(np.asarray(w, np.float32), groups, ph)
        steps.append(Step("CONV", t, dict(
            weights=np.ascontiguousarray(wc), bias=bias, kh=len(ph.y.taps), kw=len(ph.x.taps), sh=1, sw=1, dh=1,
            dw=1, pads=(ph.y.pad_lo, ph.x.pad_lo, ph.y.pad_hi, ph.x.pad_hi), groups=groups, act="none",
            act_range=None)))
    return steps


def _fc_step(g: Graph, n: Node, src: str) -> Step:
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
        c = _const_input(g, n, 2, "bias C")
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


def _pool_step(n: Node, g: Graph) -> Step:
    """POOL of a 2-D window, or of a 1-D window over the L axis of a [1, C, L] map (a 1 x k window)."""
    x = n.inputs[0]
    ih, iw, _ = hwc(g.shapes[x])
    rounding = n.attrs.get("_round", "half_up")  # a front end's rounding of int8 averages (tflite_ops: TFLite's)
    if n.op in ("GlobalAveragePool", "GlobalMaxPool"):
        mode = "global_avg" if n.op == "GlobalAveragePool" else "global_max"
        return Step("POOL", n.outputs[0], dict(mode=mode, kh=1, kw=1, sh=1, sw=1, pads=(0, 0, 0, 0), include_pad=0,
                                               rounding=rounding))
    k = [int(v) for v in n.attrs["kernel_shape"]]
    st = [int(v) for v in n.attrs.get("strides", [1] * len(k))]
    if len(k) == 1:  # [1, C, L] is a 1 x L map (ir.hwc)
        pads1 = [int(v) for v in n.attrs.get("pads", [0, 0])]
        one = Node(n.name, n.op, n.inputs, n.outputs, {**n.attrs, "kernel_shape": [1, k[0]], "strides": [1, st[0]],
                                                        "pads": [0, pads1[0], 0, pads1[1]]})
        return _pool_step(one, g)
    kh, kw = k
    sh, sw = st
    pt, pl, pb, pr = _conv_pads(n, ih, iw, kh, kw, sh, sw, 1, 1)
    oh, ow, _ = hwc(g.shapes[n.outputs[0]])
    pb += max(0, (oh - 1) * sh + kh - (ih + pt + pb))  # ceil_mode: extra cells at the end
    pr += max(0, (ow - 1) * sw + kw - (iw + pl + pr))
    include = int(n.attrs.get("count_include_pad", 0))
    mode = "max" if n.op == "MaxPool" else "avg"
    return Step("POOL", n.outputs[0], dict(mode=mode, kh=kh, kw=kw, sh=sh, sw=sw, pads=(pt, pl, pb, pr),
                                           include_pad=include, rounding=rounding))


def _resize_step(g: Graph, n: Node) -> Step:
    mode, coord, why = resize_plan(g, n)
    if mode is None:  # legality checked it: an internal inconsistency
        raise ModelError(f"internal: Resize {n.name!r} lowered although {why}")
    return Step("RESIZE", n.outputs[0], dict(mode=mode, coord=coord))


def _act_step(g: Graph, n: Node) -> Step:
    func = ACT_FUNCS[n.op]
    lo, hi, alpha = None, None, float(n.attrs.get("alpha", ACT_ALPHA.get(n.op, 0.01)))
    if n.op == "Gelu" and n.attrs.get("approximate", "none") == "tanh":
        func = "gelu_tanh"
    if n.op == "HardSigmoid":  # beta travels in the ACT `lo` field
        lo = float(n.attrs.get("beta", 0.5))
    if n.op == "Clip":
        lo = n.attrs.get("min")
        hi = n.attrs.get("max")
        vlo, vhi = _const_input(g, n, 1, "min"), _const_input(g, n, 2, "max")
        lo = lo if vlo is None else float(np.asarray(vlo).reshape(-1)[0])
        hi = hi if vhi is None else float(np.asarray(vhi).reshape(-1)[0])
        lo = -np.inf if lo is None else float(lo)
        hi = np.inf if hi is None else float(hi)
    table = n.attrs.get("_table")  # a pre-quantized model's own int8 values (tflite_front): the LUT as given
    return Step("ACT", n.outputs[0], dict(func=func, alpha=alpha, lo=lo, hi=hi, table=table))


def _prelu_step(g: Graph, n: Node) -> Step:
    """PRelu: a scalar slope is ACT leaky, one slope per channel an ARITH prelu with a per-channel table."""
    slopes = legality.prelu_slopes(g, n)
    if slopes.size == 1:
        return Step("ACT", n.outputs[0], dict(func="leaky", alpha=float(slopes[0]), lo=None, hi=None, table=None))
    return Step("ARITH", n.outputs[0], dict(op="prelu", const=slopes.astype(np.float32)))


def _channel_const(g: Graph, n: Node, t: str, c: int) -> np.ndarray:
    v = np.asarray(g.consts[t], np.float32)
    if v.size == 1:
        return np.full(c, float(v.reshape(-1)[0]), np.float32)
    if v.size == c and legality.channel_vector(v, c):
        return v.reshape(-1).astype(np.float32)
    raise ModelError(f"{n.op} {n.name!r}: constant operand of shape {v.shape} is not a scalar or per-channel vector")


def _is_channel_vector(shape, c: int) -> bool:
    """A computed [1, C, 1, 1] operand of a Mul with a C-channel map (ARITH mul_channel). A rank-3
    [C, 1, 1] tensor has no buffer of C channels (ir.hwc reads rank 3 as N, C, L) and stays refused."""
    return tuple(shape) == (1, c, 1, 1)


def _const_map_step(g: Graph, n: Node) -> tuple[str, Step]:
    """A map and a constant that is no scalar or channel vector: the constant expanded to the map's
    shape (x / k as x * (1 / k)) streams into ARITH port 1 (codegen stores it in the map's layout)."""
    a, b = n.inputs[0], n.inputs[1]
    if a in g.consts:
        a, b = b, a
    k = np.broadcast_to(np.asarray(g.consts[b], np.float64), g.shapes[a])
    op = n.op.lower()
    if n.op == "Div":
        k, op = 1.0 / k, "mul"
    return a, Step("ARITH", n.outputs[0], dict(op=op, const_map=np.ascontiguousarray(k, np.float32)))


def _eltwise_step(g: Graph, n: Node) -> tuple[str, Step]:
    op = n.op.lower()
    a, b = n.inputs[0], n.inputs[1]
    k, x = (b, a) if b in g.consts else (a, b) if a in g.consts else (None, None)
    if k is not None and np.asarray(g.consts[k]).size > 1 and (
            n.op in ("Max", "Min") or not legality.channel_vector(np.asarray(g.consts[k]), hwc(g.shapes[x])[2])):
        return _const_map_step(g, n)
    if n.op in ("Sub", "Div") and b in g.consts:  # x - k -> x + (-k); x / k -> x * (1/k)
        if a in g.consts:
            raise ModelError(f"{n.op} {n.name!r}: only a constant right operand is supported")
        k = _channel_const(g, n, b, hwc(g.shapes[a])[2]).astype(np.float64)
        if n.op == "Div" and not np.all(k != 0):
            raise ModelError(f"Div {n.name!r}: division by zero")
        const = (-k if n.op == "Sub" else 1.0 / k).astype(np.float32)
        return a, Step("ARITH", n.outputs[0], dict(op="add_const" if n.op == "Sub" else "mul_const", const=const))
    if a in g.consts and b in g.consts:
        raise ModelError(f"{n.op} {n.name!r}: both operands constant (should have been folded)")
    if a in g.consts:
        a, b = b, a
    c = hwc(g.shapes[a])[2]
    if b in g.consts:
        return a, Step("ARITH", n.outputs[0], dict(op=op + "_const", const=_channel_const(g, n, b, c)))
    out_shape = tuple(g.shapes[n.outputs[0]])
    if n.op == "Mul" and tuple(g.shapes[a]) != tuple(g.shapes[b]):
        # x[1,C,H,W] * s[1,C,1,1] -> mul_channel, only when the result has the map's shape (no broadcast growth)
        if len(g.shapes[a]) == 4 and out_shape == tuple(g.shapes[a]) and _is_channel_vector(g.shapes[b], c):
            return a, Step("ARITH", n.outputs[0], dict(op="mul_channel"), operand=b)
        if (len(g.shapes[b]) == 4 and out_shape == tuple(g.shapes[b])
                and _is_channel_vector(g.shapes[a], hwc(g.shapes[b])[2])):  # s * x: the vector is on the left
            return b, Step("ARITH", n.outputs[0], dict(op="mul_channel"), operand=a)
    # add, sub, mul, max, min of two maps; a smaller one is streamed broadcast (compiler/broadcast.py)
    bcast = not tuple(g.shapes[a]) == tuple(g.shapes[b]) == out_shape
    if n.op == "Div":  # x * (1 / y): y streams through the ACT unit's reciprocal into port 1
        return a, Step("ARITH", n.outputs[0], dict(op="mul", broadcast=bcast, reciprocal=g.ranges.get(b)), operand=b)
    return a, Step("ARITH", n.outputs[0], dict(op=op, broadcast=bcast), operand=b)


def same_bytes(g: Graph, a: str, b: str) -> bool:
    """Whether tensors a and b (same element count) are the same bytes in memory: both linear
    (dense in ONNX order), or feature maps of one [H][W][C] view."""
    if g.dtype(a) != g.dtype(b) and not (g.is_float(a) and g.is_float(b)):
        return False
    if (a in g.float_islands) != (b in g.float_islands):  # fp32 storage next to the compile dtype's
        return False
    la, lb = storage_layout(g, a), storage_layout(g, b)
    if la == lb == "linear":
        return True
    return la == lb and hwc(g.shapes[a]) == hwc(g.shapes[b])


def _host_layer(g: Graph, n: Node, reason: str, names: list[str]) -> Layer:
    implicit = list(n.attrs.get("_implicit", []))
    ins = list(n.inputs) + implicit
    x = next((t for t in ins if t and t not in g.consts), "")
    op = HostOp(n, ins, list(n.outputs), reason, frozenset(t for t in ins if t in g.consts), implicit)
    return Layer(n.name, names, x, [], kind="host", host=op)


def lower(g: Graph, cpu_fallback: bool = True) -> tuple[list[Layer], list[Concat], dict[str, str]]:
    """ONNX nodes -> single-step layers, concats, host layers and aliases (alias tensor -> source).

    A node the mapping table (legality.decide) puts on the CPU becomes a host layer; without
    `cpu_fallback` it is refused instead, naming the node and the reason."""
    layers: list[Layer] = []
    concats: list[Concat] = []
    alias: dict[str, str] = {}
    fc_src: dict[str, str] = {}
    out_roots: dict[str, str] = {}  # alias root -> graph output it is stored as

    def cpu(n: Node, why: str, names):
        if not cpu_fallback:
            raise ModelError(f"node {n.name!r} ({n.op}) cannot run on the NPU: {why} (--no-cpu-fallback)")
        layers.append(_host_layer(g, n, why, names))

    for n in g.nodes:
        names = [n.name] + list(n.attrs.get("_fused", []))
        x = n.inputs[0] if n.inputs else ""
        x = alias.get(x, x)
        if n.op == "Transpose" and addressing.moves_nothing(g, n) and same_bytes(g, x, n.outputs[0]) and not (
                n.outputs[0] in g.outputs and (x in g.inputs or x in g.outputs or x in g.consts or x in out_roots)):
            alias[n.outputs[0]] = x  # only axes of length 1 move: the same bytes
            if n.outputs[0] in g.outputs:
                out_roots[x] = n.outputs[0]
            continue
        if n.op in ALIAS_OPS:
            out = n.outputs[0]
            cons = g.consumers(out)
            root_is_io = x in g.inputs or x in g.outputs or x in g.consts or x in out_roots
            if same_bytes(g, x, out) and not (out in g.outputs and root_is_io):
                alias[out] = x
                if out in g.outputs:
                    out_roots[x] = out
            elif cons and all(m.op in ("Gemm", "MatMul") and m.inputs[0] == out for m in cons) \
                    and out not in g.outputs and g.is_map(x) and len(g.shapes[out]) == 2 and g.shapes[out][0] == 1 \
                    and hwc(g.shapes[out])[2] == int(np.prod(g.shapes[x])) \
                    and max(hwc(g.shapes[x])[:2]) <= legality.conv_kernel_limit():
                fc_src[out] = x
            elif addressing.same_stream(g, n, x, out):  # the same dense stream: copied by line runs
                layers.append(Layer(n.name, names, x, [Step("ARITH", out, dict(op="copy"))]))
            else:
                cpu(n, f"reshaping {list(g.shapes[x])} to {list(g.shapes[out])} moves bytes "
                       f"({storage_layout(g, x)} -> {storage_layout(g, out)})", names)
            continue
        if n.op in ("Gemm", "MatMul") and n.inputs[0] in fc_src:
            src = fc_src[n.inputs[0]]
            flat = Node(n.name, n.op, [n.inputs[0]] + n.inputs[1:], n.outputs, n.attrs, n.proto)
            d = legality.decide(g, flat)
            if d.npu:
                layers.append(Layer(n.name, names, src, [_fc_step(g, n, src)]))
            else:
                _reshape_back(g, layers, fc_src, n.inputs[0], cpu)
                cpu(n, d.reason, names)
            continue
        for t in n.inputs:  # a flatten this node reads as a plain tensor (not a fully connected layer)
            if t in fc_src:
                _reshape_back(g, layers, fc_src, t, cpu)
        d = legality.decide(g, n)
        if not d.npu:
            cpu(n, d.reason, names)
            continue
        if n.op in ADDRESSED:
            made, cats = addressing.lower(g, n, names, alias)
            layers.extend(made)
            concats.extend(cats)
            continue
        if n.op == "Softmax":  # several epochs (compiler/softmax.py)
            layers.extend(softmax.lower(g, n, x, names))
            continue
        if n.op == "ConvTranspose":
            for step in _convtranspose_steps(g, n):
                layers.append(Layer(n.name, names, x, [step]))
            continue
        if n.op == "MatMul" and n.inputs[1] not in g.consts:  # two activations: one is the CONV's kernel
            layers.extend(matmul.lower(g, n, names, alias))
            continue
        if n.op == "Conv":
            steps = [_conv_step(g, n)]
        elif n.op == "MatMul" and any(c(g, n) for c in (legality.fc_operand,) + legality.MAP):
            layers.extend(matmul.lower(g, n, names, alias))  # A's rows as slices, B^T the weights
            continue
        elif n.op in ("Gemm", "MatMul"):
            steps = [_fc_step(g, n, x)]
        elif n.op == "BatchNormalization":
            k, b = _bn_affine(g, n)
            steps = [Step("ARITH", n.outputs[0], dict(op="affine", scale=k.astype(np.float32),
                                                      bias=b.astype(np.float32)))]
        elif n.op in ACT_FUNCS:
            steps = [_act_step(g, n)]
        elif n.op == "PRelu":
            steps = [_prelu_step(g, n)]
        elif n.op in lut_ops.LUT_OPS:  # int8 only (legality): the table is made once the scales are known
            steps = [Step("ACT", n.outputs[0], dict(func="lut", alpha=0.01, lo=None, hi=None, table=None,
                                                    lut_node=n, opset=g.opset))]
        elif n.op in ("Max", "Min") and (bound := legality.clip_bound(g, n)):  # max(x, k) = clip(x, k, inf)
            a, k = bound
            x = alias.get(a, a)
            lo, hi = (k, np.inf) if n.op == "Max" else (-np.inf, k)
            steps = [Step("ACT", n.outputs[0], dict(func="clip", alpha=0.01, lo=lo, hi=hi, table=None))]
        elif n.op in ("Add", "Mul", "Sub", "Div", "Max", "Min"):
            n, made = broadcast.relayout_operands(g, n, names, alias)  # lower-rank operands as maps
            layers.extend(made)
            n, made = moveconv.expand_operands(g, n, names, alias)  # one channel repeated over C
            layers.extend(made)
            a, st = _eltwise_step(g, n)
            x = alias.get(a, a)
            if st.operand:
                st.operand = alias.get(st.operand, st.operand)
            steps = [st]
        elif n.op in ("ReduceMean", "ReduceMax"):
            mode = "global_avg" if n.op == "ReduceMean" else "global_max"
            steps = [Step("POOL", n.outputs[0], dict(mode=mode, kh=1, kw=1, sh=1, sw=1, pads=(0, 0, 0, 0), include_pad=0,
                                                     rounding=n.attrs.get("_round", "half_up")))]
        elif n.op in ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"):
            steps = [_pool_step(n, g)]
        elif n.op in ("Resize", "Upsample"):
            steps = [_resize_step(g, n)]
        elif n.op == "Identity":
            steps = [Step("ARITH", n.outputs[0], dict(op="copy"))]
        elif n.op == "Concat":
            concats.append(Concat(n.name, [alias.get(t, t) for t in n.inputs], n.outputs[0],
                                  int(n.attrs.get("axis", 1)) % max(len(g.shapes[n.outputs[0]]), 1)))
            layers.append(Layer(n.name, names, concats[-1].parts[0], [], kind="concat"))
            continue
        else:  # pragma: no cover - MAPPINGS and this dispatch list the same ops
            raise ModelError(f"internal: no lowering for {n.op} (node {n.name!r})")
        layers.append(Layer(n.name, names, x, steps))
    return layers, concats, alias


def _reshape_back(g: Graph, layers: list, fc_src: dict, flat: str, cpu) -> None:
    """A flatten kept for a fully connected layer that turned out not to be one: materialise it."""
    src = fc_src.pop(flat)
    n = g.producer(flat)
    cpu(n, f"reshaping {list(g.shapes[src])} to {list(g.shapes[flat])} moves bytes", [n.name])


def _readers(layers: list[Layer], concats: list[Concat]) -> dict[str, list]:
    """{tensor: the layers (then concats) that read it, once each, in list order}."""
    out: dict[str, list] = {}
    for L in layers:
        if L.kind != "concat":
            for t in dict.fromkeys(L.reads()):
                out.setdefault(t, []).append(L)
    for c in concats:
        for t in dict.fromkeys(c.parts):
            out.setdefault(t, []).append(c)
    return out


def fuse_chains(layers: list[Layer], concats: list[Concat], outputs: list[str], fusions: frozenset) -> list[Layer]:
    """Merge a layer into its only consumer when the chain is a supported fusion.

    One scan in order: a merge replaces the consumer M by the merged layer and drops L, and the scan
    goes on at L's place. Nothing before it can fuse after the merge (a layer whose one consumer was
    L or M now feeds the merged layer, which has more than one step), so this is the restart-from-the-
    start fixpoint in one pass; the readers of each tensor are kept in a table."""
    readers = _readers(layers, concats)
    i = 0
    while i < len(layers):
        L = layers[i]
        i += 1
        if L.kind != "npu" or L.output in outputs or L.siblings:
            continue
        cons = readers.get(L.output, [])
        if len(cons) != 1 or not isinstance(cons[0], Layer) or cons[0].kind != "npu" or len(cons[0].steps) != 1 \
                or cons[0].siblings:
            continue
        M, last, nxt = cons[0], L.steps[-1], cons[0].steps[0]
        if len(L.steps) >= 4:
            continue
        ok = False
        if nxt.unit == "ACT" and M.input == L.output:
            if last.unit == "CONV" and "conv-act" in fusions:
                ok = True
                if nxt.params["func"] in ("relu", "clip") and last.params["act"] == "none" and \
                        nxt.params["table"] is None and not last.params.get("moves"):  # moves: keeps its scale
                    last.params["act"] = nxt.params["func"]
                    last.params["act_range"] = (nxt.params["lo"], nxt.params["hi"])
                    last.out, nxt = nxt.out, None
            elif last.unit == "ARITH" and last.params["op"] == "add" and "add-act" in fusions \
                    and nxt.params["func"] in ("relu", "clip") and "act" not in last.params \
                    and nxt.params["table"] is None:
                ok = True
                last.params["act"] = nxt.params["func"]
                last.params["act_range"] = (nxt.params["lo"], nxt.params["hi"])
                last.out, nxt = nxt.out, None
        elif nxt.unit == "ARITH" and nxt.params["op"] == "add" and "conv-add" in fusions \
                and not nxt.params.get("broadcast") and "const_map" not in nxt.params \
                and any(s.unit == "CONV" for s in L.steps) and (M.input == L.output) != (nxt.operand == L.output):
            ok = True
            if nxt.operand == L.output:
                nxt.operand = M.input
        elif nxt.unit == "POOL" and "conv-pool" in fusions and M.input == L.output \
                and any(s.unit == "CONV" for s in L.steps) and not any(s.unit == "POOL" for s in L.steps):
            ok = True  # the CA's output streams into the pooling unit (max, avg, global average)
        if not ok:
            continue
        merged = Layer(L.name, L.nodes + M.nodes, L.input, L.steps + ([nxt] if nxt else []))
        for t in set(L.reads()) | set(M.reads()) | {L.output}:
            readers[t] = [r for r in readers.get(t, []) if r is not L and r is not M]
        for t in dict.fromkeys(merged.reads()):
            readers.setdefault(t, []).append(merged)
        k = next(k for k, x in enumerate(layers) if x is M)
        layers[k] = merged
        i -= 1
        del layers[i]  # L
        i = min(i, k)  # go on at L's place (or at the merged layer, were it earlier)
    return layers


RESCALE_FREE = ("MaxPool", "GlobalMaxPool", "Resize", "Upsample", "Concat", "Identity") + ALIAS_OPS + ADDRESSED


def insert_rescales(g: Graph) -> None:
    """Where a model fixes different scales on the input and output of an operator that moves values
    unchanged on the NPU (max pool, resize, concat by addressing, copy, reshape), the input is first
    rescaled to the output's scale and zero point: a Mul by 1 (one ARITH mul_const epoch)."""
    if not g.qdq:
        return
    for n in list(g.nodes):
        if n.op not in RESCALE_FREE or not n.outputs or n.outputs[0] not in g.qdq:
            continue
        want = g.qdq[n.outputs[0]]
        for k, t in enumerate(n.inputs if n.op == "Concat" else n.inputs[:1]):
            if not t or t in g.consts or t not in g.qdq or g.qdq[t] == want:
                continue
            one, r = f"{n.name}::one", f"{t}::rescaled{k}::{n.name}"
            g.consts[one] = np.float32(1.0)
            g.shapes[one], g.dtypes[one] = (), "fp32"
            g.shapes[r], g.dtypes[r], g.qdq[r] = g.shapes[t], g.dtype(t), want
            g.nodes.insert(g.nodes.index(n), Node(f"{n.name}::rescale{k}", "Mul", [t, one], [r]))
            n.inputs[k] = r


def run_passes(g: Graph, fusions: frozenset, cpu_fallback: bool = True) -> tuple[list[Layer], list[Concat], dict[str, str]]:
    insert_rescales(g)
    fold_pad(g)
    rewrite_silu(g)
    rewrite_gelu(g)
    if "conv-bn" in fusions:
        fold_bn(g)
    conv_forms.rewrite(g)
    gemm.rewrite(g)
    permute.fold_chains(g)
    layers, concats, alias = lower(g, cpu_fallback)
    layers = fuse_chains(layers, concats, g.outputs, fusions)
    return layers, concats, alias
