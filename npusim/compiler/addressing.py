"""Operators the NPU runs by stream-engine addressing: Slice, Split, Transpose (rows <-> columns),
Concat on H or W, DepthToSpace and SpaceToDepth.

Each is a copy through an ARITH unit (op copy, y = a) whose read SE walks a box of the source map
(a `Window`, Graph.windows) and/or whose write SE writes every s-th pixel of the destination from a
first row and column (Graph.strided, as ConvTranspose's phases), or no epoch at all when the box is a
dense part of the source (whole planes of a blocked16 map, a run of whole or partial lines: a view the
consumers read in place). The stream a copy unit sees is dense in its layout, so a window is legal
when that dense order is a stream engine's `run` + three loop levels over the source and the first
byte lies on the bus-word grid (the SE ignores base bits below `alignment.word`; strides are bytes
of a linear descriptor, so no granule rounding). Layout contract: isa/README.md "Addressing".

A node whose box the stream engine cannot walk stays on the CPU with the reason (legality.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..program.layouts import block_size, required_layout
from ..program.spec import load_isa
from .ir import Concat, Graph, Layer, Node, Step, Window, hwc

WORD = 8  # the n657's bus word (profile alignment.word); memplan refuses a window off a larger word's grid
NOMINAL_ALIGN = 128  # line/plane alignment assumed when checking field limits before the memory plan


@dataclass(frozen=True)
class Source:
    """How a whole map lies in memory: layout, [H][W][C], element bytes and the buffer's strides."""

    layout: str
    h: int
    w: int
    c: int
    esize: int
    line: int
    plane: int
    block: int

    @property
    def pixel(self) -> int:
        if self.layout == "linear":
            return self.c * self.esize
        return (self.block if self.layout == "blocked16" else self.c) * self.esize

    def addr(self, ch: int, y: int, x: int) -> int:
        """Byte offset of element (ch, y, x) from the map's first byte."""
        if self.layout == "linear":
            return ch * self.esize
        a = y * self.line + x * self.pixel
        if self.layout == "blocked16":
            return a + (ch // self.block) * self.plane + (ch % self.block) * self.esize
        return a + ch * self.esize


def nominal_source(g: Graph, t: str) -> Source:
    """The Source of map `t` before the memory plan (strides at NOMINAL_ALIGN)."""
    from .memplan import storage_layout

    h, w, c = hwc(g.shapes[t])
    es = load_isa().dtype_bytes(g.compile_dtype)
    layout = storage_layout(g, t)
    blk = block_size()
    px = (blk if layout == "blocked16" else c) * es
    line = -(-w * px // NOMINAL_ALIGN) * NOMINAL_ALIGN
    return Source(layout, h, w, c, es, line, h * line, blk)


def _limits():
    f = load_isa().command("SE")
    return f.field("run").mask, f.field("n1").mask, f.field("s1").mask


def pattern(src: Source, win: Window, h: int, w: int, c: int, word: int = WORD):
    """(offset, (run, n1, s1, n2, s2, n3, s3)) of a linear read descriptor giving the window's [h][w][c]
    as a dense stream of its layout, or the reason none exists (a string)."""
    es, blk = src.esize, src.block
    out = required_layout(h, w, c)
    dy, dx = (win.sx * src.pixel, win.sy * src.line) if win.swap else (win.sy * src.line, win.sx * src.pixel)
    if src.layout == "linear":
        dx = dy = 0
    last = win.c0 + (c - 1) * win.cs
    if out == "blocked16":
        if src.layout != "blocked16" or win.c0 % blk or win.cs != 1:
            return "a channel box off the 16-channel blocks (the SE moves whole 16-channel pixels)"
        planes = -(-c // blk)
        if dx == blk * es:
            levels, run = [(h, dy), (planes, src.plane)], w * blk * es
        else:
            levels, run = [(w, dx), (h, dy), (planes, src.plane)], blk * es
    else:
        if src.layout == "blocked16" and win.c0 // blk != last // blk:
            return f"{c} channels from {win.c0} (step {win.cs}) span two 16-channel blocks"
        if win.cs == 1:
            run, levels = c * es, []
        else:
            run, levels = es, [(c, win.cs * es)]
        if out == "image":
            if win.cs == 1 and dx == c * es:
                run, levels = w * c * es, [(h, dy)]
            else:
                levels += [(w, dx), (h, dy)]
        if len(levels) > 3:
            return "a box needing more than the SE's three loop levels"
    off = src.addr(win.c0, win.y0, win.x0)
    if off % word:
        return f"its first element lies {off % word} B off the {word} B bus-word grid (the SE ignores those base bits)"
    levels = [lv for lv in levels if lv[0] > 1] or [(1, 0)]
    levels += [(1, 0)] * (3 - len(levels))
    top_run, top_n, top_s = _limits()
    if run > top_run or any(n > top_n or s > top_s for n, s in levels):
        return "a run, count or stride beyond the SE's fields"
    (n1, s1), (n2, s2), (n3, s3) = levels
    return off, (run, n1, s1, n2, s2, n3, s3)


def dense_offset(src: Source, win: Window, h: int, w: int, c: int, word: int = WORD) -> int | None:
    """Byte offset of the window when it is a dense part of the source (read in place with the source's
    strides: whole blocked16 planes, whole pixels, stride-1 rows and columns), else None."""
    if win.swap or win.cs != 1 or win.sy != 1 or win.sx != 1 or required_layout(h, w, c) != src.layout:
        return None
    if src.layout == "blocked16" and win.c0 % src.block or src.layout == "image" and c != src.c:
        return None
    off = src.addr(win.c0, win.y0, win.x0)
    return None if off % word else off


# ------------------------------------------------------------------ boxes of the operators

def _role(rank: int, axis: int) -> str:
    """Which of n, c, y, x an ONNX axis is for a map of this rank (ir.hwc)."""
    return {4: "ncyx", 3: "ncx", 2: "nc", 1: "c"}.get(rank, "")[axis] if 0 <= axis < rank <= 4 else "?"


def _box_window(whole: str, rank: int, starts: dict[int, tuple[int, int]]) -> Window:
    kw = {}
    for axis, (start, step) in starts.items():
        role = _role(rank, axis)
        if role == "c":
            kw.update(c0=start, cs=step)
        elif role == "y":
            kw.update(y0=start, sy=step)
        elif role == "x":
            kw.update(x0=start, sx=step)
    return Window(whole, **kw)


def _const_ints(g: Graph, n: Node, i: int):
    if len(n.inputs) <= i or not n.inputs[i]:
        return None
    t = n.inputs[i]
    return [int(v) for v in np.asarray(g.consts[t]).reshape(-1)] if t in g.consts else False


def slice_windows(g: Graph, n: Node):
    """([(output, Window)], "") of a Slice or Split, or (None, reason)."""
    x = n.inputs[0]
    shape = g.shapes[x]
    rank = len(shape)
    if n.op == "Split":
        axis = int(n.attrs.get("axis", 0)) % max(rank, 1)
        if _role(rank, axis) in ("n", "?"):
            return None, f"a split along axis {axis} (the NPU addresses channels, rows and columns)"
        out, at = [], 0
        for o in n.outputs:
            if o:
                out.append((o, _box_window(x, rank, {axis: (at, 1)})))
            at += g.shapes[o][axis] if o else 0
        return out, ""
    if "starts" in n.attrs:  # opset 1-9: attributes
        starts, ends = list(n.attrs["starts"]), list(n.attrs["ends"])
        axes, steps = list(n.attrs.get("axes", range(len(starts)))), [1] * len(starts)
    else:
        starts, ends, axes, steps = (_const_ints(g, n, i) for i in (1, 2, 3, 4))
        if starts is False or ends is False or axes is False or steps is False or starts is None:
            return None, "computed starts, ends, axes or steps"
        axes = list(range(len(starts))) if axes is None else axes
        steps = [1] * len(starts) if steps is None else steps
    box = {}
    for a, s, e, st in zip(axes, starts, ends, steps):
        a %= rank
        if st <= 0:
            return None, f"step {st} on axis {a} (the SE's strides run forward)"
        first, _, _ = slice(s, e, st).indices(shape[a])
        if _role(rank, a) == "n" and g.shapes[n.outputs[0]][a] == shape[a]:
            continue
        if _role(rank, a) in ("n", "?"):
            return None, f"a slice along axis {a} (the NPU addresses channels, rows and columns)"
        box[a] = (first, st)
    return [(n.outputs[0], _box_window(x, rank, box))], ""


def transpose_window(g: Graph, n: Node):
    """([(output, Window)], "") of a Transpose exchanging rows and columns of a [1, C, H, W] map."""
    shape = g.shapes[n.inputs[0]]
    perm = [int(p) for p in n.attrs.get("perm", reversed(range(len(shape))))]
    if len(shape) == 4 and perm == [0, 1, 3, 2]:
        return [(n.outputs[0], Window(n.inputs[0], swap=True))], ""
    return None, f"perm {perm} moves channels or the batch (the SE exchanges only rows and columns of a map)"


def moves_nothing(g: Graph, n: Node) -> bool:
    """A Transpose that keeps the order of every axis longer than 1 (a reshape: maybe an alias)."""
    shape = g.shapes[n.inputs[0]]
    perm = [int(p) for p in n.attrs.get("perm", reversed(range(len(shape))))]
    kept = [p for p in perm if shape[p] != 1]
    return kept == sorted(kept)


def same_stream(g: Graph, n: Node, x: str, out: str) -> bool:
    """A reshape between maps of one layout and channel count with H x W kept: the dense stream of `x` is
    that of `out` ([planes][H*W pixels]), so an ARITH copy reading `x` by lines writes `out` (the
    line padding of the two buffers differs)."""
    from . import legality
    from .memplan import storage_layout

    if not (g.is_map(x) and g.is_map(out)) or x in g.float_islands or out in g.float_islands:
        return False
    (h, w, c), (h2, w2, c2) = hwc(g.shapes[x]), hwc(g.shapes[out])
    lay = storage_layout(g, x)
    return (lay == storage_layout(g, out) != "linear" and c == c2 and h * w == h2 * w2
            and not legality.batch1_maps(g, n) and not legality.map_fits_units(g, n))


def _d2s_phases(g: Graph, n: Node):
    """[(read Window of the input, row phase i, column phase j)] of a DepthToSpace (DCR or CRD)."""
    b = int(n.attrs["blocksize"])
    c = g.shapes[n.outputs[0]][1]
    crd = n.attrs.get("mode", "DCR") == "CRD"
    x = n.inputs[0]
    return [(Window(x, c0=i * b + j, cs=b * b) if crd else Window(x, c0=(i * b + j) * c), i, j)
            for i in range(b) for j in range(b)]


def _s2d_parts(g: Graph, n: Node):
    b = int(n.attrs["blocksize"])
    return [Window(n.inputs[0], y0=i, x0=j, sy=b, sx=b) for i in range(b) for j in range(b)]


# ------------------------------------------------------------------ channel gathers on the CA

def channel_indices(g: Graph, shape, win: Window) -> list[int] | None:
    """The source channels of a window that takes every pixel of its map (a channel-only box), else None."""
    h, w, c = hwc(shape)
    if win.swap or win.y0 or win.x0 or win.sy != 1 or win.sx != 1 or hwc(g.shapes[win.whole])[:2] != (h, w):
        return None
    return [win.c0 + k * win.cs for k in range(c)]


def gather_step(g: Graph, x: str, out: str, idx: list[int]) -> Step:
    """A 1x1 CONV whose weights select channel idx[k] for output k (a 0/1 matrix, weight scale 1: every
    value passes unchanged in int8 and float), for channel boxes the stream engine cannot walk."""
    ic, oc = hwc(g.shapes[x])[2], len(idx)
    w = np.zeros((oc, 1, 1, ic), np.float32)
    w[np.arange(oc), 0, 0, idx] = 1.0
    return Step("CONV", out, dict(weights=w, bias=np.zeros(oc, np.float32), kh=1, kw=1, sh=1, sw=1, dh=1, dw=1,
                                  pads=(0, 0, 0, 0), groups=1, act="none", act_range=None, w_scale=np.ones(oc),
                                  gather=True))


def gather_indices(g: Graph, n: Node) -> tuple[list[int] | None, str]:
    """(channel indices, "") of a Gather the CA can run (constant 1-D indices on axis 1 of a map), else
    (None, reason)."""
    rank = len(g.shapes[n.inputs[0]])
    axis = int(n.attrs.get("axis", 0)) % max(rank, 1)
    if rank < 2 or axis != 1:
        return None, f"a gather along axis {axis} (the CA gathers channels)"
    if n.inputs[1] not in g.consts or np.asarray(g.consts[n.inputs[1]]).ndim != 1:
        return None, "indices that are computed or not 1-D"
    c = g.shapes[n.inputs[0]][1]
    idx = [int(v) % c for v in np.asarray(g.consts[n.inputs[1]]).reshape(-1)]
    return idx, ""


def rewrite_channel_shuffle(g: Graph) -> None:
    """Reshape [1, C, H, W] -> [1, G, C/G, H, W], Transpose [0, 2, 1, 3, 4], Reshape back (ShuffleNet's
    channel shuffle) -> Gather of the shuffled channels (a CA channel gather), when the NPU runs it."""
    from . import legality

    for r1 in [n for n in g.nodes if n.op == "Reshape"]:
        x, a = r1.inputs[0], r1.outputs[0]
        s0, s1 = g.shapes.get(x, ()), g.shapes.get(a, ())
        if len(s0) != 4 or len(s1) != 5 or s1[0] != 1 or (s1[1] * s1[2], s1[3], s1[4]) != tuple(s0[1:]):
            continue
        tr = g.consumers(a)
        if len(tr) != 1 or tr[0].op != "Transpose" or [int(p) for p in tr[0].attrs.get("perm", [])] != [0, 2, 1, 3, 4]:
            continue
        r2 = g.consumers(tr[0].outputs[0])
        if a in g.outputs or tr[0].outputs[0] in g.outputs or len(r2) != 1 or r2[0].op not in ("Reshape", "Flatten") \
                or tuple(g.shapes[r2[0].outputs[0]]) != tuple(s0) or a in g.qdq or tr[0].outputs[0] in g.qdq:
            continue
        groups, per = s1[1], s1[2]
        idx = np.array([j * per + i for i in range(per) for j in range(groups)], np.int64)
        name = f"{r2[0].name}::shuffle"
        g.consts[name], g.shapes[name], g.dtypes[name] = idx, (len(idx),), "int64"
        node = Node(r2[0].name, "Gather", [x, name], list(r2[0].outputs), {"axis": 1, "_fused": [r1.name, tr[0].name]})
        if not legality.decide(g, node).npu:
            del g.consts[name], g.shapes[name], g.dtypes[name]
            continue
        g.nodes[g.nodes.index(r2[0])] = node
        g.nodes.remove(tr[0])
        g.nodes.remove(r1)


# ------------------------------------------------------------------ legality (called by legality.py)

def window_problem(g: Graph, shape, win: Window) -> str | None:
    """Why neither a read SE gives the window (of ONNX shape `shape`) as a dense stream nor a channel
    gather on the CA computes it, or None."""
    h, w, c = hwc(shape)
    got = pattern(nominal_source(g, win.whole), win, h, w, c)
    if not isinstance(got, str) or channel_indices(g, shape, win) is not None:
        return None
    return got


def write_problem(g: Graph, shape, whole: str, y0: int, x0: int) -> str | None:
    """Why a part of ONNX shape `shape` cannot be written into map `whole` from row y0, column x0 (a
    strided write SE, pixel by pixel), or None."""
    from .memplan import storage_layout

    lp, lw = required_layout(*hwc(shape)), storage_layout(g, whole)
    if lp != lw:
        return f"a {lp} part of a {lw} map (the write SE keeps the pixel format)"
    if lw == "linear":
        return "a part of a 1 x 1 map"
    off = nominal_source(g, whole).addr(0, y0, x0)
    if off % WORD:
        return f"a part starting {off % WORD} B off the {WORD} B bus-word grid"
    return None


def spatial_concat_problem(g: Graph, n: Node) -> str | None:
    rank = len(g.shapes[n.outputs[0]])
    axis = int(n.attrs.get("axis", 1)) % rank
    role = _role(rank, axis)
    if role not in ("y", "x"):
        return f"axis {axis} (the NPU concatenates channels, rows and columns)"
    at = 0
    for t in n.inputs:
        why = write_problem(g, g.shapes[t], n.outputs[0], at if role == "y" else 0, at if role == "x" else 0)
        if why:
            return why
        at += g.shapes[t][axis]
    return None


def op_problem(g: Graph, n: Node) -> str | None:
    """Why the NPU cannot run this Slice / Split / Transpose / DepthToSpace / SpaceToDepth by addressing."""
    if len({g.qdq.get(t) for t in n.outputs if t}) > 1:
        return "its outputs have different scales in the quantized model (a copy keeps the scale)"
    if n.op in ("Slice", "Split", "Transpose"):
        wins, why = (transpose_window if n.op == "Transpose" else slice_windows)(g, n)
        if wins is None:
            return why
        for t, win in wins:
            why = window_problem(g, g.shapes[t], win)
            if why:
                return why
        return None
    y = n.outputs[0]
    if n.op == "DepthToSpace":
        _, _, h, w = g.shapes[n.inputs[0]]
        phase = (1, g.shapes[y][1], h, w)
        for win, i, j in _d2s_phases(g, n):
            why = window_problem(g, phase, win) or write_problem(g, phase, y, i, j)
            if why:
                return why
        return None
    # SpaceToDepth: parts written into whole channel planes of the output
    c = g.shapes[n.inputs[0]][1]
    b = int(n.attrs["blocksize"])
    if required_layout(*hwc(g.shapes[y])) != "blocked16" or c % block_size() or hwc(g.shapes[y])[:2] == (1, 1):
        return f"{c} channels per phase are not whole {block_size()}-channel planes of the output"
    for win in _s2d_parts(g, n):
        got = pattern(nominal_source(g, win.whole), win, *hwc(g.shapes[y])[:2], c)
        if isinstance(got, str):
            return got
    return None if b > 0 else "blocksize < 1"


# ------------------------------------------------------------------ lowering (called by passes.py)

def _copy(name: str, names: list[str], src: str, out: str) -> Layer:
    return Layer(name, names, src, [Step("ARITH", out, dict(op="copy"))])


def _read(g: Graph, n: Node, names: list[str], win: Window, out: str, shape) -> Layer:
    """A layer computing `out` from the window: an ARITH copy through a read window, or a channel gather."""
    h, w, c = hwc(shape)
    if isinstance(pattern(nominal_source(g, win.whole), win, h, w, c), str):
        return Layer(n.name, names, win.whole, [gather_step(g, win.whole, out, channel_indices(g, shape, win))])
    src = _window_tensor(g, f"{out}::window", shape, g.dtype(out), win)
    return _copy(n.name, names, src, out)


def _window_tensor(g: Graph, t: str, shape, dtype: str, win: Window) -> str:
    g.shapes[t], g.dtypes[t] = tuple(shape), dtype
    g.windows[t] = win
    return t


def lower(g: Graph, n: Node, names: list[str], alias: dict) -> tuple[list[Layer], list[Concat]]:
    """Layers (copies) and concats of a node the mapping table put on the NPU by addressing; a box that
    is a dense part of its source becomes a view (no layer) unless it is a graph output."""
    x = alias.get(n.inputs[0], n.inputs[0])
    layers: list[Layer] = []
    if n.op in ("Slice", "Split", "Transpose"):
        wins, _ = (transpose_window if n.op == "Transpose" else slice_windows)(g, n)
        for t, win in wins:
            win = Window(x, win.c0, win.y0, win.x0, win.cs, win.sy, win.sx, win.swap)
            h, w, c = hwc(g.shapes[t])
            if t not in g.outputs and dense_offset(nominal_source(g, x), win, h, w, c) is not None:
                g.windows[t] = win  # a view: consumers read it in place
                continue
            layers.append(_read(g, n, names, win, t, g.shapes[t]))
        return layers, []
    y = n.outputs[0]
    if n.op == "Gather":
        return [Layer(n.name, names, x, [gather_step(g, x, y, gather_indices(g, n)[0])])], []
    if n.op == "DepthToSpace":
        _, _, h, w = g.shapes[x]
        c = g.shapes[y][1]
        b = int(n.attrs["blocksize"])
        for k, (win, i, j) in enumerate(_d2s_phases(g, n)):
            ph = f"{y}::phase{k}"
            g.shapes[ph], g.dtypes[ph] = (1, c, h, w), g.dtype(y)
            g.strided[ph] = (y, i, j, b, b)
            layers.append(_read(g, n, names, Window(x, win.c0, cs=win.cs), ph, (1, c, h, w)))
        return layers, []
    # SpaceToDepth: strided reads into parts, the parts concatenated on channel planes
    c = g.shapes[x][1]
    _, _, oh, ow = g.shapes[y]
    parts = []
    for k, win in enumerate(_s2d_parts(g, n)):
        win = Window(x, y0=win.y0, x0=win.x0, sy=win.sy, sx=win.sx)
        src = _window_tensor(g, f"{y}::s2d{k}::window", (1, c, oh, ow), g.dtype(y), win)
        part = f"{y}::s2d{k}"
        g.shapes[part], g.dtypes[part] = (1, c, oh, ow), g.dtype(y)
        layers.append(_copy(n.name, names, src, part))
        parts.append(part)
    cat = Concat(n.name, parts, y)
    layers.append(Layer(n.name, names, parts[0], [], kind="concat"))
    return layers, [cat]


def resolve_spatial(c: Concat, g: Graph, layers: list[Layer]) -> list[Layer]:
    """Layers writing a row/column concat's parts into the output by strided write SEs: a part an NPU
    layer produces for the concat alone is written there directly, any other part is copied there."""
    rank = len(g.shapes[c.out])
    role = _role(rank, c.axis)
    npu_made = {t for L in layers if L.kind == "npu" for t in L.writes()}
    readers = {t for L in layers if L.kind != "concat" for t in L.reads()} | {w.whole for w in g.windows.values()}
    out, at = [], 0
    for i, p in enumerate(c.parts):
        y0, x0 = (at, 0) if role == "y" else (0, at)
        at += g.shapes[p][c.axis]
        direct = (p in npu_made and p not in readers and p not in g.outputs and p not in g.strided
                  and p not in g.windows and sum(p == q for q in c.parts) == 1)
        if direct:
            g.strided[p] = (c.out, y0, x0, 1, 1)
            continue
        tgt = f"{c.out}::part{i}"
        g.shapes[tgt], g.dtypes[tgt] = g.shapes[p], g.dtype(c.out)
        g.strided[tgt] = (c.out, y0, x0, 1, 1)
        out.append(_copy(c.name, [c.name], p, tgt))
    return out
