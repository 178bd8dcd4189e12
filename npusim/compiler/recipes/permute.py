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

The search is exact and bounded: both sides' keys are one pair key per stream position (`_Pairs`), whose step
differences are computed once and shared by the searches over the stream (`_Stream`), a search stops once the
closed-form floors of its pieces reach the best plan found (`_Estimator.floor`), a pass or a port-balance
remainder whose elements cannot be copied below that is not searched (`_Estimator.beyond`), and `plan_shapes`
is memoized on its arguments.

Over 500 lines: one recipe family, the element-permutation planner (vectors, pieces, passes, their
cost, the bounded search over stream orders) whose helpers only it uses.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import lru_cache

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
TOO_MANY = [(0, 0)] * (MAX_PIECES + 1)  # the segments of a box that no plan cuts into (their count is all that matters)
MAX_ELEMENTS = 1 << 21  # elements of a permuted map this planner looks at (bounds its index arrays)
MAX_SOURCE = 1 << 27  # elements of the tensor it copies from (far beyond any N6 memory): pair keys fit in int64
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
    grid = out.reshape(n // (h * w), h, w, 3)  # [channel][y][x] (broadcast from the axes: no divisions)
    ch, x = np.arange(n // (h * w))[:, None, None], np.arange(w)
    if layout == "blocked16":
        blk = block_size()
        grid[..., 0] = x * blk + ch % blk
        grid[..., 2] = ch // blk
    else:
        grid[..., 0] = x * c + ch
    grid[..., 1] = np.arange(h)[:, None]
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
    pixel = (np.arange(h, dtype=np.int64)[:, None] * w + np.arange(w))[None, None, :, :, None]  # [.., y, x, ..]
    for inner in (blk, 8, 4, 2, 1):
        if blk % inner:
            continue
        ch = (np.arange(planes)[:, None, None, None, None] * blk + np.arange(blk // inner)[:, None, None, None] * inner
              + np.arange(inner))  # [plane, lanes / inner, 1, 1, inner]
        order = np.where(ch < c, ch * (h * w), -(h * w) - 1) + pixel  # padding lanes below -1 ...
        out.append(np.maximum(order, -1, out=order) if c % blk else order)  # ... made -1
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
        if not (d == s).all() or not _steps_ok(s):
            return None
        loops.append((n, tuple(int(v) for v in s)))
    return _walk(loops, tuple(int(v) for v in a.reshape(-1, 3)[0]), esize)


def _steps_ok(s) -> bool:
    """A loop step an SE can take: no backward line or plane, no backward element within a line."""
    return not (s[1] < 0 or s[2] < 0 or s[0] < 0 and not (s[1] or s[2]))


def _walk(loops: list, start: tuple, esize: int) -> Side | None:
    """The Side of `loops` ((count, step vector), innermost first) from `start`, after merging, or None
    beyond the SE's fields or off the bus-word grid."""
    run, loops = _merge(loops)
    top = _limits()
    if len(loops) > 3 or run * esize > top[0] or any(n > top[1] for n, _ in loops) or start[0] * esize % WORD:
        return None
    return Side(start, run, tuple(loops))


@lru_cache(maxsize=1)
def _limits():
    f = load_isa().command("SE")
    c = load_isa().command("ARITH")
    return f.field("run").mask, f.field("n1").mask, c.field("c").mask


@lru_cache(maxsize=4096)
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


class _Keys:
    """The (element, line, plane) vectors of one side's elements (non-negative) as one integer key each,
    mixed radix with room for signed digits: keys of two elements differ by the same amount exactly when
    their vectors do, so affine walks are checked on one array instead of three columns."""

    def __init__(self, vec: np.ndarray):
        top = [int(vec[:, k].max()) + 1 for k in range(3)] if len(vec) else [1, 1, 1]  # (max over axis 0 is slow)
        self.r1, self.r2 = 2 * top[0], 4 * top[0] * top[1]
        self.top = self.r2 * top[2]  # every key is below it
        dtype = np.int32 if self.top < 1 << 31 else np.int64
        self.key = (vec[:, 0] + vec[:, 1] * self.r1 + vec[:, 2] * self.r2).astype(dtype)

    def vector(self, key: int) -> tuple[int, int, int]:
        plane, rest = divmod(key, self.r2)
        line, element = divmod(rest, self.r1)
        return element, line, plane


KEEP_CACHES = 1 << 18  # stream positions up to which a stream keeps its differences between plan searches


class _Stream:
    """A stream order with both sides' keys at every position as one pair key (-1 order entries and
    elements without a counterpart are not `valid`), and the pair keys' first differences and step changes
    along each axis, computed when first asked and shared by the searches over the whole stream, a masked
    copy or its first slices."""

    def __init__(self, order, pair, valid, ends: "_Pairs", parent=None, cut=None):
        self.order, self.pair, self.valid, self.ends = order, pair, valid, ends
        self.parent, self.cut = parent, cut  # cut: (axis, k) of a head of parent, or None (same positions)
        self._diff: dict = {}
        self._full: dict = {}
        self._change: dict = {}
        # what depends on the keys only, by box (its positions are the root stream's): shared by the family
        self.known = parent.known if parent is not None else {}

    @classmethod
    def of(cls, order: np.ndarray, ends: "_Pairs", to_write: bool) -> "_Stream":
        """to_write: `order` indexes the written tensor, else the read one."""
        pair, has = ends.by_out if to_write else ends.by_in
        valid = order >= 0
        safe = order if valid.all() else np.maximum(order, 0)  # (padding lanes are -1; take: faster than [])
        if not has.all():
            valid &= has.take(safe)
        return cls(order, pair.take(safe), valid, ends)

    def masked(self, valid: np.ndarray) -> "_Stream":
        """The same stream with only `valid` positions to copy (a subset of this one's)."""
        return _Stream(self.order, self.pair, valid, self.ends, parent=self)

    def head(self, axis: int, k: int) -> "_Stream":
        """The stream's first k slices along `axis`."""
        box = tuple(slice(0, k) if a == axis else slice(None) for a in range(self.order.ndim))
        return _Stream(self.order[box], self.pair[box], self.valid[box], self.ends, parent=self, cut=(axis, k))

    def _from_parent(self, arr: np.ndarray, ax: int, less: int) -> np.ndarray:
        """The parent's array of differences along ax (`less` shorter there) over this stream's positions."""
        if self.cut is None:
            return arr
        axis, k = self.cut
        k = max(k - less, 0) if ax == axis else k
        return arr[tuple(slice(0, k) if a == axis else slice(None) for a in range(arr.ndim))]

    def diff(self, ax: int) -> np.ndarray:
        """Pair key differences between neighbours along axis ax."""
        got = self._diff.get(ax)
        if got is None:
            got = (self._from_parent(self.parent.diff(ax), ax, 1) if self.parent is not None
                   else _head(self._lagged(ax), ax, 1))
            self._diff[ax] = got
        return got

    def _lagged(self, ax: int) -> np.ndarray:
        """A root stream's pair key differences along ax, full shape (the last slice: zero)."""
        got = self._full.get(ax)
        if got is None:
            got = self._full[ax] = _lagged(self.pair, ax, np.subtract, np.int64)
        return got

    def change(self, ax: int) -> np.ndarray:
        """True where either side's step along ax differs from the next step (the pair keys' step does)."""
        got = self._change.get(ax)
        if got is None:
            got = (self._from_parent(self.parent.change(ax), ax, 2) if self.parent is not None
                   else _head(_lagged(self._lagged(ax), ax, np.not_equal, bool), ax, 2))
            self._change[ax] = got
        return got

    def release(self) -> None:
        """Drop the differences of a large stream (bounds the planner's memory)."""
        if self.order.size > KEEP_CACHES:
            self._diff.clear()
            self._full.clear()
            self._change.clear()
            self.known.clear()


def _lagged(full: np.ndarray, ax: int, op, dtype) -> np.ndarray:
    """op(full[.., i + 1, ..], full[.., i, ..]) at every place of C-contiguous `full` (its last slice along
    axis ax: zero), as one contiguous operation on its storage lagged by the axis' stride (numpy's strided
    loops along an inner axis, as in np.diff, are several times slower)."""
    lag = math.prod(full.shape[ax + 1:])
    flat = full.reshape(-1)
    out = np.empty(flat.size, dtype)
    op(flat[lag:], flat[:-lag], out=out[:-lag])
    out[len(out) - lag:] = 0
    return out.reshape(full.shape)


def _head(a: np.ndarray, ax: int, less: int) -> np.ndarray:
    """`a` without its last `less` slices along axis ax."""
    return a[tuple(slice(0, max(a.shape[ax] - less, 0)) if i == ax else slice(None) for i in range(a.ndim))]


def _sparse_any(c: np.ndarray, ax: int) -> np.ndarray:
    """c.any(axis=every axis but ax) for a mostly False `c`: the axis-ax coordinates of its True places."""
    hit = np.flatnonzero(c)
    out = np.zeros(c.shape[ax], bool)
    out[hit // math.prod(c.shape[ax + 1:]) % c.shape[ax]] = True
    return out


def _projections(v: np.ndarray):
    """v.any(axis=every axis but ax) for each axis ax in turn: the axes before ax reduced one at a time
    (each reduction of the leading axis is fast and shrinks what is left), then the axes after it."""
    for ax in range(v.ndim):
        yield v.reshape(v.shape[0], -1).any(axis=1) if v.ndim > 1 else v
        v = v.any(axis=0)


def _pieces(st: _Stream, esize: int, floor=None, limit: float = math.inf) -> list[Piece] | None:
    """Cut stream `st` into pieces, or None. A sub-box whose elements fill a smaller box is cropped to it.
    `floor(piece)`: the least cycles a piece adds to a plan; the search stops (None) once its pieces'
    floors reach `limit` (a plan costing that much is not wanted)."""
    valid, known = st.valid, st.known
    out: list[Piece] = []
    spent = 0.0

    def crop(box: tuple) -> tuple[tuple | None, bool]:
        """(the box cropped to its valid elements or None if it has none, whether all of those are valid)."""
        v = valid[box]
        if v.all():
            return box, True
        if not v.any():
            return None, False
        lo_hi = []
        for hit in map(np.flatnonzero, _projections(v)):
            lo_hi.append((int(hit[0]), int(hit[-1]) + 1))
        inner = tuple(slice(b.start + lo, b.start + hi) for b, (lo, hi) in zip(box, lo_hi))
        return inner, bool(valid[inner].all())

    def along(box: tuple, ax: int, less: int) -> tuple:
        return box[:ax] + (slice(box[ax].start, box[ax].stop - less),) + box[ax + 1:]

    def segments(box: tuple, ax: int) -> list[tuple[int, int]]:
        """Maximal ranges of axis `ax` over which both sides step by one vector everywhere in the box."""
        lo, hi = box[ax].start, box[ax].stop
        if hi - lo < 3:
            return [(lo, hi)]
        key = ("segments", ax, tuple((b.start, b.stop) for b in box))
        got = known.get(key)
        if got is None:
            got = known[key] = _segments(box, ax)
        return got

    def _segments(box: tuple, ax: int) -> list[tuple[int, int]]:
        lo, hi = box[ax].start, box[ax].stop
        cuts = np.flatnonzero(_sparse_any(st.change(ax)[along(box, ax, 2)], ax))  # between steps i, i+1
        if len(cuts) >= MAX_PIECES:  # more parts than a plan may have pieces: `cut` refuses the box
            return TOO_MANY
        bounds = [lo, *(cuts + (lo + 2)).tolist(), hi]
        return list(zip(bounds[:-1], bounds[1:]))

    def sides(box: tuple) -> tuple[Side, Side] | None:
        """The read and write Sides walking the box, or None if no SE pattern pair does (memoized)."""
        key = ("sides", tuple((b.start, b.stop) for b in box))
        if key not in known:
            pair = walks(box)  # cheap: from the box's first steps
            known[key] = pair if pair is not None and affine(box) else None
        return known[key]

    def walks(box: tuple) -> tuple[Side, Side] | None:
        """The read and write Sides that walk the box if it is affine: loops from the steps at its first
        element."""
        pair, vectors = st.pair, st.ends.vectors
        at = [b.start for b in box]
        r0, w0 = vectors(pair.item(*at))
        reads, writes = [], []
        for ax in reversed(range(len(box))):
            n = box[ax].stop - box[ax].start
            if n == 1:
                continue
            at[ax] += 1
            r1, w1 = vectors(pair.item(*at))
            at[ax] -= 1
            rs, ws = (r1[0] - r0[0], r1[1] - r0[1], r1[2] - r0[2]), (w1[0] - w0[0], w1[1] - w0[1], w1[2] - w0[2])
            if not (_steps_ok(rs) and _steps_ok(ws)):
                return None
            reads.append((n, rs))
            writes.append((n, ws))
        read = _walk(reads, r0, esize)
        write = read and _walk(writes, w0, esize)
        return (read, write) if write else None

    def affine(box: tuple) -> bool:
        """Every step along each axis of the box equals the first one on both sides."""
        for ax in reversed(range(len(box))):
            if box[ax].stop - box[ax].start > 1:
                d = st.diff(ax)[along(box, ax, 1)]
                if not (d == d.flat[0]).all():
                    return False
        return True

    def cut(box: tuple, full: bool = False) -> bool:
        """Cut `box` into pieces (full: known to hold valid elements only, as every part of such a box)."""
        if not full:
            box, full = crop(box)
            if box is None:
                return True
        size = math.prod(b.stop - b.start for b in box)
        if full and stream_shape(size) is not None:
            pair = sides(box)
            if pair is not None:
                out.append(Piece(size, *pair))
                if floor is not None:
                    nonlocal spent
                    spent += floor(out[-1])
                    if spent >= limit:
                        return False
                return len(out) <= MAX_PIECES
        axes = [a for a in range(valid.ndim) if box[a].stop - box[a].start > 1]
        if not axes:
            return False
        for ax in axes:  # the outermost axis along which the box is not affine: cut into affine ranges
            parts = segments(box, ax) if full else []
            if len(parts) > 1:
                break
        else:  # affine but too many loops (or holes, or too long): the outermost axis index by index
            ax = axes[0]
            parts = [(i, i + 1) for i in range(box[ax].start, box[ax].stop)]
        if len(parts) + len(out) > MAX_PIECES:
            return False
        return all(cut(box[:ax] + (slice(a, b),) + box[ax + 1:], full) for a, b in parts)

    return out if cut(tuple(slice(0, n) for n in valid.shape)) else None


def _interleave(a: list[Piece], b: list[Piece]) -> list[Piece]:
    """a and b alternated (pieces whose slow side is the read next to ones whose slow side is the write,
    so that an epoch loads both bus ports)."""
    out = []
    for k in range(max(len(a), len(b))):
        out += a[k:k + 1] + b[k:k + 1]
    return out


def _tables(memo: dict, shape, layout: str) -> tuple[list, _Keys]:
    """(stream orders, element keys) of a tensor, computed once per `memo` (one plan search)."""
    key = (tuple(shape), layout)
    if key not in memo:
        memo[key] = (_orders(shape, layout), _Keys(_vectors(shape, layout)))
    return memo[key]


class _Pairs:
    """Pair keys of a copy out[i] = in[src_of[i]]: read key x `radix` (twice the write keys' range) + write
    key, so that two pairs differ by the same amount exactly when both sides' keys do; per element of the
    output (`by_out`) and of the input (`by_in`), each with whether the element has a counterpart."""

    def __init__(self, src_of: np.ndarray, inv: np.ndarray, rkeys: _Keys, wkeys: _Keys):
        self.radix = 2 * wkeys.top
        # keys are below 64 x the elements (the most padding: 1 channel in 16 lanes): with MAX_SOURCE and
        # MAX_ELEMENTS, below 2^61
        assert rkeys.top * self.radix < 1 << 62, "pair keys beyond int64"
        self.by_out = self._pairs(src_of, rkeys.key, wkeys.key, True)
        self.by_in = self._pairs(inv, rkeys.key, wkeys.key, False)
        self.rkeys, self.wkeys = rkeys, wkeys

    def vectors(self, pair: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """The read and the write element's vectors of a pair key."""
        read, write = divmod(pair, self.radix)
        return self.rkeys.vector(read), self.wkeys.vector(write)

    def _pairs(self, index, rkey, wkey, by_out: bool) -> tuple[np.ndarray, np.ndarray]:
        has = index >= 0
        other = (rkey if by_out else wkey)[np.where(has, index, 0)].astype(np.int64)
        return (other * self.radix + wkey if by_out else rkey.astype(np.int64) * self.radix + other), has


def _best_pass(src_of: np.ndarray, in_shape, in_layout: str, out_shape, out_layout: str, esize: int, cost,
               bound: float = math.inf, memo: dict | None = None):
    """(pieces, cycles) of the cheapest stream order copying out[i] = in[src_of[i]] (-1: out[i] not
    written), or None; None too if it costs `bound` cycles or more (the searches stop there). `memo`:
    the tensors' tables shared by the passes of one plan search."""
    memo = {} if memo is None else memo
    (ins_orders, rkeys), (outs, wkeys) = _tables(memo, in_shape, in_layout), _tables(memo, out_shape, out_layout)
    inv = np.full(len(rkeys.key), -1, np.int64)
    hit = src_of >= 0
    inv[src_of[hit]] = np.flatnonzero(hit)
    if cost.beyond(int(np.count_nonzero(inv >= 0)), bound):  # (each output's element, read once)
        return None
    ends = _Pairs(src_of, inv, rkeys, wkeys)
    best = None
    shapes = (in_shape, in_layout, out_shape, out_layout)

    def limit(spent: float = 0.0) -> float:
        """What the pieces still to find may cost at least before their plan cannot beat the best one."""
        return (bound if best is None else min(bound, best[1])) - spent

    def consider(pieces):
        nonlocal best
        if pieces is None or len(pieces) > MAX_PIECES or cost.plan_floor(pieces) >= limit():
            return
        c = cost(pieces, *shapes)
        if c < limit():
            best = (pieces, c)

    first = None
    for order in outs:
        st = _Stream.of(order, ends, True)
        consider(_pieces(st, esize, cost.floor, limit()))
        st.release()
        first = st if first is None else first
    ins = []
    for order in ins_orders:
        ins.append(_Stream.of(order, ends, False))
        consider(_pieces(ins[-1], esize, cost.floor, limit()))
        ins[-1].release()
    # port balance: the output's first planes in an output order, the rest in an input order
    order = first.order
    axis = next((a for a, n in enumerate(order.shape) if n > 1), None)
    if axis is None:
        return best
    size = order.shape[axis]
    targets = []  # per input order: where its position's element has an output, and that output's slice

    def slices() -> list:
        if not targets:
            where = np.full(src_of.size, -1, np.int64)  # per output element: its slice of `order` along axis
            shape = [1] * order.ndim
            shape[axis] = size
            at = np.broadcast_to(np.arange(size).reshape(shape), order.shape)
            where[order[order >= 0]] = at[order >= 0]
            for st2 in ins:
                to = inv.take(np.maximum(st2.order, 0))
                targets.append(((st2.order >= 0) & (to >= 0), where[np.maximum(to, 0)]))
        return targets

    for k in sorted({max(1, size * f // 8) for f in range(1, 8)} - {size}):
        a = _pieces(first.head(axis, k), esize, cost.floor, limit())
        if a is None:
            continue
        spent = sum(cost.floor(p) for p in a)
        for st2, (there, at) in zip(ins, slices()):
            if limit(spent) <= 0:
                break
            mask = there & (at >= k)
            if cost.beyond(int(np.count_nonzero(mask)), limit(spent)):
                continue
            b = _pieces(st2.masked(mask), esize, cost.floor, limit(spent))
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


class _Estimator:
    """cost(pieces, ...) -> NPU cycles: per epoch of up to PER_EPOCH pieces, setup (registers) plus the
    sum of its streams' costs (memory.cost.pattern_cost on the fastest pool: they share its banks) or the
    ARITH work, whichever is larger; each stream's cycles computed once per plan search.

    `floor(piece)` is what a piece adds at least, in closed form: its setup and, per stream, every run
    its own bursts (memory.cost: at least ceil(run / beat) beats and one burst's overhead per run, or the
    run's bytes at the pool's rate if slower); `plan_floor(pieces)` bounds a whole plan the same way. A
    search stops once its floors reach the best plan found: a plan costing as much cannot win."""

    def __init__(self, profile, esize: int):
        self.profile, self.esize = profile, esize
        self.pool = profile.pool_named(activation_pools(profile)[0])
        self.per = max(1, min(PER_EPOCH, profile.units.arith_units))
        self.setup = profile.epoch.setup(_registers())
        self._cycles: dict = {}  # (Side, unit vector, access) -> cycles

    def nominal(self, shape, layout) -> tuple[int, int, int]:
        esize = self.esize
        h, w, c = hwc(tuple(shape)) if layout != "linear" else (1, 1, 0)
        px = (block_size() if layout == "blocked16" else c) * esize
        line = -(-w * px // NOMINAL_LINE) * NOMINAL_LINE
        return esize, line, h * line

    def side_cycles(self, s: Side, unit: tuple, access: str) -> float:
        key = (s, unit, access)
        got = self._cycles.get(key)
        if got is None:
            dot = lambda v: sum(a * b for a, b in zip(v, unit))  # noqa: E731
            loops = [(n, dot(v)) for n, v in s.loops] + [(1, 0)] * (3 - len(s.loops))
            (n1, s1), (n2, s2), (n3, s3) = loops
            base = self.pool.base + dot(s.start)
            got = self._cycles[key] = pattern_cost(
                self.pool, AccessPattern(base, s.run * self.esize, n1, s1, n2, s2, n3, s3), self.profile,
                access=access).cycles
        return got

    def _side_floor(self, s: Side) -> float:
        bus = self.profile.bus
        runs = 1
        for n, _ in s.loops:
            runs *= n
        nbytes = s.run * self.esize
        beats = -(-nbytes // bus.beat_bytes)
        bursts = -(-beats // bus.max_burst_beats)
        return runs * (max(beats, nbytes / self.pool.bytes_per_cycle) + bursts * bus.burst_overhead_cycles)

    def floor(self, piece: Piece) -> float:
        return self.setup + self._side_floor(piece.read) + self._side_floor(piece.write)

    def beyond(self, count: int, limit: float) -> bool:
        """Whether the floors of any pieces copying `count` elements reach `limit` (with a margin for
        rounding): at least one piece's setup, and per side every byte at the slower of the bus beat and
        the pool's rate, and one burst's overhead."""
        if count == 0:
            return False
        rate = min(self.profile.bus.beat_bytes, self.pool.bytes_per_cycle)
        least = self.setup + 2 * (count * self.esize / rate + self.profile.bus.burst_overhead_cycles)
        return least * (1 - 1e-9) >= limit

    def plan_floor(self, pieces) -> float:
        rate = float(self.profile.compute.elems_per_cycle["arith"])
        total = 0.0
        for k in range(0, len(pieces), self.per):
            group = pieces[k:k + self.per]
            streams = sum(self._side_floor(p.read) + self._side_floor(p.write) for p in group)
            total += self.setup * len(group) + max(streams, max(p.count for p in group) / rate)
        return total

    def __call__(self, pieces, in_shape, in_layout, out_shape, out_layout) -> float:
        ru, wu = self.nominal(in_shape, in_layout), self.nominal(out_shape, out_layout)
        total = 0.0
        rate = float(self.profile.compute.elems_per_cycle["arith"])
        for k in range(0, len(pieces), self.per):
            group = pieces[k:k + self.per]
            reads = sum(self.side_cycles(p.read, ru, "read") for p in group)
            writes = sum(self.side_cycles(p.write, wu, "write") for p in group)
            # the engine's bank model serializes the streams of an epoch that reach the same RAM banks
            # (measured: an epoch of element-granular pieces takes about the sum of its streams' costs)
            total += self.setup * len(group) + max(reads + writes, max(p.count for p in group) / rate)
        return total


def plan(g: Graph, x: str, y: str, src_of: np.ndarray, profile, linear: bool = False) -> tuple[Plan | None, str]:
    """The cheapest NPU plan copying map y[i] = x[src_of[i]] (-1: y[i] not copied), or (None, why none
    exists); linear: x and y may also be float tensors stored dense in ONNX order (batch > 1)."""
    if not all(g.is_map(t) or linear and g.is_float(t) for t in (x, y)):
        return None, "an operand that is not a feature map"
    return plan_shapes(tuple(g.shapes[x]), storage_layout(g, x), tuple(g.shapes[y]), storage_layout(g, y),
                       load_isa().dtype_bytes(g.compile_dtype), src_of, profile)


MEMO_PLANS = 512  # plan searches remembered per process (a model repeats its shuffles; tests recompile models)
_plans: dict = {}  # (shapes, layouts, esize, digest of src_of, profile) -> (Plan | None, reason)


def plan_shapes(sx, lx: str, sy, ly: str, esize: int, src_of: np.ndarray, profile) -> tuple[Plan | None, str]:
    """plan() between a tensor of shape sx stored lx and one of shape sy stored ly (either may be linear).
    Memoized (the result depends only on the arguments; Plans are immutable)."""
    key = (tuple(sx), lx, tuple(sy), ly, esize, src_of.dtype.str, src_of.shape,
           hashlib.sha256(np.ascontiguousarray(src_of).tobytes()).digest(),
           profile.identity())
    got = _plans.pop(key, None)
    if got is None:
        got = _plan_shapes(sx, lx, sy, ly, esize, src_of, profile)
    _plans[key] = got  # most recently used last
    while len(_plans) > MEMO_PLANS:
        del _plans[next(iter(_plans))]
    return got


def _plan_shapes(sx, lx: str, sy, ly: str, esize: int, src_of: np.ndarray, profile) -> tuple[Plan | None, str]:
    if src_of.size > MAX_ELEMENTS:
        return None, f"{src_of.size} elements (the planner looks at up to {MAX_ELEMENTS})"
    if math.prod(sx) > MAX_SOURCE:
        return None, f"a source of {math.prod(sx)} elements (the planner reads from up to {MAX_SOURCE})"
    h, w, c = hwc(sy)
    cost = _Estimator(profile, esize)
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
    memo: dict = {}
    direct = _best_pass(src_of, sx, lx, sy, ly, esize, cost, memo=memo)
    if direct is not None:
        plans.append(Plan((tuple(direct[0]),), False, direct[1]))
    n = int(np.prod(sx, dtype=np.int64))
    flat = (n,)
    if lx != "linear":  # through ONNX order: wanted only if cheaper than the direct plan (which wins a tie)
        bound = math.inf if direct is None else direct[1]
        first = _best_pass(np.arange(n, dtype=np.int64), sx, lx, flat, "linear", esize, cost, bound, memo)
        second = None if first is None else _best_pass(
            src_of, flat, "linear", sy, ly, esize, cost, (bound - first[1]) * (1 + 1e-9) + 1e-6, memo)  # (rounding)
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




