"""ConvTranspose on the NPU: one stride-1 CONV per output phase, written by strided addressing.

With stride s, output row oy gets its taps from the kernel rows ky = r + m*s (r = (oy + pad) mod s)
applied to the input rows q - m (q = (oy + pad) div s). So the outputs of one phase (r_y, r_x) form an
ordinary convolution of the input with the flipped sub-kernel of those taps; the phase's results go to
every s-th pixel of the output, starting at its first row and column (a strided write SE). Each output
pixel belongs to exactly one phase, so the phases tile the output and every one adds the bias.

The decomposition is decided once per node and checked against the host's ConvTranspose (an
independent scatter-add formulation) on a small probe with the node's own spatial attributes (one
channel per group): a form it does not reproduce (negative sub-pads, k < s, dilation) leaves the
node on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ...cpu.kernels import conv_transpose
from ...program.layouts import required_layout
from ..checks import MAP, const_weights, field_limit, model_weights, rank4_maps
from ..ir import Graph, Layer, Node, Step, hwc
from ..recipe import Recipe
from .conv import const_input, model_quant


@dataclass(frozen=True)
class Axis:
    """One phase along one axis: outputs first, first + s, ... (count n) from taps of a stride-1 conv."""
    first: int
    n: int
    taps: tuple[int, ...]  # kernel indices, in conv order (flipped)
    pad_lo: int
    pad_hi: int


@dataclass(frozen=True)
class Phase:
    y: Axis
    x: Axis
    sy: int
    sx: int


def _axis_phases(size_in: int, size_out: int, k: int, s: int, p_begin: int) -> list[Axis] | None:
    out = []
    for r in range(s):
        rows = [o for o in range(size_out) if (o + p_begin) % s == r]
        if not rows:
            continue
        m = -(-(k - r) // s)
        if m <= 0:
            return None  # a phase with no taps (kernel smaller than the stride): bias only
        q0 = (rows[0] + p_begin) // s
        lo, hi = (m - 1) - q0, (q0 + len(rows) - 1) - (size_in - 1)
        if lo < 0 or hi < 0:
            return None
        out.append(Axis(rows[0], len(rows), tuple(r + t * s for t in reversed(range(m))), lo, hi))
    return out


def _pads(n: Node, ih, iw, oh, ow, kh, kw, sh, sw) -> tuple[int, int]:
    """Begin pads (top, left) by the ONNX formulas: explicit pads, or auto_pad / output_shape."""
    ap = n.attrs.get("auto_pad", "NOTSET")
    op = list(n.attrs.get("output_padding", [0, 0]))
    if ap in ("NOTSET", "") and "output_shape" not in n.attrs:
        p = list(n.attrs.get("pads", [0, 0, 0, 0]))
        return int(p[0]), int(p[1])
    out = []
    for i_, o_, k, s, opad in ((ih, oh, kh, sh, op[0]), (iw, ow, kw, sw, op[1])):
        total = s * (i_ - 1) + opad + k - o_
        out.append(total // 2 if ap == "SAME_UPPER" else total - total // 2)
    return out[0], out[1]


def plan(g: Graph, n: Node):
    """([Phase], "") when the NPU can run the node, else (None, reason); decided once (kept in its attrs)."""
    if "_ct_plan" not in n.attrs:
        n.attrs["_ct_plan"] = _plan(g, n)
    return n.attrs["_ct_plan"]


def _plan(g: Graph, n: Node):
    x, y = n.inputs[0], n.outputs[0]
    if len(n.inputs) < 2 or n.inputs[1] not in g.consts or (len(n.inputs) > 2 and n.inputs[2]
                                                            and n.inputs[2] not in g.consts):
        return None, "weights or bias are computed (the CA reads constant weights)"
    w = g.consts[n.inputs[1]]
    if w.ndim != 4 or len(g.shapes[x]) != 4:
        return None, f"a {w.ndim - 2}-D transposed convolution (the CA runs 2-D)"
    if any(int(d) != 1 for d in n.attrs.get("dilations", [1, 1])):
        return None, "dilated transposed convolution"
    _, _, ih, iw = g.shapes[x]
    _, _, oh, ow = g.shapes[y]
    kh, kw = int(w.shape[2]), int(w.shape[3])
    sh, sw = (int(v) for v in n.attrs.get("strides", [1, 1]))
    pt, pl = _pads(n, ih, iw, oh, ow, kh, kw, sh, sw)
    ys, xs = _axis_phases(ih, oh, kh, sh, pt), _axis_phases(iw, ow, kw, sw, pl)
    if ys is None or xs is None:
        return None, "its output phases need cropped inputs or have no taps (kernel smaller than the stride)"
    phases = [Phase(a, b, sh, sw) for a in ys for b in xs]
    why = _probe(g, n, phases)
    return (phases, "") if why is None else (None, why)


def phase_weights(w: np.ndarray, groups: int, ph: Phase) -> np.ndarray:
    """Conv weights [O][len(taps_y)][len(taps_x)][C/groups] of one phase from ConvTranspose weights
    [C][O/groups][kh][kw]."""
    c, og = w.shape[0], w.shape[1]
    cg = c // groups
    sub = w[:, :, list(ph.y.taps)][:, :, :, list(ph.x.taps)]  # [C][O/g][My][Mx]
    out = np.empty((og * groups, len(ph.y.taps), len(ph.x.taps), cg), dtype=np.float32)
    for gi in range(groups):
        blk = sub[gi * cg:(gi + 1) * cg]  # [C/g][O/g][My][Mx]
        out[gi * og:(gi + 1) * og] = blk.transpose(1, 2, 3, 0)
    return out


def _phases_numpy(x: np.ndarray, w: np.ndarray, bias: np.ndarray, groups: int, phases, oh: int, ow: int):
    """The decomposition in plain numpy (float64): x [C][H][W] -> y [O][oh][ow]."""
    og = w.shape[1]
    y = np.zeros((og * groups, oh, ow))
    cg = x.shape[0] // groups
    for ph in phases:
        wc = phase_weights(w, groups, ph).astype(np.float64)  # [O][My][Mx][C/g]
        xp = np.pad(x, ((0, 0), (ph.y.pad_lo, ph.y.pad_hi), (ph.x.pad_lo, ph.x.pad_hi)))
        win = sliding_window_view(xp, (len(ph.y.taps), len(ph.x.taps)), axis=(1, 2))  # [C][ny][nx][My][Mx]
        for gi in range(groups):
            part = np.einsum("cjiab,oabc->oji", win[gi * cg:(gi + 1) * cg], wc[gi * og:(gi + 1) * og])
            y[gi * og:(gi + 1) * og, ph.y.first::ph.sy, ph.x.first::ph.sx][:, :ph.y.n, :ph.x.n] = \
                part + bias[gi * og:(gi + 1) * og, None, None]
    return y


def _probe(g: Graph, n: Node, phases) -> str | None:
    """None when the phases reproduce the host's ConvTranspose (a scatter-add per tap, npusim/cpu/kernels.py,
    checked against ONNX Runtime in the tests) on a probe with one channel per group."""
    groups = int(n.attrs.get("group", 1))
    w_full = g.consts[n.inputs[1]]
    _, _, ih, iw = g.shapes[n.inputs[0]]
    _, _, oh, ow = g.shapes[n.outputs[0]]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, groups, ih, iw))
    w = rng.standard_normal((groups, 1) + tuple(w_full.shape[2:]))
    bias = rng.standard_normal(groups)
    attrs = {k: v for k, v in n.attrs.items() if not k.startswith("_")}
    try:
        ref = conv_transpose(x, w, bias, attrs)
    except Exception as e:
        return f"the probe cannot run it ({type(e).__name__})"
    if ref.shape != (1, groups, oh, ow):
        return f"the probe's output {list(ref.shape)} is not the node's [1, {groups}, {oh}, {ow}]"
    got = _phases_numpy(x[0], w, bias, groups, phases, oh, ow)
    if not np.allclose(got, ref[0], rtol=1e-6, atol=1e-6):
        return "its padding form is not one the phase decomposition reproduces"
    return None


def _model_quant(g: Graph, n: Node) -> dict:
    """A pre-quantized model's weight scales per output channel and int32 biases (conv.model_quant); a phase's
    sub-kernel keeps its output channels, so the model's integers come back exactly."""
    bias = n.inputs[2] if len(n.inputs) > 2 else ""
    return model_quant(g, n.inputs[1], 1, bias, g.shapes[n.outputs[0]][1])


def model_scales(g: Graph, n: Node):
    """pre-quantized weights: group 1, int8 after their zero point, one scale per tensor or per output channel
    (each phase's sub-kernel keeps the model's integers and scales)"""
    if len(n.inputs) < 2 or n.inputs[1] not in g.wq:
        return None
    if int(n.attrs.get("group", 1)) != 1 or "w_scale" not in _model_quant(g, n):
        return "pre-quantized weights a phase cannot keep (grouped, not int8, or not scaled per output channel)"
    return None


def convtranspose_rule(g: Graph, n: Node):
    """a 2-D transposed convolution with a blocked16 output whose output phases are stride-1 convs within
    the CONV fields, each phase map in the output's layout (checked against the host's kernel)"""
    phases, why = plan(g, n)
    if phases is None:
        return why
    out = g.shapes[n.outputs[0]]
    layout = required_layout(*hwc(out))
    for ph in phases:
        if max(len(ph.y.taps), len(ph.x.taps)) > field_limit("CONV", "kh"):
            return f"a phase kernel of {len(ph.y.taps)}x{len(ph.x.taps)} exceeds the CA's {field_limit('CONV', 'kh')}"
        if max(ph.y.pad_lo, ph.y.pad_hi, ph.x.pad_lo, ph.x.pad_hi) > field_limit("CONV", "pad_t"):
            return f"a phase needs pads beyond the CA's {field_limit('CONV', 'pad_t')}"
        if required_layout(ph.y.n, ph.x.n, out[1]) != layout:
            return f"a {ph.y.n}x{ph.x.n} phase is not in the output's {layout} layout"
    if layout != "blocked16":  # an image pixel (C <= 4 elements) need not start on a bus word
        return f"its {layout} output (C <= 4) puts phase pixels off the bus-word grid of a write SE's base"
    return None


def phase_steps(g: Graph, n: Node) -> list[Step]:
    """One CONV step per output phase (compiler/recipes/convtranspose.py); each phase tensor is a strided view
    of the output (Graph.strided), written where its pixels belong."""
    phases, _ = plan(g, n)
    w = g.consts[n.inputs[1]]
    groups = int(n.attrs.get("group", 1))
    out = n.outputs[0]
    o = g.shapes[out][1]
    bias = const_input(g, n, 2, "bias B")
    bias = np.zeros(o, np.float32) if bias is None else np.asarray(bias, np.float32).reshape(-1)
    mq = _model_quant(g, n) if n.inputs[1] in g.wq else {}
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
            act_range=None, **mq)))
    return steps


def _lower(ctx, n: Node, x: str) -> list[Layer]:
    """One layer per output phase."""
    return [layer for step in phase_steps(ctx.g, n) for layer in ctx.layer(n, x, [step])]


RECIPES = [
    Recipe("ConvTranspose", "CONV per output phase (stride-1 sub-kernels), written by strided addressing",
           (const_weights,) + MAP + (rank4_maps, model_weights, model_scales, convtranspose_rule), _lower),
]
