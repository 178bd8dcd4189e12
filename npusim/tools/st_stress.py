"""Several ST Edge AI Core programs, or several instances of one, sharing one NPU and the board's memory.

ST's runtime can run more than one network instance: their epoch blocks interleave on the NPU (one
block at a time). An ST compile places every buffer at a fixed address, so two networks whose pools
overlap, or two instances of one compile, write into each other's buffers unless the application
keeps their memory apart. This replays each program once (`st_run.replay_st`: its own faults, the
bytes each epoch block writes and the buffers it reads), then interleaves the processes' blocks with
a seeded scheduler for `runs` inferences each and reports every write that lands in a buffer another
process still needs:

- an intermediate buffer between the block that produced it and the last block that reads it;
- the network's input from the start of its inference to its last read, its output from the block that
  produced it until the application has taken it (the process's next inference starts);
- a parameter (weight, table) in writable memory, always.

Buffers the application provides (user-allocated I/O) are its own, one set per instance: they are
neither judged nor judged against. A program compiled without `--all-buffers-info` lists only its I/O buffers: its intermediate buffers
are not judged, and the report says so. Time: the NPU runs one block at a time; an inference's latency
is from its first block's start to its last block's end, other processes' blocks included.

    rep = st_stress(["detector/", "classifier/"], runs=100, seed=3)
    print(rep.text()); rep.exit_code        # 139 when a process clobbers another's buffer, else 0
"""

from __future__ import annotations

import bisect
import statistics
from dataclasses import dataclass, field

import numpy as np

from ..errors import UsageError
from ..faults import COMMAND_KIND, NODE_KIND, Fault, Relation, RegionRef, faults_to_json, render_text
from ..importers.stedgeai import label
from ..importers.stedgeai.board import resolved_buffers

SCHEDULES = ("round-robin", "random", "priority")
MAX_PROCESSES = 16
MAX_RUNS = 100_000  # inferences per process (a schedule's clobbers repeat long before)
EXIT_FAULT = 139


@dataclass(frozen=True)
class _Live:
    """A buffer of one program as a victim: its bytes and the steps between which it holds data
    (live after `after` steps of an inference are done and until `until` are; a step is a block)."""

    name: str
    start: int
    end: int
    after: int
    until: float  # a step count, or inf (a parameter) or steps + 1 (an output the application takes)
    kind: str
    made_by: int | None  # the epoch block that writes it
    read_by: int | None  # the last epoch block that reads it


@dataclass
class _Program:
    """One ST output, replayed: its steps (epoch blocks in order), their cycles and written bytes."""

    name: str
    steps: list  # [(block index, [(epoch, sw?)], cycles, [(lo, hi, buffer written)])]
    live: list  # [_Live] sorted by start
    faults: list  # the program's own faults (its single replay)
    unjudged: bool  # intermediate buffers not listed (compiled without --all-buffers-info)
    solo_cycles: float
    undecided: list  # blocks the replay could not decode (neither timed nor judged)


@dataclass
class StStressReport:
    targets: list[str]
    processes: dict  # process name -> target name
    runs: int
    schedule: str
    seed: int
    clock_hz: float
    inferences: int = 0
    npu_cycles: float = 0.0
    latencies: dict = field(default_factory=dict)  # process -> [cycles per inference]
    solo: dict = field(default_factory=dict)  # target -> cycles of one inference alone
    faults: list = field(default_factory=list)  # each program's own faults, then the clobbers
    notes: list = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT_FAULT if self.faults else 0

    def _ms(self, cycles: float) -> float:
        return cycles * 1e3 / self.clock_hz

    def text(self) -> str:
        lines = [f"npusim stress: {len(self.processes)} process(es) on one NPU ({self.schedule} schedule, seed "
                 f"{self.seed}), ST Edge AI Core programs: {self.inferences} inference(s), "
                 f"{self._ms(self.npu_cycles):.3f} ms of NPU time"]
        for p, t in self.processes.items():
            lat = self.latencies.get(p) or [0.0]
            lines.append(f"  {p}: {len(self.latencies.get(p, []))} inference(s) of {t}; latency median "
                         f"{self._ms(statistics.median(lat)):.3f} ms, max {self._ms(max(lat)):.3f} ms "
                         f"(alone {self._ms(self.solo[t]):.3f} ms)")
        lines += [f"  note: {n}" for n in self.notes]
        if self.faults:
            clobbers = sum(1 for f in self.faults if f.context)
            lines.append(f"{len(self.faults)} fault(s), {clobbers} of them a process writing into another's "
                         f"buffer:")
            lines.append(render_text(self.faults, ", ".join(self.targets)).rstrip())
        else:
            lines.append("no fault: no process writes into a buffer another process still needs")
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict:
        return {"source": "stedgeai", "targets": self.targets, "processes": self.processes, "runs": self.runs,
                "schedule": self.schedule, "seed": self.seed, "inferences": self.inferences,
                "npu_ms": self._ms(self.npu_cycles), "solo_ms": {t: self._ms(c) for t, c in self.solo.items()},
                "latency_ms": {p: [self._ms(c) for c in v] for p, v in self.latencies.items()},
                "notes": self.notes, "exit_code": self.exit_code, "faults": faults_to_json(self.faults)}


def st_stress(paths, runs: int = 10, processes: int | None = None, seed: int = 0, schedule: str = "round-robin",
              profile=None, options=None) -> StStressReport:
    """Interleave the programs at `paths` (module doc); process i runs program i mod len(paths)."""
    from ..hw import load_profile

    if not paths:
        raise UsageError("stress: no ST output")
    if schedule not in SCHEDULES:
        raise UsageError(f"stress: schedule {schedule!r}: expected one of {', '.join(SCHEDULES)}")
    if not 1 <= runs <= MAX_RUNS:
        raise UsageError(f"stress: {runs} runs of an ST output: expected 1 to {MAX_RUNS:,}")
    n = processes or len(paths)
    if not 1 <= n <= MAX_PROCESSES:
        raise UsageError(f"stress: {n} processes: expected 1 to {MAX_PROCESSES}")
    profile = profile or load_profile("n657")
    programs = [_program(p, name, profile, options) for p, name in zip(paths, _target_names(paths))]
    names = _process_names([pg.name for pg in programs], n)
    rep = StStressReport(targets=[pg.name for pg in programs], processes={nm: programs[i % len(programs)].name
                                                                          for i, nm in enumerate(names)},
                         runs=runs, schedule=schedule, seed=seed, clock_hz=float(profile.clock))
    rep.solo = {pg.name: pg.solo_cycles for pg in programs}
    for pg in programs:
        rep.faults += pg.faults
        rep.notes += [f"{pg.name}: not decoded (neither timed nor judged): {u}" for u in pg.undecided]
        if pg.unjudged:
            rep.notes.append(f"{pg.name} lists only its I/O buffers (compiled without --all-buffers-info): "
                             f"writes into its intermediate buffers are not judged")
    if n == 1:
        rep.notes.append("one process: every inference replays the same program on the same memory; "
                         "the interleaving has nothing to judge")
    _interleave(rep, programs, names, runs, seed, schedule)
    return rep


def _process_names(targets: list[str], n: int) -> list[str]:
    unique = n == len(targets) and len(set(targets)) == n
    return [targets[i % len(targets)] if unique else f"{targets[i % len(targets)]}#{i}" for i in range(n)]


def _target_names(paths) -> list[str]:
    """The folder of each output (a network.c's parent; an imported blob's stem), the whole path where two
    share a name."""
    names = [label(p) for p in paths]
    return names if len(set(names)) == len(names) else [str(p) for p in paths]


def _program(path, name: str, profile, options) -> _Program:
    from .st_run import replay_st

    out, rep, cycles = replay_st(path, options, profile)
    steps: list = []
    for t in rep.epochs:
        if not steps or steps[-1][0] != t.block:
            steps.append((t.block, [], 0.0, []))
        blk, keys, cyc, written = steps[-1]
        keys.append((t.epoch, t.sw))
        steps[-1] = (blk, keys, cyc + cycles.get((t.block, t.epoch, t.sw), 0.0), written + list(t.written))
    produced, last_read = {}, {}
    for k, (_, keys, _, written) in enumerate(steps, start=1):
        for _, _, owner in written:
            produced.setdefault(owner, k)
    for k, t_keys in enumerate(_reads_by_step(rep.epochs, steps), start=1):
        for read in t_keys:
            last_read[read] = k
    block = {k: b for k, (b, *_) in enumerate(steps, start=1)}
    placed = {b.name: b for b in _placed_buffers(out, rep)}
    app = {b.name for b in out.buffers if b.base_symbol or b.is_user_allocated}
    steps = [(blk, keys, cyc, [w for w in written if w[2] not in app]) for blk, keys, cyc, written in steps]
    live = []
    for b in placed.values():
        if b.name in app:
            continue
        writable = not (out.pool_at(b.start) and out.pool_at(b.start).read_only)
        if b.is_param:
            if writable:
                live.append(_Live(b.name, b.start, b.end, 0, float("inf"), "parameter", None, None))
        elif b.role == "input":
            if b.name in last_read:
                live.append(_Live(b.name, b.start, b.end, 0, last_read[b.name], "input", None,
                                  block[last_read[b.name]]))
        elif b.role == "output":
            if b.name in produced:
                live.append(_Live(b.name, b.start, b.end, produced[b.name], len(steps) + 1, "output",
                                  block[produced[b.name]], None))
        elif b.name in produced and last_read.get(b.name, 0) > produced[b.name]:
            live.append(_Live(b.name, b.start, b.end, produced[b.name], last_read[b.name], "intermediate",
                              block[produced[b.name]], block[last_read[b.name]]))
    live.sort(key=lambda v: v.start)
    return _Program(name, steps, live, list(rep.faults), not out.all_buffers_info, sum(cycles.values()),
                    list(rep.undecided))


def _reads_by_step(traffic, steps) -> list[set]:
    out, i = [], 0
    for blk, keys, _, _ in steps:
        names: set = set()
        for _ in keys:
            names |= traffic[i].reads
            i += 1
        out.append(names)
    return out


def _placed_buffers(out, rep):
    """ST's buffers at their addresses, user I/O at the replay's placement."""
    return resolved_buffers(out, {k: v[0] for k, v in rep.placements.items()})


def _overlaps(writer: _Program, victim: _Program) -> list[list]:
    """Per step of `writer`: [(victim buffer, lo, hi)] its writes share bytes with (any time)."""
    starts = [v.start for v in victim.live]
    ends = np.maximum.accumulate([v.end for v in victim.live]).tolist() if victim.live else []
    per_step = []
    for _, _, _, written in writer.steps:
        hits: dict = {}
        for lo, hi, _ in written:
            k = bisect.bisect_left(starts, hi) - 1
            while k >= 0 and ends[k] > lo:
                v = victim.live[k]
                if v.start < hi and lo < v.end and v.name not in hits:
                    hits[v.name] = (v, max(lo, v.start), min(hi, v.end))
                k -= 1
        per_step.append(list(hits.values()))
    return per_step


def _interleave(rep: StStressReport, programs: list[_Program], names: list[str], runs: int, seed: int,
                schedule: str) -> None:
    n = len(names)
    prog = [programs[i % len(programs)] for i in range(n)]
    hits = {(a, b): _overlaps(programs[a], programs[b]) for a in range(len(programs)) for b in range(len(programs))}
    tgt = [i % len(programs) for i in range(n)]
    done = [0] * n  # inferences finished
    pos = [0] * n  # steps of the current inference done
    began = [0.0] * n
    rep.latencies = {nm: [] for nm in names}
    rng = np.random.default_rng([seed, 7])
    seen: dict = {}
    now, turn = 0.0, 0
    bound = runs * sum(len(p.steps) for p in prog) + n  # every step of every run, once
    for _ in range(bound):
        ready = [i for i in range(n) if done[i] < runs]
        if not ready:
            break
        if schedule == "random":
            i = ready[int(rng.integers(len(ready)))]
        elif schedule == "priority":
            i = ready[0]
        else:
            i = min(ready, key=lambda j: (j - turn) % n)
            turn = (i + 1) % n
        p = prog[i]
        if not p.steps:
            done[i] = runs
            continue
        if pos[i] == 0:
            began[i] = now
        k = pos[i]
        blk, keys, cyc, _ = p.steps[k]
        for j in range(n):
            if j == i:
                continue
            for v, lo, hi in hits[(tgt[i], tgt[j])][k]:
                if not _holds(v, pos[j], done[j], runs):
                    continue
                key = (i, j, v.name)  # the first block that clobbers it; later ones are counted
                if key in seen:
                    seen[key].count += 1
                    continue
                seen[key] = _clobber(names[i], p, blk, keys, names[j], prog[j], v, lo, hi, pos[j])
                rep.faults.append(seen[key])
        now += cyc
        rep.npu_cycles += cyc
        pos[i] = k + 1
        if pos[i] == len(p.steps):
            rep.latencies[names[i]].append(now - began[i])
            rep.inferences += 1
            done[i] += 1
            pos[i] = 0
    rep.faults = [_final(f) for f in rep.faults]


def _holds(v: _Live, pos: int, done: int, runs: int) -> bool:
    """Whether buffer `v` of a process holds data when the process has done `pos` blocks of its
    current inference and `done` inferences (pos 0: between inferences, or not started)."""
    if v.kind == "parameter":
        return True
    if pos == 0:
        if v.kind == "output":  # the last inference's output, until the next inference starts
            return done > 0
        return v.kind == "input" and done < runs  # the application wrote the next input
    return v.after <= pos < v.until


class _Count:
    """A clobber being counted (a Fault is frozen)."""

    def __init__(self, fault: Fault):
        self.fault, self.count = fault, 1


def _clobber(writer: str, p: _Program, blk: int, keys, victim: str, q: _Program, v: _Live, lo: int, hi: int,
             at: int) -> _Count:
    epoch, sw = keys[0]
    state = {"parameter": "a parameter in writable memory",
             "input": f"its input, read until epoch block {v.read_by}",
             "output": "its output, until the application takes it (the next inference starts)",
             "intermediate": f"written by epoch block {v.made_by} and read until epoch block {v.read_by}"}[v.kind]
    region = RegionRef(v.name, "weight" if v.kind == "parameter" else v.kind if v.kind in ("input", "output")
                       else "activation", v.start, v.end - v.start, "written",
                       origin=f"buffer '{v.name}' of {q.name} (process {victim})" +
                       (f", produced by its epoch block {v.made_by}" if v.made_by is not None else
                        ", produced by the application" if v.kind == "input" else ", produced by the weight image"))
    f = Fault("pool-overlap", "write", lo, hi - lo, "CPU" if sw else "NPU", epoch, blk, _writer_buffer(p, blk, lo, hi), region, Relation("inside", lo - v.start),
              f"process {writer} ({p.name}), epoch block {blk}, writes [{lo:#x}, {hi:#x}) into '{v.name}' of "
              f"process {victim} ({q.name}) while it holds data: {state}; process {victim} has run {at} of its "
              f"{len(q.steps)} epoch blocks",
              f"{writer} overwrites {victim}'s '{v.name}'", context=writer,
              details={NODE_KIND: "ST node", COMMAND_KIND: "epoch block", "victim_process": victim,
                       "victim_program": q.name, "victim_buffer": v.name},
              why="ST compiles every buffer at a fixed address: two programs (or two instances of one) on one "
                  "NPU need memory that does not overlap while both hold data")
    return _Count(f)


def _writer_buffer(p: _Program, blk: int, lo: int, hi: int) -> str:
    for b, _, _, written in p.steps:
        if b == blk:
            for a, z, owner in written:
                if a < hi and lo < z:
                    return owner
    return ""


def _final(c: _Count) -> Fault:
    from dataclasses import replace

    return replace(c.fault, count=c.count) if isinstance(c, _Count) else c
