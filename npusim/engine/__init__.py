"""The SimPy machine that executes decoded programs: epoch controller, stream engines, units,
timing (fast analytic and burst-level reference), stats and Perfetto trace."""

from .epoch_values import ReplayRefused
from .machine import Machine, MachineOptions
from .result import RunResult
from .stats import EpochStats, LayerStats, Stats

__all__ = ["Machine", "MachineOptions", "ReplayRefused", "RunResult", "Stats", "EpochStats", "LayerStats"]
