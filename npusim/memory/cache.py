"""NPU cache in front of the external memories: set-associative, LRU, 64 B lines.

Reads allocate lines; writes are modelled write-through, no-allocate (every written
byte goes to memory): they are counted as `writes`, neither hits nor misses, so hits/misses
are honest read statistics. State persists across calls until `reset()`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hw.profile import HardwareProfile
from . import _kernels as K
from .pattern import AccessPattern, runs


@dataclass(frozen=True)
class CacheResult:
    lines: int  # line look-ups (consecutive repeats within a stream count once)
    hits: int
    misses: int
    miss_bytes: int  # bytes moved to/from the external memory (misses x line; all bytes of a write)
    writes: int = 0  # line look-ups of a write (write-through, no allocate)


class NpuCache:
    def __init__(self, profile: HardwareProfile):
        c = profile.cache
        self.line = c.line
        self.ways = c.ways
        self.sets = c.sets
        self.hit_cycles = c.hit_cycles
        self.reset()

    def reset(self) -> None:
        self.tags = np.full((self.sets, self.ways), -1, dtype=np.int64)
        self.stamps = np.zeros((self.sets, self.ways), dtype=np.int64)
        self.clock = 0
        self.hits = 0
        self.misses = 0
        self.writes = 0

    def access_lines(self, lines: np.ndarray) -> CacheResult:
        """Look up line indices (address // line) in order."""
        lines = np.ascontiguousarray(lines, dtype=np.int64)
        h, m, self.clock = K.cache_access(self.tags, self.stamps, lines, self.clock)
        self.hits += h
        self.misses += m
        return CacheResult(int(lines.size), int(h), int(m), int(m) * self.line)

    def access(self, pattern: AccessPattern, access: str = "read") -> CacheResult:
        lines = K.run_lines(runs(pattern), pattern.run, self.line)
        if access == "write":
            self.writes += int(lines.size)
            return CacheResult(int(lines.size), 0, 0, pattern.nbytes, int(lines.size))
        return self.access_lines(lines)
