"""Options of a stress / soak run, their limits and the parsers of their CLI forms (no heavy imports:
the CLI builds its arguments from this module)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import UsageError

MAX_RUNS = 10**9
MAX_FRAMES = 256  # distinct frames (their references are kept in memory)
MAX_STEPS = 10_000
MAX_DURATION_S = 7 * 24 * 3600
PLOT_POINTS = 4096


@dataclass(frozen=True)
class StressOptions:
    runs: int = 1000  # per process (with `duration`: until the time is up)
    duration: float | None = None  # host seconds (overnight mode)
    processes: int | None = None  # default: one per target
    strategy: str = "shared"  # processes.POOL_STRATEGIES
    schedule: str = "round-robin"
    seed: int = 0
    frames: int = 8
    inputs_dir: str | None = None
    steps: int = 1  # generative loop: each step's outputs are the next step's inputs
    check_every: int = 1  # 0: every run timing-only
    period_ms: float = 0.0  # mean time between a process's jobs (0: back to back)
    jitter: float = 0.5  # +- fraction of the period, seeded
    monitor: float | None = None  # seconds between monitor lines
    warmup: int | None = None  # runs per process left out of the leak fit (default 10 %, 1..100)
    buffering: str = "per-run"
    alloc_align: int = 32
    alloc_pad: int = 0
    leak_output_every: int = 0
    short_free: int = 0
    keep_going: bool = False
    csv: str | None = None
    plot: str | None = None

    def __post_init__(self):
        ints = {"runs": (1, MAX_RUNS), "frames": (1, MAX_FRAMES), "steps": (1, MAX_STEPS), "check_every": (0, MAX_RUNS),
                "seed": (0, 2**63 - 1)}
        for k, (lo, hi) in ints.items():
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise UsageError(f"stress {k}={v!r}: expected an integer in [{lo}, {hi}]")
        if self.processes is not None and (isinstance(self.processes, bool) or not isinstance(self.processes, int)
                                           or self.processes < 1):
            raise UsageError(f"stress processes={self.processes!r}: expected a positive integer")
        if self.duration is not None and not 0 < self.duration <= MAX_DURATION_S:
            raise UsageError(f"stress duration={self.duration!r}: expected 0 < seconds <= {MAX_DURATION_S}")
        if not 0 <= self.period_ms <= 1e6 or not 0 <= self.jitter <= 1:
            raise UsageError("stress: period_ms must lie in [0, 1e6] and jitter in [0, 1]")
        if self.monitor is not None and not 0 < self.monitor <= 3600:
            raise UsageError(f"stress monitor={self.monitor!r}: expected 0 < seconds <= 3600")
        self.runtime_config()  # validates the runtime fields

    def runtime_config(self, timing_only: bool = False):
        from ..processes import RuntimeBugs, RuntimeConfig

        return RuntimeConfig(strategy=self.strategy, schedule=self.schedule, seed=self.seed, buffering=self.buffering,
                             io_align=self.alloc_align, io_pad=self.alloc_pad, timing_only=timing_only,
                             keep_going=self.keep_going,
                             bugs=RuntimeBugs(self.leak_output_every, self.short_free))


def parse_duration(text: str) -> float:
    """'8h', '30m', '45s', '1h30m', '90' (seconds) -> seconds."""
    t = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        return float(t)
    parts = re.findall(r"(\d+(?:\.\d+)?)([hms])", t)
    if not parts or "".join(a + b for a, b in parts) != t:
        raise UsageError(f"duration {text!r}: expected e.g. 8h, 30m, 45s, 1h30m or seconds")
    return sum(float(a) * {"h": 3600, "m": 60, "s": 1}[b] for a, b in parts)


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """'224x224,256x256' -> [(224, 224), (256, 256)]."""
    out = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)x(\d+)\s*", part)
        if not m or not (1 <= int(m[1]) <= 8192 and 1 <= int(m[2]) <= 8192):
            raise UsageError(f"--shapes {text!r}: expected HxW[,HxW...] with sides in [1, 8192]")
        out.append((int(m[1]), int(m[2])))
    return out


MAX_SEEDS = 1024


def parse_seeds(text: str) -> list[int]:
    """'0-15' or '0,3,7' (or a mix: '0-3,9') -> seeds, in order, each once."""
    out: list[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not m or (m[2] is not None and int(m[2]) < int(m[1])):
            raise UsageError(f"--seeds {text!r}: expected A-B or A,B,... (non-negative integers, A <= B)")
        lo, hi = int(m[1]), int(m[2] if m[2] is not None else m[1])
        if hi - lo + 1 + len(out) > MAX_SEEDS:
            raise UsageError(f"--seeds {text!r}: at most {MAX_SEEDS} seeds")
        out += [s for s in range(lo, hi + 1) if s not in out]
    return out
