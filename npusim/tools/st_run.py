"""Replay of an ST Edge AI Core output as the tools use it: read, replay, time."""

from __future__ import annotations


def replay_timed(path, options=None, profile=None):
    """(StOutput, Replay, {(block, epoch, sw): EpochTime}) of the output at `path`."""
    from ..hw import load_profile
    from ..importers.stedgeai import load
    from ..importers.stedgeai.replay import ReplayOptions, replay
    from ..importers.stedgeai.timing import program_timing

    out = load(path)
    rep = replay(out, options or ReplayOptions())
    return out, rep, program_timing(out, rep, profile or load_profile("n657"))


def replay_st(path, options=None, profile=None):
    """(StOutput, Replay, {(block, epoch, sw): cycles}) of the output at `path`."""
    out, rep, times = replay_timed(path, options, profile)
    return out, rep, {k: t.cycles for k, t in times.items()}


class StRunResult:
    """A timing-only replay of an ST output, shaped like a run report: status, cycles, faults.
    `times`: each epoch's (and software block's) `EpochTime`, the parts `--stalls` shows."""

    def __init__(self, out, rep, times, profile):
        self.out, self.replay, self.times = out, rep, times
        self.epoch_cycles = {k: t.cycles for k, t in times.items()}
        self.profile = profile
        self.faults = rep.faults
        self.status = "fault" if rep.faults else "ok"
        self.cycles = int(round(sum(self.epoch_cycles.values())))
        self.ms = self.cycles * 1e3 / profile.clock

    def summary(self, values: bool = False) -> str:
        """The report's head; `values`: the command also ran the program's values (`--outputs`)."""
        hw = sum(1 for k in self.epoch_cycles if not k[2])
        sw = len(self.epoch_cycles) - hw
        lines = [f"npusim run: ST output '{self.out.name}' ({self.out.toolchain.get('atonn', '?')}): {self.status}, "
                 f"{self.cycles:,} cycles = {self.ms:.3f} ms at {self.profile.clock / 1e6:.0f} MHz "
                 f"({hw} hardware epochs, {sw} software blocks; timing and memory replay, "
                 f"{'values from the functional run' if values else 'no values'})"]
        for k, (a, n, w) in self.replay.placements.items():
            lines.append(f"user I/O {k}: {n:,} B placed at {a:#x} in {w}")
        for u in self.replay.undecided:
            lines.append(f"not decoded (not timed, not checked): {u}")
        return "\n".join(lines)

    def report_text(self, values: bool = False) -> str:
        from ..faults import render_text
        return render_text(self.faults, self.out.name) + "\n" + self.summary(values) + "\n"

    def report_json(self) -> dict:
        from ..faults import faults_to_json, render_text
        return {"status": self.status, "end_reason": "fault" if self.faults else "done", "cycles": self.cycles,
                "ms": self.ms, "profile": self.profile.name, "source": "stedgeai", "name": self.out.name,
                "toolchain": self.out.toolchain, "faults": faults_to_json(self.faults),
                "fault_text": render_text(self.faults, self.out.name) if self.faults else "",
                "user_io": {k: {"address": a, "size": n, "where": w} for k, (a, n, w) in self.replay.placements.items()},
                "undecided": self.replay.undecided,
                "epochs": [{"block": b, "epoch": e, "software": sw, "cycles": t.cycles, "critical": t.critical,
                            "bound": t.bound(), "stages": t.stages}
                           for (b, e, sw), t in self.times.items()],
                "blocks": self.block_rows(), "pool_views": self.pool_views(),
                "epochs_table": _table_rows(self),
                "faulting_epochs": sorted({f.epoch for f in self.faults if f.epoch is not None})}

    def pool_views(self) -> dict:
        """Pool speeds as the compile declares them (ST's `.mpool` model) and as the profile has them
        (datasheets, what timing uses), and the whole model's time under each."""
        from ..importers.stedgeai.timing import pool_views, program_timing

        if not hasattr(self, "_views"):
            other = program_timing(self.out, self.replay, self.profile, view="compile")
            self._views = {"pools": pool_views(self.out, self.profile), "ms_profile": self.ms,
                           "ms_compile": sum(t.cycles for t in other.values()) * 1e3 / self.profile.clock}
        return self._views

    def block_rows(self) -> list[dict]:
        """Per epoch block: its kind, epochs, npusim's cycles and ST's estimates (0: the file has none)."""
        per: dict = {}
        for (b, _, _), c in self.epoch_cycles.items():
            per[b] = per.get(b, 0.0) + c
        return [{"block": blk.index, "kind": blk.kind, "epochs": len(blk.epochs) or (1 if blk.sw_ops else 0),
                 "cycles": int(round(per.get(blk.index, 0.0))), "st_npu_cycles": blk.estimated_npu_cycles or 0,
                 "st_total_cycles": blk.estimated_tot_cycles or 0} for blk in self.out.blocks]

    def blocks_text(self) -> str:
        """`run --timing-only`: npusim's cycles per epoch block beside ST's estimates (0: absent)."""
        rows = self.block_rows()
        lines = ["block kind   epochs       npusim  ST npu est  ST tot est"]
        lines += [f"{r['block']:>5} {r['kind']:<6} {r['epochs']:>6} {r['cycles']:>12,} {r['st_npu_cycles']:>11,} "
                  f"{r['st_total_cycles']:>11,}" for r in rows]
        tot = [sum(r[k] for r in rows) for k in ("cycles", "st_npu_cycles", "st_total_cycles")]
        lines.append(f"{'total':<5} {'':<6} {sum(r['epochs'] for r in rows):>6} {tot[0]:>12,} {tot[1]:>11,} {tot[2]:>11,}")
        v = self.pool_views()
        speeds = ", ".join(f"{p['pool']} {p['compile_bytes_per_cycle']:.3g}/"
                           f"{'-' if p['profile_bytes_per_cycle'] is None else format(p['profile_bytes_per_cycle'], '.3g')}"
                           for p in v["pools"])
        lines.append(f"pool speeds, B per NPU cycle (the compile's .mpool / the profile's datasheet figures; timing uses "
                     f"the profile's): {speeds}")
        lines.append(f"with the compile's own pool speeds: {v['ms_compile']:.3f} ms (the profile's: {v['ms_profile']:.3f} ms)")
        return "\n".join(lines) + "\n"

    def stalls_text(self) -> str:
        """`run --stalls`: each epoch's cycles by what bounds them (setup, programming, a stream engine,
        a pool's bank conflicts, a bus port, CONVACC compute, the other units, the host), with its
        slowest stage; then the sums per epoch block and the total. Each row's columns sum to its cycles."""
        from ..importers.stedgeai.timing import BOUND_CAUSES

        def fmt(label, cycles, bound, crit=""):
            parts = [int(round(bound[c])) for c in BOUND_CAUSES]
            big = max(range(len(parts)), key=lambda i: parts[i])
            parts[big] += int(round(cycles)) - sum(parts)  # rounding goes to the largest part: the row sums exactly
            return f"{label:<14} {int(round(cycles)):>11,} " + " ".join(f"{v:>10,}" for v in parts) + f"  {crit}"

        head = f"{'':<14} {'cycles':>11} " + " ".join(f"{c:>10}" for c in BOUND_CAUSES)
        lines = ["cycles by what bounds them, per epoch (block/epoch, /sw: a software or hybrid block; the columns after 'cycles' sum to it); last: the slowest stage",
                 f"{'block/epoch':<14}" + head[14:] + "  critical"]
        blocks: dict = {}
        for (b, e, sw), t in self.times.items():
            lines.append(fmt(f"{b}/{e}{'/sw' if sw else ''}", t.cycles, t.bound(), t.critical))
            acc = blocks.setdefault(b, [0.0, dict.fromkeys(BOUND_CAUSES, 0.0)])
            acc[0] += t.cycles
            for c, v in t.bound().items():
                acc[1][c] += v
        lines += ["", "per epoch block", f"{'block':<14}" + head[14:]]
        total = [0.0, dict.fromkeys(BOUND_CAUSES, 0.0)]
        for b, (cyc, bound) in blocks.items():
            lines.append(fmt(str(b), cyc, bound).rstrip())
            total[0] += cyc
            for c, v in bound.items():
                total[1][c] += v
        lines.append(fmt("total", total[0], total[1]).rstrip())
        return "\n".join(lines) + "\n"

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
    out, rep, times = replay_timed(path, options, profile)
    return StRunResult(out, rep, times, profile)


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
