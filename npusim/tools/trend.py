"""Leak trends: a bounded series of (run, bytes) samples and a robust slope with a verdict.

`Series` keeps at most `capacity` points whatever the run length: when it is full it drops every
other point and from then on keeps every 2nd (4th, ...) sample, so an overnight soak holds the same
memory as a short run and the points stay evenly spread over all the runs.

`leak_trend(series)` fits the Theil-Sen slope (median of the pairwise slopes: robust to outliers and
to the bimodal noise of in-flight allocations) with Sen's rank confidence interval (the normal
approximation of Kendall's S, at `z` standard deviations). It calls a leak only when the whole
interval lies above zero and the fitted growth over the window is at least `min_growth` bytes: an
exactly flat series (a correct runtime) has every pairwise slope 0, and a single step (one
allocation kept once) has at least half its pairwise slopes 0, so neither is ever a leak; a
staircase (a buffer lost every k runs) or a ramp (bytes lost on every free) is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FIT_POINTS = 512  # points the fit uses at most (pairwise slopes: ~131k)
Z_LEAK = 3.29  # two-sided 99.9 %: no false positive over long clean runs
MIN_SAMPLES = 16


class Series:
    """Bounded, evenly decimated samples (x increasing), in arrays allocated once: the memory a
    series takes is the same from its first sample to its last."""

    def __init__(self, capacity: int = FIT_POINTS):
        if capacity < 4:
            raise ValueError("Series capacity must be >= 4")
        self.capacity = capacity
        self.stride = 1
        self._x = np.zeros(capacity, dtype=np.float64)
        self._y = np.zeros(capacity, dtype=np.float64)
        self._n = 0
        self._seen = 0

    def add(self, x: float, y: float) -> None:
        k = self._seen
        self._seen += 1
        if k % self.stride:
            return
        if self._n >= self.capacity:
            half = self._n // 2 + self._n % 2
            self._x[:half] = self._x[0:self._n:2]
            self._y[:half] = self._y[0:self._n:2]
            self._n = half
            self.stride *= 2
            if k % self.stride:
                return
        self._x[self._n] = x
        self._y[self._n] = y
        self._n += 1

    def __len__(self) -> int:
        return self._n

    @property
    def seen(self) -> int:
        return self._seen

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return self._x[:self._n].copy(), self._y[:self._n].copy()


@dataclass(frozen=True)
class LeakTrend:
    samples: int
    slope: float  # bytes per run (Theil-Sen)
    low: float  # confidence interval of the slope
    high: float
    growth: float  # slope x the fitted window, bytes
    leak: bool
    runs_to_exhaustion: float | None  # at this slope, from the last sample, with `free` bytes left

    @property
    def verdict(self) -> str:
        if self.samples < MIN_SAMPLES:
            return "too few runs"
        return "leak" if self.leak else "flat"

    def text(self) -> str:
        if self.samples < MIN_SAMPLES:
            return f"too few runs for a trend ({self.samples} samples, need {MIN_SAMPLES})"
        s = (f"{self.slope:+,.1f} B/run (99.9 % interval {self.low:+,.1f} .. {self.high:+,.1f}, "
             f"{self.samples} samples): {self.verdict}")
        if self.leak and self.runs_to_exhaustion is not None:
            s += f", pool exhausted in ~{self.runs_to_exhaustion:,.0f} more runs"
        return s

    def to_json(self) -> dict:
        return {"samples": self.samples, "bytes_per_run": self.slope, "low": self.low, "high": self.high,
                "growth": self.growth, "verdict": self.verdict, "runs_to_exhaustion": self.runs_to_exhaustion}


def theil_sen(x: np.ndarray, y: np.ndarray, z: float = Z_LEAK) -> tuple[float, float, float]:
    """(slope, low, high): the median pairwise slope and Sen's confidence interval at `z`."""
    n = x.size
    if n < 2:
        return 0.0, 0.0, 0.0
    i, j = np.triu_indices(n, 1)
    dx = x[j] - x[i]
    keep = dx != 0
    slopes = np.sort((y[j] - y[i])[keep] / dx[keep])
    m = slopes.size
    if m == 0:
        return 0.0, 0.0, 0.0
    c = z * np.sqrt(n * (n - 1) * (2 * n + 5) / 18.0)
    lo_k = int(np.clip(np.floor((m - c) / 2.0), 0, m - 1))
    hi_k = int(np.clip(np.ceil((m + c) / 2.0), 0, m - 1))
    return float(np.median(slopes)), float(slopes[lo_k]), float(slopes[hi_k])


def leak_trend(series: Series, warmup: float = 0.0, min_growth: float = 32.0, free: float | None = None,
               z: float = Z_LEAK) -> LeakTrend:
    """The trend of `series` over the samples with x >= `warmup` (see the module docstring)."""
    x, y = series.arrays()
    keep = x >= warmup
    x, y = x[keep], y[keep]
    slope, low, high = theil_sen(x, y, z)
    span = float(x[-1] - x[0]) if x.size > 1 else 0.0
    growth = slope * span
    leak = x.size >= MIN_SAMPLES and low > 0 and growth >= min_growth
    left = None
    if leak and free is not None:
        left = max(0.0, float(free)) / slope
    return LeakTrend(int(x.size), slope, low, high, growth, leak, left)
