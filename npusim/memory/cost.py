"""Cost of an access pattern on one pool, and bank conflicts between concurrent requesters.

`pattern_cost` splits every run into AXI bursts (counted in closed form by `burst_math`; the
enumerating `_kernels.burst_stats` is the reference and the fallback for profiles whose periods are
too large for its tables): at most
`bus.max_burst_beats` beats of `bus.beat_bytes`, never crossing `bus.burst_boundary`,
partial first/last beats counted as whole beats. A burst whose bytes straddle a bank line
(`pool.bank_line` bytes) is split by the RAM: each crossing is a cross-bank split.

Cycles of one requester alone (NPU cycles):

    cycles = max(beats, mem_bytes / pool.bytes_per_cycle + cache_hits * cache.hit_cycles)
             + bursts * bus.burst_overhead_cycles
             + cross_bank_splits * timing.cross_bank_penalty_cycles

`beats` is bus time (one beat per cycle on a port); `mem_bytes` is the payload bytes, or,
with an `NpuCache` on a cacheable pool, the bytes of missed lines; each line hit costs the
profile's `cache.hit_cycles`. Writes are write-through (all bytes go to memory, no hits).
`unmapped_cost` is the bus-only cost of a pattern whose base lies in no pool.

`conflict_cycles` for requesters sharing a pool in one window: on a bank touched by n
requesters, their passes serialize -- the bank works sum(passes) instead of max(passes),
so the extra passes are sum - max (n-way conflict = n serialized passes). Extra cycles =
extra passes x timing.bank_conflict_cycles; bank_conflicts = extra passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..errors import UsageError
from ..hw.profile import HardwareProfile, Pool
from . import burst_math
from .cache import NpuCache
from .pattern import AccessPattern, runs

MAX_BANKS = 1 << 20  # per-bank arrays are sized by pool.banks: refuse absurd counts first


@dataclass(frozen=True)
class PatternCost:
    bytes: int
    bursts: int
    beats: int
    cross_bank_splits: int
    bank_bytes: np.ndarray  # payload bytes per bank
    cycles: float  # this requester alone (formula in the module docstring)
    bank_passes: np.ndarray  # beats touching each bank (the conflict model's passes)
    mem_bytes: int = 0  # bytes moved to/from the RAM itself (miss bytes when cached)
    cache_hits: int = 0
    cache_misses: int = 0


class ConflictCost(NamedTuple):
    cycles: float
    bank_conflicts: int


def pattern_cost(pool: Pool | str, pattern: AccessPattern, profile: HardwareProfile,
                 cache: NpuCache | None = None, access: str = "read", looked=None) -> PatternCost:
    """Bursts, beats, splits, per-bank load and cycles of `pattern` on `pool` (formula above).
    `looked`: on a cacheable pool, the `CacheResult` the NPU cache already gave this access (instead
    of asking `cache`)."""
    if isinstance(pool, str):
        pool = profile.pool_named(pool)
    bus = profile.bus
    if pool.banks > MAX_BANKS:
        raise UsageError(f"pool {pool.name}: {pool.banks} banks, more than the {MAX_BANKS} the cost model handles")
    geo = burst_math.geometry(bus.beat_bytes, bus.max_burst_beats, bus.burst_boundary, pool.base,
                              pool.interleave, pool.banks, pool.xor_hash)
    got = burst_math.stats(pattern, geo)
    if got is not None:
        bursts, beats, splits, bank_bytes, bank_passes = got
    else:
        bursts, beats, splits, bank_bytes, bank_passes = _enumerated(pool, pattern, bus)
    nbytes = pattern.nbytes
    mem_bytes, hits, misses = nbytes, 0, 0
    if pool.cacheable and (looked is not None or cache is not None):
        r = looked if looked is not None else cache.access(pattern, access)
        mem_bytes, hits, misses = r.miss_bytes, r.hits, r.misses
    cycles = (max(float(beats), mem_bytes / pool.bytes_per_cycle + hits * profile.cache.hit_cycles)
              + bursts * bus.burst_overhead_cycles
              + splits * profile.timing.cross_bank_penalty_cycles)
    return PatternCost(int(nbytes), int(bursts), int(beats), int(splits), bank_bytes, float(cycles),
                       bank_passes, int(mem_bytes), int(hits), int(misses))


def _enumerated(pool: Pool, pattern: AccessPattern, bus):
    """The reference: every run split into bursts (`_kernels.burst_stats`)."""
    from . import _kernels as K

    bank_bytes = np.zeros(pool.banks, dtype=np.int64)
    bank_passes = np.zeros(pool.banks, dtype=np.int64)
    bursts, beats, splits = K.burst_stats(
        runs(pattern), pattern.run, bus.beat_bytes, bus.max_burst_beats, bus.burst_boundary,
        pool.bank_line, pool.interleave, pool.banks, pool.xor_hash, pool.base, bank_bytes, bank_passes)
    return bursts, beats, splits, bank_bytes, bank_passes


def unmapped_cost(pattern: AccessPattern, profile: HardwareProfile) -> PatternCost:
    """Bus-only cost of a pattern whose base lies in no pool (no banks, no memory behind it):
    ceil(bytes / beat) beats in bursts of max_burst_beats, each paying the address phase."""
    bus = profile.bus
    beats = -(-pattern.nbytes // bus.beat_bytes)
    bursts = -(-beats // bus.max_burst_beats)
    empty = np.zeros(0, dtype=np.int64)
    return PatternCost(int(pattern.nbytes), int(bursts), int(beats), 0, empty,
                       float(beats + bursts * bus.burst_overhead_cycles), empty, int(pattern.nbytes), 0, 0)


def conflict_cycles(costs, pool: Pool | str, profile: HardwareProfile) -> ConflictCost:
    """Extra cycles and conflict count when `costs` (PatternCost of one pool) run concurrently."""
    costs = list(costs)
    if isinstance(pool, str):
        pool = profile.pool_named(pool)
    if len(costs) < 2:
        return ConflictCost(0.0, 0)
    passes = np.stack([np.asarray(c.bank_passes, dtype=np.int64) for c in costs])
    if passes.shape[1] != pool.banks:
        raise UsageError(f"conflict_cycles: costs have {passes.shape[1]} banks, pool {pool.name} has {pool.banks}")
    return passes_conflicts(passes, profile)


def passes_conflicts(passes: np.ndarray, profile: HardwareProfile) -> ConflictCost:
    """`conflict_cycles` of the requesters whose bank passes are the rows of `passes`."""
    extra = int((passes.sum(axis=0) - passes.max(axis=0)).sum()) if passes.shape[0] > 1 else 0
    return ConflictCost(extra * profile.timing.bank_conflict_cycles, extra)
