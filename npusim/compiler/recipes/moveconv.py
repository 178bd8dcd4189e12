"""CONVs whose kernel only moves values (contract: isa/README.md "Moving CONVs").

Every weight is 0 or 1 and every output has exactly one 1, so the CA computes y = x exactly in fp16 and
fp32, and in int8 too when input and output share one scale (weight 127 at scale 1/127; the step's
`moves` flag makes quantize.assign_qparams give both one scale and keeps fusion from folding an ACT into
the CONV's own output). Three uses:

- **Channel expansion** (numpy broadcasting along channels): a computed operand of one channel under a
  C-channel Add/Sub/Mul/Div/Max/Min result is first repeated over C channels by a 1 x 1 CONV with a
  1 -> C all-ones kernel; the existing ARITH epoch then takes it (broadcast over H and W by zero
  strides where it is smaller, compiler/recipes/broadcast.py). An Add whose expanded operand has the result's
  shape fuses the two (conv-add: one epoch).
- **Shift and select** (Slice/Split boxes off the bus-word grid or off the 16-channel blocks): the read
  SE starts at a `cover` box whose first byte lies on the grid (the columns from the grid pixel at or
  below the box, the channels from the box's 16-channel block, or the whole image pixel), and a CONV
  whose kernel is one-hot moves the values into place: output (o, y, x) = cover (c0' + o*cs, y,
  x*sx + s), a 1 x (s + 1) kernel with its 1 at tap s and column stride sx; depthwise (one weight per
  channel) when the cover has the box's channels, else dense (a channel gather).
- **Channel gather** (element permutations, compiler/recipes/permute.py): every output pixel one input pixel with
  its channels picked by the pixel's phase (a channel permutation, DepthToSpace, a folded channel shuffle):
  a one-hot 1 x 1 CONV per phase, grouped where it can be, written strided, up to one per CA an epoch
  (GatherPlan).

Each route is kept only where estimated faster than the host's copy or elementwise op (the profile's
host cost model, cpu/cost.py): per epoch its setup (configuration registers) plus the longer of its
slowest unit (the CA at the engine's lane and tap use, engine/timing.py ca_utilisation, over the CAs
codegen shares a dense CONV's output blocks among) and its bytes through the fastest activation pool.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...program.spec import load_isa
from ..estimates import arith_cycles, conv_cycles, conv_epoch, epoch_cycles, parallel_convs, stored
from ..ir import Graph, Layer, Node, Step, Window, hwc
from ..storage import storage_layout
from ..streams import pattern, write_problem

WORD = 8  # the n657's bus word (profile alignment.word), as addressing.WORD


# ------------------------------------------------------------------ steps and estimates

def conv_step(out: str, weights: np.ndarray, groups: int = 1, sw: int = 1) -> Step:
    """A CONV moving values: `weights` [oc][1][kw][in_c / groups] of 0 and 1, no bias, no pads."""
    oc, kh, kw, _ = weights.shape
    return Step("CONV", out, dict(weights=np.ascontiguousarray(weights, np.float32), bias=np.zeros(oc, np.float32),
                                  kh=kh, kw=kw, sh=1, sw=sw, dh=1, dw=1, pads=(0, 0, 0, 0), groups=groups, act="none",
                                  act_range=None, moves=True))


# ------------------------------------------------------------------ channel expansion

def expanded_shape(g: Graph, t: str, out: str, shape=None) -> tuple[int, ...] | None:
    """The shape computed operand `t` (or a map of `shape` made from it) takes once its one channel is
    repeated over the C channels of result `out` ([1, 1, h, w] -> [1, C, h, w], [1, 1, L] -> [1, C, L],
    [1, 1] -> [1, C]), or None when it needs no expansion or is no map of one channel with the result's rank."""
    st, so = tuple(g.shapes[t] if shape is None else shape), tuple(g.shapes[out])
    if len(st) != len(so) or len(so) not in (2, 3, 4) or st[:2] != (1, 1) or so[1] == 1:
        return None
    return (1, so[1]) + st[2:]


def expansion_estimate(g: Graph, n: Node, shapes: dict | None = None) -> float:
    """Estimated NPU cycles of an eltwise node with its one-channel operands expanded: a CONV epoch per
    expanded operand (1 -> C channels over its own pixels) and the ARITH epoch. `shapes`: operands first
    copied into maps of other shapes (compiler/recipes/broadcast.py relayout)."""
    p, out = g.profile, n.outputs[0]
    es = load_isa().dtype_bytes(g.compile_dtype)
    oh, ow, oc = hwc(g.shapes[out])
    total = epoch_cycles(p, ("ARITH",), 3, arith_cycles(p, oh * ow * oc), 3 * oh * ow * stored(oc), es)
    for t in n.inputs[:2]:
        e = expanded_shape(g, t, out, (shapes or {}).get(t)) if t not in g.consts else None
        if e is not None:
            h, w, c = hwc(e)
            total += epoch_cycles(p, ("CONV",), 3, conv_cycles(p, g.compile_dtype, 1, c, 1, 1, h * w),
                                  h * w * (1 + stored(c)), es)
    return total


def expand_operands(g: Graph, n: Node, names: list[str], alias: dict) -> tuple[Node, list[Layer]]:
    """(the node reading expanded operands, the CONV layers making them): registers each `::expand`
    tensor (shape, dtype, int8 range of its operand)."""
    out, ins, layers = n.outputs[0], list(n.inputs), []
    for i, t in enumerate(n.inputs[:2]):
        e = expanded_shape(g, t, out) if t and t not in g.consts else None
        if e is None:
            continue
        name = f"{out}::expand{i}"
        g.shapes[name], g.dtypes[name] = e, g.dtype(t)
        if t in g.ranges:
            g.ranges[name] = g.ranges[t]
        layers.append(Layer(n.name, names, alias.get(t, t), [conv_step(name, np.ones((e[1], 1, 1, 1)))]))
        ins[i] = name
    return Node(n.name, n.op, ins, list(n.outputs), n.attrs, n.proto), layers


# ------------------------------------------------------------------ shift and select

def _cover_channels(src, win: Window, c: int, word: int) -> tuple[int, int]:
    """(first channel, channel count) of the cover: from the box's 16-channel block (blocked16), the whole
    pixel (image) or the grid element at or below the box (linear)."""
    last = win.c0 + (c - 1) * win.cs
    if src.layout == "blocked16":
        first = win.c0 // src.block * src.block
    elif src.layout == "image":
        first = 0
    else:
        first = win.c0 - (win.c0 * src.esize % word) // src.esize
    return first, last + 1 - first


def shift_plan(src, win: Window, h: int, w: int, c: int, profile=None, dtype: str = "int8", word: int = WORD):
    """(cover Window, cover [h][w][c], CONV weights, groups, column stride) reading the box `win` ([h][w][c]
    of Source `src`) from a grid-aligned cover and moving it into place, or the reason none exists. With the
    cover's channels those of the box, the kernel is depthwise when `profile` estimates it faster."""
    if win.swap:
        return "a transposed box"
    c0, cin = _cover_channels(src, win, c, word)
    s = 0
    if src.layout != "linear":
        x = win.x0
        while x * src.pixel % word:
            x -= 1
        s = win.x0 - x
    if s:
        cover = Window(win.whole, c0=c0, y0=win.y0, x0=win.x0 - s, sy=win.sy)
        cw, sw = s + (w - 1) * win.sx + 1, win.sx
    else:
        cover = Window(win.whole, c0=c0, y0=win.y0, x0=win.x0, sy=win.sy, sx=win.sx)
        cw, sw = w, 1
    conv = load_isa().command("CONV")
    if s + 1 > conv.field("kw").mask or sw > conv.field("sw").mask:
        return f"a shift of {s} column(s) at step {win.sx} beyond the CONV's kernel and stride fields"
    got = pattern(src, cover, h, cw, cin, word)
    if isinstance(got, str):
        return f"its grid-aligned cover: {got}"
    dense = np.zeros((c, 1, s + 1, cin))
    dense[np.arange(c), 0, s, win.c0 - c0 + np.arange(c) * win.cs] = 1.0  # a channel gather
    if c0 == win.c0 and win.cs == 1 and cin == c and 1 < c <= conv.field("groups").mask and profile is not None:
        pixels = h * w
        if conv_cycles(profile, dtype, c, c, s + 1, c, pixels) < conv_cycles(profile, dtype, c, c, s + 1, 1, pixels):
            depthwise = np.zeros((c, 1, s + 1, 1))
            depthwise[:, 0, s, 0] = 1.0  # output channel o reads its own channel, s columns on
            return cover, (h, cw, cin), depthwise, c, sw
    return cover, (h, cw, cin), dense, 1, sw


def shift_estimate(profile, dtype: str, plan, h: int, w: int) -> float:
    """Estimated NPU cycles of the CONV epoch of a shift plan with an [h][w] output."""
    _, (_, cw, cin), weights, groups, _ = plan
    c = weights.shape[0]
    return epoch_cycles(profile, ("CONV",), 3, conv_cycles(profile, dtype, cin, c, weights.shape[2], groups, h * w),
                        h * (cw * stored(cin) + w * stored(c)), load_isa().dtype_bytes(dtype))


def shift_layer(g: Graph, n: Node, names: list[str], plan, out: str) -> Layer:
    """The CONV layer of a shift plan writing `out`; registers its `::cover` box (Graph.windows)."""
    cover, (h, cw, cin), weights, groups, sw = plan
    t = f"{out}::cover"
    g.shapes[t], g.dtypes[t] = (1, cin, h, cw), g.dtype(out)
    g.windows[t] = cover
    return Layer(n.name, names, t, [conv_step(out, weights, groups, sw)])


# ------------------------------------------------------------------ channel gather (permutations)

@dataclass(frozen=True)
class GatherPlan:
    """An element permutation y[i] = x[src_of[i]] as CONVs gathering channels: output pixel (bh*Y + i,
    bw*X + j) is input pixel (Y, X) with its channels picked by the phase (i, j) alone. Per phase a 1 x 1
    one-hot CONV, grouped (`groups`) where every group of output channels reads one group of input channels
    (DepthToSpace CRD: output channel o of every phase reads input channels o*b*b ..), writes every bh-th row
    and bw-th column of y (Graph.strided; with one phase, y itself); up to `parallel_convs` phases an epoch,
    one CA each, the input read once (contract: isa/README.md "Moving CONVs")."""
    bh: int
    bw: int
    phases: tuple[tuple[int, int, tuple[int, ...]], ...]  # (row phase, column phase, input channel per output one)
    groups: tuple[int, ...]  # per phase the CONV's groups
    cycles: float


def block_groups(chans, in_c: int, top: int) -> int:
    """The most groups G (dividing in_c and the output's channels, up to `top`) for which output channel o
    reads an input channel of group o // (out_c / G): the gather as a grouped CONV (1: dense)."""
    out_c = len(chans)
    k = np.asarray(chans)
    for gr in sorted((d for d in range(1, min(in_c, out_c, top) + 1) if in_c % d == 0 and out_c % d == 0),
                     reverse=True):
        if (k // (in_c // gr) == np.arange(out_c) // (out_c // gr)).all():
            return gr
    return 1


def gather_phases(src_of: np.ndarray, sx, sy):
    """(bh, bw, [(i, j, input channel of every output channel)]) when every output pixel of map `sy` is
    input pixel (y // bh, x // bw) of map `sx` with its channels gathered by the phase (y % bh, x % bw)
    alone, else None. Covers channel permutations (bh = bw = 1), DepthToSpace in both modes and folded
    Reshape - Transpose - Reshape channel shuffles."""
    hx, wx, cx = hwc(tuple(sx))
    hy, wy, cy = hwc(tuple(sy))
    if hy % hx or wy % wx or src_of.size != hy * wy * cy:
        return None
    bh, bw = hy // hx, wy // wx
    ch, rest = np.divmod(src_of.reshape(cy, hy, wy), hx * wx)
    py, px = np.divmod(rest, wx)
    if (py != (np.arange(hy) // bh)[None, :, None]).any() or (px != (np.arange(wy) // bw)[None, None, :]).any():
        return None
    phases = []
    for i in range(bh):
        for j in range(bw):
            k = ch[:, i::bh, j::bw]
            if (k != k[:, :1, :1]).any():
                return None
            phases.append((i, j, tuple(int(v) for v in k[:, 0, 0])))
    return bh, bw, phases


def gather_plan(g: Graph, x: str, y: str, src_of: np.ndarray, profile) -> tuple[GatherPlan | None, str]:
    """The channel-gather plan of map y[i] = x[src_of[i]] with its estimated NPU cycles, or (None, why)."""
    if not (g.is_map(x) and g.is_map(y)) or "linear" in (storage_layout(g, x), storage_layout(g, y)):
        return None, "not a permutation between two maps of pixels"
    got = gather_phases(src_of, g.shapes[x], g.shapes[y])
    if got is None:
        return None, "an output pixel that is no input pixel with its channels picked by the pixel's phase"
    bh, bw, phases = got
    hx, wx, cx = hwc(g.shapes[x])
    cy = hwc(g.shapes[y])[2]
    if len(phases) > 1:
        if len(g.shapes[y]) != 4:
            return None, "pixel phases of a map that is not 4-D"
        for i, j, _ in phases:
            why = write_problem(g, (1, cy, hx, wx), y, i, j)
            if why:
                return None, f"its phase ({i}, {j}): {why}"
    groups = tuple(block_groups(ch, cx, load_isa().command("CONV").field("groups").mask) for _, _, ch in phases)
    k = parallel_convs(profile) if len(phases) > 1 else 1
    px = hx * wx
    cost = sum(conv_epoch(profile, g.compile_dtype, cx, cy, min(groups[e:e + k]), px,
                          px * (stored(cx) + len(groups[e:e + k]) * stored(cy)), len(groups[e:e + k]))
               for e in range(0, len(groups), k))
    return GatherPlan(bh, bw, tuple(phases), groups, cost), ""


def _one_hot(chans, in_c: int, groups: int) -> np.ndarray:
    """[out_c][1][1][in_c / groups] weights: output channel o picks input channel chans[o] (of its group)."""
    icg = in_c // groups
    w = np.zeros((len(chans), 1, 1, icg))
    w[np.arange(len(chans)), 0, 0, np.asarray(chans) % icg] = 1.0
    return w


def gather_layers(g: Graph, n: Node, names: list[str], x: str, plan: GatherPlan) -> list[Layer]:
    """The layers of a gather plan writing n's output: up to parallel_convs phase CONVs an epoch."""
    y = n.outputs[0]
    hx, wx, cx = hwc(g.shapes[x])
    if len(plan.phases) == 1:
        return [Layer(n.name, names, x, [conv_step(y, _one_hot(plan.phases[0][2], cx, plan.groups[0]),
                                                   plan.groups[0])])]
    steps = []
    for p, ((i, j, chans), gr) in enumerate(zip(plan.phases, plan.groups)):
        t = f"{y}::gather{p}"
        g.shapes[t], g.dtypes[t] = (1, len(chans), hx, wx), g.dtype(y)
        g.strided[t] = (y, i, j, plan.bh, plan.bw)
        steps.append(conv_step(t, _one_hot(chans, cx, gr), gr))
    k = parallel_convs(g.profile)
    return [Layer(n.name, names, x, steps[e:e + 1], siblings=[(x, st) for st in steps[e + 1:e + k]])
            for e in range(0, len(steps), k)]
