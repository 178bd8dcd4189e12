"""The SimPy machine: an epoch controller walking the decoded command list.

EPOCH opens an epoch configuration, SE/unit/LINK commands add to it, RUN starts it (the
machine runs one epoch at a time, so the controller resumes when it is done and WAIT, the
barrier, is always met), HOST runs the CPU fallback between epochs, END stops. Within an epoch, in order:
hardware refusal checks (bad-descriptor, misaligned-access), stream dataflow (hang), access
checks of every demand access through the memory Checker (read SEs and their prefetch, unit
tables, write SEs), values (gather -> kernels -> scatter), then timing: one SimPy timeout to the
epoch's end (fast mode) or one per burst (burst mode).

`Machine.check` is the same walk with `MachineOptions.static`: every refusal, dataflow, watchdog
and access check, and the region state (written bytes) advanced epoch by epoch, but no values, no
simulated time and no SimPy -- what `npusim check` predicts is what a run finds, by construction. The
watchdog of a timed epoch body is decided by a cache-free upper bound of the body where that suffices,
else by the same timing arithmetic (`_timed_watchdog`). Bytes a decision needs that are not known
before the run are noted in `undecided` (engine/static.py).

This module is the controller and an epoch's walk through its checks; the machine's other parts are
mixed in from their own modules: software epochs (`software_epoch.py`), an epoch's values
(`epoch_values.py`), an epoch's timing (`timed_epoch.py`); what a program's configurations alone decide
is precomputed once per program (`plan.py`).
Why one module of ~510 lines: the command walk and an epoch's checks, in the order the hardware applies them,
are one sequence; everything else is in the modules above.
"""

from __future__ import annotations

from dataclasses import dataclass

import simpy

from ..errors import NpusimError
from ..memory import NpuCache, write_write_races
from .config import EpochConfig, decode_program
from .epoch_values import EpochValues, ReplayRefused
from .hwfaults import make_fault
from .plan import CONFIG_OPS, EpochPlan, command_layers, epoch_plan, plain_blocks, written_intervals
from .software_epoch import SoftwareEpochs
from .static import KnownBytes, Undecided
from .stats import EpochStats, Stats, finalize
from .timed_epoch import TimedEpochs
from .trace import Trace

HW_CLASSES = ("out-of-pool", "write-to-readonly")


def _timeout(env: simpy.Environment, delay: float) -> simpy.Event:
    return env.timeout(max(float(delay), 0.0))


@dataclass
class MachineOptions:
    timing_only: bool = False
    keep_going: bool = False
    trace: bool = True
    mode: str = "fast"  # fast | burst
    max_cycles: float | None = None
    context: str | None = None  # the process this program runs as (every access is checked with it)
    static: bool = False  # `check` only: walk and check every access, move no data, take no time
    replay: bool = False  # `Machine.replay` only: values alone (timing, checks, region state skipped)


class _Stop(Exception):
    """Internal: ends the controller (fault in stop-at-first-fault mode)."""


class Machine(SoftwareEpochs, EpochValues, TimedEpochs):
    """One NPU built from a profile, over a Memory, a RegionTable and a Checker.

    `env` and `gate` let several Machines (processes) share one NPU: they run in one SimPy
    environment, and before each epoch the controller waits for `gate.acquire(context, "e<id>")`
    and after it calls `gate.release(context)` (`engine.scheduler.NpuScheduler`); HOST steps do
    not take the gate. `start` / `finish` split `run` for a caller that drives the environment.
    """

    def __init__(self, profile, isa, memory, regions, checker, options: MachineOptions, progress=None,
                 env: simpy.Environment | None = None, gate=None, known: KnownBytes | None = None, after_step=None,
                 before_step=None):
        self.profile, self.isa = profile, isa
        self.progress = progress  # progress(stage, done, total) per epoch, or None
        # after_step(command index of the RUN or HOST) once an epoch or software epoch has ended (its writes are
        # in memory): how a per-layer comparison reads the tensors of each layer before memory is reused
        self.after_step = after_step
        self.before_step = before_step  # before_step(the same index) before it starts (it may write memory)
        self.memory, self.regions, self.checker = memory, regions, checker
        self.opt = options
        self.cache = NpuCache(profile)
        self.trace = Trace(profile, options.trace)
        self.stats = Stats(mode=options.mode)
        self.faults: list = []
        self.end_reason = "done"
        self.env = env if env is not None else simpy.Environment()
        self._solo = env is None  # nothing but this controller's events in the environment
        self.gate = gate
        self._t0 = 0.0
        # the controller's time when it is ahead of the environment's: epochs run back to back in a solo
        # environment wait together (`_catch_up`), their delays in `_lag`; None when env.now is the time
        self._ahead: float | None = None
        self._lag: list = []
        self.known = known  # static walks: the bytes known before the run (default: the constants)
        self._skipped_lookups: list = []  # static walks: NPU cache look-ups of epochs the bound decided
        self.undecided: list[Undecided] = []  # static walks: what needs values known only when running
        self.host_records: dict[int, bytes] = {}  # HOST command -> the operator record bytes it read
        self._arrays: dict = {}  # pool name -> its array in `memory`, once a replay's step used it (`_pool_array`)

    # ------------------------------------------------------------ faults
    def _fault(self, *faults) -> None:
        """Record faults (and mark them on the trace); stop the run unless keep_going. A stopping
        access still moved the bytes of its stream before the first bad one: the epoch's stats
        count them (with keep_going the whole, clipped, stream is counted when it is timed)."""
        if self.opt.replay:
            raise ReplayRefused(faults[0].cls)
        self.faults.extend(faults)
        es = self.stats.epochs[-1] if self.stats.epochs else None
        for f in faults:
            self.trace.fault(f, self._now())
            if es is not None and f.epoch == es.id and es.status == "ok":
                es.status = "fault"  # a hang keeps its own status
        if not self.opt.keep_going:
            f = faults[0]
            if es is not None and f.epoch == es.id and f.access in ("read", "write"):
                key = "bytes_written" if f.access == "write" else "bytes_read"
                setattr(es, key, getattr(es, key) + int((f.details or {}).get("stream_offset", 0)))
            raise _Stop()

    def _provenance(self, pattern, access, layer):
        """Name of the buffer this access was compiled for, when buffers overlap (memory reuse):
        among the buffers holding the base, the one this layer produces (write) or consumes (read) (of
        several, e.g. parts of one Split in epochs apart, the first holding the whole access), else the
        smallest one holding the whole access (e.g. a concat written by addressing)."""
        hits = self._holding.get(pattern.base)
        if hits is None:
            hits = self._holding[pattern.base] = [b for b in self.buffers if b[1] <= pattern.base < b[2]]
        if len(hits) < 2:
            return None
        lo, hi = pattern.extent()
        mine = [b for b in hits if layer and ((access == "write" and b[3] == layer) or
                                              (access == "read" and layer in b[4]))]
        if mine:
            return next((b for b in mine if b[1] <= lo and hi <= b[2]), mine[0])[0]
        whole = [b for b in hits if b[1] <= lo and hi <= b[2]]
        if whole:
            return min(whole, key=lambda b: (b[2] - b[1], b[0]))[0]
        return None

    def _check(self, pattern, access, unit, epoch, command, layer) -> None:
        """Record the first bad byte's fault, plus the first byte of each later bus-fault class
        (unmapped, read-only write) the same pattern also causes. In keep_going the
        access then runs clipped by the bus itself (gather/scatter skip refused bytes).
        What the access's geometry decides (its provenance, extent, bus verdict) is kept per
        program; a clean access of the common case is told apart cheaply (`Checker.clean`)."""
        key = (pattern, access, layer)
        g = self._geo.get(key)
        if g is None:
            g = self._geo[key] = self._geometry(pattern, access, layer)
        self._check_at(g, pattern, access, unit, epoch, command, layer)

    def _check_at(self, g, pattern, access, unit, epoch, command, layer) -> None:
        """`_check` of an access whose `_geometry` is `g`."""
        prov, lo, hi, bus_ok = g
        ctx = self.opt.context
        if bus_ok and ctx is None and self.checker.clean(pattern, access, prov, lo, hi):
            return
        if prov is not None and ctx is not None:
            prov = self.regions.named(prov, owner=ctx)
        where = dict(access=access, unit=unit, epoch=epoch, command=command, layer=layer, context=ctx)
        f = self.checker.check(pattern, provenance=prov, **where)
        if f is None:
            return
        found = [f]
        for cls in HW_CLASSES[HW_CLASSES.index(f.cls) + 1 if f.cls in HW_CLASSES else 0:]:
            hw = self.checker.check(pattern, only=(cls,), **where)
            if hw is not None:
                found.append(hw)
        self._fault(*found)

    def _geometry(self, pattern, access, layer) -> tuple:
        """(provenance name or None, extent lo, hi, whether the bus takes every byte) of an access."""
        lo, hi = pattern.extent()
        return (self._provenance(pattern, access, layer), lo, hi,
                pattern.nbytes > 0 and self.checker.bus_clean(lo, hi, access))

    def _layer(self, command: int) -> str:
        """`Program.layer_of`, from the per-program table of every command's layer."""
        layers = self._layers
        return layers[command] if 0 <= command < len(layers) else self.program.layer_of(command)

    def _mac_rate(self, dtype: str) -> float:
        """MACs per cycle of all the profile's CAs at `dtype` (the utilisation denominator)."""
        return float(self.profile.compute.macs(dtype) * self.profile.units.conv_accelerators)

    # ------------------------------------------------------------ controller
    def _load(self, program):
        """Take `program`: its buffers, the per-program memos; its decoded commands."""
        self.program = program
        amap = self.memory.map
        self.buffers = program.memo("engine buffers", (amap.profile,), lambda: [
            (b.name, amap.base_of(b.pool) + b.offset, amap.base_of(b.pool) + b.offset + b.size, b.producer,
             tuple(b.consumers)) for b in program.buffers])
        self._holding = program.memo("buffers holding", (amap.profile,), dict)  # address -> buffers holding it
        self._plans = program.memo("epoch plans", (self.profile, self.isa, amap.profile), dict)
        self._costs = program.memo("pattern costs", (self.profile,), dict)  # of uncached pools
        self._weights = program.memo("conv weights", (), dict)  # float32 constant weights (engine/units.py)
        self._geo = program.memo("access geometry", (amap.profile,), dict)  # (pattern, access, layer) -> _geometry
        # id(plan) -> (plan, region table geometry token, `Checker.clean_spec` per access of plan.checks)
        self._specs = program.memo("clean specs", (amap.profile,), dict)
        self._layers = program.memo("command layers", (), lambda: command_layers(program))
        # the NPU cache's answers of an earlier run of this program from a fresh cache (memory/cache.py)
        self._transcripts = program.memo("cache transcripts", (self.profile,), dict)
        self._transcript_key = (self.opt.mode, self.opt.static)
        self.cache.record()
        self.cache.follow(self._transcripts.get(self._transcript_key))
        return decode_program(program, self.isa, self.profile)

    def _keep_transcript(self) -> None:
        """Keep the NPU cache's look-ups of this run for the next (a run that ended early only when
        there is none yet)."""
        t = self.cache.transcript()
        key = self._transcript_key
        if t is not None and (self.end_reason == "done" or key not in self._transcripts):
            self._transcripts[key] = t

    def start(self, program) -> simpy.Process:
        """Decode `program` and start its controller in the environment (run it with env.run)."""
        decoded = self._load(program)
        self._t0 = float(self.env.now)
        return self.env.process(self._controller(decoded))

    def check(self, program, solo: bool = True):
        """The static walk (`MachineOptions.static`): every fault a keep-going run of `program`
        meets, from descriptors and region state alone, in the order the run meets them. `solo`: the
        program is alone in its memory (not one of several contexts), so the bytes known before the
        run are its own constants and zeros, and the units' verdicts on them are memoized with it."""
        if not (self.opt.static and self.opt.keep_going):
            raise NpusimError("Machine.check needs MachineOptions(static=True, keep_going=True)")
        decoded = self._load(program)
        if self.known is None:
            self.known = KnownBytes.of_programs([program], self.memory.map)
        self._verdicts = program.memo("table verdicts", (self.profile, self.memory.map.profile), dict) if solo else {}
        for _ in self._controller(decoded):  # a static walk never waits: nothing is yielded
            raise NpusimError("static walk: the controller waited for simulated time")
        self._keep_transcript()
        return self

    def replay(self, program, host_records: dict):
        """The values of a run of `program` whose timing is already known (`MachineOptions.replay`):
        the controller's walk, each epoch's stream reads, units and stream writes, each software
        epoch's operator, and nothing else -- no access checks, no region state, no timing, no SimPy.
        Sound only after a run of the same program, profile and options that met no fault (the
        runtime's timing memo): every check and every cycle is then a function of the commands and of
        the software epochs' operator records (`host_records` of that run), which are bytes in memory.
        Raises `ReplayRefused` on a fault (a unit refusing its parameter table, a host operator
        refusing its operands: decided by values), on an operator record other than `host_records`'
        (its operator and cycles could differ) or on anything that would wait for simulated time."""
        if not self.opt.replay:
            raise NpusimError("Machine.replay needs MachineOptions(replay=True)")
        self._replay_records = host_records
        decoded = self._load(program)
        for _ in self._controller(decoded):
            raise ReplayRefused("wait")
        return self

    def _now(self) -> float:
        """The controller's current cycle (ahead of env.now while epochs' waits are pending)."""
        return self.env.now if self._ahead is None else self._ahead

    def _catch_up(self):
        """Let the pending epochs' time pass: one SimPy timeout to the controller's time, exactly (env.now +
        delay == that time, as the epochs' timeouts one by one would give), else their timeouts one by one."""
        target, lag = self._ahead, self._lag
        if target is None:
            return
        self._ahead, self._lag = None, []
        delay = target - self.env.now
        if delay >= 0 and self.env.now + delay == target:
            yield self.env.timeout(delay)
        else:
            for d in lag:
                yield self.env.timeout(d)

    def _wait(self, delay: float):
        """Let `delay` cycles pass (a static walk takes no time)."""
        if not self.opt.static:
            yield _timeout(self.env, delay)

    def _written(self, pattern) -> None:
        """The pattern's bytes were written: the region state advances (and static knowledge ends)."""
        self.regions.mark_written(pattern)
        if self.known is not None:
            self.known.forget(pattern)

    def _knows(self, pattern, command: int, unit: str, what: str) -> bool:
        """A static walk knows the bytes of `pattern` before the run, else notes `what` as undecided."""
        if self.known.known(pattern):
            return True
        self.undecided.append(Undecided(command, self._layer(command), unit, what))
        return False

    def finish(self):
        """Totals after the controller ended; epoch starts count from `start` (a shared environment's
        clock runs on), so `stats.cycles` is this program's time from start to end."""
        if self._t0:
            for e in self.stats.epochs:
                e.start -= self._t0
        self._keep_transcript()
        finalize(self.stats, self.profile)
        if not self.stats.native:
            self.stats.notes.append("fp32 epochs ran: fp32 is a simulation-only debug precision, not native on the N657")
        return self

    def run(self, program):
        proc = self.start(program)
        until = self.opt.max_cycles
        if until is not None:
            self.env.run(until=simpy.events.AnyOf(self.env, [proc, self.env.timeout(until)]))
            if not proc.triggered:
                self.end_reason = "cycle-limit"
        else:
            self.env.run(until=proc)
        self.finish()
        if self.end_reason == "cycle-limit" and self.opt.max_cycles is not None:
            self.stats.cycles = min(self.stats.cycles, float(self.opt.max_cycles))
            self.stats.ms = self.profile.cycles_to_ms(self.stats.cycles)
        return self

    def _controller(self, decoded):
        cfg: EpochConfig | None = None
        steps = sum(1 for d in decoded if d.op in ("RUN", "HOST")) if self.progress is not None else 0
        done = 0
        gated = self._epoch if self.gate is None else self._gated_epoch
        # epochs back to back need no SimPy event each where nothing else waits in the environment
        together = self.gate is None and self._solo and self.opt.max_cycles is None
        operands: list = []  # HTENSOR commands since the last HOST
        blocks = self.program.memo("plain epochs", (self.isa, self.profile), lambda: plain_blocks(decoded, self.isa))
        i, n = 0, len(decoded)
        try:
            while i < n:
                d = decoded[i]
                i += 1
                if d.op == "EPOCH" and d.index in blocks:  # prebuilt: every command up to its RUN configures
                    cfg, run_at = blocks[d.index]
                    if self.progress is not None:
                        self.progress("epoch", done, steps)
                        done += 1
                    if self.before_step is not None:
                        self.before_step(decoded[run_at].index)
                    if together:
                        now = self.env.now if self._ahead is None else self._ahead  # `_now()`
                        rest = self._epoch_now(cfg, now)
                        if rest.__class__ is float:
                            self._ahead = now + rest  # what env.timeout(rest) would make env.now
                            self._lag.append(rest)
                        elif rest is not None:
                            yield from self._catch_up()
                            yield from rest
                    else:
                        yield from gated(cfg)
                    if self.after_step is not None:
                        self.after_step(decoded[run_at].index)
                    cfg, i = None, run_at + 1
                    continue
                if self._ahead is not None and d.op in ("RUN", "HOST"):  # they read env.now
                    yield from self._catch_up()
                if self.progress is not None and d.op in ("RUN", "HOST"):
                    self.progress("epoch", done, steps)
                    done += 1
                layer = self._layer(d.index) if d.op not in ("WAIT", "END") else ""  # read by faults only
                if d.op is None:
                    code = f"{d.opcode:#04x}" if isinstance(d.opcode, int) else "?"
                    self._fault(make_fault("unknown-opcode", f"command {d.index}: opcode {code} is not in the ISA",
                                           epoch=cfg.id if cfg else None, command=d.index, layer=layer,
                                           rule="opcode defined by the ISA"))
                elif d.op == "EPOCH":
                    cfg = EpochConfig(d.args["id"], d.index, int(self.isa.layouts["blocked16"]["block"]))
                elif d.op in CONFIG_OPS:
                    if cfg is None:
                        self._fault(make_fault("bad-descriptor", f"{d.op} outside an epoch (no EPOCH before it)",
                                               command=d.index, layer=layer, rule="EPOCH before configuration"))
                    else:
                        cfg.add(d)
                elif d.op == "RUN":
                    if cfg is None:
                        self._fault(make_fault("bad-descriptor", "RUN without a configured epoch", command=d.index,
                                               layer=layer, rule="EPOCH before RUN"))
                    else:
                        if self.before_step is not None:
                            self.before_step(d.index)
                        yield from self._gated_epoch(cfg)
                        cfg = None
                        if self.after_step is not None:
                            self.after_step(d.index)
                elif d.op == "HTENSOR":
                    if cfg is not None:
                        self._fault(make_fault("bad-descriptor", "HTENSOR inside an epoch (host operands are given "
                                               "between epochs)", command=d.index, layer=layer,
                                               rule="HTENSOR between epochs"))
                    else:
                        operands.append(d)
                elif d.op == "HOST":
                    if cfg is not None:
                        self._fault(make_fault("bad-descriptor", "HOST inside an epoch (the host runs between "
                                               "epochs)", command=d.index, layer=layer, rule="HOST between epochs"))
                    else:
                        if self.before_step is not None:
                            self.before_step(d.index)
                        yield from self._host(d, operands)
                        if self.after_step is not None:
                            self.after_step(d.index)
                    operands = []
                elif d.op == "END":
                    break
                # WAIT: the barrier is already met (one epoch at a time, see the module doc)
        except _Stop:
            last = self.faults[-1].cls if self.faults else ""
            self.end_reason = "hang" if last == "hang" else "fault"
        yield from self._catch_up()

    def _plan(self, cfg: EpochConfig) -> EpochPlan:
        """The epoch's static plan: memoized per program for prebuilt configurations."""
        got = self._plans.get(cfg.command)
        if got is not None and got[0] is cfg:
            return got[1]
        plan = epoch_plan(cfg, self.profile, self.isa, self._layer, self.memory.map)
        self._plans[cfg.command] = (cfg, plan)
        return plan

    def _gated_epoch(self, cfg):
        """The epoch, holding the NPU gate (shared NPU) while it runs."""
        if self.gate is None:
            yield from self._epoch(cfg)
            return
        yield self.gate.acquire(self.opt.context, f"e{cfg.id}")
        try:
            yield from self._epoch(cfg)
        finally:
            self.gate.release(self.opt.context)

    # ------------------------------------------------------------ epochs
    def _epoch(self, cfg: EpochConfig):
        """The epoch as a SimPy process step: `_epoch_now`, then its wait."""
        rest = self._epoch_now(cfg, self.env.now)
        if rest.__class__ is float:
            yield from self._until_end(rest)
        elif rest is not None:
            yield from rest

    def _until_end(self, end: float):
        """Wait the `end` cycles from an epoch's start to its end (`_time_epoch`)."""
        yield self.env.timeout(end)
        if not self._solo or self.opt.max_cycles is not None:  # others may have events then
            # where a SimPy AllOf of the stages' timeouts resumed the controller: events at
            # that time keep their order
            yield self.env.timeout(0)

    def _epoch_now(self, cfg: EpochConfig, t0: float):
        """An epoch started at cycle `t0`, up to its wait: None (nothing to wait: a static walk, a replay),
        the cycles from t0 to its end (a float: the common case, an epoch that ran), or a generator that
        waits and ends the epoch otherwise (refused, hang)."""
        got = self._plans.get(cfg.command)  # `_plan`, inline
        plan = got[1] if got is not None and got[0] is cfg else self._plan(cfg)
        if self.opt.replay:  # values only: the result's stats are the memoised run's
            self._replay_epoch(cfg, plan)
            return None
        tpl = plan.stats
        if tpl is None:  # the epoch's stats as they start, once per plan
            setup = float(self.profile.epoch.setup(cfg.registers()))
            es = EpochStats(id=cfg.id, command=cfg.command, layer=self._layer(cfg.command), setup_cycles=setup)
            convs = [cfg.units[n] for n in sorted(cfg.units) if cfg.units[n].op == "CONV"]
            es.mac_rate = self._mac_rate(convs[0].dtype if convs else "int8")
            es.cycles = setup
            es.stall_cycles["setup"] = setup
            tpl = plan.stats = es.__dict__.copy()
        es = object.__new__(EpochStats)  # EpochStats(...) as above, started at t0
        d = tpl.copy()
        d["start"], d["pools"], d["bank_bytes"], d["stages"] = t0, {}, {}, {}
        d["stall_cycles"] = tpl["stall_cycles"].copy()
        es.__dict__ = d
        layer, setup = es.layer, es.setup_cycles
        self.stats.epochs.append(es)
        if self.trace.enabled:
            if plan.marker is None:
                plan.marker = self.trace.marker_template(f"epoch {cfg.id}" + (f" ({layer})" if layer else ""),
                                                         {"command": cfg.command})
            self.trace.place(plan.marker, t0)
        if plan.fp32:
            self.stats.native = False
        if plan.refused:
            es.status = "fault"
            self.trace.complete("EC", f"refused epoch {cfg.id}", t0, setup)
            self._fault(*plan.refused)
            return self._wait(setup)
        flow = plan.flow
        if plan.slow:
            return self._hang(cfg, es, t0, {plan.slow[0]: plan.slow[1]}, layer)
        if plan.checks is None:
            self._plan_checks(plan)
        patterns, tables = plan.patterns, plan.table_patterns
        if self.opt.context is None:
            clean_by = self.checker.clean_by
            got = self._specs.get(id(plan))  # `_clean_specs`, inline
            regions = self.checker.regions
            if got is None or got[0] is not plan or got[1] is not (regions.geometry if regions is not None else None):
                got = (None, None, self._clean_specs(plan))
            for spec, c in got[2]:
                if spec is None or not clean_by(spec):
                    g, p, access, name, command, lay, _ = c
                    self._check_at(g, p, access, name, cfg.id, command, lay)
                if c[6] is not None:  # the read's prefetch fault
                    self._fault(c[6])
        else:
            for g, p, access, name, command, lay, pf in plan.checks:
                self._check_at(g, p, access, name, cfg.id, command, lay)
                if pf is not None:
                    self._fault(pf)
        if plan.may_race and plan.races:
            writes = sorted((n, p) for n, p, _, _ in plan.writes)
            for f in write_write_races(writes, epoch=cfg.id, command=cfg.command, layer=layer, regions=self.regions):
                self._fault(f)
        if self.opt.static:
            self._static_tables(cfg, flow, tables)
        elif not self.opt.timing_only:
            self._values(cfg, flow, patterns, tables, plan.values)
        if self.known is None:
            if plan.written is not None:
                self.regions.mark_intervals(*plan.written)
        else:
            for name, p, _, _ in plan.writes:
                self._written(p)
        end = None
        if self.opt.static:
            late = self._timed_watchdog(cfg, flow, patterns, tables, es, t0, plan)
        else:
            late, end = self._time_epoch(cfg, flow, patterns, tables, es, t0, plan)
            if end is not None:  # the epoch ends with its last stage (`_time_epoch`)
                end = max(float(end), 0.0)
        if late:
            return self._hang(cfg, es, t0, {es.critical: late}, layer)
        if flow.waiting:
            return self._ended_hang(end, cfg, es, t0, flow.waiting, layer)
        return end

    def _ended_hang(self, end, cfg, es, t0, waiting: dict, layer):
        """Wait for the epoch's end (when timed), then `_hang`: a write SE waits for a stream no unit sends."""
        if end is not None:
            yield from self._until_end(end)
        yield from self._hang(cfg, es, t0, waiting, layer)

    def _plan_checks(self, plan) -> None:
        """What the epoch's access checks and written bytes need of its plan, worked out once: per
        access in check order (reads with their prefetch fault, tables, writes) its `_geometry`; the
        demand and table patterns by unit; the covered intervals and extent of every non-empty write."""
        checks = []
        for name, p, command, lay, pf in plan.reads:
            checks.append((self._geometry(p, "read", lay), p, "read", name, command, lay, pf))
        for name, p, command, lay in plan.tables:
            checks.append((self._geometry(p, "read", lay), p, "read", name, command, lay, None))
        for name, p, command, lay in plan.writes:
            checks.append((self._geometry(p, "write", lay), p, "write", name, command, lay, None))
        plan.patterns = {name: p for name, p, *_ in plan.reads}
        plan.patterns.update((name, p) for name, p, *_ in plan.writes)
        plan.table_patterns = {name: p for name, p, *_ in plan.tables}
        plan.written = written_intervals([p for _, p, _, _ in plan.writes])
        # whether two writes share a byte: geometry (the run names the region a race meets)
        plan.races = bool(plan.may_race and write_write_races(sorted((n, p) for n, p, _, _ in plan.writes)))
        plan.checks = checks

    def _clean_specs(self, plan) -> list:
        """(`Checker.clean_spec` (None: the full check decides), check) per access of `plan.checks`, kept per
        program for the region table's geometry it was worked out for."""
        token = self.checker.regions.geometry if self.checker.regions is not None else None
        got = self._specs.get(id(plan))
        if got is None or got[0] is not plan or got[1] is not token:
            specs = [(self.checker.clean_spec(c[1], c[2], c[0][0], c[0][1], c[0][2]) if c[0][3] else None, c)
                     for c in plan.checks]
            got = self._specs[id(plan)] = (plan, token, specs)
        return got[2]

    def _hang(self, cfg, es, t0, waiting: dict, layer):
        """End the epoch as a `hang`: the watchdog fires epoch.timeout_cycles after setup."""
        setup = es.setup_cycles
        es.status = "hang"
        names = sorted(waiting)
        why = "; ".join(f"{n}: {waiting[n]}" for n in names)
        timeout = float(self.profile.epoch.timeout_cycles)
        extra = max(0.0, setup + timeout - es.cycles)
        for n in names:
            self.trace.complete(n, "waiting (hang)", t0 + setup, timeout)
        es.cycles = setup + timeout
        yield from self._wait(extra)
        self._fault(make_fault("hang", f"epoch {cfg.id} timed out after {int(timeout)} cycles; waiting: {why}",
                               unit=",".join(names), epoch=cfg.id, command=cfg.command, layer=layer,
                               rule=f"epoch.timeout_cycles={int(timeout)}", details={"waiting": dict(waiting)}))
