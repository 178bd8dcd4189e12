"""The SimPy machine that executes decoded programs: epoch controller, stream engines, units,
timing (fast analytic and burst-level reference), stats and Perfetto trace."""

from .machine import Machine, MachineOptions, ReplayRefused
from .result import RunResult
from .stats import EpochStats, LayerStats, Stats

__all__ = ["Machine", "MachineOptions", "ReplayRefused", "RunResult", "Stats", "EpochStats", "LayerStats"]
