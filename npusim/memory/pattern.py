"""Access patterns exactly as a stream engine generates them.

`n3 x n2 x n1` runs of `run` contiguous bytes; run (i3, i2, i1) starts at
`base + i1*s1 + i2*s2 + i3*s3` (i1 fastest). The byte stream is the runs in that order.
Any word masking of the base (`alignment.word`) is the caller's (the engine's) job:
the pattern holds the addresses the hardware really uses. Strides may be negative or 0.
`n_runs`/`nbytes` come from the counts alone: callers bound a pattern (the engine's watchdog
check) before anything is materialised; `runs` refuses more than `MAX_RUNS` runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import UsageError

MAX_RUNS = 1 << 27  # run starts `runs` materialises at most (1 GiB of int64)


@dataclass(frozen=True)
class AccessPattern:
    base: int
    run: int
    n1: int = 1
    s1: int = 0
    n2: int = 1
    s2: int = 0
    n3: int = 1
    s3: int = 0

    def __post_init__(self):
        if self.run < 0 or min(self.n1, self.n2, self.n3) < 0:
            raise UsageError(f"access pattern {self}: run and counts must be >= 0")

    @classmethod
    def linear(cls, base: int, size: int) -> "AccessPattern":
        return cls(base, size)

    @property
    def n_runs(self) -> int:
        return self.n1 * self.n2 * self.n3

    @property
    def nbytes(self) -> int:
        return self.n_runs * self.run

    def extent(self) -> tuple[int, int]:
        """[lo, hi) covering every byte (lo == hi when the pattern is empty)."""
        if self.nbytes == 0:
            return self.base, self.base
        lo = hi = self.base
        for n, s in ((self.n1, self.s1), (self.n2, self.s2), (self.n3, self.s3)):
            span = (n - 1) * s
            lo += min(span, 0)
            hi += max(span, 0)
        return lo, hi + self.run

    def run_index(self, k: int) -> tuple[int, int, int]:
        """(i3, i2, i1) of the k-th run in stream order."""
        i1 = k % self.n1
        i2 = (k // self.n1) % self.n2
        return k // (self.n1 * self.n2), i2, i1


def runs(p: AccessPattern) -> np.ndarray:
    """Start address of every run, in stream order (int64); at most MAX_RUNS runs."""
    if p.n_runs > MAX_RUNS:
        raise UsageError(f"access pattern with {p.n_runs} runs: more than the {MAX_RUNS} the simulator materialises")
    a3 = np.arange(p.n3, dtype=np.int64) * p.s3
    a2 = np.arange(p.n2, dtype=np.int64) * p.s2
    a1 = np.arange(p.n1, dtype=np.int64) * p.s1
    return (p.base + a3[:, None, None] + a2[None, :, None] + a1[None, None, :]).reshape(-1)


def byte_addresses(p: AccessPattern) -> np.ndarray:
    """Every byte address in stream order (for tests and small patterns; O(bytes) memory)."""
    return (runs(p)[:, None] + np.arange(p.run, dtype=np.int64)[None, :]).reshape(-1)


def covered_intervals(p: AccessPattern) -> np.ndarray:
    """Sorted, disjoint [lo, hi) intervals (shape (k, 2), int64) of the bytes the pattern touches."""
    if p.nbytes == 0:
        return np.zeros((0, 2), dtype=np.int64)
    s = np.unique(runs(p))
    e = s + p.run
    # merge: a new interval starts where the start is beyond every previous end
    prev_end = np.maximum.accumulate(e)
    new = np.ones(s.size, dtype=bool)
    new[1:] = s[1:] > prev_end[:-1]
    idx = np.flatnonzero(new)
    ends = np.maximum.reduceat(e, idx)
    return np.stack([s[idx], ends], axis=1)
