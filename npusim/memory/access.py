"""Move bytes between simulated memory and a stream: `gather` and `scatter`.

Bytes of a pattern that fall outside every pool are never touched: `gather` returns 0
for them and `scatter` drops them, and `scatter` never writes a read-only pool (the bus
refuses those bytes; the checker reports such accesses before they run).
"""

from __future__ import annotations

import numpy as np

from ..errors import UsageError
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


def _runs_view(arr: np.ndarray, off: int, p: AccessPattern) -> np.ndarray:
    """[n3][n2][n1][run] view of the pattern's bytes in `arr` (offset `off` of its first run)."""
    return np.lib.stride_tricks.as_strided(arr[off:], shape=(p.n3, p.n2, p.n1, p.run), strides=(p.s3, p.s2, p.s1, 1),
                                           writeable=arr.flags.writeable)


def _pools_touched(memory: Memory, p: AccessPattern, writable: bool = False):
    lo, hi = p.extent()
    return [q for q in memory.map.pools if q.base < hi and lo < q.end and (q.writable or not writable)]


def gather(memory: Memory, pattern: AccessPattern) -> np.ndarray:
    """The pattern's byte stream (uint8, length pattern.nbytes), read from `memory`; a single run
    inside one constant of a read-only pool comes back as a read-only view of its bytes."""
    if pattern.n_runs == 1:
        view = memory.constant_view(pattern.base, pattern.run)
        if view is not None:
            return view
    if pattern.nbytes == 0:
        return np.zeros(0, dtype=np.uint8)
    pool = _one_pool(memory, pattern)
    if pool is not None:  # one strided copy
        lo, hi = pattern.extent()
        arr = memory.existing(pool, lo - pool.base, hi - pool.base)
        if arr is None:
            return np.zeros(pattern.nbytes, dtype=np.uint8)
        out = np.empty(pattern.nbytes, dtype=np.uint8)
        out.reshape(pattern.n3, pattern.n2, pattern.n1, pattern.run)[...] = _runs_view(arr, pattern.base - pool.base,
                                                                                       pattern)
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


def scatter(memory: Memory, pattern: AccessPattern, data) -> None:
    """Write the stream `data` (pattern.nbytes bytes) to the pattern's addresses in writable pools."""
    from . import _kernels as K

    buf = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    if buf.size != pattern.nbytes:
        raise UsageError(f"scatter: {buf.size} bytes of data for a pattern of {pattern.nbytes} bytes")
    if pattern.nbytes == 0:
        return
    pool = _one_pool(memory, pattern)
    if pool is not None and _disjoint(pattern):  # one strided copy (no run overwrites another)
        if pool.writable:
            _runs_view(memory.array(pool), pattern.base - pool.base, pattern)[...] = \
                buf.reshape(pattern.n3, pattern.n2, pattern.n1, pattern.run)
        return
    starts = runs(pattern)
    for pool in _pools_touched(memory, pattern, writable=True):
        K.scatter_pool(memory.array(pool), pool.base, starts, pattern.run, buf)
