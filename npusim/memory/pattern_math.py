"""Closed forms over an access pattern: the shared core of the simulator's checks and `npusim check`.

A pattern is `base + n3 x n2 x n1` runs of `run` bytes; run k = (i3, i2, i1) (i1 fastest) starts at
`base + i1*s1 + i2*s2 + i3*s3` (strides may be negative or 0). Everything here works on the counts
and strides, never on bytes:

  `levels(p)`           the pattern's levels (count, stride), inner first: levels of count 1 dropped,
                        a level merged into the one inside it when it continues its progression
  `run_start(p, k)`     start of run k                                            O(levels)
  `extent(p)`           [lo, hi) hull of every byte                               O(levels)
  `first_start_in(p, a, b)`  first run (stream order) whose start lies in one of the closed
                        ranges [a_i, b_i]: (k, start), or None
  `first_enter(p, lo, hi)`   first run with a byte in [lo, hi) and its first such byte (the run's
                        lowest byte there: a run is contiguous and ascending): (k, addr), or None
  `first_enter_any(p, los, his)`  the same for a union of intervals (the first byte of the first run
                        that has one in any interval)
  `first_leave(p, lo, hi)`   first run with a byte outside [lo, hi) and its first such byte
  `covered(p)`          the bytes touched, as sorted disjoint intervals (set semantics)

Cost: with the pattern's levels "monotone" (run starts non-decreasing or non-increasing in stream
order -- every pattern a compiler emits for a tensor is), the searches are O(levels) per interval,
vectorized over intervals. Otherwise the outer levels that break monotony are enumerated (vectorized,
in chunks of at most CHUNK combinations), each combination solved in closed form: O(n2 * n3) at
worst, never O(runs * bytes). `covered` is O(levels) when runs abut or overlap (dense tensors) and
O(runs) (vectorized) when they leave gaps.

Why the searches are exact: with starts non-decreasing, a level's blocks are ordered (each block's
largest offset <= the next block's first), so the first run whose start is >= x lies in the first
block whose largest offset is >= x; descend level by level. A run [s, s+run) meets [lo, hi) iff
lo - run + 1 <= s <= hi - 1, and its first byte there is max(s, lo).
"""

from __future__ import annotations

import bisect
import math

import numpy as np

BIG = 1 << 62  # stands for -inf / +inf in interval bounds (addresses and offsets stay far below)
CHUNK = 1 << 16  # outer combinations x intervals solved per vectorized step


def levels(p) -> list[tuple[int, int]]:
    """(count, stride) per level, inner first, after dropping count-1 levels and merging a level into
    the one inside it when it continues that level's progression (stride == inner count * stride).
    Stream order is kept: run k of the merged levels is run k of the pattern."""
    out: list[list[int]] = []
    for n, s in ((p.n1, p.s1), (p.n2, p.s2), (p.n3, p.s3)):
        if n == 1:
            continue
        if out and s == out[-1][0] * out[-1][1]:
            out[-1][0] *= n
            continue
        out.append([n, s])
    return [(n, s) for n, s in out]


def n_runs(p) -> int:
    return p.n1 * p.n2 * p.n3


def run_start(p, k: int) -> int:
    """Start address of run k (stream order)."""
    i1 = k % p.n1
    i2 = (k // p.n1) % p.n2
    return p.base + i1 * p.s1 + i2 * p.s2 + (k // (p.n1 * p.n2)) * p.s3


def extent(p) -> tuple[int, int]:
    """[lo, hi) covering every byte of the pattern (lo == hi when it is empty)."""
    if p.run <= 0 or n_runs(p) == 0:
        return p.base, p.base
    lo = hi = p.base
    for n, s in ((p.n1, p.s1), (p.n2, p.s2), (p.n3, p.s3)):
        span = (n - 1) * s
        lo += min(span, 0)
        hi += max(span, 0)
    return lo, hi + p.run


# ------------------------------------------------------------------ monotone levels

def _spans(lv) -> list[int]:
    """Largest offset of the levels inside each level (for non-negative strides)."""
    out, acc = [], 0
    for n, s in lv:
        out.append(acc)
        acc += (n - 1) * s
    return out


def _monotone_prefix(lv, sign: int) -> int:
    """How many inner levels have starts monotone in direction `sign` (+1 non-decreasing, -1
    non-increasing) in stream order."""
    acc = 0
    for d, (n, s) in enumerate(lv):
        s = s * sign
        if s < acc:  # the level's next block would start below this block's largest offset
            return d
        acc += (n - 1) * s
    return len(lv)


class _Inner:
    """Closed-form search over monotone inner levels: offsets (from the combination's base) of runs
    0..N-1 are non-decreasing in `sign` * offset."""

    def __init__(self, lv, sign: int):
        self.sign = sign
        self.lv = [(n, s * sign) for n, s in lv]
        self.spans = _spans(self.lv)
        self.weights = []
        w = 1
        for n, _ in self.lv:
            self.weights.append(w)
            w *= n
        self.n = w
        self.maxoff = sum((n - 1) * s for n, s in self.lv)

    def offset(self, k):
        """Offset (in the search direction: sign * real offset) of run k (array)."""
        off = np.zeros_like(k)
        for (n, s), w in zip(self.lv, self.weights):
            off += ((k // w) % n) * s
        return off

    def first_ge(self, x):
        """First run whose (directed) offset is >= x, N where none (x: int64 array)."""
        k = np.zeros_like(x)
        rem = x.copy()
        active = rem > 0
        for (n, s), w, span in reversed(list(zip(self.lv, self.weights, self.spans))):
            if s > 0:
                i = np.clip(-((span - rem) // s), 0, n - 1)  # ceil((rem - span) / s)
                i = np.where(active, i, 0)
                k += i * w
                rem -= i * s
                active &= rem > 0
        return np.where(x > self.maxoff, self.n, k)

    def first_in(self, a, b):
        """First run whose real offset lies in [a, b] (arrays); N where none."""
        if self.sign > 0:
            k = self.first_ge(a)
            off = self.offset(np.minimum(k, self.n - 1))
            return np.where((k < self.n) & (off <= b), k, self.n)
        k = self.first_ge(-b)  # directed offset = -offset >= -b  <=>  offset <= b
        off = -self.offset(np.minimum(k, self.n - 1))
        return np.where((k < self.n) & (off >= a), k, self.n)


def _split(lv):
    """(inner searcher, outer levels): the longest monotone inner prefix (at least one level)."""
    up, down = _monotone_prefix(lv, 1), _monotone_prefix(lv, -1)
    d, sign = (up, 1) if up >= down else (down, -1)
    d = max(d, 1)
    return _Inner(lv[:d], sign), lv[d:]


def _outer_offsets(outer, q):
    """Offsets of outer combinations q (stream order over the outer levels, inner first)."""
    off = np.zeros_like(q)
    w = 1
    for n, s in outer:
        off += ((q // w) % n) * s
        w *= n
    return off


# ------------------------------------------------------------------ searches

def first_start_in(p, a, b):
    """(k, start) of the first run whose start lies in one of the closed ranges [a_i, b_i], or None.
    `a`, `b`: ints or int sequences (use +-BIG for open ends)."""
    a = np.atleast_1d(np.asarray(a, dtype=np.int64))
    b = np.atleast_1d(np.asarray(b, dtype=np.int64))
    if n_runs(p) == 0 or a.size == 0:
        return None
    lv = levels(p)
    if not lv:  # a single run
        hit = (a <= p.base) & (p.base <= b)
        return (0, p.base) if hit.any() else None
    inner, outer = _split(lv)
    n_outer = 1
    for n, _ in outer:
        n_outer *= n
    step = max(1, CHUNK // a.size)
    for q0 in range(0, n_outer, step):
        q = np.arange(q0, min(n_outer, q0 + step), dtype=np.int64)
        base = p.base + _outer_offsets(outer, q)  # (C,)
        k = inner.first_in(a[None, :] - base[:, None], b[None, :] - base[:, None])  # (C, m)
        kmin = k.min(axis=1)
        hit = np.flatnonzero(kmin < inner.n)
        if hit.size:
            c = int(hit[0])
            kk = int(q[c]) * inner.n + int(kmin[c])
            return kk, run_start(p, kk)
    return None


def first_enter_any(p, los, his):
    """(k, addr): the first run with a byte in the union of [lo_i, hi_i) and the first such byte of
    it, or None. Intervals need not be sorted or disjoint."""
    if p.run <= 0 or n_runs(p) == 0:
        return None
    los = np.atleast_1d(np.asarray(los, dtype=np.int64))
    his = np.atleast_1d(np.asarray(his, dtype=np.int64))
    keep = los < his
    los, his = los[keep], his[keep]
    if not los.size:
        return None
    got = first_start_in(p, los - p.run + 1, his - 1)
    if got is None:
        return None
    k, s = got
    e = s + p.run
    inside = (los < e) & (his > s)
    return k, int(np.maximum(los[inside], s).min())


def first_enter(p, lo: int, hi: int):
    """(k, addr) of the first run with a byte in [lo, hi) and its first byte there, or None."""
    return first_enter_any(p, [lo], [hi])


def first_leave(p, lo: int, hi: int):
    """(k, addr) of the first run with a byte outside [lo, hi) and its first such byte, or None."""
    return first_enter_any(p, [-BIG, hi], [lo, BIG])


def complement(starts, ends, lo: int, hi: int):
    """The gaps of sorted disjoint intervals inside [lo, hi), as (starts, ends) arrays."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    i = int(np.searchsorted(ends, lo, side="right"))
    j = int(np.searchsorted(starts, hi, side="left"))
    s, e = starts[i:j], ends[i:j]
    gs = np.concatenate(([lo], e))
    ge = np.concatenate((s, [hi]))
    gs = np.maximum(gs, lo)
    ge = np.minimum(ge, hi)
    keep = gs < ge
    return gs[keep], ge[keep]


# ------------------------------------------------------------------ covered bytes

COVERED_KEPT = 4096  # patterns whose intervals `covered` remembers (forgotten all at once past this)
COVERED_MAX_RUNS = 256  # intervals of a pattern it remembers at most
_COVERED: dict = {}


def covered(p, max_runs: int | None = None):
    """Sorted disjoint [start, end) intervals of the bytes the pattern touches, as two read-only
    int64 arrays (remembered per pattern: a program's streams repeat every run).

    Levels whose runs abut or overlap the block inside them collapse into one run first (order does
    not matter for a set), so a dense tensor is one interval whatever its counts."""
    key = (p.base, p.run, p.n1, p.s1, p.n2, p.s2, p.n3, p.s3, max_runs)
    got = _COVERED.get(key)
    if got is not None:
        return got
    got = _covered(p, max_runs)
    if got[0].size <= COVERED_MAX_RUNS:
        if len(_COVERED) >= COVERED_KEPT:
            _COVERED.clear()
        for a in got:
            a.setflags(write=False)
        _COVERED[key] = got
    return got


def _covered(p, max_runs: int | None):
    if p.run <= 0 or n_runs(p) == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z
    base, run = p.base, p.run
    lv = []
    for n, s in ((p.n1, p.s1), (p.n2, p.s2), (p.n3, p.s3)):
        if n == 1 or s == 0:
            continue
        if s < 0:  # the same set of starts, walked upward from the lowest
            base += (n - 1) * s
            s = -s
        lv.append((n, s))
    lv.sort(key=lambda t: t[1])
    rest = []
    for n, s in lv:
        if not rest and s <= run:
            run = (n - 1) * s + run  # these runs overlap or abut: one longer run
        else:
            rest.append((n, s))
    if not rest:
        return np.array([base], dtype=np.int64), np.array([base + run], dtype=np.int64)
    count = math.prod(n for n, _ in rest)
    if max_runs is not None and count > max_runs:
        from ..errors import UsageError

        raise UsageError(f"access pattern with {count} separate runs: more than the {max_runs} the simulator tracks")
    starts = np.array([base], dtype=np.int64)
    for n, s in rest:
        starts = (starts[None, :] + (np.arange(n, dtype=np.int64) * s)[:, None]).reshape(-1)
    gaps = [s - run - sum((m - 1) * t for m, t in rest[:i]) for i, (_, s) in enumerate(rest)]
    if min(gaps) < 0:  # blocks interleave or overlap: sort the starts
        starts = np.unique(starts)
    ends = starts + run
    if min(gaps) > 0:  # nested with a gap between all runs: they are the intervals
        return starts, ends
    return merge_intervals(starts, ends)


def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of [starts[k], ends[k]) intervals (any order, empty ones dropped) as sorted disjoint
    intervals, those that meet or touch merged: int64 (starts, ends)."""
    keep = ends > starts
    starts, ends = np.asarray(starts[keep], dtype=np.int64), np.asarray(ends[keep], dtype=np.int64)
    if starts.size == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    prev_end = np.maximum.accumulate(ends)
    new = np.ones(starts.size, dtype=bool)
    new[1:] = starts[1:] > prev_end[:-1]
    idx = np.flatnonzero(new)
    return starts[idx], np.maximum.reduceat(ends, idx)


def add_interval(starts: list[int], ends: list[int], a: int, b: int) -> None:
    """Add [a, b) to the sorted disjoint intervals starts[k]..ends[k] in place, merging what it meets
    or touches."""
    i = bisect.bisect_left(ends, a)
    j = bisect.bisect_right(starts, b)
    if i < j:
        a, b = min(a, starts[i]), max(b, ends[j - 1])
    starts[i:j] = [a]
    ends[i:j] = [b]


def first_overlap(a, b) -> int | None:
    """Lowest address shared by two sorted disjoint interval sets ((starts, ends) arrays, as `covered` gives), or None."""
    (sa, ea), (sb, eb) = a, b
    if not sa.size or not sb.size:
        return None
    j = np.searchsorted(eb, sa, side="right")  # per interval of a: the first of b ending after its start
    jc = np.minimum(j, sb.size - 1)
    meet = (j < sb.size) & (sb[jc] < ea)
    if not meet.any():
        return None
    return int(np.maximum(sa, sb[jc])[meet].min())
