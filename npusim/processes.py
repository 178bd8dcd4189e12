"""Processes on one NPU over time: the runtime library's memory per inference, its I/O, the scheduler.

    system = NpuSystem(profile, RuntimeConfig(strategy="misconfigured", schedule="random", seed=3))
    system.add_process("a", [prog_a])          # loaded once: weights placed in flash, owned by "a"
    system.add_process("b", [prog_b])
    system.run(next_job, on_result)            # next_job(process) -> Job | None; on_result(InferenceResult)

One Memory, RegionTable and Checker serve every process; one SimPy environment and an
`engine.scheduler.NpuScheduler` interleave their epochs (each inference is a `Machine` started
in that environment, gated epoch by epoch). Per inference, the runtime library of process P:
  1. allocates from its `RuntimePool` view (board API: alloc / map / free) a scratch arena per
     RAM stretch the program uses (its footprint there: activations, the network's own I/O tensors
     and SE prefetch zones), a user input buffer per input and a user output buffer per output
     (`io_align`, `io_pad`); with `buffering="fixed"` these are allocated once and reused;
  2. relocates the program into its arena (`program.relocate`, cached per placement), registers
     its buffers and guard zones as regions owned by P, and forgets earlier writes of the arena;
  3. writes the input values into the user input buffer and copies them into the network's input
     tensor (host accesses, checked by the Checker as unit HOST of context P, like the NPU's);
  4. runs the epochs (the scheduler may run other processes' epochs in between);
  5. copies each output tensor into its user output buffer and reads the values from there;
  6. frees the arena and the user buffers and removes their regions.
A stretch is a run of adjacent pools the NPU can treat as one (npuRAM3..6).

Pool strategies (who owns which bytes):
  shared         one correct pool per stretch for all processes
  misconfigured  every process gets its own pool over the *whole* stretch: they hand out the same
                 bytes (the field failure). Detected as `cross-context-access` (a write into bytes of
                 a live region of another process, both named) and as output drift
  partitioned    the stretch split evenly, one partition per process (the Checker knows them)
  serialised     as misconfigured, but the scheduler runs whole inferences one at a time
Weights are placed once per process at load, each process at its own offset of the weights pool.

Planted runtime bugs (`RuntimeBugs`): `leak_output_every=k` (every k-th inference of a process
takes a path that returns without freeing its user output buffers; in a generative loop, the
output buffer fed back as the next input), `short_free=b` (the pool's free returns b bytes too few).

Host copies are not timed (they run on the CPU between the NPU's epochs). Faults are data in the
`InferenceResult`; an inference stops at its first fault unless `keep_going`.

Why this module is long (~570 lines): it is one job, the runtime library's life cycle of an inference
(steps 1-6 above), and `NpuSystem` holds it as methods over one shared state (the pools' views, the
region table, the placements, the scheduler's environment); cutting the steps into modules would pass
that state around without making any step stand alone. The generative loop is `generative.py`.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, replace

import simpy

from .errors import DataError, UsageError
from .faults import NODE_KIND, RUNTIME_NODE
from .generative import feedback_pairs
from .memory import AccessPattern, AddressMap, Checker, Memory, RegionTable
from .memory.runtime_pool import FITS, PoolStats, RuntimePool
from .program.model import Program
from .sharing import BUFFERING, POLICIES, POOL_STRATEGIES

MAX_PROCESSES = 16  # stated limit: processes on one NPU
PLACEMENT_CACHE = 8  # relocated programs kept per variant (LRU)
WEIGHTS_ALIGN = 4096  # each process's weights start on a 4 KiB boundary (same burst geometry as compiled)
# a memcpy of a whole tensor buffer also reads its line padding, which nothing writes: not a fault
_COPY_READ = ("out-of-pool", "cross-context-access", "buffer-underflow", "buffer-overflow", "use-after-free")
_MERGEABLE = ("width", "clock_ratio", "perms", "cacheable", "banks", "interleave", "xor_hash")


@dataclass(frozen=True)
class RuntimeBugs:
    leak_output_every: int = 0  # every k-th inference leaves its user output buffers allocated
    short_free: int = 0  # every free gives back this many bytes too few

    def __post_init__(self):
        for k in ("leak_output_every", "short_free"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 1 << 24:
                raise UsageError(f"RuntimeBugs.{k}={v!r}: expected an integer in [0, 2^24]")

    def __bool__(self) -> bool:
        return bool(self.leak_output_every or self.short_free)


@dataclass(frozen=True)
class RuntimeConfig:
    strategy: str = "shared"
    schedule: str = "round-robin"  # engine.scheduler.POLICIES
    seed: int = 0  # the scheduler's random choices
    buffering: str = "per-run"  # per-run: alloc/free every inference; fixed: allocate once, reuse
    io_align: int = 32  # vendor habit: I/O buffers 32 B aligned
    io_pad: int = 0  # extra bytes after each user I/O buffer
    granule: int = 32  # the pool rounds every block up to this
    fit: str = "first-fit"
    bugs: RuntimeBugs = RuntimeBugs()
    timing_only: bool = False
    keep_going: bool = False
    mode: str = "fast"

    def __post_init__(self):
        for name, value, allowed in (("strategy", self.strategy, POOL_STRATEGIES), ("schedule", self.schedule, POLICIES),
                                     ("buffering", self.buffering, BUFFERING), ("fit", self.fit, FITS)):
            if value not in allowed:
                raise UsageError(f"{name} {value!r}: expected one of {', '.join(allowed)}")
        for name in ("io_align", "granule"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0 or v & (v - 1) or v > 1 << 20:
                raise UsageError(f"{name}={v!r}: expected a power of two up to 1 MiB")
        if isinstance(self.io_pad, bool) or not isinstance(self.io_pad, int) or not 0 <= self.io_pad <= 1 << 24:
            raise UsageError(f"io_pad={self.io_pad!r}: expected a number of bytes in [0, 16 MiB]")


@dataclass
class Job:
    """One unit of work of a process: `steps` inferences of one variant, each step's outputs fed
    back as the next step's inputs; it arrives `delay` cycles after the process's previous job ended."""

    variant: int = 0
    inputs: dict | None = None  # {input name: float array}; None: no values (timing-only)
    steps: int = 1
    delay: float = 0.0
    tag: object = None  # the caller's, handed back in every result


@dataclass
class InferenceResult:
    process: str
    index: int  # the process's inference number (0, 1, ...)
    job: Job
    step: int
    status: str  # ok | fault | pool-exhausted
    faults: list = field(default_factory=list)
    outputs: dict = field(default_factory=dict)
    busy_cycles: float = 0.0  # the process's own epochs (NPU + HOST fallback)
    latency_cycles: float = 0.0  # from the inference's start to its end (includes other processes' epochs)
    end_time: float = 0.0  # simulated cycle the inference ended
    held: int = 0  # bytes the process holds in its pools after the inference (live + lost)
    message: str = ""
    interleaving: str = ""  # the scheduler's last grants, for a faulting inference


def stretches(profile) -> list[tuple[str, int, int, tuple[str, ...]]]:
    """(name, lo, hi, member pools) of every run of adjacent pools with the same properties
    ("npuRAM3..npuRAM6": the NPU treats them as one range)."""
    out: list[list] = []
    for p in sorted(profile.pools, key=lambda p: p.base):
        last = out[-1] if out else None
        if last is not None and last[2] == p.base and all(
                getattr(last[4], k) == getattr(p, k) for k in _MERGEABLE):
            last[2] = p.end
            last[3].append(p.name)
        else:
            out.append([p.name, p.base, p.end, [p.name], p])
    return [(s[0] if len(s[3]) == 1 else f"{s[3][0]}..{s[3][-1]}", s[1], s[2], tuple(s[3])) for s in out]


class _Variant:
    """One program of a process, its weights placed; relocated per arena placement (cached)."""

    def __init__(self, index: int, base: Program, arenas: dict, label: str):
        self.index, self.base, self.arenas, self.label = index, base, arenas, label
        self.inputs = base.buffers_of("input")
        self.outputs = base.buffers_of("output")
        self._cache: OrderedDict = OrderedDict()

    def feedback(self) -> dict[str, str]:
        return feedback_pairs(self.base)


class Process:
    def __init__(self, name: str, priority: int):
        self.name, self.priority = name, priority
        self.variants: list[_Variant] = []
        self.pools: dict[str, RuntimePool] = {}  # stretch name -> the pool this process allocates from
        self.fixed: dict = {}  # (variant, role, name) -> (Allocation, regions) with buffering="fixed"
        self.inferences = 0
        self.output_sets = 0  # user output buffer sets given back (the leak bug counts them)
        self.weights: dict[str, list[int]] = {}  # weights pool -> [lo, hi) it holds

    @property
    def held(self) -> int:
        return sum(p.held.get(self.name, 0) for p in self.pools.values())


class NpuSystem:
    def __init__(self, profile, config: RuntimeConfig | None = None):
        from .engine.scheduler import NpuScheduler
        from .program.spec import load_isa

        self.profile, self.config = profile, config or RuntimeConfig()
        self.isa = load_isa()
        self.amap = AddressMap(profile)
        self.memory = Memory(self.amap)
        self.regions = RegionTable(self.amap)
        self.env = simpy.Environment()
        self.sched = NpuScheduler(self.env, self.config.schedule, self.config.seed,
                                  serialise=self.config.strategy == "serialised")
        self.processes: list[Process] = []
        self.checker: Checker | None = None
        self._flash: dict[str, int] = {}  # weights pool -> next free offset
        self._stretch = {n: s for s in stretches(profile) for n in (s[0], *s[3])}  # pool or stretch name -> stretch
        self.first_fault: InferenceResult | None = None

    # ------------------------------------------------------------ loading
    def add_process(self, name: str, programs, priority: int = 0) -> Process:
        """Load a process: its programs (variants, e.g. one per input shape) with weights placed."""
        from .runtime import load

        if len(self.processes) >= MAX_PROCESSES:
            raise UsageError(f"at most {MAX_PROCESSES} processes share one NPU")
        if any(p.name == name for p in self.processes) or not name:
            raise UsageError(f"process name {name!r} is empty or already used")
        proc = Process(name, priority)
        for i, prog in enumerate(programs):
            proc.variants.append(self._load_variant(proc, i, load(prog, self.profile)))
        if not proc.variants:
            raise UsageError(f"process {name!r}: no program")
        self.sched.register(name, priority)
        self.processes.append(proc)
        return proc

    def _load_variant(self, proc: Process, index: int, prog: Program) -> _Variant:
        from .program.relocate import relocate
        from .runtime import _add_guard_regions, _check_profile, _footprint, load

        _check_profile(prog, self.profile)
        need = _footprint(prog, self.profile, self.isa)
        const_pools = {c.pool for c in prog.constants} | {b.pool for b in prog.buffers if b.kind == "weight"}
        act_pools = {b.pool for b in prog.buffers if b.kind != "weight"}
        shared = sorted({self._stretch[p][0] for p in const_pools} & {self._stretch[p][0] for p in act_pools})
        if shared:
            raise DataError(f"process {proc.name!r}: weights and activations share {shared[0]}; the runtime allocates "
                            f"its pools per inference, so keep weights in a pool of their own (--weights-pool)")
        deltas = {}
        for pool in sorted(const_pools):
            p = self.profile.pool_named(pool)
            at = -(-self._flash.get(pool, 0) // WEIGHTS_ALIGN) * WEIGHTS_ALIGN
            end = at + need.get(pool, 0)
            if end > p.size:
                raise DataError(f"process {proc.name!r}: the weights of its programs need {end:,} B of {pool}, "
                                f"which has {p.size:,} B")
            deltas[pool] = at
            self._flash[pool] = end
            lo_hi = proc.weights.setdefault(pool, [p.base + at, p.base + end])
            lo_hi[1] = p.base + end
        base = load(_rehome(relocate(prog, deltas, self.profile, self.isa), self.profile), self.profile)
        weights = [b for b in base.buffers if b.kind == "weight"]
        self.regions.add_buffers(weights, context=proc.name)
        for c in base.constants:
            addr = self.amap.base_of(c.pool) + c.offset
            self.memory.map_constant(addr, c.data)  # copied only where something reads it
            if self.regions.find(addr, include_guard=False) is None:
                self.regions.add(c.name, "weight", addr, len(c.data), owner=proc.name, origin=f"constant '{c.name}'",
                                 state="live")
            self.regions.mark_range_written(addr, len(c.data))
        _add_guard_regions(replace(base, buffers=weights), self.amap, self.regions, proc.name)
        arenas = {}
        for pool in sorted(act_pools):
            sname, lo, hi, members = self._stretch[pool]
            p = self.profile.pool_named(pool)
            origin, size, align = arenas.get(sname, (p.base, 0, 8))
            origin = min(origin, p.base)
            size = max(size, p.base - origin + need.get(pool, 0))
            align = max([align] + [b.align for b in base.buffers if b.pool == pool and b.kind != "weight"])
            arenas[sname] = (origin, size, align)
        return _Variant(index, base, arenas, f"{proc.name}.{index}")

    def _build_pools(self) -> None:
        cfg = self.config
        used = sorted({s for p in self.processes for v in p.variants for s in v.arenas})
        partitions = {}
        for sname in used:
            _, lo, hi, members = self._stretch[sname]
            users = [p for p in self.processes if any(sname in v.arenas for v in p.variants)]
            if cfg.strategy == "shared":
                pool = RuntimePool(sname, lo, hi, cfg.granule, cfg.fit, cfg.bugs.short_free)
                for p in users:
                    p.pools[sname] = pool
            elif cfg.strategy == "partitioned":
                part = (hi - lo) // len(users) // 4096 * 4096
                for i, p in enumerate(users):
                    a, b = lo + i * part, lo + (i + 1) * part
                    p.pools[sname] = RuntimePool(f"{sname}/{p.name}", a, b, cfg.granule, cfg.fit, cfg.bugs.short_free)
                    partitions[(p.name, sname)] = (a, b)
            else:  # misconfigured, serialised: every process believes it owns the whole stretch
                for p in users:
                    p.pools[sname] = RuntimePool(f"{sname}@{p.name}", lo, hi, cfg.granule, cfg.fit, cfg.bugs.short_free)
        if cfg.strategy == "partitioned":
            for p in self.processes:
                for wpool, (a, b) in p.weights.items():
                    partitions[(p.name, wpool)] = (a, b)
        self.checker = Checker(self.amap, self.regions, partitions=partitions or None)
        for p in self.processes:
            for v in p.variants:
                for sname, (_, size, _) in v.arenas.items():
                    io = sum(_block(b.size + cfg.io_pad, cfg.granule) for b in v.inputs + v.outputs
                             if self._stretch[b.pool][0] == sname)
                    room = p.pools[sname].capacity
                    if size + io > room:
                        raise DataError(f"process {p.name!r}: one inference of program {v.index} needs "
                                        f"{size + io:,} B of {sname} (arena {size:,} B + I/O {io:,} B), its pool "
                                        f"has {room:,} B")

    def pool_stats(self) -> list[PoolStats]:
        """Every distinct runtime pool, in stretch then process order."""
        seen, out = set(), []
        for p in self.processes:
            for pool in p.pools.values():
                if id(pool) not in seen:
                    seen.add(id(pool))
                    out.append(pool.stats())
        return out

    # ------------------------------------------------------------ running
    def run(self, next_job, on_result, tick=None) -> None:
        """Run every process until `next_job(process)` returns None for it; `on_result(result)` gets
        each inference as it ends; `tick()` is called at every epoch (a clock for monitors)."""
        if not self.processes:
            raise UsageError("no processes to run")
        self._build_pools()
        lives = [self.env.process(self._life(p, next_job, on_result, tick)) for p in self.processes]
        self.env.run(until=simpy.events.AllOf(self.env, lives))

    def _life(self, proc: Process, next_job, on_result, tick):
        while True:
            job = next_job(proc)
            if job is None:
                break
            if job.delay > 0:
                yield self.env.timeout(job.delay)
            yield from self._job(proc, job, on_result, tick)
        for a, regs in proc.fixed.values():
            self._release(proc, a, regs)
        proc.fixed.clear()

    def _job(self, proc: Process, job: Job, on_result, tick):
        var = proc.variants[job.variant]
        pairs = var.feedback() if job.steps > 1 else {}
        values, carried = job.inputs, []
        for step in range(job.steps):
            res, outs = yield from self._inference(proc, var, job, step, values, carried, tick)
            carried = []
            if res.status != "ok":
                for a, regs in outs:
                    self._release(proc, a, regs)
            elif step + 1 < job.steps:
                values = {i: res.outputs[o] for i, o in pairs.items()} if res.outputs else None
                carried = outs
            else:
                self._free_outputs(proc, outs)
            res.held = proc.held
            on_result(res)
            if res.status != "ok":
                break

    # ------------------------------------------------------------ one inference
    def _inference(self, proc: Process, var: _Variant, job: Job, step: int, values, carried, tick):
        """Generator: one inference (see the module docstring); returns (result, user outputs kept)."""
        from .diagnose import explain_all
        from .runtime import _add_guard_regions, _bind_input, _read_output

        cfg, name = self.config, proc.name
        yield self.sched.begin(name)
        t0 = float(self.env.now)
        res = InferenceResult(name, proc.inferences, job, step, "ok")
        proc.inferences += 1
        temp: list = []  # (allocation, regions) to release at the end
        outs: list = []
        try:
            arenas = {}
            for sname, (origin, size, align) in sorted(var.arenas.items()):
                got = self._buffer(proc, (var.index, "scratch", sname), sname, size, align, 0,
                                   f"{var.label}.scratch", "scratch", temp)
                if got is None:
                    return self._exhausted(res, proc, sname, size), []
                arenas[sname] = got[0].addr - origin
            moved, acts = self._placed(var, arenas)
            user_in, user_out = {}, {}
            for role, bufs, store, kind in (("in", var.inputs, user_in, "input"), ("out", var.outputs, user_out, "output")):
                for b in bufs:
                    sname = self._stretch[b.pool][0]
                    got = self._buffer(proc, (var.index, role, b.name), sname, b.size, cfg.io_align, cfg.io_pad,
                                       f"{role}:{b.name}", kind, temp if role == "in" else outs)
                    if got is None:
                        return self._exhausted(res, proc, sname, b.size + cfg.io_pad), outs
                    store[b.name] = got
            n0 = len(self.regions.regions)
            self.regions.add_buffers(acts.buffers, context=name)
            _add_guard_regions(acts, self.amap, self.regions, name)
            temp.append((None, self.regions.regions[n0:]))
            for sname, delta in arenas.items():
                origin, size, _ = var.arenas[sname]
                self._forget_writes(origin + delta, size, name)
            self.sched.note(name, "in")
            moved_in = {b.name: b for b in moved.buffers_of("input")}
            for b in var.inputs:
                ua, regs = user_in[b.name]
                net = moved_in[b.name]
                own = self.regions.named(b.name, owner=name)
                ok = self._host(res, "write", ua.addr, b.size, regs[0], name, "input write") and \
                    self._host(res, "read", ua.addr, b.size, regs[0], name, "input copy") and \
                    self._host(res, "write", net.address(self.profile), b.size, own, name, "input copy")
                if not ok:
                    return self._ended(res, t0), outs
                if values is not None and not cfg.timing_only:
                    if b.name not in values:
                        raise DataError(f"process {name!r}: no value for input {b.name!r}")
                    _bind_input(self.memory, _at(b, ua.addr, self.profile), values[b.name], self.profile)
                    self.memory.write(net.address(self.profile), self.memory.read(ua.addr, b.size))
            self._free_outputs(proc, carried)  # the previous step's outputs are consumed: recycle them
            carried = []
            m = self._machine(name, tick)
            yield m.start(moved)
            m.finish()
            res.faults.extend(explain_all(m.faults, moved, self.profile, self.isa))
            res.busy_cycles = float(sum(e.cycles for e in m.stats.epochs))
            if res.faults and not cfg.keep_going:
                return self._ended(res, t0), outs
            self.sched.note(name, "out")
            for b in moved.buffers_of("output"):
                ua, regs = user_out[b.name]
                own = self.regions.named(b.name, owner=name)
                ok = self._host(res, "read", b.address(self.profile), b.size, own, name, "output copy") and \
                    self._host(res, "write", ua.addr, b.size, regs[0], name, "output copy")
                if not ok:
                    return self._ended(res, t0), outs
                if not cfg.timing_only:
                    self.memory.write(ua.addr, self.memory.read(b.address(self.profile), b.size))
                    res.outputs[b.name] = _read_output(self.memory, _at(b, ua.addr, self.profile), self.profile)[0]
            return self._ended(res, t0), outs
        finally:
            for a, regs in temp:
                self._release(proc, a, regs)
            self._free_outputs(proc, carried)
            self.sched.end(name)

    def _machine(self, name: str, tick):
        from .engine import Machine, MachineOptions

        cfg = self.config
        progress = (lambda stage, done, total: tick()) if tick is not None else None
        return Machine(self.profile, self.isa, self.memory, self.regions, self.checker,
                       MachineOptions(cfg.timing_only, cfg.keep_going, False, cfg.mode, None, name),
                       progress=progress, env=self.env, gate=self.sched)

    def _ended(self, res: InferenceResult, t0: float) -> InferenceResult:
        res.status = "fault" if res.faults else res.status
        res.end_time = float(self.env.now)
        res.latency_cycles = res.end_time - t0
        if res.faults:
            res.interleaving = self.sched.interleaving()
            if self.first_fault is None:
                self.first_fault = res
        return res

    def _exhausted(self, res: InferenceResult, proc: Process, sname: str, size: int) -> InferenceResult:
        pool = proc.pools[sname]
        st = pool.stats()
        res.status = "pool-exhausted"
        res.message = (f"{proc.name}: alloc of {size:,} B failed in pool {pool.name}: {st.in_use:,} of "
                       f"{st.capacity:,} B in use, largest free extent {st.largest_free:,} B")
        res.end_time = float(self.env.now)
        return res

    # ------------------------------------------------------------ buffers
    def _buffer(self, proc, key, sname, size, align, pad, name, kind, keep):
        """(Allocation, [region]) from the process's pool (reused with fixed buffering), or None."""
        if self.config.buffering == "fixed" and key in proc.fixed:
            return proc.fixed[key]
        pool = proc.pools[sname]
        a = pool.alloc(size, align, pad, name, proc.name, kind)
        if a is None:
            return None
        regs = []
        if kind != "scratch":  # the arena's regions are the program's buffers, added per placement
            regs.append(self.regions.add(name, kind, a.addr, size, owner=proc.name, origin=f"runtime allocation '{name}'"))
            if pad:
                regs.append(self.regions.add(f"{name}.pad", "guard", a.addr + size, pad, owner=proc.name,
                                             origin=f"padding of runtime allocation '{name}'"))
        got = (a, regs)
        if self.config.buffering == "fixed":
            proc.fixed[key] = got
        else:
            keep.append(got)
        return got

    def _release(self, proc: Process, a, regs) -> None:
        for r in regs:
            self.regions.remove(r)
        if a is not None and a.live:
            proc.pools[self._pool_key(proc, a)].free(a)

    def _free_outputs(self, proc: Process, outs) -> None:
        """Free the user output buffers of one inference, unless the planted leak takes the path that
        forgets them (every k-th set of a process): they stay allocated, regions and all."""
        if not outs:
            return
        proc.output_sets += 1
        k = self.config.bugs.leak_output_every
        if k and proc.output_sets % k == 0:
            return
        for a, regs in outs:
            self._release(proc, a, regs)

    def _pool_key(self, proc: Process, a) -> str:
        for sname, pool in proc.pools.items():
            if pool.lo <= a.addr < pool.hi:
                return sname
        raise UsageError(f"allocation {a.name!r} is in none of {proc.name!r}'s pools")

    def _placed(self, var: _Variant, deltas: dict):
        """(program relocated into the arenas, its non-weight buffers as a Program), cached."""
        from .program.relocate import relocate
        from .runtime import load

        key = tuple(sorted(deltas.items()))
        got = var._cache.get(key)
        if got is None:
            offsets = {m: d for s, d in deltas.items() for m in self._stretch[s][3]}
            moved = load(_rehome(relocate(var.base, offsets, self.profile, self.isa), self.profile), self.profile)
            acts = replace(moved, buffers=[b for b in moved.buffers if b.kind != "weight"], constants=[])
            got = var._cache[key] = (moved, acts)
            while len(var._cache) > PLACEMENT_CACHE:
                var._cache.popitem(last=False)
        var._cache.move_to_end(key)
        return got

    def _forget_writes(self, lo: int, size: int, owner: str) -> None:
        """A fresh arena starts unwritten, except bytes another process's live region holds (its data)."""
        keep = sorted((max(r.start, lo), min(r.end, lo + size)) for r in self.regions.overlapping(lo, lo + size)
                      if r.owner not in (owner, None) and r.state != "freed" and r.kind != "guard")
        cur = lo
        for a, b in keep + [(lo + size, lo + size)]:
            if a > cur:
                self.regions.clear_written(cur, a - cur)
            cur = max(cur, b)

    def _host(self, res: InferenceResult, access: str, addr: int, size: int, region, name: str, what: str) -> bool:
        """A host access of the runtime library, checked like the NPU's; False if it faulted (and stops)."""
        p = AccessPattern(addr, size)
        f = self.checker.check(p, access, unit="HOST", layer=f"runtime {what}", provenance=region, context=name,
                               only=_COPY_READ if access == "read" else None)
        if f is not None:
            f = replace(f, details={**f.details, NODE_KIND: RUNTIME_NODE})
        if access == "write":
            self.regions.mark_written(p)
        if f is None:
            return True
        res.faults.append(f)
        return self.config.keep_going


def _block(n: int, granule: int) -> int:
    return -(-n // granule) * granule


def _at(buf, addr: int, profile):
    """`buf` (its layout and quantization) placed at absolute `addr`."""
    pool = profile.pool_at(addr)
    return replace(buf, pool=pool.name, offset=addr - pool.base)


def _rehome(program: Program, profile) -> Program:
    """Buffers and constants named by the pool their start lies in (a relocation may move a start
    on into the next pool of a stretch)."""
    def home(x):
        addr = profile.pool_named(x.pool).base + x.offset
        p = profile.pool_at(addr)
        return x if p is None or p.name == x.pool else replace(x, pool=p.name, offset=addr - p.base)

    return replace(program, buffers=[home(b) for b in program.buffers], constants=[home(c) for c in program.constants])


__all__ = ["BUFFERING", "InferenceResult", "Job", "NpuSystem", "POOL_STRATEGIES", "Process", "RuntimeBugs",
           "RuntimeConfig", "stretches"]
