"""Replay of an ST Edge AI Core output as the tools use it: read, replay, time."""

from __future__ import annotations


def replay_st(path, options=None, profile=None):
    """(StOutput, Replay, {(block, epoch, sw): cycles}) of the output at `path`."""
    from ..hw import load_profile
    from ..importers.stedgeai import load
    from ..importers.stedgeai.replay import ReplayOptions, replay
    from ..importers.stedgeai.timing import program_cycles

    out = load(path)
    rep = replay(out, options or ReplayOptions())
    cycles = program_cycles(out, rep, profile or load_profile("n657"))
    return out, rep, cycles


class StRunResult:
    """A timing-only replay of an ST output, shaped like a run report: status, cycles, faults."""

    def __init__(self, out, rep, cycles, profile):
        self.out, self.replay, self.epoch_cycles = out, rep, cycles
        self.profile = profile
        self.faults = rep.faults
        self.status = "fault" if rep.faults else "ok"
        self.cycles = int(round(sum(cycles.values())))
        self.ms = self.cycles * 1e3 / profile.clock

    def summary(self) -> str:
        hw = sum(1 for k in self.epoch_cycles if not k[2])
        sw = len(self.epoch_cycles) - hw
        lines = [f"npusim run: ST output '{self.out.name}' ({self.out.toolchain.get('atonn', '?')}): {self.status}, "
                 f"{self.cycles:,} cycles = {self.ms:.3f} ms at {self.profile.clock / 1e6:.0f} MHz "
                 f"({hw} hardware epochs, {sw} software blocks; timing and memory replay, no values)"]
        for k, (a, n, w) in self.replay.placements.items():
            lines.append(f"user I/O {k}: {n:,} B placed at {a:#x} in {w}")
        for u in self.replay.undecided:
            lines.append(f"not decoded (not timed, not checked): {u}")
        return "\n".join(lines)

    def report_text(self) -> str:
        from ..faults import render_text
        return render_text(self.faults, self.out.name) + "\n" + self.summary() + "\n"

    def report_json(self) -> dict:
        from ..faults import faults_to_json, render_text
        return {"status": self.status, "end_reason": "fault" if self.faults else "done", "cycles": self.cycles,
                "ms": self.ms, "profile": self.profile.name, "source": "stedgeai", "name": self.out.name,
                "toolchain": self.out.toolchain, "faults": faults_to_json(self.faults),
                "fault_text": render_text(self.faults, self.out.name) if self.faults else "",
                "user_io": {k: {"address": a, "size": n, "where": w} for k, (a, n, w) in self.replay.placements.items()},
                "undecided": self.replay.undecided,
                "epochs": [{"block": b, "epoch": e, "software": sw, "cycles": c}
                           for (b, e, sw), c in self.epoch_cycles.items()],
                "epochs_table": _table_rows(self),
                "faulting_epochs": sorted({f.epoch for f in self.faults if f.epoch is not None})}

    def html(self, title: str = "") -> str:
        from ..report.st_page import st_run_page
        return st_run_page(self.report_json(), title)

    def trace_json(self) -> str:
        """A Chrome/Perfetto trace: one slice per epoch (hardware) or software block (host), in order."""
        import json
        events, t = [], 0.0
        us = 1e6 / self.profile.clock
        for (b, e, sw), c in self.epoch_cycles.items():
            events.append({"name": f"{'sw' if sw else 'epoch'} {e} (block {b})", "ph": "X", "pid": 1,
                           "tid": 2 if sw else 1, "ts": t * us, "dur": c * us,
                           "args": {"block": b, "epoch": e, "cycles": c}})
            t += c
        events += [{"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "NPU"}},
                   {"name": "thread_name", "ph": "M", "pid": 1, "tid": 2, "args": {"name": "CPU (software epochs)"}}]
        return json.dumps({"traceEvents": events, "displayTimeUnit": "ns"})


def _table_rows(res) -> list[dict]:
    from .st_inspect import rows
    return rows(res.out, res.replay, res.epoch_cycles)


def run_st(path, options=None, profile=None) -> StRunResult:
    from ..hw import load_profile
    profile = profile or load_profile("n657")
    out, rep, cycles = replay_st(path, options, profile)
    return StRunResult(out, rep, cycles, profile)


def footprint_bytes(out) -> int:
    """Bytes of RAM the compile occupies: per writable pool, the end of its last non-parameter buffer
    (the whole pool where the table lists only the I/O buffers: compiled without --all-buffers-info)."""
    total = 0
    for pool in out.pools:
        if pool.read_only or pool.size <= 0:
            continue
        if not out.all_buffers_info:
            total += pool.size
            continue
        ends = [b.end - pool.address for b in out.buffers
                if not b.is_param and not b.base_symbol and pool.address <= b.start < pool.end]
        total += max(ends, default=0)
    return total


def point_summary(res: StRunResult) -> dict:
    """The columns of one grid point (plain data), as `points.summary` gives them for npusim blobs."""
    first = res.faults[0] if res.faults else None
    return {"status": res.status, "end_reason": "fault" if res.faults else "done", "cycles": res.cycles,
            "ms": round(res.ms, 4), "bank_conflicts": None, "cross_bank_splits": None, "stall_cycles": None,
            "footprint_bytes": footprint_bytes(res.out), "faults": len(res.faults),
            "first_fault": first.cls if first else "", "fault_layer": (first.layer or "") if first else ""}


def check_text(res: StRunResult) -> str:
    """`npusim check` of an ST output: the first line, then the sanitizer report of every fault."""
    from ..faults import render_text
    n = len(res.faults)
    first = res.faults[0].cls if res.faults else ""
    head = (f"npusim check: ST output '{res.out.name}': {n} fault(s) (first: {first})" if n else
            f"npusim check: ST output '{res.out.name}': no fault") + \
        f" in {sum(1 for k in res.epoch_cycles if not k[2])} hardware epochs, " \
        f"{sum(1 for k in res.epoch_cycles if k[2])} software blocks, {len(res.out.buffers)} buffers"
    body = render_text(res.faults, res.out.name) if n else ""
    notes = "".join(f"not decided statically: {u}\n" for u in res.replay.undecided)
    return head + "\n" + (("\n" + body) if body else "") + notes
