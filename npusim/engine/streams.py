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


def min_cycles(pattern: AccessPattern, profile) -> int:
    """Fewest cycles the bus could move `pattern` in (from its counts alone, nothing materialised):
    every run is at least ceil(run / beat) beats, in bursts of at most max_burst_beats, each burst
    paying its address phase."""
    bus = profile.bus
    beats = -(-pattern.run // bus.beat_bytes)
    bursts = -(-beats // bus.max_burst_beats)
    return pattern.n_runs * (beats + bursts * int(bus.burst_overhead_cycles))


def read_stream(memory, pattern: AccessPattern, **kept) -> np.ndarray:
    """The stream bytes; bytes outside every pool read as 0 (keep_going after a bus fault). `kept`:
    `win=`, the pattern's `memory.window` kept by the caller."""
    return gather(memory, pattern, **kept)


def write_stream(memory, pattern: AccessPattern, data: np.ndarray, **kept) -> None:
    """Scatter the stream; the bus drops bytes outside every pool or in a read-only pool. `kept`: as
    for `read_stream`."""
    scatter(memory, pattern, data, **kept)
