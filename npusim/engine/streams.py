"""Stream-engine address generation and data movement, exactly from the decoded descriptor.

Address of run (i3, i2, i1) = (base & ~(word-1)) + i1*s1 + i2*s2 + i3*s3: the hardware ignores
base bits below alignment.word, and the strides are already bytes of the hardware unit the
descriptor was encoded in (decode multiplies back). Prefetch reads up to
stream_engine.prefetch_window bytes past the last demand byte (the highest address the pattern
touches), never at or past `limit` (limit 0 = no limit); prefetch is checked at hardware level
only: a prefetched byte outside every pool is a bus error (out-of-pool).
"""

from __future__ import annotations

import numpy as np

from ..memory import AccessPattern, gather, scatter
from ..memory.pattern import byte_addresses
from .hwfaults import make_fault


def se_pattern(args: dict, profile) -> AccessPattern:
    word = profile.alignment.word
    return AccessPattern(args["base"] & ~(word - 1), args["run"], args["n1"], args["s1"],
                         args["n2"], args["s2"], args["n3"], args["s3"])


def prefetch_range(pattern: AccessPattern, limit: int, profile) -> tuple[int, int]:
    """[lo, hi) of the bytes prefetched past the demand stream (empty when lo == hi)."""
    _, hi = pattern.extent()
    end = hi + profile.stream_engine.prefetch_window
    if limit:
        end = min(end, limit)
    return hi, max(hi, end)


def check_prefetch(amap, lo: int, hi: int, **where):
    """out-of-pool Fault for the first prefetched byte outside every pool, else None."""
    if hi <= lo:
        return None
    if amap.is_mapped(lo, hi - lo):
        return None
    a = lo
    while a < hi and amap.is_mapped(a, 1):
        p = amap.pool_of(a)
        a = min(hi, p.end)
    return make_fault("out-of-pool", f"prefetch past the stream reads unmapped address {a:#x} "
                      f"(prefetch window [{lo:#x}, {hi:#x}), limit register does not stop it)",
                      access="read", address=a, size=hi - lo, rule="prefetch must stay inside a pool (set limit)",
                      **where)


def _legal_mask(amap, addrs: np.ndarray, write: bool) -> np.ndarray:
    """Bytes the bus would accept: inside a pool (and writable for writes)."""
    ok = np.zeros(addrs.shape, dtype=bool)
    for p in amap.pools:
        if write and not p.writable:
            continue
        ok |= (addrs >= p.base) & (addrs < p.end)
    return ok


def read_stream(memory, pattern: AccessPattern, clipped: bool) -> np.ndarray:
    """The stream bytes; with `clipped`, illegal bytes read as 0 (keep_going after a bus fault)."""
    if not clipped:
        return gather(memory, pattern)
    addrs = byte_addresses(pattern)
    ok = _legal_mask(memory.map, addrs, write=False)
    out = np.zeros(addrs.size, dtype=np.uint8)
    for p in memory.map.pools:
        m = ok & (addrs >= p.base) & (addrs < p.end)
        if m.any():
            out[m] = memory.array(p)[addrs[m] - p.base]
    return out


def write_stream(memory, pattern: AccessPattern, data: np.ndarray, clipped: bool) -> np.ndarray | None:
    """Scatter the stream; with `clipped`, drop bytes the bus refuses. Returns the legal-byte mask."""
    if not clipped:
        scatter(memory, pattern, data)
        return None
    addrs = byte_addresses(pattern)
    ok = _legal_mask(memory.map, addrs, write=True)
    for p in memory.map.pools:
        m = ok & (addrs >= p.base) & (addrs < p.end)
        if m.any():
            memory.array(p)[addrs[m] - p.base] = data[m]
    return ok
