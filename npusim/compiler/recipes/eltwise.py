"""Elementwise operators on the ARITH unit: Add, Sub, Mul, Div, Max, Min of a map and a constant (a
scalar, one per channel, or a constant map streamed on port 1) or of two maps (a smaller one broadcast
by zero stream-engine strides, `broadcast`; one channel first repeated over C by a CONV, `moveconv`);
Max / Min with a scalar as ACT clip; BatchNormalization as ARITH affine; Identity as ARITH copy.
"""

from __future__ import annotations

import numpy as np

from ...errors import ModelError
from ..checks import MAP, channel_vector, eltwise_maps, map_fits_units
from ..estimates import host_faster
from ..ir import Graph, Node, Step, hwc
from ..recipe import Recipe, one_step
from . import broadcast, moveconv
from .broadcast import relayout_plan, relayout_shape
from .moveconv import expanded_shape, expansion_estimate


def inference_mode(g: Graph, n: Node):
    """inference form: constant statistics, one output"""
    if len([o for o in n.outputs if o]) != 1:
        return "training outputs (running mean/var) requested"
    for t in n.inputs[1:5]:
        if t not in g.consts:
            return f"statistic {t!r} is computed"
    return None


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
    y = n.outputs[0]
    relaid = {t: s for t in (a, b) if (s := relayout_shape(g, t, y))}
    copies = 0.0
    for t, s in relaid.items():
        best, why = relayout_plan(g, n, t, s)
        if best is None:
            return f"operand {t!r} {list(g.shapes[t])} copied into a map of {list(s)}: {why}"
        copies += best.cycles
    wide = {t: expanded_shape(g, t, y, relaid.get(t)) for t in (a, b)}
    why = broadcast.problem(g, a, y, wide[a] or relaid.get(a)) or broadcast.problem(g, b, y, wide[b] or relaid.get(b))
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


def identity_copy(g: Graph, n: Node):
    """a copy of a computed map (ARITH copy)"""
    if n.inputs[0] in g.consts:
        return "a copy of a constant"
    return None


BROADCAST = ("a smaller map broadcast by zero SE strides; one channel first repeated over C by a CONV; a lower-rank "
             "operand first copied into a map of its padded shape")


def bn_affine(g: Graph, bn: Node) -> tuple[np.ndarray, np.ndarray]:
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


def _channel_const(g: Graph, n: Node, t: str, c: int) -> np.ndarray:
    v = np.asarray(g.consts[t], np.float32)
    if v.size == 1:
        return np.full(c, float(v.reshape(-1)[0]), np.float32)
    if v.size == c and channel_vector(v, c):
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
            n.op in ("Max", "Min") or not channel_vector(np.asarray(g.consts[k]), hwc(g.shapes[x])[2])):
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
    # add, sub, mul, max, min of two maps; a smaller one is streamed broadcast (compiler/recipes/broadcast.py)
    bcast = not tuple(g.shapes[a]) == tuple(g.shapes[b]) == out_shape
    if n.op == "Div":  # x * (1 / y): y streams through the ACT unit's reciprocal into port 1
        return a, Step("ARITH", n.outputs[0], dict(op="mul", broadcast=bcast, reciprocal=g.ranges.get(b)), operand=b)
    return a, Step("ARITH", n.outputs[0], dict(op=op, broadcast=bcast), operand=b)


def _affine_step(g: Graph, n: Node) -> Step:
    k, b = bn_affine(g, n)
    return Step("ARITH", n.outputs[0], dict(op="affine", scale=k.astype(np.float32), bias=b.astype(np.float32)))


def _copy_step(g: Graph, n: Node) -> Step:
    return Step("ARITH", n.outputs[0], dict(op="copy"))


def _lower_eltwise(ctx, n: Node, x: str):
    """Max / Min with a scalar: ACT clip; else lower-rank operands copied into maps, one channel repeated
    over C, then one ARITH step (its operand through the aliases)."""
    g = ctx.g
    if n.op in ("Max", "Min") and (bound := clip_bound(g, n)):  # max(x, k) = clip(x, k, inf)
        a, k = bound
        lo, hi = (k, np.inf) if n.op == "Max" else (-np.inf, k)
        return ctx.layer(n, ctx.source(a), [Step("ACT", n.outputs[0], dict(func="clip", alpha=0.01, lo=lo, hi=hi,
                                                                             table=None))])
    n, made = broadcast.relayout_operands(g, n, ctx.names, ctx.alias)  # lower-rank operands as maps
    n, more = moveconv.expand_operands(g, n, ctx.names, ctx.alias)  # one channel repeated over C
    a, st = _eltwise_step(g, n)
    if st.operand:
        st.operand = ctx.source(st.operand)
    return made + more + ctx.layer(n, ctx.source(a), [st])


_ELTWISE = (eltwise_maps, map_fits_units, eltwise_operands)
RECIPES = [
    Recipe("BatchNormalization", "ARITH affine", (inference_mode,) + MAP, one_step(_affine_step)),
    Recipe("Add", f"ARITH add / add_const ({BROADCAST})", _ELTWISE, _lower_eltwise),
    Recipe("Sub", f"ARITH sub / add_const ({BROADCAST})", _ELTWISE, _lower_eltwise),
    Recipe("Mul", f"ARITH mul / mul_const / mul_channel ({BROADCAST})", _ELTWISE, _lower_eltwise),
    Recipe("Div", f"ARITH mul_const; x / y: ACT reciprocal into ARITH mul ({BROADCAST})", _ELTWISE, _lower_eltwise),
    Recipe("Max", f"ARITH max ({BROADCAST}); with a scalar: ACT clip",
           (eltwise_maps, map_fits_units, two_inputs, eltwise_operands), _lower_eltwise),
    Recipe("Min", f"ARITH min ({BROADCAST}); with a scalar: ACT clip",
           (eltwise_maps, map_fits_units, two_inputs, eltwise_operands), _lower_eltwise),
    Recipe("Identity", "ARITH copy", MAP + (identity_copy,), one_step(_copy_step)),
]
