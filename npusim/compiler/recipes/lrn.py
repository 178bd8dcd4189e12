"""Local response normalization (LRN, AlexNet and GoogLeNet) across channels on the NPU, in int8.

    y = x * d,  d = (bias + alpha / size * s) ^ -beta,  s[c] = sum of x[c']^2 over the `size` channels
    c' in [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)] (ONNX's window, clipped at the ends)

Two epochs: `ARITH mul` (x * x, the square), then `CONV -> ACT -> ARITH mul`: a 1 x 1 C x C kernel of ones
on the window's band sums the squares, the ACT unit's lookup table maps the sum to d, the ARITH multiplies
d by x (read again on port 1). The table is the only non-linear step: fp16 and fp32 have no ACT power
function, so there the node stays on the CPU.

int8 scales from x's calibrated range [lo, hi] (m = max |lo|, |hi|): the square in [0, m^2], the sum in
[0, size m^2], d in [(bias + alpha m^2)^-beta, bias^-beta]; y keeps its own calibrated range.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from ...cpu.cost import host_cycles
from ...kernels.quant import quantize
from ...program.spec import load_isa
from ..checks import MAP, rank4_maps
from ..estimates import arith_cycles, conv_cycles, epoch_cycles, stored
from ..ir import Graph, Layer, Node, Step, hwc
from ..recipe import Lowering, Recipe

WEIGHT_LIMIT = 1 << 20  # bytes of the C x C window kernel (weights pool), as the Softmax's


def attributes(n: Node) -> tuple[int, float, float, float]:
    """(size, alpha, beta, bias) with ONNX's defaults."""
    return (int(n.attrs.get("size", 1)), float(n.attrs.get("alpha", 1e-4)), float(n.attrs.get("beta", 0.75)),
            float(n.attrs.get("bias", 1.0)))


def window(c: int, size: int) -> np.ndarray:
    """[C out][C in] float32: 1 where input channel c' is in output channel c's window."""
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    k = np.arange(c)
    return ((k[None, :] >= k[:, None] - lo) & (k[None, :] <= k[:, None] + hi)).astype(np.float32)


def scale_table(bias: float, k: float, beta: float, q_in: tuple[float, int], q_out: tuple[float, int]) -> np.ndarray:
    """int8[256]: entry q + 128 = quantize((bias + k * s) ^ -beta) at s = (q - in_zp) * in_scale (s >= 0)."""
    s = np.maximum((np.arange(-128, 128, dtype=np.float64) - int(q_in[1])) * float(q_in[0]), 0.0)
    return quantize((bias + k * s) ** -beta, q_out[0], q_out[1])


def _ranges(g: Graph, n: Node) -> tuple[float, float, tuple[float, float]]:
    """(square's top, sum's top, d's range) from x's calibrated range."""
    size, alpha, beta, bias = attributes(n)
    lo, hi = g.ranges[n.inputs[0]]
    top = max(abs(lo), abs(hi)) ** 2
    return top, size * top, ((bias + alpha * top) ** -beta, bias ** -beta)


def npu_estimate(g: Graph, n: Node) -> float:
    """Estimated NPU cycles of the two epochs (setup + slowest unit or bytes through the fastest pool)."""
    h, w, c = hwc(g.shapes[n.inputs[0]])
    esize = load_isa().dtype_bytes(g.compile_dtype)
    elems = h * w * stored(c)
    square = epoch_cycles(g.profile, ("ARITH",), 3, arith_cycles(g.profile, elems), 3 * elems, esize)
    body = max(conv_cycles(g.profile, g.compile_dtype, c, c, 1, 1, h * w), arith_cycles(g.profile, elems))
    return square + epoch_cycles(g.profile, ("CONV", "ACT", "ARITH"), 4, body, 3 * elems, esize)


# ------------------------------------------------------------------ checks (docstring = the rule)

def int8_table(g: Graph, n: Node):
    """int8: d = (bias + alpha / size x window sum)^-beta is an ACT lookup table (fp16/fp32 have no power
    function); a calibrated model (a pre-quantized one gives no scales for the square and the sum); bias > 0"""
    if g.compile_dtype != "int8":
        return f"{g.compile_dtype}: the ACT unit has no power function (int8 runs d as a lookup table)"
    if g.prequantized:
        return "a pre-quantized model gives no scales for the square and the window sum"
    if n.inputs[0] not in g.ranges:
        return "no calibrated range for x"
    size, _, _, bias = attributes(n)
    if size < 1 or not bias > 0:
        return f"size {size}, bias {bias} (needs size >= 1 and bias > 0)"
    return None


def window_kernel(g: Graph, n: Node):
    """the C x C window kernel within 1 MiB"""
    c = hwc(g.shapes[n.inputs[0]])[2]
    need = c * c * load_isa().dtype_bytes(g.compile_dtype)
    if need > WEIGHT_LIMIT:
        return f"{c} channels need a {need >> 10} KiB window kernel (limit {WEIGHT_LIMIT >> 10} KiB)"
    return None


def faster_than_host(g: Graph, n: Node):
    """estimated faster than the host's LRN (the profile's host cost model)"""
    if g.profile is None:
        return None
    shape = tuple(g.shapes[n.inputs[0]])
    npu, cpu = npu_estimate(g, n), host_cycles("LRN", [shape], [shape], g.profile, n.attrs)
    if npu >= cpu:
        return f"faster on the CPU (estimated {npu:,.0f} NPU cycles for its 2 epochs vs {cpu:,.0f})"
    return None


# ------------------------------------------------------------------ lowering

def lower(ctx: Lowering, n: Node, x: str) -> list[Layer]:
    """The two epochs of the module doc; registers the square, sum and d tensors (shape, dtype, int8 range)."""
    g, y = ctx.g, n.outputs[0]
    size, alpha, beta, bias = attributes(n)
    square_top, sum_top, d_range = _ranges(g, n)

    def tensor(suffix: str, rng: tuple[float, float]) -> str:
        t = f"{y}::{suffix}"
        g.shapes[t], g.dtypes[t], g.ranges[t] = tuple(g.shapes[x]), g.dtype(x), rng
        return t

    sq, s, d = tensor("square", (0.0, square_top)), tensor("window_sum", (0.0, sum_top)), tensor("scale", d_range)
    c = hwc(g.shapes[x])[2]
    band = Step("CONV", s, dict(weights=window(c, size).reshape(c, 1, 1, c), bias=np.zeros(c, np.float32), kh=1, kw=1,
                                sh=1, sw=1, dh=1, dw=1, pads=(0, 0, 0, 0), groups=1, act="none", act_range=None))
    table = Step("ACT", d, dict(func="lut", alpha=0.01, lo=None, hi=None, table=None,
                                lut=partial(scale_table, bias, alpha / size, beta)))
    return [Layer(n.name, ctx.names, x, [Step("ARITH", sq, dict(op="mul"), operand=x)]),
            Layer(n.name, ctx.names, sq, [band, table, Step("ARITH", y, dict(op="mul"), operand=x)])]


RECIPES = [
    Recipe("LRN", "ARITH mul (the square), CONV window sum + ACT lut (bias + alpha / size x sum)^-beta + ARITH mul "
                  "by x (int8; compiler/recipes/lrn.py)", MAP + (rank4_maps, int8_table, window_kernel, faster_than_host),
           lower, costed=True),
]
