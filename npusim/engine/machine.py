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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import simpy

from ..errors import NpusimError
from ..memory import AccessPattern, NpuCache, pattern_cost, unmapped_cost, write_write_races
from ..memory.pattern_math import covered, merge_intervals
from .burst import burst_body
from .config import EpochConfig, decode_program
from .hwfaults import make_fault
from .plan import CONFIG_OPS, EpochPlan, epoch_plan, plain_blocks
from .static import KnownBytes, Undecided
from .stats import EpochStats, Stats, add_bank_bytes, finalize
from .streams import read_stream, write_stream
from .timing import Transfer, body_bound, epoch_timing, own_bound
from .trace import Trace
from .units import cached_table_problem, run_conv_split, run_unit, split_key, table_problem

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


class ReplayRefused(Exception):
    """`Machine.replay` met something its values-only walk cannot stand for (a fault, a software
    epoch's operator record other than the memoised one, a wait for simulated time): the caller
    runs the program in full instead."""


class Machine:
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
        self.known = known  # static walks: the bytes known before the run (default: the constants)
        self._skipped_lookups: list = []  # static walks: NPU cache look-ups of epochs the bound decided
        self.undecided: list[Undecided] = []  # static walks: what needs values known only when running
        self.host_records: dict[int, bytes] = {}  # HOST command -> the operator record bytes it read

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
            self.trace.fault(f, self.env.now)
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
        self._table_verdicts = program.memo("table verdicts", (), dict)  # of constant tables (units.py)
        self._geo = program.memo("access geometry", (amap.profile,), dict)  # (pattern, access, layer) -> _geometry
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
                    yield from gated(cfg)
                    if self.after_step is not None:
                        self.after_step(decoded[run_at].index)
                    cfg, i = None, run_at + 1
                    continue
                if self.progress is not None and d.op in ("RUN", "HOST"):
                    self.progress("epoch", done, steps)
                    done += 1
                layer = self._layer(d.index)
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

    # ------------------------------------------------------------ HOST
    def _host(self, d, operands: list):
        """A software epoch: the host runs the operator record of `d` on its HTENSOR operands
        (engine/host.py), every operand byte checked like an NPU access, timed by [host]."""
        from ..cpu import HostOpError, host_cycles, run_operator
        from ..program.hostop import decode_record
        from .host import Operand, from_operator, operand_problem, to_operator

        a, idx = d.args, d.index
        if self.opt.replay:
            self._replay_host(d, operands)
            return
        layer = self._layer(idx)
        es = EpochStats(id=-1, command=idx, layer=layer, start=self.env.now, kind="host")
        es.mac_rate = self._mac_rate("int8")
        self.stats.epochs.append(es)
        block = int(self.isa.layouts["blocked16"]["block"])

        def refuse(msg: str, rule: str):
            es.status = "fault"
            self._fault(make_fault("bad-descriptor", f"HOST: {msg}", unit="HOST", command=idx, layer=layer, rule=rule))

        rec_p = AccessPattern(a["node"], a["node_bytes"])
        self._check(rec_p, "read", "HOST", None, idx, layer)
        rec = None
        if not self.opt.static or self._knows(rec_p, idx, "HOST", "the host operator record is an input or was "
                                              "written by the program before this software epoch: its "
                                              "contents (operator, watchdog) are known only when running"):
            try:
                raw = read_stream(self.memory, rec_p).tobytes()
                self.host_records[idx] = raw
                rec = decode_record(raw)
            except NpusimError as e:
                refuse(str(e), "the HOST node address holds a host operator record")
                return
        ops = [Operand.from_args(o.args, o.index) for o in operands]
        op_type = rec.op_type if rec is not None else "HOST"
        ins = sorted((o for o in ops if o.is_input), key=lambda o: o.slot)
        outs = sorted((o for o in ops if not o.is_input), key=lambda o: o.slot)
        if [o.slot for o in ins] != list(range(a["n_in"])) or [o.slot for o in outs] != list(range(a["n_out"])):
            refuse(f"{op_type} takes n_in={a['n_in']}, n_out={a['n_out']}: HTENSOR slots are inputs "
                   f"{[o.slot for o in ins]}, outputs {[o.slot for o in outs]}", "one HTENSOR per operand slot")
            return
        bad = next((p for p in (operand_problem(o, block) for o in ops) if p), None)
        if bad:
            refuse(f"{op_type} {bad}", "HTENSOR operands describe a tensor the host can address")
            return
        if rec is not None:
            es.cycles = host_cycles(rec.op_type, [o.shape for o in ins], [o.shape for o in outs], self.profile,
                                    _attrs(rec))
        limit = float(self.profile.epoch.timeout_cycles)
        if es.cycles > limit:
            es.status = "hang"
            es.cycles = limit
            self.trace.complete("HOST", f"{rec.op_type} (hang)", self.env.now, limit)
            yield from self._wait(limit)
            self._fault(make_fault("hang", f"software epoch {rec.op_type} needs more than the watchdog's "
                                   f"{int(limit)} cycles", unit="HOST", command=idx, layer=layer,
                                   rule=f"epoch.timeout_cycles={int(limit)}"))
            return
        pats = {id(o): o.pattern(block) for o in ops}
        for o in ins:
            self._check(pats[id(o)], "read", "HOST", None, o.command, layer)
        for o in outs:
            self._check(pats[id(o)], "write", "HOST", None, o.command, layer)
        if self.opt.static:
            self.undecided.append(Undecided(idx, layer, "HOST", f"software epoch {op_type}: whether the host "
                                            "operator runs on its operand values (if it fails, its outputs "
                                            "stay unwritten) is known only when running"))
        elif not self.opt.timing_only:
            try:
                vals = [to_operator(o, read_stream(self.memory, pats[id(o)]), block) for o in ins]
                ys = run_operator(rec, vals, [_np_type(o.elem) for o in outs])
                for k, (o, y) in enumerate(zip(outs, ys)):
                    got = tuple(np.shape(y))
                    if got != tuple(o.shape) and [d for d in got if d != 1] == [d for d in o.shape if d != 1]:
                        ys[k] = np.reshape(y, o.shape)  # the same elements, size-1 dims aside (one layout)
                    elif got != tuple(o.shape):
                        raise HostOpError(f"{rec.op_type}: output {o.slot} has shape {list(got)}, "
                                          f"its HTENSOR says {list(o.shape)}")
            except HostOpError as e:
                refuse(str(e), "HOST operands legal for the operator")
                return
            for o, y in zip(outs, ys):
                write_stream(self.memory, pats[id(o)], from_operator(o, y, block))
        for o in outs:
            self._written(pats[id(o)])
        es.bytes_read = sum(pats[id(o)].nbytes for o in ins) + rec_p.nbytes
        es.bytes_written = sum(pats[id(o)].nbytes for o in outs)
        es.stall_cycles["host"] = es.cycles
        es.stages["HOST"] = es.cycles
        es.critical = "HOST"
        self.trace.complete("HOST", f"{op_type} ({layer})" if layer else op_type, self.env.now, es.cycles,
                            {"cycles": round(float(es.cycles), 1), "cpu": True})
        yield from self._wait(es.cycles)

    def _replay_host(self, d, operands: list) -> None:
        """`replay`: a software epoch's values, when its operator record is the memoised run's."""
        from ..cpu import HostOpError, run_operator
        from ..program.hostop import decode_record
        from .host import Operand, from_operator, to_operator

        a = d.args
        raw = read_stream(self.memory, AccessPattern(a["node"], a["node_bytes"])).tobytes()
        if self._replay_records.get(d.index) != raw:
            raise ReplayRefused("host record")
        block = int(self.isa.layouts["blocked16"]["block"])
        ops = [Operand.from_args(o.args, o.index) for o in operands]
        ins = sorted((o for o in ops if o.is_input), key=lambda o: o.slot)
        outs = sorted((o for o in ops if not o.is_input), key=lambda o: o.slot)
        pats = {id(o): o.pattern(block) for o in ops}
        try:
            vals = [to_operator(o, read_stream(self.memory, pats[id(o)]), block) for o in ins]
            ys = run_operator(decode_record(raw), vals, [_np_type(o.elem) for o in outs])
        except (HostOpError, NpusimError):
            raise ReplayRefused("host operator") from None
        for o, y in zip(outs, ys):
            got = tuple(np.shape(y))
            if got != tuple(o.shape):
                if [v for v in got if v != 1] != [v for v in o.shape if v != 1]:
                    raise ReplayRefused("host output shape")  # the full run refuses it (`_host`)
                y = np.reshape(y, o.shape)
            write_stream(self.memory, pats[id(o)], from_operator(o, y, block))

    # ------------------------------------------------------------ epochs
    def _epoch(self, cfg: EpochConfig):
        t0 = self.env.now
        plan = self._plan(cfg)
        if self.opt.replay:  # values only: the result's stats are the memoised run's
            self._replay_epoch(cfg, plan)
            return
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
            yield from self._wait(setup)
            return
        flow = plan.flow
        if plan.slow:
            yield from self._hang(cfg, es, t0, {plan.slow[0]: plan.slow[1]}, layer)
            return
        if plan.checks is None:
            self._plan_checks(plan)
        patterns, tables = plan.patterns, plan.table_patterns
        clean = self.checker.clean if self.opt.context is None else None
        for g, p, access, name, command, lay, pf in plan.checks:
            if clean is None or not g[3] or not clean(p, access, g[0], g[1], g[2]):
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
            self._values(cfg, flow, patterns, tables)
        if self.known is None:
            if plan.written is not None:
                self.regions.mark_intervals(*plan.written)
        else:
            for name, p, _, _ in plan.writes:
                self._written(p)
        if self.opt.static:
            late = self._timed_watchdog(cfg, flow, patterns, tables, es, t0, plan)
        else:
            late, end = self._time_epoch(cfg, flow, patterns, tables, es, t0, plan)
            if end is not None:  # the epoch ends with its last stage (`_time_epoch`)
                yield _timeout(self.env, end)
                if not self._solo or self.opt.max_cycles is not None:  # others may have events then
                    # where a SimPy AllOf of the stages' timeouts resumed the controller: events at
                    # that time keep their order
                    yield self.env.timeout(0)
        if late:
            yield from self._hang(cfg, es, t0, {es.critical: late}, layer)
            return
        if flow.waiting:
            yield from self._hang(cfg, es, t0, flow.waiting, layer)

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

    def _replay_epoch(self, cfg, plan) -> None:
        """`replay`: the epoch's values alone, from its static plan."""
        if plan.refused or plan.slow or plan.flow.waiting:  # faults: a fault-free run had none
            raise ReplayRefused("epoch")
        patterns = {name: p for name, p, *_ in plan.reads}
        patterns.update((name, p) for name, p, *_ in plan.writes)
        self._values(cfg, plan.flow, patterns, {name: p for name, p, *_ in plan.tables})

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

    def _unit_refused(self, cfg, name: str, problem: str) -> None:
        u = cfg.units[name]
        self._fault(make_fault("bad-descriptor", f"{name}: cannot execute its configuration: {problem}",
                               unit=name, epoch=cfg.id, command=u.command,
                               layer=self._layer(u.command), rule="parameter tables hold legal values"))

    def _static_tables(self, cfg, flow, tables) -> None:
        """What `_values` decides from parameter-table entries, for the tables known before the run."""
        for name in flow.order:
            if name.startswith("SE") or name in flow.waiting or name not in tables:
                continue
            u = cfg.units[name]
            if self._knows(tables[name], u.command, name, f"{name}'s parameter table is an input or was "
                           "written by the program before this epoch: whether the unit accepts its entries "
                           "is known only when running"):
                key = (u.command, tables[name])
                problem = self._verdicts.get(key, False)
                if problem is False:
                    problem = self._verdicts[key] = table_problem(u, read_stream(self.memory, tables[name]))
                if problem:
                    self._unit_refused(cfg, name, problem)

    def _split_group(self, cfg, flow, name, streams, tables, done) -> list:
        """The int8 CONV units that compute with `name` in one GEMM (`units.run_conv_split`): later
        units of the epoch with its split key and input stream, weights already read, their tables
        acceptable, no stream written between (so every byte they read is what they would read at
        their turn). [name] alone when there are none."""
        u = cfg.units[name]
        key = split_key(u)
        if key is None or name not in tables:
            return [name]
        src = flow.inputs[name].get(0)
        group = [name]
        at = flow.order.index(name)
        for other in flow.order[at + 1:]:
            if other.startswith("SE"):
                if not cfg.ses[other].read:
                    break
                continue
            v = cfg.units[other]
            if (other in flow.waiting or other in done or other not in tables or split_key(v) != key
                    or flow.inputs[other].get(0) != src
                    or flow.inputs[other].get(1) not in streams):
                continue
            table = read_stream(self.memory, tables[other]) if other in tables else None
            if cached_table_problem(v, table, self._table_verdicts) is None:
                group.append(other)
        return group

    def _values(self, cfg, flow, patterns, tables) -> None:
        streams = {}
        scratch: dict = {"weights": self._weights}  # unpacked inputs and im2col shared by the units of this epoch
        done: dict = {}  # output streams of units computed ahead with another (`_split_group`)
        for name in flow.order:
            if name in flow.waiting and not name.startswith("SE"):
                continue
            if name.startswith("SE"):
                se = cfg.ses[name]
                if se.read:
                    streams[name] = read_stream(self.memory, patterns[name])
                elif name not in flow.waiting:
                    src = flow.inputs[name][0]
                    write_stream(self.memory, patterns[name], streams[src])
                continue
            u = cfg.units[name]
            table = None
            if name in tables:
                table = read_stream(self.memory, tables[name])
            ins = {port: streams[src] for port, src in flow.inputs[name].items()}
            problem = cached_table_problem(u, table, self._table_verdicts)
            if problem is None and name in done:
                streams[name] = done.pop(name)
            elif problem is None:
                group = self._split_group(cfg, flow, name, streams, tables, done)
                if len(group) > 1:
                    try:
                        outs = run_conv_split([cfg.units[n] for n in group],
                                              [{p: streams[s] for p, s in flow.inputs[n].items()} for n in group],
                                              [read_stream(self.memory, tables[n]) for n in group], scratch)
                        streams[name] = outs[0]
                        done.update(zip(group[1:], outs[1:]))
                    except NpusimError:  # each unit meets its own refusal at its turn
                        pass
                if name not in streams:
                    try:
                        streams[name] = run_unit(u, ins, table, scratch)
                    except NpusimError as e:  # a configuration the unit's kernel refuses
                        problem = str(e)
            if problem is not None:
                streams[name] = np.zeros(u.stream_bytes(u.out_shape()), dtype=np.uint8)
                self._unit_refused(cfg, name, problem)

    def _timed_watchdog(self, cfg, flow, patterns, tables, es, t0, plan):
        """A static walk's `_time_epoch`: why the timed body outlasts the watchdog, or None. Decided by a
        cache-free upper bound of the body (`timing.body_bound`, per plan) where that bound stays
        within the watchdog; else by `_time_epoch` itself, after the NPU cache has been given the
        look-ups of the epochs the bound decided, in the order the run makes them (`_lookups`)."""
        limit = float(self.profile.epoch.timeout_cycles)
        if self.opt.mode == "fast":
            if plan.body_bound is None:
                plan.body_bound = self._body_bound(cfg, flow, patterns, tables, plan)
            if plan.body_bound <= limit:
                self._skipped_lookups.extend(self._lookups(cfg, flow, patterns, tables))
                return None
        for pattern, access in self._skipped_lookups:
            self.cache.access(pattern, access)
        self._skipped_lookups = []
        return self._time_epoch(cfg, flow, patterns, tables, es, t0, plan)[0]

    def _lookups(self, cfg, flow, patterns, tables):
        """(pattern, access) of the epoch's accesses to cacheable pools, in `_time_epoch`'s order."""
        for name in flow.order:
            p, access = None, "read"
            if name.startswith("SE"):
                p = patterns.get(name)
                access = "read" if cfg.ses[name].read else "write"
            elif name in tables:
                p = tables[name]
            if p is not None:
                pool = self.memory.map.pool_of(p.base)
                if pool is not None and pool.cacheable:
                    yield p, access

    def _body_bound(self, cfg, flow, patterns, tables, plan) -> float:
        """`timing.body_bound` of the epoch: its transfers' and tables' costs without a cache."""
        prof = self.profile
        transfers, owns, units = [], {}, {}
        for name in flow.order:
            if name.startswith("SE"):
                if name not in patterns:
                    continue
                p, se = patterns[name], cfg.ses[name]
                pool = self.memory.map.pool_of(p.base)
                cost = self._cacheless_cost(pool, p, "read" if se.read else "write")
                transfers.append(Transfer(name, prof.bus.stream_engine_port[se.index], pool, cost, not se.read))
                owns[name] = own_bound(cost, p, pool, prof)
            else:
                units[name] = plan.compute[name]
                if name in tables:
                    p = tables[name]
                    pool = self.memory.map.pool_of(p.base)
                    units[name] += own_bound(self._cacheless_cost(pool, p, "read"), p, pool, prof)
        return body_bound(transfers, owns, units, prof, plan.serial)

    def _cacheless_cost(self, pool, pattern, access):
        """`_cost` as if the NPU cache were cold (the same, memoised, for a pool it does not cache)."""
        if pool is None or not pool.cacheable:
            return self._cost(pool, pattern, access)
        key = (pool.name, pattern, access, "without cache")
        got = self._costs.get(key)
        if got is None:
            got = self._costs[key] = pattern_cost(pool, pattern, self.profile, access=access)
        return got

    def _time_epoch(self, cfg, flow, patterns, tables, es, t0, plan):
        """Time the epoch: (why it hangs when its timed body outlasts epoch.timeout_cycles, else None;
        the cycles from its start to its end, where the controller waits with one SimPy timeout, or
        None when it hangs or the walk is static). The epoch ends with its last stage: a stage ends
        at setup + its cycles, the body at setup + body.

        In the fast mode the epoch's figures are a function of its plan and of what the NPU cache
        answers to its look-ups: the look-ups are made (they advance this run's cache), and the
        figures of an earlier run (of any Machine on this plan) that got the same answers are reused
        (`plan.timed`), else worked out (`_figures`) and kept."""
        setup = es.setup_cycles
        if self.opt.mode == "fast":
            tp = plan.timed
            if tp is None:
                tp = plan.timed = _Timed(tuple(self._lookups(cfg, flow, patterns, tables)))
            cache = self.cache
            looked = tuple([cache.access(p, a) for p, a in tp.lookups])
            fresh = not (es.bytes_read or es.bytes_written or es.pools)
            snap = tp.results.get(looked) if fresh else None
            if snap is None:
                late, body, stages = self._figures(cfg, flow, patterns, tables, es, plan, iter(looked))
                if fresh and len(tp.results) < TIMED_KEPT:
                    tp.results[looked] = _snapshot(es, late, body, stages)
            else:
                late, body, stages = _restore(es, snap)
        else:
            late, body, stages = self._figures(cfg, flow, patterns, tables, es, plan, None)
        if late is not None:
            return late, None
        if self.opt.static:  # the static walk decides the timed hang above, and takes no time
            return None, None
        if self.trace.enabled:
            key = (id(stages), setup, cfg.id, es.layer)
            got = plan.trace if plan.trace is not None and plan.trace[0] == key and plan.trace[1] is stages else None
            if got is None:  # the epoch's events, kept with the stages they show (the last ones met)
                items = [("EC", f"setup epoch {cfg.id}", None, setup, None)]
                items += [(name, f"epoch {cfg.id}" + (f" {es.layer}" if es.layer else ""), setup, stages[name],
                           {"cycles": round(float(stages[name]), 1)}) for name in sorted(stages)]
                got = (key, stages, self.trace.templates(items))
                if got[2] is not None:
                    plan.trace = got
            if got[2] is not None:
                self.trace.place(got[2], t0)
            else:
                self.trace.complete("EC", f"setup epoch {cfg.id}", t0, setup)
                for name in sorted(stages):
                    self.trace.complete(name, f"epoch {cfg.id}" + (f" {es.layer}" if es.layer else ""), t0 + setup,
                                        stages[name], {"cycles": round(float(stages[name]), 1)})
        return None, max([setup + v for v in stages.values()] + [setup + body])

    def _figures(self, cfg, flow, patterns, tables, es, plan, looked):
        """The epoch's timing figures into `es`: (why it hangs or None, body, stages). `looked`: the
        NPU cache's answers to the epoch's cacheable accesses, in order (None: ask the cache)."""
        prof = self.profile
        setup = es.setup_cycles
        transfers, units = [], {}
        for name in flow.order:
            if name.startswith("SE"):
                se = cfg.ses[name]
                if name not in patterns:
                    continue
                p = patterns[name]
                pool = self.memory.map.pool_of(p.base)
                acc = "read" if se.read else "write"
                cost = self._cost(pool, p, acc, looked)
                transfers.append(Transfer(name, prof.bus.stream_engine_port[se.index], pool, cost, not se.read))
                key = "bytes_read" if se.read else "bytes_written"
                setattr(es, key, getattr(es, key) + cost.bytes)
                pname = pool.name if pool is not None else "unmapped"
                es.pools[pname] = es.pools.get(pname, 0) + cost.bytes
                if pool is not None:
                    add_bank_bytes(es.bank_bytes, pname, cost.bank_bytes)
                es.bursts += cost.bursts
                es.cross_bank_splits += cost.cross_bank_splits
                es.cache_hits += cost.cache_hits
                es.cache_misses += cost.cache_misses
            else:
                u = cfg.units[name]
                cyc = plan.compute[name]
                if name in tables:
                    p = tables[name]
                    pool = self.memory.map.pool_of(p.base)
                    tc = self._cost(pool, p, "read", looked)
                    cyc += tc.cycles
                    es.bytes_read += tc.bytes
                    pname = pool.name if pool is not None else "unmapped"
                    es.pools[pname] = es.pools.get(pname, 0) + tc.bytes
                    if pool is not None:
                        add_bank_bytes(es.bank_bytes, pname, tc.bank_bytes)
                units[name] = cyc
                if u.op == "CONV":
                    es.macs += u.work()
        timing = epoch_timing(transfers, units, prof, plan.serial)
        body = timing.body
        stages = timing.stages
        if self.opt.mode == "burst":
            body, stages = burst_body(transfers, patterns, units, prof, plan.serial)
        es.bank_conflicts = timing.bank_conflicts
        es.stages = {k: float(v) for k, v in sorted(stages.items())}
        es.critical = max(sorted(stages), key=lambda n: stages[n]) if stages else ""
        for k, v in timing.stall.items():
            if k != "setup":
                es.stall_cycles[k] = v * (body / timing.body if timing.body else 0.0)
        es.cycles = setup + body
        convs = [u for u in cfg.units.values() if u.op == "CONV"]
        es.mac_capacity = body * sum(prof.compute.macs(u.dtype) for u in convs)
        if es.macs and es.mac_capacity:
            es.mac_utilisation = es.macs / es.mac_capacity
        limit = float(prof.epoch.timeout_cycles)
        if body > limit:  # the timed epoch (port and bank sharing included) outlasts the watchdog
            for k in list(es.stall_cycles):
                if k != "setup":
                    es.stall_cycles[k] *= limit / body
            es.cycles = setup
            return f"needs {int(body)} cycles with port and bank sharing, past the watchdog", body, stages
        return None, body, stages

    def _cost(self, pool, pattern, access, looked=None):
        """`pattern_cost` of an access; on a cacheable pool the NPU cache is asked, or its answer is
        the next of `looked`."""
        if pool is None:
            return unmapped_cost(pattern, self.profile)
        if pool.cacheable:  # depends on the NPU cache's state
            if looked is not None:
                return pattern_cost(pool, pattern, self.profile, access=access, looked=next(looked))
            return pattern_cost(pool, pattern, self.profile, cache=self.cache, access=access)
        key = (pool.name, pattern, access)
        got = self._costs.get(key)
        if got is None:
            got = self._costs[key] = pattern_cost(pool, pattern, self.profile, access=access)
        return got


TIMED_KEPT = 8  # figures kept per epoch plan, one per distinct set of NPU cache answers
_TIMED_FIELDS = ("bytes_read", "bytes_written", "bursts", "cross_bank_splits", "cache_hits", "cache_misses", "macs",
                 "bank_conflicts", "critical", "cycles", "mac_capacity", "mac_utilisation")


class _Timed:
    """The timing memo of one epoch plan: its cacheable accesses in look-up order, and
    {the cache's answers: `_snapshot` of the figures}."""

    __slots__ = ("lookups", "results")

    def __init__(self, lookups: tuple):
        self.lookups = lookups
        self.results: dict = {}


def _snapshot(es, late, body, stages) -> tuple:
    """What `Machine._figures` set on a fresh EpochStats, and what it returned."""
    return ({k: getattr(es, k) for k in _TIMED_FIELDS}, dict(es.pools),
            tuple((k, tuple(v)) for k, v in es.bank_bytes.items()), dict(es.stages), dict(es.stall_cycles),
            late, body, stages)


def _restore(es, snap) -> tuple:
    """Set a `_snapshot` on a fresh EpochStats (copies of its containers); (late, body, stages)."""
    vals, pools, bank, stages_es, stall, late, body, stages = snap
    d = es.__dict__
    d.update(vals)
    d["pools"] = pools.copy()
    d["bank_bytes"] = {k: list(v) for k, v in bank}
    d["stages"] = stages_es.copy()
    d["stall_cycles"] = stall.copy()
    return late, body, stages


def written_intervals(patterns) -> tuple | None:
    """`RegionTable.mark_intervals` arguments for the bytes `patterns` write: nothing reads between
    an epoch's writes, so they are marked at once, as the union of their covered intervals (the same
    written set as one by one), and each extent's regions go live."""
    parts = [covered(p) for p in patterns if p.nbytes]
    if not parts:
        return None
    if len(parts) == 1:
        cs, ce = parts[0]
    else:
        cs, ce = merge_intervals(np.concatenate([a for a, _ in parts]), np.concatenate([b for _, b in parts]))
    return cs, ce, cs.tolist(), ce.tolist(), [p.extent() for p in patterns if p.nbytes]


def command_layers(program) -> list[str]:
    """`program.layer_of(i)` of every command index i, in one pass over the debug entries."""
    keys = sorted(k for k in program.debug if isinstance(k, int) and not isinstance(k, bool))
    out, j, cur = [], 0, ""
    for i in range(len(program.commands)):
        while j < len(keys) and keys[j] <= i:
            cur = program.debug[keys[j]]
            j += 1
        out.append(cur)
    return out


def _attrs(rec) -> dict:
    """Integer attributes of a host record's node that its cost needs (kernel_shape, transA)."""
    from onnx import helper

    out = {}
    for at in rec.node_proto().attribute:
        if at.name in ("kernel_shape", "transA"):
            out[at.name] = helper.get_attribute_value(at)
    return out


def _np_type(elem: str):
    from ..kernels.quant import np_dtype

    return np_dtype(elem)
