"""RunResult: outputs, faults, stats and trace of one run, with text / JSON renderings."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..faults import faults_to_json, render_text
from ..names import fit
from .stats import STALL_CAUSES, Deferred, Stats, deferred_field  # noqa: F401

OVERLAPPED = "overlapped"  # a layer's cycles no stall cause claims: compute and transfers both busy


@dataclass
class RunResult:
    status: str  # "ok" | "fault"
    end_reason: str  # "done" | "fault" | "hang" | "cycle-limit"
    outputs: dict = field(default_factory=dict)  # name -> float32 NCHW
    raw_outputs: dict = field(default_factory=dict)  # name -> native dtype NCHW
    faults: list = field(default_factory=list)
    stats: Stats = field(default_factory=Stats)
    trace: dict | None = None  # Chrome/Perfetto trace-event dict (None when disabled)
    program_name: str = ""
    profile_name: str = ""
    blob: dict = field(default_factory=dict)  # the program's header: versions, compiler, target profile
    memory_map: list = field(default_factory=list)  # npusim.memmap.memory_map of the run's regions

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def summary(self) -> str:
        s = self.stats
        shown = self.end_reason not in ("done", self.status)  # e.g. "fault (hang)", "ok (cycle-limit)"
        parts = [f"{self.status} ({self.end_reason})" if shown else self.status, f"{int(round(s.cycles)):,} cycles", f"{s.ms:.4f} ms",
                 f"{s.bank_conflicts} bank conflicts", f"{s.cross_bank_splits} cross-bank splits",
                 f"{len(self.faults)} faults" + (f" (first: {self.faults[0].cls})" if self.faults else "")]
        text = "npusim: " + ", ".join(parts)
        if not s.native:
            text += " [fp32 debug precision: not native]"
        return text

    def report_json(self) -> dict:
        """Everything a report needs (a page is rendered from this alone): see DESIGN.md."""
        return {"status": self.status, "end_reason": self.end_reason, "cycles": int(round(self.stats.cycles)),
                "ms": self.stats.ms, "profile": self.profile_name, "program": self.program_name,
                "blob": dict(self.blob), "faults": faults_to_json(self.faults),
                "fault_text": render_text(self.faults, self.program_name) if self.faults else "",
                "stats": self.stats.to_json(), "memory_map": self.memory_map}

    def report_text(self) -> str:
        s = self.stats
        lines = [self.summary()]
        if self.faults:
            lines.append("")
            lines.append(render_text(self.faults, self.program_name).rstrip("\n"))
        lines.append("")
        kinds = s.by_kind()
        lines.append(f"NPU epochs: {kinds['npu'][0]} ({int(round(kinds['npu'][1])):,} cycles); "
                     f"CPU epochs: {kinds['host'][0]} ({int(round(kinds['host'][1])):,} cycles)")
        w, shown = fit(ly.name or "?" for ly in s.layers)
        lines.append(f"{'layer':<{w}} {'on':>3} {'cycles':>12} {'bytes rd':>10} {'bytes wr':>10} {'conflicts':>9} "
                     f"{'splits':>7} {'MAC util':>8}")
        for ly in s.layers:
            on = "CPU" if ly.kind == "host" else "NPU"
            lines.append(f"{shown[ly.name or '?']:<{w}} {on:>3} {int(round(ly.cycles)):>12,} {ly.bytes_read:>10} "
                         f"{ly.bytes_written:>10} {ly.bank_conflicts:>9} {ly.cross_bank_splits:>7} "
                         f"{ly.mac_utilisation:>8.1%}")
        stalls = ", ".join(f"{k} {int(round(v)):,}" for k, v in s.stall_cycles.items() if v)
        lines.append(f"stall cycles: {stalls or 'none'}")
        lines.append("")
        lines.append(self.stalls_text().rstrip("\n"))
        for note in s.notes:
            lines.append(f"note: {note}")
        return "\n".join(lines) + "\n"

    def stalls_text(self) -> str:
        """Stall cycles by cause, one row per layer (causes in STALL_CAUSES order, columns that are
        zero everywhere left out), then `overlapped`: the cycles no cause claims (compute and transfers
        both busy), so a row's columns sum to its cycles; and the run's totals."""
        s = self.stats
        causes = [c for c in STALL_CAUSES if any(ly.stall_cycles.get(c, 0) for ly in s.layers)]
        width = {c: max(len(c), 10) for c in causes + [OVERLAPPED]}
        rows = [(ly.name or "?", ly.cycles, ly.stall_cycles) for ly in s.layers] + [("total", s.cycles, s.stall_cycles)]
        w, shown = fit(name for name, _, _ in rows)
        lines = [f"stall cycles by cause; {OVERLAPPED}: compute and transfers both busy (the columns after "
                 f"'cycles' sum to it)",
                 f"{'layer':<{w}} {'cycles':>12} " + " ".join(f"{c:>{width[c]}}" for c in causes + [OVERLAPPED])]
        for name, cycles, st in rows:
            parts = [int(round(st.get(c, 0))) for c in causes]
            parts.append(int(round(cycles)) - sum(parts))  # rounding stays in this column: the row sums exactly
            lines.append(f"{shown[name]:<{w}} {int(round(cycles)):>12,} "
                         + " ".join(f"{v:>{width[c]},}" for c, v in zip(causes + [OVERLAPPED], parts)))
        return "\n".join(lines) + "\n"

    def trace_json(self) -> str:
        return json.dumps(self.trace if self.trace is not None else {"traceEvents": []})


deferred_field(RunResult, "stats", "Stats of the run (a repeat functional run copies the memoised ones when first read)")
deferred_field(RunResult, "memory_map", "npusim.memmap.memory_map of the run's regions (a list of pools)")
deferred_field(RunResult, "trace", "the Chrome/Perfetto trace-event dict (None when disabled)")
