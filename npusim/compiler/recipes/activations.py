"""Activations: one ACT step (ReLU and Clip fuse into the conv before them as its clamp), PRelu as
ACT leaky (a scalar slope) or ARITH prelu (one slope per channel).
"""

from __future__ import annotations

import numpy as np

from ..checks import MAP
from ..ir import Graph, Node, Step
from ..recipe import Recipe, one_step
from .conv import const_input


ACT_FUNCS = {"Relu": "relu", "Clip": "clip", "LeakyRelu": "leaky", "Sigmoid": "sigmoid", "Tanh": "tanh",
             "HardSwish": "hardswish", "SiLU": "silu", "HardSigmoid": "hardsigmoid", "Elu": "elu",
             "Softplus": "softplus", "Gelu": "gelu", "Mish": "mish", "Reciprocal": "reciprocal"}


ACT_ALPHA = {"LeakyRelu": 0.01, "Elu": 1.0, "HardSigmoid": 0.2}  # ONNX's default alpha


def act_step(g: Graph, n: Node) -> Step:
    func = ACT_FUNCS[n.op]
    lo, hi, alpha = None, None, float(n.attrs.get("alpha", ACT_ALPHA.get(n.op, 0.01)))
    if n.op == "Gelu" and n.attrs.get("approximate", "none") == "tanh":
        func = "gelu_tanh"
    if n.op == "HardSigmoid":  # beta travels in the ACT `lo` field
        lo = float(n.attrs.get("beta", 0.5))
    if n.op == "Clip":
        lo = n.attrs.get("min")
        hi = n.attrs.get("max")
        vlo, vhi = const_input(g, n, 1, "min"), const_input(g, n, 2, "max")
        lo = lo if vlo is None else float(np.asarray(vlo).reshape(-1)[0])
        hi = hi if vhi is None else float(np.asarray(vhi).reshape(-1)[0])
        lo = -np.inf if lo is None else float(lo)
        hi = np.inf if hi is None else float(hi)
    table = n.attrs.get("_table")  # a pre-quantized model's own int8 values (tflite_front): the LUT as given
    return Step("ACT", n.outputs[0], dict(func=func, alpha=alpha, lo=lo, hi=hi, table=table))


def prelu_step(g: Graph, n: Node) -> Step:
    """PRelu: a scalar slope is ACT leaky, one slope per channel an ARITH prelu with a per-channel table."""
    slopes = prelu_slopes(g, n)
    if slopes.size == 1:
        return Step("ACT", n.outputs[0], dict(func="leaky", alpha=float(slopes[0]), lo=None, hi=None, table=None))
    return Step("ARITH", n.outputs[0], dict(op="prelu", const=slopes.astype(np.float32)))


def clip_const_bounds(g: Graph, n: Node):
    """Clip bounds are constants"""
    for t in n.inputs[1:]:
        if t and t not in g.consts:
            return f"bound {t!r} is computed"
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


_RECIPE_TEXT = {"Relu": "ACT relu (or fused into the conv)", "Clip": "ACT clip (or fused into the conv)",
                "LeakyRelu": "ACT leaky", "Sigmoid": "ACT sigmoid", "Tanh": "ACT tanh", "HardSwish": "ACT hardswish",
                "SiLU": "ACT silu (x * Sigmoid(x))", "HardSigmoid": "ACT hardsigmoid", "Elu": "ACT elu",
                "Softplus": "ACT softplus",
                "Gelu": "ACT gelu / gelu_tanh (the Erf form x * 0.5 * (1 + Erf(x / sqrt 2)) too: compiler/rewrites/gelu.py)",
                "Mish": "ACT mish", "Reciprocal": "ACT reciprocal"}
RECIPES = [Recipe(op, _RECIPE_TEXT[op], ((clip_const_bounds,) if op == "Clip" else ()) + MAP, one_step(act_step))
           for op in ACT_FUNCS] + [
    Recipe("PRelu", "ACT leaky (scalar slope) / ARITH prelu (per-channel slope)", MAP + (prelu_slope,),
           one_step(prelu_step)),
]
