"""Softmax over the channels of a feature map on the NPU (contract: isa/README.md "Softmax over channels").

    y = e / sum_c e,  e = exp(x - m),  m = max_c x (per pixel)

Subtracting the pixel's own maximum keeps every exponent <= 0, so e lies in (0, 1] with 1 at the maximum
and the sum in [1, C]: nothing overflows in fp16 or fp32, and in int8 the dominant term is exact. The
units, as epochs (C channels, L = ceil(log2 C) levels):

1. the channel maximum, replicated over all C channels, by L epochs `CONV -> ARITH max`: the CA's 1 x 1
   kernel is the cyclic channel shift by 2^k (a permutation: one weight 1 per output channel, exact in int8
   with equal in/out scales), the ARITH takes the maximum with the unshifted map, so after level k every
   channel holds the maximum of 2^(k+1) consecutive channels (cyclically);
2. `ARITH sub -> ACT exp`: d = x - m, e = exp(d) (int8: a LUT);
3. `CONV -> ACT reciprocal -> ARITH mul`: an all-ones C x C kernel gives the channel sum replicated
   over all channels, the ACT its reciprocal, the ARITH the product with e (read again on port 1).

int8 scales: the maxima share x's range; d in [lo - hi, 0]; e in [0, 1]; the sum in [0, 1 / p] where p is
the smallest per-pixel largest probability over the calibration samples (a probe the calibration adds,
`probe_name`); the reciprocal in [p, 1]. Refused to the CPU, with the reason: another axis, a model
whose quantization fixes the scales (pre-quantized), kernels beyond WEIGHT_LIMIT bytes, or a map the host
runs faster (its epochs' setup outweighs a few pixels; C x C kernels outweigh many channels): the target
profile's host cost model (cpu/cost.py) against `npu_estimate`.
"""

from __future__ import annotations

import numpy as np

from ...cpu.cost import host_cycles
from ...program.spec import load_isa
from ..checks import MAP
from ..ir import Graph, Layer, Node, Step, hwc
from ..recipe import Recipe

WEIGHT_LIMIT = 1 << 20  # bytes of the shift and sum kernels of one Softmax (weights pool)


def _axis(g: Graph, n: Node) -> int:
    rank = len(g.shapes[n.inputs[0]])
    return int(n.attrs.get("axis", 1 if g.opset < 13 else -1)) % max(rank, 1)


def over_channels(g: Graph, n: Node) -> bool:
    """A Softmax over the channel axis of a map [1, C, H, W] / [1, C, L] / [1, C] (before opset 13 the
    coerced 2-D form at axis 1 is that only when every dimension after C is 1)."""
    s = tuple(g.shapes[n.inputs[0]])
    if len(s) not in (2, 3, 4) or s[0] != 1 or _axis(g, n) != 1:
        return False
    return g.opset >= 13 or int(np.prod(s[2:], dtype=np.int64)) == 1


def probe_name(y: str) -> str:
    """The calibration probe of Softmax output y: its maximum over channels, per pixel."""
    return f"{y}::channel_max"


def calibration_probes(g: Graph) -> list[str]:
    """Softmax outputs whose per-pixel channel maximum the int8 calibration measures."""
    return [n.outputs[0] for n in g.nodes if n.op == "Softmax" and n.inputs and over_channels(g, n)]


def levels(c: int) -> int:
    return (c - 1).bit_length() if c > 1 else 0


def kernel_bytes(c: int, esize: int) -> int:
    return (levels(c) + 1) * c * c * esize


# the epochs of the recipe: (unit commands, stream engines, links) each, for the setup estimate
_EPOCHS = {"max": (("CONV", "ARITH"), 4, 5), "exp": (("ARITH", "ACT"), 3, 4), "sum": (("CONV", "ACT", "ARITH"), 4, 6)}


def npu_estimate(profile, dtype: str, c: int, pixels: int) -> float:
    """Estimated NPU cycles of the recipe: per epoch the setup (its configuration registers) plus its
    slowest unit (the CAs at their 1 x 1 rate: lanes and window taps as engine/timing.py uses them, output
    channels split over the CAs from 32 channels on as codegen does; ARITH and ACT at their element rates);
    memory traffic overlaps and is left out."""
    isa, comp, ep = load_isa(), profile.compute, profile.epoch
    lanes = comp.lanes
    lane_use = c / (-(-c // lanes) * lanes)
    tap_use = min(comp.kernel_taps, min(comp.tap_fill, -(-c // lanes))) / comp.kernel_taps
    ports = profile.bus.stream_engine_port
    reads = sum(1 for e in range(profile.units.stream_engines) if ports[e] == ports[0])
    # codegen's multi-CA slices: a slice reads its kernel and its ARITH operand, all share the input
    cas = min(profile.units.conv_accelerators, -(-c // 16), (reads - 1) // 2,
              profile.units.stream_engines - reads) if c >= 32 else 1
    cas = max(cas, 1)
    ca = c * c * pixels / (comp.macs(dtype) * lane_use * tap_use * cas)
    elems = c * pixels
    total = 0.0
    for kind, count in (("max", levels(c)), ("exp", 1), ("sum", 1)):
        units, ses, links = _EPOCHS[kind]
        regs = isa.registers({"SE": ses, "LINK": links, **{u: 1 for u in units}})
        body = max((ca if u == "CONV" else elems / float(comp.elems_per_cycle["arith" if u == "ARITH" else "activation"]))
                   for u in units)
        total += count * (ep.setup(regs) + body)
    return total


def problem(g: Graph, n: Node) -> str | None:
    """over the channel axis (before opset 13: only when H = W = 1); int8: a calibrated model (not a
    pre-quantized one); the L + 1 C x C kernels within 1 MiB; estimated faster than the host's Softmax"""
    x = n.inputs[0]
    if not over_channels(g, n):
        return f"axis {n.attrs.get('axis', 1 if g.opset < 13 else -1)} of {list(g.shapes[x])} is not the channel axis " \
               f"of a map (the NPU sums over channels)"
    c = hwc(g.shapes[x])[2]
    esize = load_isa().dtype_bytes(g.compile_dtype)
    if kernel_bytes(c, esize) > WEIGHT_LIMIT:
        return f"{c} channels need {kernel_bytes(c, esize) >> 10} KiB of shift and sum kernels (limit " \
               f"{WEIGHT_LIMIT >> 10} KiB)"
    if g.compile_dtype == "int8":
        if g.prequantized:
            return "a pre-quantized model gives no scales for the intermediate exp, sum and reciprocal"
        if x not in g.ranges or probe_name(n.outputs[0]) not in g.ranges:
            return "no calibrated range for the channel maximum"
        if not g.ranges[probe_name(n.outputs[0])][0] > 0:
            return "the calibrated largest probability is 0"
    if g.profile is not None:
        h, w, _ = hwc(g.shapes[x])
        shape = tuple(g.shapes[x])
        npu, cpu = npu_estimate(g.profile, g.compile_dtype, c, h * w), host_cycles("Softmax", [shape], [shape], g.profile)
        if npu >= cpu:
            return f"faster on the CPU (estimated {npu:,.0f} NPU cycles for its {levels(c) + 2} epochs vs {cpu:,.0f})"
    return None


def _conv(out: str, weights: np.ndarray) -> Step:
    c = weights.shape[0]
    return Step("CONV", out, dict(weights=np.ascontiguousarray(weights.reshape(c, 1, 1, c), np.float32),
                                  bias=np.zeros(c, np.float32), kh=1, kw=1, sh=1, sw=1, dh=1, dw=1, pads=(0, 0, 0, 0),
                                  groups=1, act="none", act_range=None))


def _act(out: str, func: str) -> Step:
    return Step("ACT", out, dict(func=func, alpha=0.01, lo=None, hi=None, table=None))


def lower(g: Graph, n: Node, x: str, names: list[str]) -> list[Layer]:
    """The epochs of the module doc; registers the intermediate tensors (shape, dtype, int8 ranges)."""
    y = n.outputs[0]
    c = hwc(g.shapes[x])[2]

    def tensor(suffix: str, rng=None) -> str:
        t = f"{y}::{suffix}"
        g.shapes[t], g.dtypes[t] = tuple(g.shapes[x]), g.dtype(x)
        if rng is not None and g.compile_dtype == "int8":
            g.ranges[t] = rng
        return t

    int8 = g.compile_dtype == "int8" and not g.prequantized
    lo, hi = g.ranges[x] if int8 else (0.0, 0.0)
    out: list[Layer] = []
    m = x
    for k in range(levels(c)):
        shift = np.zeros((c, c))
        shift[np.arange(c), (np.arange(c) + (1 << k)) % c] = 1.0  # output j reads channel j + 2^k
        p, m_next = tensor(f"shift{k}", (lo, hi)), tensor(f"max{k}", (lo, hi))
        out.append(Layer(n.name, names, m, [_conv(p, shift), Step("ARITH", m_next, dict(op="max"), operand=m)]))
        m = m_next
    d, e = tensor("diff", (lo - hi, 0.0)), tensor("exp", (0.0, 1.0))
    out.append(Layer(n.name, names, x, [Step("ARITH", d, dict(op="sub"), operand=m), _act(e, "exp")]))
    p_min = g.ranges[probe_name(y)][0] if int8 else 1.0
    s, r = tensor("sum", (0.0, 1.0 / p_min)), tensor("reciprocal", (p_min, 1.0))
    out.append(Layer(n.name, names, e, [_conv(s, np.ones((c, c))), _act(r, "reciprocal"),
                                        Step("ARITH", y, dict(op="mul"), operand=e)]))
    return out


def softmax_channels(g: Graph, n: Node):
    """over the channel axis of a map (before opset 13 only when H = W = 1); int8: a calibrated model, not a
    pre-quantized one; the shift and sum kernels within 1 MiB"""
    return problem(g, n)


def _lower(ctx, n: Node, x: str) -> list[Layer]:
    return lower(ctx.g, n, x, ctx.names)


RECIPES = [
    Recipe("Softmax", "CONV channel shifts + ARITH max (the channel maximum), ARITH sub + ACT exp, "
                      "CONV all-ones sum + ACT reciprocal + ARITH mul (compiler/recipes/softmax.py)", MAP + (softmax_channels,),
           _lower, costed=True),
]
