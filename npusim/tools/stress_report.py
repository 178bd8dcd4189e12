"""The report of a stress / soak run: counts, cycles, pools, leak trends, the first fault; text and JSON."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

EXIT_LEAK = 4  # a leak trend or an exhausted pool (`npusim stress`)


@dataclass
class StressReport:
    targets: list
    options: object  # StressOptions
    processes: dict  # name -> target name
    runs: int = 0  # jobs ended
    inferences: int = 0
    status: Counter = field(default_factory=Counter)  # inference status -> count
    faults: Counter = field(default_factory=Counter)  # fault class -> count
    checked: int = 0
    drifted: int = 0
    max_drift: float = 0.0
    ref_failed: int = 0
    worst_cosine: float | None = None
    worst_rel: float | None = None
    reference: str = ""  # what the outputs were compared with (reference.REFERENCE_LABELS)
    cycles_min: float | None = None
    cycles_max: float | None = None
    cycles_median: float | None = None
    seconds: float = 0.0
    sim_cycles: float = 0.0
    npu_busy: float = 0.0
    pools: list = field(default_factory=list)  # PoolStats at the end
    max_fragmentation: float = 0.0
    trends: dict = field(default_factory=dict)  # process -> LeakTrend
    first_fault: object = None  # InferenceResult
    first_fault_text: str = ""
    exhausted: str = ""
    rss_warm: int = 0
    rss_end: int = 0
    rss_max: int = 0
    clock_hz: float = 1e9

    @property
    def leak(self) -> bool:
        return any(t.leak for t in self.trends.values()) or bool(self.exhausted)

    @property
    def rss_growth(self) -> float:
        return (self.rss_end - self.rss_warm) / self.rss_warm if self.rss_warm else 0.0

    @property
    def exit_code(self) -> int:
        from ..errors import EXIT_FAULT, EXIT_OK, EXIT_VALIDATION_FAILED

        if self.faults:
            return EXIT_FAULT
        if self.leak:
            return EXIT_LEAK
        if self.drifted or self.ref_failed:
            return EXIT_VALIDATION_FAILED
        return EXIT_OK

    def verdict(self) -> str:
        return {139: "FAULT", EXIT_LEAK: "LEAK", 3: "DRIFT", 0: "clean"}[self.exit_code]

    def text(self) -> str:
        o = self.options
        names = ", ".join(f"{p} ({t})" for p, t in self.processes.items())
        rate = self.inferences / self.seconds if self.seconds else 0.0
        lines = [f"npusim stress: {self.runs:,} runs ({self.inferences:,} inferences) of {names}; pool {o.strategy}, "
                 f"schedule {o.schedule}, seed {o.seed}; {self.seconds:.1f} s ({rate:.1f} inferences/s)"]
        st = ", ".join(f"{n:,} {k}" for k, n in sorted(self.status.items()))
        lines.append(f"  runs        {st or 'none'}")
        if self.checked:
            lines.append(f"  outputs     {self.checked:,} compared with the single-process reference: {self.drifted:,} "
                         f"drifted" + (f" (max |diff| {self.max_drift:.4g})" if self.drifted else " (bit-exact)"))
        if self.worst_cosine is not None:
            lines.append(f"  reference   {self.reference or 'reference'}: worst cosine {self.worst_cosine:.6f}, worst max_rel "
                         f"{self.worst_rel:.4g}, {self.ref_failed:,} runs below the thresholds")
        fl = ", ".join(f"{c} x{n:,}" for c, n in sorted(self.faults.items()))
        lines.append(f"  faults      {fl or 'none'}")
        if self.cycles_min is not None:
            ms = 1e3 / self.clock_hz
            lines.append(f"  cycles      min {self.cycles_min:,.0f}  median {self.cycles_median:,.0f}  max "
                         f"{self.cycles_max:,.0f}  ({self.cycles_median * ms:.3f} ms median)")
        if self.sim_cycles:
            lines.append(f"  npu         busy {self.npu_busy / self.sim_cycles:.1%} of {self.sim_cycles:,.0f} simulated cycles")
        for p in self.pools:
            lines.append(f"  pool        {p.name}: {p.in_use:,} B in use at the end ({p.lost:,} B lost), high-water "
                         f"{p.high_water:,} B, highest byte +{p.high_end:,}, fragmentation {p.fragmentation:.1%} "
                         f"(max {self.max_fragmentation:.1%}), {p.allocs:,} allocs / {p.frees:,} frees")
        for name, t in self.trends.items():
            lines.append(f"  leak trend  {name}: {t.text()}")
        if self.exhausted:
            lines.append(f"  exhausted   {self.exhausted}")
        if self.rss_warm:
            lines.append(f"  host        RSS {self.rss_warm / 2**20:.1f} MiB after warm-up, {self.rss_end / 2**20:.1f} MiB "
                         f"at the end ({100 * self.rss_growth:+.2f} %), max {self.rss_max / 2**20:.1f} MiB")
        out = "\n".join(lines) + "\n"
        if self.first_fault_text:
            out += "\n" + self.first_fault_text
        return out + f"verdict: {self.verdict()}\n"

    def to_json(self) -> dict:
        o = self.options
        return {"verdict": self.verdict(), "exit_code": self.exit_code, "runs": self.runs, "inferences": self.inferences,
                "status": dict(self.status), "faults": dict(self.faults), "checked": self.checked,
                "drifted": self.drifted, "max_drift": self.max_drift, "reference_failed": self.ref_failed,
                "reference": self.reference,
                "worst_cosine": self.worst_cosine, "worst_max_rel": self.worst_rel,
                "cycles": {"min": self.cycles_min, "median": self.cycles_median, "max": self.cycles_max},
                "seconds": self.seconds, "simulated_cycles": self.sim_cycles, "npu_busy_cycles": self.npu_busy,
                "pools": [p.to_json() for p in self.pools], "max_fragmentation": self.max_fragmentation,
                "leak": {k: t.to_json() for k, t in self.trends.items()}, "exhausted": self.exhausted,
                "host_rss": {"warm": self.rss_warm, "end": self.rss_end, "max": self.rss_max, "growth": self.rss_growth},
                "processes": self.processes, "strategy": o.strategy, "schedule": o.schedule, "seed": o.seed,
                "first_fault": _fault_json(self.first_fault)}


def _fault_json(res) -> dict | None:
    if res is None:
        return None
    from ..faults import faults_to_json

    return {"process": res.process, "inference": res.index, "step": res.step, "interleaving": res.interleaving,
            "faults": faults_to_json(res.faults)}
