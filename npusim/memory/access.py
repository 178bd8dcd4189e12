"""Move bytes between simulated memory and a stream: `gather` and `scatter`.

Bytes of a pattern that fall outside every pool are never touched: `gather` returns 0
for them and `scatter` drops them, and `scatter` never writes a read-only pool (the bus
refuses those bytes; the checker reports such accesses before they run). What the pattern and
the address map alone decide (`window`: one pool's strided view, or a `Split` of a pattern over
adjacent pools into such views) can be kept by a caller that moves it again.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import UsageError
from ..hw.profile import Pool
from .addrmap import Memory
from .pattern import AccessPattern, runs


def _one_pool(memory: Memory, p: AccessPattern):
    """The pool holding every byte of `p` when its strides are >= 0 (so that the runs are a strided
    view of the pool's bytes), else None."""
    if min(p.s1, p.s2, p.s3) < 0:
        return None
    lo, hi = p.extent()
    pool = memory.map.pool_of(lo)
    return pool if pool is not None and hi <= pool.end else None


def _disjoint(p: AccessPattern) -> bool:
    """Whether no two bytes of `p` share an address (strides >= 0): each stride, smallest first,
    clears the extent of the dimensions inside it."""
    extent = p.run
    for n, s in sorted(((p.n1, p.s1), (p.n2, p.s2), (p.n3, p.s3)), key=lambda t: t[1]):
        if n > 1:
            if s < extent:
                return False
            extent += (n - 1) * s
    return True


@dataclass(frozen=True)
class Window:
    """Where the bytes of a non-empty pattern lie when one pool holds them all as a strided view (strides
    >= 0): what `gather` and `scatter` work out from the pattern and the address map alone, kept by a
    caller that moves the same pattern again (`window`)."""

    pool: Pool
    lo: int  # the extent, as offsets in the pool
    hi: int
    off: int  # offset of the first byte
    shape: tuple  # (n3, n2, n1, run)
    strides: tuple
    dense: bool  # the stream is the bytes [off, off + nbytes) in order
    disjoint: bool  # no two bytes of the stream share an address

    def view(self, arr: np.ndarray) -> np.ndarray:
        """The [n3][n2][n1][run] view of the pattern's bytes in the pool's array."""
        return np.ndarray(self.shape, np.uint8, arr, self.off, self.strides)

    def read_into(self, memory: Memory, out: np.ndarray) -> None:
        """out (the stream's bytes, contiguous) = the pattern's bytes (zeros in a pool never written)."""
        arr = memory.existing(self.pool, self.lo, self.hi)
        if arr is None:
            out[...] = 0
        else:
            self.load(arr, out)

    def load(self, arr: np.ndarray, out: np.ndarray) -> None:
        """`read_into` from the pool's array `arr` (`Memory.existing` of the window's pool, kept by a caller)."""
        if self.dense:
            out[...] = arr[self.off:self.off + out.size]
        else:
            out.reshape(self.shape)[...] = self.view(arr)

    def write_from(self, memory: Memory, buf: np.ndarray) -> None:
        """Store the stream `buf` at the pattern's bytes (a disjoint window of a writable pool)."""
        self.store(memory.array(self.pool), buf)

    def store(self, arr: np.ndarray, buf: np.ndarray) -> None:
        """`write_from` into the pool's array `arr` (`Memory.array` of the window's pool, kept by a caller
        that stores many streams)."""
        if self.dense:
            arr[self.off:self.off + buf.size] = buf
        else:
            self.view(arr)[...] = buf.reshape(self.shape)

    def stream_of(self, arr: np.ndarray) -> np.ndarray:
        """The stream's bytes as a view of the pool's array `arr`: flat for a dense window, else its
        [n3][n2][n1][run] strided view."""
        if self.dense:
            n3, n2, n1, run = self.shape
            return arr[self.off:self.off + n3 * n2 * n1 * run]
        return self.view(arr)


SPLIT_MAX_ROWS = 64  # (i3, i2) rows of runs a `Split` walks; a pattern of more takes the Numba loops


@dataclass(frozen=True)
class Split:
    """Where the bytes of a pattern lie when they span adjacent pools, every byte in one: the stream cut
    into pieces `(stream offset, bytes, Window)`, in stream order, each a strided view of one pool (a run
    across a pool boundary is cut at it). Moved piece by piece as a `Window` is (`gather`, `scatter`)."""

    pieces: tuple
    disjoint: bool
    dense = False  # never one run of bytes of one pool


def _split(memory: Memory, p: AccessPattern) -> Split | None:
    """The `Split` of `p` (strides >= 0), or None when a byte lies outside every pool or the pattern has
    more than SPLIT_MAX_ROWS rows of runs."""
    if p.n3 * p.n2 > SPLIT_MAX_ROWS:
        return None
    pool_of = memory.map.pool_of
    pieces, at = [], 0
    for i3 in range(p.n3):
        for i2 in range(p.n2):
            row = p.base + i3 * p.s3 + i2 * p.s2
            i1 = 0
            while i1 < p.n1:
                a = row + i1 * p.s1
                pool = pool_of(a)
                if pool is None:
                    return None
                if a + p.run <= pool.end:  # the runs from i1 on that end inside this pool
                    n = p.n1 - i1 if p.s1 == 0 else min(p.n1 - i1, (pool.end - p.run - a) // p.s1 + 1)
                    sub = AccessPattern(a, p.run, n, p.s1)
                    i1 += n
                else:  # one run across pool boundaries: a piece per pool
                    sub = AccessPattern(a, pool.end - a)
                    while sub.base + sub.run < a + p.run:
                        pieces.append((at, sub.run, window(memory, sub)))
                        at += sub.run
                        nxt = pool_of(sub.base + sub.run)
                        if nxt is None:
                            return None
                        sub = AccessPattern(nxt.base, min(nxt.end, a + p.run) - nxt.base)
                    i1 += 1
                pieces.append((at, sub.nbytes, window(memory, sub)))
                at += sub.nbytes
    return Split(tuple(pieces), _disjoint(p))


def window(memory: Memory, p: AccessPattern) -> Window | Split | None:
    """The `Window` of `p` in `memory`'s address map, its `Split` over adjacent pools, or None (empty,
    a negative stride, or a byte outside every pool)."""
    if not p.nbytes or min(p.s1, p.s2, p.s3) < 0:
        return None
    pool = _one_pool(memory, p)
    if pool is None:
        return _split(memory, p)
    lo, hi = p.extent()
    dense = all(n <= 1 or s == inner for n, s, inner in ((p.n1, p.s1, p.run), (p.n2, p.s2, p.run * p.n1),
                                                         (p.n3, p.s3, p.run * p.n1 * p.n2)))
    return Window(pool, lo - pool.base, hi - pool.base, p.base - pool.base, (p.n3, p.n2, p.n1, p.run),
                  (p.s3, p.s2, p.s1, 1), dense, _disjoint(p))


def _pools_touched(memory: Memory, p: AccessPattern, writable: bool = False):
    lo, hi = p.extent()
    return [q for q in memory.map.pools if q.base < hi and lo < q.end and (q.writable or not writable)]


_UNKNOWN = object()


def gather(memory: Memory, pattern: AccessPattern, win=_UNKNOWN) -> np.ndarray:
    """The pattern's byte stream (uint8, length pattern.nbytes), read from `memory`; a single run
    inside one constant of a read-only pool comes back as a read-only view of its bytes. `win`: the
    pattern's `window` in this memory's map, when the caller kept it."""
    if pattern.n_runs == 1:
        view = memory.constant_view(pattern.base, pattern.run)
        if view is not None:
            return view
    if pattern.nbytes == 0:
        return np.zeros(0, dtype=np.uint8)
    if win is _UNKNOWN:
        win = window(memory, pattern)
    if isinstance(win, Window):  # one strided copy
        arr = memory.existing(win.pool, win.lo, win.hi)
        if arr is None:
            return np.zeros(pattern.nbytes, dtype=np.uint8)
        if win.dense:
            return arr[win.off:win.off + pattern.nbytes].copy()
        out = np.empty(pattern.nbytes, dtype=np.uint8)
        out.reshape(win.shape)[...] = win.view(arr)
        return out
    if win is not None:  # a strided copy per piece
        out = np.empty(pattern.nbytes, dtype=np.uint8)
        for at, n, w in win.pieces:
            w.read_into(memory, out[at:at + n])
        return out
    from . import _kernels as K  # Numba: imported only when bytes really move

    out = np.zeros(pattern.nbytes, dtype=np.uint8)
    starts = runs(pattern)
    lo, hi = pattern.extent()
    for pool in _pools_touched(memory, pattern):
        arr = memory.existing(pool, max(lo, pool.base) - pool.base, min(hi, pool.end) - pool.base)
        if arr is not None:
            K.gather_pool(arr, pool.base, starts, pattern.run, out)
    return out


def stream_bytes(data, nbytes: int) -> np.ndarray:
    """`data` as the flat uint8 stream `scatter` stores (no copy of a contiguous array), checked to be
    `nbytes` long."""
    if data.__class__ is np.ndarray and data.ndim == 1 and data.dtype == np.uint8 and data.flags.c_contiguous:
        buf = data
    else:
        buf = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    if buf.size != nbytes:
        raise UsageError(f"scatter: {buf.size} bytes of data for a pattern of {nbytes} bytes")
    return buf


def scatter(memory: Memory, pattern: AccessPattern, data, win=_UNKNOWN) -> None:
    """Write the stream `data` (pattern.nbytes bytes) to the pattern's addresses in writable pools.
    `win`: as for `gather`."""
    buf = stream_bytes(data, pattern.nbytes)
    if pattern.nbytes == 0:
        return
    if win is _UNKNOWN:
        win = window(memory, pattern)
    if isinstance(win, Window) and win.disjoint:  # one strided copy (no run overwrites another)
        if win.pool.writable:
            win.write_from(memory, buf)
        return
    if win is not None and win.disjoint:  # a strided copy per piece of a writable pool
        for at, n, w in win.pieces:
            if w.pool.writable:
                w.write_from(memory, buf[at:at + n])
        return
    from . import _kernels as K

    starts = runs(pattern)
    for pool in _pools_touched(memory, pattern, writable=True):
        K.scatter_pool(memory.array(pool), pool.base, starts, pattern.run, buf)
