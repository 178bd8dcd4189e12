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
    from . import _kernels as K  # Numba: imported only when bytes really move

    out = np.zeros(pattern.nbytes, dtype=np.uint8)
    if pattern.nbytes == 0:
        return out
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
    starts = runs(pattern)
    for pool in _pools_touched(memory, pattern, writable=True):
        K.scatter_pool(memory.array(pool), pool.base, starts, pattern.run, buf)
