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

Over 500 lines: one recipe family, the seven operators placed by stream-engine addressing share the
box and part helpers here.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...program.layouts import block_size, required_layout
from ...program.spec import load_isa
from ..checks import MAP, batch1_maps, map_fits_units, rank4_maps
from ..estimates import arith_cycles, epoch_cycles, host_faster, stored
from ..ir import Concat, Graph, Layer, Node, Step, Window, hwc
from ..recipe import Recipe
from ..storage import storage_layout
from ..streams import dense_offset, nominal_source, pattern, window_problem, write_problem
from . import permute
from .moveconv import GatherPlan, gather_layers, shift_estimate, shift_layer, shift_plan
from .permute import choose


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
    if "_source" in n.attrs:
        return None, "a folded Reshape - Transpose - Reshape chain (not one box)"
    if len(shape) == 4 and perm == [0, 1, 3, 2]:
        return [(n.outputs[0], Window(n.inputs[0], swap=True))], ""
    return None, f"perm {perm} moves channels or the batch (the SE exchanges only rows and columns of a map)"


def moves_nothing(g: Graph, n: Node) -> bool:
    """A Transpose that keeps the order of every axis longer than 1 (a reshape: maybe an alias)."""
    if "_source" in n.attrs:  # a folded permutation chain (rewrites/shuffle_chains.py)
        return False
    shape = g.shapes[n.inputs[0]]
    perm = [int(p) for p in n.attrs.get("perm", reversed(range(len(shape))))]
    kept = [p for p in perm if shape[p] != 1]
    return kept == sorted(kept)


def same_stream(g: Graph, n: Node, x: str, out: str) -> bool:
    """A reshape between maps of one layout and channel count with H x W kept: the dense stream of `x` is
    that of `out` ([planes][H*W pixels]), so an ARITH copy reading `x` by lines writes `out` (the
    line padding of the two buffers differs)."""

    if not (g.is_map(x) and g.is_map(out)) or x in g.float_islands or out in g.float_islands:
        return False
    (h, w, c), (h2, w2, c2) = hwc(g.shapes[x]), hwc(g.shapes[out])
    lay = storage_layout(g, x)
    return (lay == storage_layout(g, out) != "linear" and c == c2 and h * w == h2 * w2
            and not batch1_maps(g, n) and not map_fits_units(g, n))


def _d2s_phases(g: Graph, n: Node):
    """[(read Window of the input, row phase i, column phase j)] of a DepthToSpace (DCR or CRD)."""
    b = int(n.attrs["blocksize"])
    c = g.shapes[n.outputs[0]][1]
    crd = n.attrs.get("mode", "DCR") == "CRD"
    x = n.inputs[0]
    return [(Window(x, c0=i * b + j, cs=b * b) if crd else Window(x, c0=(i * b + j) * c), i, j)
            for i in range(b) for j in range(b)]


def pad_amounts(g: Graph, n: Node) -> tuple[tuple[int, int, int, int] | None, str]:
    """((top, left, bottom, right), "") of an edge/reflect Pad of a map's rows and columns, else (None, why)."""
    mode = n.attrs.get("mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("edge", "reflect"):
        return None, f"mode {mode} (zero pads fold into a following Conv; edge and reflect are copied)"
    shape = g.shapes[n.inputs[0]]
    rank = len(shape)
    pads = n.attrs.get("pads") if "pads" in n.attrs else _const_ints(g, n, 1)
    axes = _const_ints(g, n, 3)
    if pads is None or pads is False or axes is False:
        return None, "computed pads or axes"
    axes = list(range(rank)) if axes is None else [a % rank for a in axes]
    if len(pads) != 2 * len(axes) or rank not in (3, 4):
        return None, f"pads {list(pads)} of a rank-{rank} tensor (the NPU pads the rows and columns of a map)"
    begin, end = dict(zip(axes, pads[:len(axes)])), dict(zip(axes, pads[len(axes):]))
    if any(begin.get(a, 0) or end.get(a, 0) for a in (0, 1)):
        return None, "pads on the batch or channel axis"
    if min(pads) < 0:
        return None, "negative pads (a crop)"
    ya, xa = (2, 3) if rank == 4 else (None, 2)
    t, b = (begin.get(ya, 0), end.get(ya, 0)) if ya else (0, 0)
    amounts = (t, begin.get(xa, 0), b, end.get(xa, 0))
    h, w, _ = hwc(shape)
    if mode == "reflect" and (max(t, b) > h - 1 or max(amounts[1], amounts[3]) > w - 1):
        return None, "reflect pads longer than the map side - 1"
    return amounts, ""


def pad_pieces(g: Graph, n: Node):
    """[(read Window of the output | None for the input, (first row, first column) written, shape)]: the
    input into the interior, then the border rows (top, bottom) and, over every row, the border columns,
    each copied from rows and columns already written (edge: one stride-0 read per side; reflect: one
    copy per row or column)."""
    (t, left, b, r), _ = pad_amounts(g, n)
    y = n.outputs[0]
    h, w, c = hwc(g.shapes[n.inputs[0]])
    oh = h + t + b
    edge = n.attrs.get("mode") in ("edge", b"edge")
    out = [(None, (t, left), (1, c, h, w))]
    for side, count in (("top", t), ("bottom", b)):
        if not count:
            continue
        inner = t if side == "top" else t + h - 1
        first = 0 if side == "top" else t + h
        if edge:
            out.append((Window(y, y0=inner, x0=left, sy=0), (first, left), (1, c, count, w)))
            continue
        for k in range(count):
            src, dst = (t + 1 + k, t - 1 - k) if side == "top" else (t + h - 2 - k, t + h + k)
            out.append((Window(y, y0=src, x0=left), (dst, left), (1, c, 1, w)))
    for side, count in (("left", left), ("right", r)):
        if not count:
            continue
        inner = left if side == "left" else left + w - 1
        first = 0 if side == "left" else left + w
        if edge:
            out.append((Window(y, x0=inner, sx=0), (0, first), (1, c, oh, count)))
            continue
        for k in range(count):
            src, dst = (left + 1 + k, left - 1 - k) if side == "left" else (left + w - 2 - k, left + w + k)
            out.append((Window(y, x0=src), (0, dst), (1, c, oh, 1)))
    return out


def _s2d_parts(g: Graph, n: Node):
    b = int(n.attrs["blocksize"])
    return [Window(n.inputs[0], y0=i, x0=j, sy=b, sx=b) for i in range(b) for j in range(b)]


# ------------------------------------------------------------------ legality (called by legality.py)


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


def _permuted(g: Graph, n: Node, why: str) -> str | None:
    """None when the node, which no single box walks (`why`), runs as an element permutation
    (compiler/recipes/permute.py: pattern pairs, cheaper than the host), else both reasons."""

    best, why2 = choose(g, n)
    return None if best is not None else f"{why}; as an element permutation: {why2}"


def part_plans(g: Graph, n: Node, x: str | None = None):
    """([(output, Window, shift plan or None)], "") of a Slice or Split read from map `x` (default: its
    input): None where a copy's read SE walks the box, a moveconv shift plan where only a grid-aligned
    cover can be read; or (None, reason)."""

    wins, why = slice_windows(g, n)
    if wins is None:
        return None, why
    out = []
    for t, win in wins:
        win = replace(win, whole=x or win.whole)
        shape = hwc(g.shapes[t])
        why = window_problem(g, g.shapes[t], win)
        plan = None
        if why:
            plan = shift_plan(nominal_source(g, win.whole), win, *shape, g.profile, g.compile_dtype)
            if isinstance(plan, str):
                return None, f"{why}; shifted by a CONV: {plan}"
        out.append((t, win, plan))
    return out, ""


def _slice_problem(g: Graph, n: Node) -> str | None:
    """Why a Slice or Split cannot run by addressing (copies, views and moveconv shifts), or None; with a
    shift, the estimate of its epochs against the host's copy (moveconv.host_faster)."""

    parts, why = part_plans(g, n)
    if parts is None:
        return why
    if g.profile is None or all(plan is None for _, _, plan in parts):
        return None
    npu = 0.0
    for t, win, plan in parts:
        h, w, c = hwc(g.shapes[t])
        if plan is not None:
            npu += shift_estimate(g.profile, g.compile_dtype, plan, h, w)
        elif t in g.outputs or dense_offset(nominal_source(g, win.whole), win, h, w, c) is None:
            npu += epoch_cycles(g.profile, ("ARITH",), 2, arith_cycles(g.profile, h * w * c), 2 * h * w * stored(c),
                                load_isa().dtype_bytes(g.compile_dtype))
    return host_faster(g, n, npu, "for its copies and shifting CONVs")


def op_problem(g: Graph, n: Node) -> str | None:
    """Why the NPU cannot run this Slice / Split / Transpose / DepthToSpace / SpaceToDepth by addressing."""
    if len({g.qdq.get(t) for t in n.outputs if t}) > 1:
        return "its outputs have different scales in the quantized model (a copy keeps the scale)"
    if n.op == "Transpose":
        wins, why = transpose_window(g, n)
        for t, win in wins or []:
            why = why or window_problem(g, g.shapes[t], win)
        return _permuted(g, n, why) if why else None
    if n.op in ("Slice", "Split"):
        return _slice_problem(g, n)
    y = n.outputs[0]
    if n.op == "Pad":
        amounts, why = pad_amounts(g, n)
        if amounts is None:
            return why
        for win, (r0, c0), shape in pad_pieces(g, n):
            why = write_problem(g, shape, y, r0, c0) or (win is not None and window_problem(g, shape, win))
            if why:
                return why
        return None
    if n.op == "DepthToSpace":
        _, _, h, w = g.shapes[n.inputs[0]]
        phase = (1, g.shapes[y][1], h, w)
        for win, i, j in _d2s_phases(g, n):
            why = window_problem(g, phase, win) or write_problem(g, phase, y, i, j)
            if why:
                return _permuted(g, n, why)
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
    """An ARITH copy of the window into `out`."""
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
    best = n.attrs.get("_permute", (None, ""))[0]
    if best is not None:  # an element permutation (compiler/recipes/permute.py)

        if isinstance(best, GatherPlan):  # channels gathered by one-hot CONVs, per pixel phase
            return gather_layers(g, n, names, x, best), []
        return permute.lower(g, n, names, x, best), []
    if n.op in ("Slice", "Split"):

        for t, win, plan in part_plans(g, n, x)[0]:
            h, w, c = hwc(g.shapes[t])
            if plan is not None:  # off the grid or the blocks: a grid-aligned cover, moved by a CONV
                layers.append(shift_layer(g, n, names, plan, t))
            elif t not in g.outputs and dense_offset(nominal_source(g, x), win, h, w, c) is not None:
                g.windows[t] = win  # a view: consumers read it in place
            else:
                layers.append(_read(g, n, names, win, t, g.shapes[t]))
        return layers, []
    if n.op == "Transpose":
        for t, win in transpose_window(g, n)[0]:
            layers.append(_read(g, n, names, replace(win, whole=x), t, g.shapes[t]))
        return layers, []
    y = n.outputs[0]
    if n.op == "Pad":
        for k, (win, (r0, c0), shape) in enumerate(pad_pieces(g, n)):
            part = f"{y}::pad{k}"
            g.shapes[part], g.dtypes[part] = tuple(shape), g.dtype(y)
            g.strided[part] = (y, r0, c0, 1, 1)
            src = x if win is None else _window_tensor(g, f"{part}::window", shape, g.dtype(y), win)
            layers.append(_copy(n.name, names, src, part))
        return layers, []
    if n.op == "DepthToSpace":
        _, _, h, w = g.shapes[x]
        c = g.shapes[y][1]
        b = int(n.attrs["blocksize"])
        for k, (win, i, j) in enumerate(_d2s_phases(g, n)):
            ph = f"{y}::phase{k}"
            g.shapes[ph], g.dtypes[ph] = (1, c, h, w), g.dtype(y)
            g.strided[ph] = (y, i, j, b, b)
            layers.append(_read(g, n, names, replace(win, whole=x), ph, (1, c, h, w)))
        return layers, []
    # SpaceToDepth: strided reads into parts, the parts concatenated on channel planes
    c = g.shapes[x][1]
    _, _, oh, ow = g.shapes[y]
    parts = []
    for k, win in enumerate(_s2d_parts(g, n)):
        win = replace(win, whole=x)
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


def concat_resolvable(g: Graph, n: Node):
    """computed maps concatenated on channels (parts on 16-channel blocks written in place, others by a
    chain of ARITH concats) or on rows or columns (each part's first pixel on the bus-word grid, in the
    output's layout)"""
    rank = len(g.shapes[n.outputs[0]])
    if any(t in g.consts for t in n.inputs):
        return "a constant part"
    if rank < 2 or int(n.attrs.get("axis", 1)) % rank != 1:
        return spatial_concat_problem(g, n)
    return None


def addressed_box(g: Graph, n: Node):
    """constant forward steps over channels, rows and columns; channels that are whole 16-channel pixels
    (a box starting on a block) or lie in one block or image pixel; the first element on the bus-word grid;
    else (Slice, Split) a grid-aligned cover shifted into place by a one-hot CONV, where estimated faster
    than the host"""
    return op_problem(g, n)


def transpose_rows_columns(g: Graph, n: Node):
    """perm [0, 1, 3, 2] of a [1, C, H, W] map (only axes of length 1 moving: an alias); any other perm between
    maps as an element permutation (stream-engine pattern pairs, or a one-hot CONV gathering channels per
    pixel phase) when the cost model finds it cheaper than the host's copy"""
    return op_problem(g, n)


def depth_to_space_box(g: Graph, n: Node):
    """each phase's channels readable as a box (DCR: C' channels from a 16-channel block or in one block;
    CRD: a channel step within one block) and written from its first row and column on the bus-word grid;
    else an element permutation cheaper than the host's copy (stream-engine pattern pairs, or one-hot CONVs
    gathering each phase's channels, compiler/recipes/moveconv.py)"""
    return op_problem(g, n)


def space_to_depth_planes(g: Graph, n: Node):
    """each phase's C channels are whole 16-channel planes of a blocked16 output"""
    return op_problem(g, n)


def pad_border(g: Graph, n: Node):
    """edge or reflect, constant pads of the rows and columns of a map; every row and column copied starts on
    the bus-word grid"""
    return op_problem(g, n)


def _lower(ctx, n: Node, x: str) -> list[Layer]:
    layers, concats = lower(ctx.g, n, ctx.names, ctx.alias)
    ctx.concats.extend(concats)
    return layers


def _lower_concat(ctx, n: Node, x: str) -> list[Layer]:
    """A Concat is placed by the memory plan (parts written into its planes, rows or columns) or resolved
    into ARITH concats after the passes (memplan.resolve_concats); here it is noted."""
    g = ctx.g
    ctx.concats.append(Concat(n.name, [ctx.source(t) for t in n.inputs], n.outputs[0],
                              int(n.attrs.get("axis", 1)) % max(len(g.shapes[n.outputs[0]]), 1)))
    return [Layer(n.name, ctx.names, ctx.concats[-1].parts[0], [], kind="concat")]


RECIPES = [
    Recipe("Concat", "addressing (parts written into the planes, rows or columns) or ARITH concats",
           MAP + (concat_resolvable,), _lower_concat),
    Recipe("Slice", "addressing: a view in place, or an ARITH copy whose read SE walks the box, or a CONV "
                    "shifting it from a grid-aligned cover (compiler/recipes/moveconv.py)", MAP + (addressed_box,), _lower),
    Recipe("Split", "addressing: per part a view in place, or an ARITH copy whose read SE walks it, or a CONV "
                    "shifting it from a grid-aligned cover (compiler/recipes/moveconv.py)", MAP + (addressed_box,), _lower),
    Recipe("Transpose", "ARITH copy whose read SE walks columns as rows; channels moved: ARITH copies between "
                        "stream-engine pattern pairs (compiler/recipes/permute.py) or one-hot CONVs gathering channels "
                        "(compiler/recipes/moveconv.py)", MAP + (transpose_rows_columns,), _lower, costed=True),
    Recipe("DepthToSpace", "ARITH copy per phase: its channels read as a box, every b-th pixel written; else "
                           "one-hot CONVs gathering each phase's channels (compiler/recipes/moveconv.py) or copies "
                           "between stream-engine pattern pairs", MAP + (rank4_maps, depth_to_space_box), _lower,
           costed=True),
    Recipe("Pad", "ARITH copies: the map into the interior, then border rows and columns from written ones "
                  "(edge: a stride-0 read per side; reflect: a copy per row or column)", MAP + (pad_border,), _lower),
    Recipe("SpaceToDepth", "ARITH copy per phase: every b-th pixel read, written into channel planes",
           MAP + (rank4_maps, space_to_depth_planes), _lower),
]
