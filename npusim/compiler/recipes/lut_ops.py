"""Unary elementwise operators as int8 lookup tables of the activation unit.

In int8 the ACT unit maps every input code through a 256-entry table (`act_func = lut`), so any
operator that takes one float tensor to another of the same shape, element by element, runs on the
NPU: entry q + 128 is ONNX's own value of the operator (its reference implementation, in float64)
at the dequantized input code, requantized to the output's scale and zero point. fp16 and fp32 have
no such table: those operators stay on the CPU there (the mapping table says so).
"""

from __future__ import annotations

from functools import partial

import numpy as np
from onnx import helper

from ...cpu.reference import evaluator
from ...kernels.quant import quantize

from ..checks import MAP
from ..ir import Graph, Node, Step
from ..recipe import Recipe, one_step

# default-domain operators with one float input and one float output of its shape, value by value
LUT_OPS = ("Abs", "Neg", "Exp", "Log", "Sqrt", "Erf", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh",
           "Cosh", "Asinh", "Acosh", "Atanh", "Floor", "Ceil", "Round", "Sign", "Softsign", "Selu", "Celu",
           "ThresholdedRelu", "Shrink")
RECIPE = "ACT lut (int8 only: 256 entries of ONNX's values at the tensor scales)"


def int8_only(g, n: Node) -> str | None:
    """int8: the ACT unit's lookup table (fp16/fp32 have no table for this operator)"""
    if g.compile_dtype != "int8":
        return f"{g.compile_dtype}: the ACT unit has no {n.op} function (int8 runs it as a lookup table)"
    if len([t for t in n.inputs if t]) != 1 or len(n.outputs) != 1:
        return f"{n.op} with {len(n.inputs)} inputs"
    return None


def table(n: Node, opset: int, q_in: tuple[float, int], q_out: tuple[float, int]) -> np.ndarray:
    """int8[256]: entry q + 128 = quantize(op((q - in_zp) * in_scale)); a NaN of the operator (a code
    outside its domain) becomes the output's zero point, an infinity the nearest end of the range."""
    node = helper.make_node(n.op, ["x"], ["y"], **{k: v for k, v in n.attrs.items() if not k.startswith("_")})
    x = (np.arange(-128, 128, dtype=np.float64) - int(q_in[1])) * float(q_in[0])
    with np.errstate(all="ignore"):
        y = np.asarray(evaluator(node, opset, [x]).run(None, {"x": x})[0], dtype=np.float64)
    y = np.where(np.isnan(y), 0.0, y)
    return quantize(y, q_out[0], q_out[1])


def lut_step(g: Graph, n: Node) -> Step:
    """An ACT lut step whose table is made once the scales are known (`lut`: codegen calls it with the input's
    and output's (scale, zero point))."""
    return Step("ACT", n.outputs[0], dict(func="lut", alpha=0.01, lo=None, hi=None, table=None,
                                          lut=partial(table, n, g.opset)))


RECIPES = [Recipe(op, RECIPE, MAP + (int8_only,), one_step(lut_step)) for op in LUT_OPS]
