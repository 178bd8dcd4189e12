"""Element permutations of maps by stream-engine pattern pairs: Transposes that move channels, ShuffleNet's
channel shuffle (Reshape - Transpose - Reshape), DepthToSpace CRD across 16-channel blocks.

What the operator does is taken from the operator itself: applied to the indices of its input, it gives
for every output element the input element it copies (`source_index`). Every element's place in memory is
an integer vector (element, line, plane): byte address = element x esize + line x line stride + plane x
plane stride (blocked16: element = x * 16 + channel % 16, plane = channel // 16; image: element = x * C +
channel; linear, dense ONNX order: element = flat index). The copy is a set of *pieces*, each one ARITH
copy (y = a) between a read SE and a write SE walking the same elements in the same order: a box of
the stream order over which both sides' vectors are affine, each side then `run` + three loop levels
after merging loops that continue each other (vector equality: the same in every memory plan). The
stream order is one side's storage order with its 16 lanes split (lanes innermost ... outermost); a
sub-box that is not one piece is cut along its outermost axis, down to single runs. Two plans are
costed: direct (input map to output map, in one side's order, or the output's first planes in its order
and the rest in the input's) and through a linear tensor in ONNX order (the input copied to ONNX order,
then the permutation read from it), pieces packed four to an epoch (ARITH units); a blocked16 output
with a partial last plane first gets its padding lanes (the input's last plane of the same padding, or an
ARITH copy of the output's shape, which writes zeros there), a linear output with places no input element
fills (src_of -1: a padded copy) is written whole first; the
NPU takes the cheaper one when it beats the host's copy (the profile's [host] cost model), else the
node stays on the CPU with both figures in its reason. A permutation that gathers channels per pixel phase
(moveconv.GatherPlan: one-hot CONVs) is a third plan, weighed with the others. Layout contract:
isa/README.md "Addressing" and "Moving CONVs".

Over 500 lines: one recipe family, the element-permutation planner (vectors, pieces, passes, their
cost) whose helpers only it uses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...hw import load_profile
from ...cpu.cost import host_cycles as host_op_cycles
from ...memory.cost import pattern_cost
from ...memory.pattern import AccessPattern
from ...program.layouts import block_size
from ...program.spec import load_isa
from ..ir import Gather, Graph, Layer, Node, Step, hwc
from ..storage import activation_pools, storage_layout
from .moveconv import gather_plan

WORD = 8  # the n657's bus word: a piece's first byte on each side lies on this grid (the SE ignores low base bits)
MAX_PIECES = 64  # pieces of one plan (beyond it the host copy is cheaper on any profile: an epoch each)
MAX_ELEMENTS = 1 << 21  # elements of a permuted map this planner looks at (bounds its index arrays)
PER_EPOCH = 4  # pieces per epoch: one ARITH unit each (units.arith_units on the n657)
NOMINAL_LINE = 128  # line alignment of the nominal plan the cost is estimated on


@dataclass(frozen=True)
class Side:
    """One side of a piece: the first element's vector, the run in elements and up to three loops
    (count, stride vector), innermost first."""
    start: tuple[int, int, int]
    run: int
    loops: tuple[tuple[int, tuple[int, int, int]], ...]


@dataclass(frozen=True)
class Piece:
    count: int  # elements
    read: Side
    write: Side


@dataclass(frozen=True)
class Plan:
    passes: tuple[tuple[Piece, ...], ...]  # direct: one pass; through ONNX order: two
    via_linear: bool
    cycles: float  # estimated NPU cycles
    pad: Piece | None = None  # the input's last plane copied first to the output's (its padding lanes)
    pad_shape: tuple | None = None  # pad's map shape when it is an ARITH copy zeroing y's padding lanes


def _vectors(shape, layout: str) -> np.ndarray:
    """(numel, 3) int64: the (element, line, plane) vector of each element of a tensor in ONNX order."""
    n = int(np.prod(shape, dtype=np.int64))
    flat = np.arange(n, dtype=np.int64)
    out = np.zeros((n, 3), np.int64)
    if layout == "linear":
        out[:, 0] = flat
        return out
    h, w, c = hwc(tuple(shape))
    ch, rest = np.divmod(flat, h * w)
    y, x = np.divmod(rest, w)
    if layout == "blocked16":
        blk = block_size()
        out[:, 0] = x * blk + ch % blk
        out[:, 2] = ch // blk
    else:
        out[:, 0] = x * c + ch
    out[:, 1] = y
    return out


def _orders(shape, layout: str):
    """Stream orders over one side's storage: [(index array of ONNX flat indices, -1 = padding lane)],
    lanes split into (outer, inner) for every inner width that divides the block."""
    return [_split(o) for o in _storage_orders(shape, layout)]


def _split(order: np.ndarray) -> np.ndarray:
    """`order` with every axis longer than a block and a multiple of it split into (n / 16, 16): the same
    stream, with a loop level where the other side's blocks begin (merged back when it continues)."""
    blk = block_size()
    dims = []
    for n in order.shape:
        dims += [n // blk, blk] if n > blk and n % blk == 0 else [n]
    return order.reshape(dims)


def _storage_orders(shape, layout: str):
    n = int(np.prod(shape, dtype=np.int64))
    if layout == "linear":
        return [np.arange(n, dtype=np.int64).reshape([d for d in shape if d > 1] or [n])]
    h, w, c = hwc(tuple(shape))
    if layout == "image":
        ch, y, x = np.meshgrid(np.arange(c), np.arange(h), np.arange(w), indexing="ij")
        flat = (ch * h + y) * w + x  # [c][h][w]
        return [flat.transpose(1, 2, 0), flat]  # channels innermost, channels outermost
    blk = block_size()
    planes = -(-c // blk)
    out = []
    for inner in (blk, 8, 4, 2, 1):
        if blk % inner:
            continue
        p, jh, y, x, jl = np.meshgrid(np.arange(planes), np.arange(blk // inner), np.arange(h), np.arange(w),
                                      np.arange(inner), indexing="ij")
        ch = p * blk + jh * inner + jl
        out.append(np.where(ch < c, (ch * h + y) * w + x, -1))
    return out


def _merge(loops: list[tuple[int, tuple]]) -> tuple[int, list]:
    """(run in elements, loops) after merging loops that continue the run or the loop inside them."""
    run, out = 1, []
    for n, s in loops:
        if not out and s == (run, 0, 0):
            run *= n
        elif out and s == tuple(out[-1][0] * v for v in out[-1][1]):
            out[-1] = (out[-1][0] * n, out[-1][1])
        else:
            out.append((n, s))
    return run, out


def _side(a: np.ndarray, esize: int) -> Side | None:
    """The Side walking vectors `a` (shape (*box, 3)), or None if no SE pattern does."""
    loops = []
    for ax in reversed(range(a.ndim - 1)):
        n = a.shape[ax]
        if n == 1:
            continue
        d = np.diff(a, axis=ax)
        s = d.reshape(-1, 3)[0]
        if not (d == s).all() or s[1] < 0 or s[2] < 0 or s[0] < 0 and not (s[1] or s[2]):
            return None
        loops.append((n, tuple(int(v) for v in s)))
    run, loops = _merge(loops)
    start = tuple(int(v) for v in a.reshape(-1, 3)[0])
    top = _limits()
    if len(loops) > 3 or run * esize > top[0] or any(n > top[1] for n, _ in loops) or start[0] * esize % WORD:
        return None
    return Side(start, run, tuple(loops))


def _limits():
    f = load_isa().command("SE")
    c = load_isa().command("ARITH")
    return f.field("run").mask, f.field("n1").mask, c.field("c").mask


def stream_shape(count: int) -> tuple[int, ...] | None:
    """The ONNX shape of a piece's stream as the ARITH copy sees it, dense in its layout: `count` elements
    of a linear vector (up to the unit's C field), else [1, 16, h, w] (blocked16, whole blocks) or
    [1, c <= 4, h, w] (image) within the H and W fields; None if no such shape holds `count`."""
    isa = load_isa()
    f = isa.command("ARITH")
    top_hw, top_c = f.field("h").mask, f.field("c").mask
    if count <= top_c:
        return (count,)
    for c in (block_size(), 4, 3, 2, 1):
        if count % c:
            continue
        m = count // c
        for w in range(min(top_hw, m), 0, -1):
            if m % w == 0:
                if m // w <= top_hw:
                    return (1, c, m // w, w)
                break
    return None


def _pieces(order: np.ndarray, src_of: np.ndarray, rvec: np.ndarray, wvec: np.ndarray, esize: int,
            to_write: bool) -> list[Piece] | None:
    """Cut the stream `order` (indices of the ordering side, -1 = none) into pieces, or None.
    to_write: `order` indexes the written tensor (read index = src_of[i]); else the read one (write
    index = src_of[i], the inverse). src_of -1: no element there (a written element left alone, a read
    one copied nowhere). A sub-box whose elements fill a smaller box is cropped to it."""
    valid = order >= 0
    safe = np.where(valid, order, 0)
    other = src_of[safe]
    valid &= other >= 0
    other = np.where(valid, other, 0)
    r = rvec[other] if to_write else rvec[safe]
    w = wvec[safe] if to_write else wvec[other]
    out: list[Piece] = []

    def crop(box: tuple) -> tuple | None:
        v = valid[box]
        if not v.any():
            return None
        lo_hi = []
        for ax in range(v.ndim):
            hit = np.flatnonzero(v.any(axis=tuple(a for a in range(v.ndim) if a != ax)))
            lo_hi.append((int(hit[0]), int(hit[-1]) + 1))
        inner = tuple(slice(b.start + lo, b.start + hi) for b, (lo, hi) in zip(box, lo_hi))
        return inner

    def segments(box: tuple, ax: int) -> list[tuple[int, int]]:
        """Maximal ranges of axis `ax` over which both sides step by one vector everywhere in the box."""
        lo, hi = box[ax].start, box[ax].stop
        if hi - lo < 3:
            return [(lo, hi)]
        d = np.concatenate([np.diff(r[box], axis=ax), np.diff(w[box], axis=ax)], axis=-1)
        change = (np.diff(d, axis=ax) != 0).any(axis=tuple(a for a in range(d.ndim) if a != ax))
        out, at = [], lo
        for c in [lo + 2 + int(i) for i in np.flatnonzero(change)] + [hi]:  # a change between steps i, i+1
            if c > at:
                out.append((at, c))
                at = c
        return out

    def cut(box: tuple) -> bool:
        box = crop(box)
        if box is None:
            return True
        v = valid[box]
        if v.all() and stream_shape(int(v.size)) is not None:
            rs, ws = _side(r[box], esize), _side(w[box], esize)
            if rs is not None and ws is not None:
                out.append(Piece(int(v.size), rs, ws))
                return len(out) <= MAX_PIECES
        axes = [a for a in range(order.ndim) if box[a].stop - box[a].start > 1]
        if not axes:
            return False
        for ax in axes:  # the outermost axis along which the box is not affine: cut into affine ranges
            parts = segments(box, ax) if v.all() else []
            if len(parts) > 1:
                break
        else:  # affine but too many loops (or holes, or too long): the outermost axis index by index
            ax = axes[0]
            parts = [(i, i + 1) for i in range(box[ax].start, box[ax].stop)]
        if len(parts) + len(out) > MAX_PIECES:
            return False
        return all(cut(box[:ax] + (slice(a, b),) + box[ax + 1:]) for a, b in parts)

    return out if cut(tuple(slice(0, n) for n in order.shape)) else None


def _interleave(a: list[Piece], b: list[Piece]) -> list[Piece]:
    """a and b alternated (pieces whose slow side is the read next to ones whose slow side is the write,
    so that an epoch loads both bus ports)."""
    out = []
    for k in range(max(len(a), len(b))):
        out += a[k:k + 1] + b[k:k + 1]
    return out


def _best_pass(src_of: np.ndarray, in_shape, in_layout: str, out_shape, out_layout: str, esize: int, cost):
    """(pieces, cycles) of the cheapest stream order copying out[i] = in[src_of[i]] (-1: out[i] not
    written), or None."""
    rvec, wvec = _vectors(in_shape, in_layout), _vectors(out_shape, out_layout)
    inv = np.full(len(rvec), -1, np.int64)
    hit = src_of >= 0
    inv[src_of[hit]] = np.flatnonzero(hit)
    best = None

    def consider(pieces):
        nonlocal best
        if pieces is None or len(pieces) > MAX_PIECES:
            return
        c = cost(pieces, in_shape, in_layout, out_shape, out_layout)
        if best is None or c < best[1]:
            best = (pieces, c)

    outs, ins = _orders(out_shape, out_layout), _orders(in_shape, in_layout)
    for order in outs:
        consider(_pieces(order, src_of, rvec, wvec, esize, True))
    for order in ins:
        consider(_pieces(order, inv, rvec, wvec, esize, False))
    # port balance: the output's first planes in an output order, the rest in an input order
    for order in outs[:1]:
        axis = next((a for a, n in enumerate(order.shape) if n > 1), None)
        if axis is None:
            continue
        size = order.shape[axis]
        for k in sorted({max(1, size * f // 8) for f in range(1, 8)} - {size}):
            head = np.take(order, range(k), axis=axis)
            rest = np.take(order, range(k, size), axis=axis)
            a = _pieces(head, src_of, rvec, wvec, esize, True)
            if a is None:
                continue
            mine = np.zeros(src_of.size, bool)
            mine[rest[rest >= 0]] = True
            for order2 in ins:
                to = inv[np.where(order2 >= 0, order2, 0)]
                keep = (order2 >= 0) & (to >= 0) & mine[np.maximum(to, 0)]
                b = _pieces(np.where(keep, order2, -1), inv, rvec, wvec, esize, False)
                if b is not None:
                    consider(_interleave(a, b))
    return best


def source_index(g: Graph, n: Node) -> np.ndarray | None:
    """For every output element (ONNX order) the flat index of the input element it copies: the node
    (Transpose, DepthToSpace, or a folded chain's `_source`) applied to the input's indices."""
    if "_source" in n.attrs:
        return n.attrs["_source"]
    shape = g.shapes[n.inputs[0]]
    idx = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64).reshape(shape)
    if n.op == "Transpose":
        perm = [int(p) for p in n.attrs.get("perm", reversed(range(len(shape))))]
        return np.ascontiguousarray(idx.transpose(perm)).reshape(-1)
    if n.op == "DepthToSpace" and len(shape) == 4:
        b = int(n.attrs["blocksize"])
        nb, c, h, w = shape
        if n.attrs.get("mode", "DCR") in ("CRD", b"CRD"):
            t = idx.reshape(nb, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
        else:
            t = idx.reshape(nb, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
        return np.ascontiguousarray(t).reshape(-1)
    return None


def _registers() -> int:
    """Configuration registers of one piece: read SE, ARITH, write SE and two LINKs (engine contract)."""
    return load_isa().registers({"SE": 2, "ARITH": 1, "LINK": 2})


def _estimator(profile, esize: int):
    """cost(pieces, ...) -> NPU cycles: per epoch of up to PER_EPOCH pieces, setup (registers) plus the
    sum of its streams' costs (memory.cost.pattern_cost on the fastest pool: they share its banks) or the
    ARITH work, whichever is larger."""
    pool = profile.pool_named(activation_pools(profile)[0])
    per = max(1, min(PER_EPOCH, profile.units.arith_units))
    setup = profile.epoch.setup(_registers())

    def nominal(shape, layout):
        h, w, c = hwc(tuple(shape)) if layout != "linear" else (1, 1, 0)
        px = (block_size() if layout == "blocked16" else c) * esize
        line = -(-w * px // NOMINAL_LINE) * NOMINAL_LINE
        return np.array([esize, line, h * line], np.int64)

    def side_cycles(s: Side, unit: np.ndarray, access: str) -> float:
        loops = [(n, int(np.dot(v, unit))) for n, v in s.loops] + [(1, 0)] * (3 - len(s.loops))
        (n1, s1), (n2, s2), (n3, s3) = loops
        base = pool.base + int(np.dot(s.start, unit))
        return pattern_cost(pool, AccessPattern(base, s.run * esize, n1, s1, n2, s2, n3, s3), profile,
                            access=access).cycles

    def cost(pieces, in_shape, in_layout, out_shape, out_layout) -> float:
        ru, wu = nominal(in_shape, in_layout), nominal(out_shape, out_layout)
        total = 0.0
        rate = float(profile.compute.elems_per_cycle["arith"])
        for k in range(0, len(pieces), per):
            group = pieces[k:k + per]
            reads = sum(side_cycles(p.read, ru, "read") for p in group)
            writes = sum(side_cycles(p.write, wu, "write") for p in group)
            # the engine's bank model serializes the streams of an epoch that reach the same RAM banks
            # (measured: an epoch of element-granular pieces takes about the sum of its streams' costs)
            total += setup * len(group) + max(reads + writes, max(p.count for p in group) / rate)
        return total

    return cost


def plan(g: Graph, x: str, y: str, src_of: np.ndarray, profile, linear: bool = False) -> tuple[Plan | None, str]:
    """The cheapest NPU plan copying map y[i] = x[src_of[i]] (-1: y[i] not copied), or (None, why none
    exists); linear: x and y may also be float tensors stored dense in ONNX order (batch > 1)."""
    if not all(g.is_map(t) or linear and g.is_float(t) for t in (x, y)):
        return None, "an operand that is not a feature map"
    return plan_shapes(tuple(g.shapes[x]), storage_layout(g, x), tuple(g.shapes[y]), storage_layout(g, y),
                       load_isa().dtype_bytes(g.compile_dtype), src_of, profile)


def plan_shapes(sx, lx: str, sy, ly: str, esize: int, src_of: np.ndarray, profile) -> tuple[Plan | None, str]:
    """plan() between a tensor of shape sx stored lx and one of shape sy stored ly (either may be linear)."""
    if src_of.size > MAX_ELEMENTS:
        return None, f"{src_of.size} elements (the planner looks at up to {MAX_ELEMENTS})"
    h, w, c = hwc(sy)
    cost = _estimator(profile, esize)
    blk = block_size()
    pad, pad_cycles, pad_shape = None, 0.0, None
    if ly == "blocked16" and c % blk:
        line = ((h, (0, 1, 0)),) if h > 1 else ()
        if lx == "blocked16" and hwc(sx)[:2] == (h, w) and hwc(sx)[2] % blk == c % blk:
            last_x, last_y = (0, 0, -(-hwc(sx)[2] // blk) - 1), (0, 0, -(-c // blk) - 1)
            pad = Piece(h * w * blk, Side(last_x, w * blk, line), Side(last_y, w * blk, line))
        elif _first_pixel(sx, lx) >= blk:
            # no such plane: an ARITH copy whose output is a map of y's shape writes zeros into the padding
            # lanes (the unit packs its C channels); it reads any blk elements of x, the same ones for every
            # pixel (stride-0 loops), and the data pieces then overwrite the valid lanes
            planes = -(-c // blk)
            rep = tuple((k, (0, 0, 0)) for k in (w, h, planes) if k > 1)
            out = line + (((planes, (0, 0, 1)),) if planes > 1 else ())
            pad = Piece(planes * h * w * blk, Side((0, 0, 0), blk, rep), Side((0, 0, 0), w * blk, out))
            pad_shape = (1, c, h, w)
        else:
            return None, (f"{c} output channels leave the last 16-channel block partial and the input has no "
                          "plane with the same padding lanes to copy them from")
        pad_cycles = cost([pad], sx, lx, sy, ly)
    elif (src_of < 0).any():  # places of y the copy leaves alone: filled first, so every byte of y is written
        fill = _fill_piece(src_of.size, _first_pixel(sx, lx), esize) if ly == "linear" else None
        if fill is None:
            return None, "places of the output that no input element fills cannot be written in its layout"
        pad, pad_cycles = fill, cost([fill], sx, lx, sy, ly)
    plans = []
    direct = _best_pass(src_of, sx, lx, sy, ly, esize, cost)
    if direct is not None:
        plans.append(Plan((tuple(direct[0]),), False, direct[1]))
    n = int(np.prod(sx, dtype=np.int64))
    flat = (n,)
    if lx != "linear":
        first = _best_pass(np.arange(n, dtype=np.int64), sx, lx, flat, "linear", esize, cost)
        second = _best_pass(src_of, flat, "linear", sy, ly, esize, cost)
        if first is not None and second is not None:
            plans.append(Plan((tuple(first[0]), tuple(second[0])), True, first[1] + second[1]))
    if not plans:
        return None, (f"no set of up to {MAX_PIECES} stream-engine pattern pairs (run + three loops, first byte "
                      f"on the {WORD} B bus-word grid) walks it")
    best = min(plans, key=lambda p: p.cycles)
    return Plan(best.passes, best.via_linear, best.cycles + pad_cycles, pad, pad_shape), ""


def _divisors(count: int) -> list[int]:
    small = [d for d in range(1, int(count ** 0.5) + 1) if count % d == 0]
    return sorted(set(small + [count // d for d in small]))


def _factors(count: int, top: int, parts: int = 3) -> list[int] | None:
    """count as a product of up to `parts` factors of at most `top` each (greedy from the largest), or None."""
    out = []
    while count > 1:
        f = max(d for d in _divisors(count) if d <= top)
        if len(out) == parts or f == 1:
            return None
        out.append(f)
        count //= f
    return out


def _fill_piece(count: int, first: int, esize: int) -> Piece | None:
    """A copy writing all `count` elements of a linear tensor (dense runs) from the input's first 16
    elements read again and again (stride-0 loops): any initialized bytes; the data pieces then overwrite
    the elements the tensor has."""
    blk = block_size()
    run_top, n_top, _ = _limits()
    if count % blk or first < blk or stream_shape(count) is None:
        return None
    reps = _factors(count // blk, n_top)
    if reps is None:
        return None
    for run in reversed([d for d in _divisors(count) if d * esize <= run_top]):
        if (sizes := _factors(count // run, n_top)) is not None:
            break
    else:
        return None
    loops, step = [], run
    for k in sizes:
        loops.append((k, (step, 0, 0)))
        step *= k
    return Piece(count, Side((0, 0, 0), blk, tuple((k, (0, 0, 0)) for k in reps)), Side((0, 0, 0), run, tuple(loops)))


def _first_pixel(shape, layout: str) -> int:
    """Elements contiguous from a tensor's first byte (its first line's run; the whole of a linear one)."""
    if layout == "linear":
        return int(np.prod(shape, dtype=np.int64))
    h, w, c = hwc(tuple(shape))
    return w * (block_size() if layout == "blocked16" else c)


def lower(g: Graph, n: Node, names: list[str], x: str, best: Plan) -> list[Layer]:
    """Layers of a plan: per pass, epochs of up to PER_EPOCH pieces (Layer.siblings), each piece a read
    gather -> ARITH copy -> write gather; a two-pass plan goes through a linear tensor in ONNX order."""
    y = n.outputs[0]
    layers = []
    mid = f"{y}::onnx_order"
    if best.via_linear:
        g.shapes[mid], g.dtypes[mid] = (int(np.prod(g.shapes[x], dtype=np.int64)),), g.dtype(y)
    ends = [(x, mid), (mid, y)] if best.via_linear else [(x, y)]
    passes = list(best.passes)
    if best.pad is not None:  # first, in an epoch of its own: the data pieces then overwrite its valid lanes
        passes, ends = [(best.pad,)] + passes, [(x, y)] + ends
    for k, (pieces, (src, dst)) in enumerate(zip(passes, ends)):
        pairs = []
        for i, p in enumerate(pieces):
            a, b = f"{y}::perm{k}.{i}::read", f"{y}::perm{k}.{i}"
            shape = best.pad_shape if p is best.pad and best.pad_shape else stream_shape(p.count)
            for t, whole, side in ((a, src, p.read), (b, dst, p.write)):
                g.shapes[t], g.dtypes[t] = shape, g.dtype(y)
                g.gathers[t] = Gather(whole, side.start, side.run, side.loops)
            pairs.append((a, b))
        for e in range(0, len(pairs), PER_EPOCH):
            group = pairs[e:e + PER_EPOCH]
            layers.append(Layer(n.name, names, group[0][0], [Step("ARITH", group[0][1], dict(op="copy"))],
                                siblings=[(a, Step("ARITH", b, dict(op="copy"))) for a, b in group[1:]]))
    return layers


def host_cycles(g: Graph, nodes: list[Node], profile) -> float:
    """NPU cycles the host spends running `nodes` as software epochs (the profile's [host] model)."""
    return sum(host_op_cycles(m.op, [g.shapes[t] for t in m.inputs if t], [g.shapes[t] for t in m.outputs if t], profile,
                   m.attrs) for m in nodes)


def choose(g: Graph, n: Node, host_nodes: list[Node] | None = None) -> tuple[Plan | None, str]:
    """(plan, "") when the NPU permutation of node `n` (its `source_index`) is cheaper than the host
    running `host_nodes` (default: n), else (None, the reason, with the estimates). The plan is the cheaper
    of the stream-engine pattern pairs (Plan) and the channel-gathering CONVs (moveconv.GatherPlan).
    Memoized on n."""
    if "_permute" in n.attrs:
        return n.attrs["_permute"]

    profile = g.profile or load_profile()
    src = source_index(g, n)
    if src is None:
        got = (None, "no element mapping")
    else:

        best, why = plan(g, n.inputs[0], n.outputs[0], src, profile)
        conv, why2 = gather_plan(g, n.inputs[0], n.outputs[0], src, profile)
        host = host_cycles(g, host_nodes or [n], profile)
        if best is None and conv is None:
            got = (None, f"{why}; as CONVs gathering channels: {why2}")
        elif min(p.cycles for p in (best, conv) if p is not None) >= host:
            what = []
            if best is not None:
                pieces = sum(len(p) for p in best.passes)
                what.append(f"its stream-engine permutation ({pieces} copy pieces"
                            f"{' through ONNX order' if best.via_linear else ''}, ~{best.cycles:.0f} cycles)")
            if conv is not None:
                what.append(f"its channel gather ({len(conv.phases)} one-hot CONV(s), ~{conv.cycles:.0f} cycles)")
            got = (None, f"{' and '.join(what)} {'is' if len(what) == 1 else 'are'} slower than the host's copy "
                         f"(~{host:.0f} cycles)")
        else:
            got = (min((p for p in (best, conv) if p is not None), key=lambda p: p.cycles), "")
    n.attrs["_permute"] = got
    return got




