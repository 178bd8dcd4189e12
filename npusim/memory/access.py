"""Move bytes between simulated memory and a stream: `gather` and `scatter`.

Bytes of a pattern that fall outside every pool are never touched: `gather` returns 0
for them and `scatter` drops them, and `scatter` never writes a read-only pool (the bus
refuses those bytes; the checker reports such accesses before they run). What the pattern and
the address map alone decide (`window`) can be kept by a caller that moves it again.
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


def window(memory: Memory, p: AccessPattern) -> Window | None:
    """The `Window` of `p` in `memory`'s address map, or None (empty, or not one pool's strided view)."""
    pool = _one_pool(memory, p) if p.nbytes else None
    if pool is None:
        return None
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
    if win is not None:  # one strided copy
        arr = memory.existing(win.pool, win.lo, win.hi)
        if arr is None:
            return np.zeros(pattern.nbytes, dtype=np.uint8)
        if win.dense:
            return arr[win.off:win.off + pattern.nbytes].copy()
        out = np.empty(pattern.nbytes, dtype=np.uint8)
        out.reshape(win.shape)[...] = win.view(arr)
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


def scatter(memory: Memory, pattern: AccessPattern, data, win=_UNKNOWN) -> None:
    """Write the stream `data` (pattern.nbytes bytes) to the pattern's addresses in writable pools.
    `win`: as for `gather`."""
    buf = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    if buf.size != pattern.nbytes:
        raise UsageError(f"scatter: {buf.size} bytes of data for a pattern of {pattern.nbytes} bytes")
    if pattern.nbytes == 0:
        return
    if win is _UNKNOWN:
        win = window(memory, pattern)
    if win is not None and win.disjoint:  # one strided copy (no run overwrites another)
        if win.pool.writable:
            arr = memory.array(win.pool)
            if win.dense:
                arr[win.off:win.off + buf.size] = buf
            else:
                win.view(arr)[...] = buf.reshape(win.shape)
        return
    from . import _kernels as K

    starts = runs(pattern)
    for pool in _pools_touched(memory, pattern, writable=True):
        K.scatter_pool(memory.array(pool), pool.base, starts, pattern.run, buf)
