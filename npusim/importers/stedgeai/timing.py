"""Cycles of an imported ST program on npusim's timing model: ST's own epochs and units.

Per hardware epoch: setup (the profile's `epoch.setup_cycles`) plus its programming, plus the slowest
of its concurrent stages. Each mechanism comes from the epoch's register configuration:
- programming: an epoch-controller program's own time, `epoch.ec_word_cycles` per 32-bit word it
  fetches and executes (instructions and their data words; a poll costs its words, its wait is the
  epoch's work); an explicit-struct epoch's registers written by the Cortex-M55, `epoch.register_cycles`
  each (every stream engine, unit field and switch link);
- each stream engine: its stream side, one element per stream word at `stream_engine.words_per_cycle`;
  its memory side, `memory.cost.pattern_cost` of its walk (frames, lines, pixels, repetition
  loops: `streng.walk`) on its pool (bursts, beats, bank-line splits, pool bandwidth). An engine
  whose cacheable bit is set reads an external pool through the NPU cache, one cache for the whole
  program in epoch order: a repetition loop that re-reads a frame of weights hits. Pixels closer than a bus beat are fetched as the beats their line spans
  (`fetched`): the engine reads bus words, not single bytes. Engines sharing a pool add their bank
  conflicts (`conflict_cycles`), engines sharing a bus port their beats;
- each CONVACC: output pixels x kernel taps x kernels x input depth per frame, times the frames its
  input engine streams, at `compute.mac_per_cycle` x the MAC array's use (`Compute.window_use`, the
  model of npusim's own convs: lanes over `batchDepth`, window taps over the kernel). CTRL.SIMD 16x8
  runs at half the 8x8 rate (8x8 SIMD packs two 8-bit products in a 16x8 multiplier); Deep1x1 mode
  (CTRL.DEEPMODE) packs FBYTES input bytes per stream element, so a 1x1 kernel fills FBYTES x
  `compute.tap_fill` window taps. A convolution split over several CONVACCs chained through the
  accumulator port (input 2) runs them in lockstep: the chain is as slow as its slowest member; each
  CONVACC's output link carries one word per output value (`stream_engine.words_per_cycle`);
- each ARITH / POOL / ACTIV: its frame's elements at `compute.elems_per_cycle`.
Software blocks: the host cost model (`cpu.cost`) of each library operator on its buffers' shapes.
Hybrid blocks (ST's runtime library moving data with the NPU's stream engines, e.g. a Concat or a
DepthToSpace): the Cortex-M55 programs an input and an output engine (`host.call_cycles` plus their
registers at `epoch.register_cycles`) and waits while they move the operator's bytes (the replay's
traffic of the block, streamed at each pool's rate).
Pools keep ST's addresses; their bandwidth and bank geometry come from the profile's pool of the same
name (sourced or assumed there), or from ST's description (byte width, clock ratio) for a pool the
profile lacks.

What an epoch's time derives from its configuration (walks, stream words, the units' work) is computed
once per loaded output and placement (`streng.placed_walks`, shared with the replay); per profile, the
engines' costs and each pool's conflicts are kept too (for an engine reading through the NPU cache, per
answer of the cache, the newest few), the cache's look-ups made again each run (following the last run's
transcript while they agree), and the whole time of an epoch none of whose engines reads through it.

`EpochTime` keeps the parts: `bound()` splits an epoch's cycles by what bounds them (rows that sum to
the cycles, `BOUND_CAUSES`), for `npusim run ST_OUTPUT --stalls`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from ...cpu.cost import host_cycles
from ...hw.profile import Pool as HwPool
from ...memory.cache import NpuCache
from ...memory.cost import conflict_cycles, pattern_cost
from ...memory.pattern import AccessPattern
from . import collector
from . import streng as se

# the ONNX operator whose host cost class fits each runtime-library operator
SW_AS_ONNX = {"softmax": "Softmax", "softmax_integer": "Softmax", "dequantizelinear": "DequantizeLinear",
              "quantizelinear": "QuantizeLinear", "resize_integer": "Resize", "resize": "Resize",
              "conv_integer": "Conv", "Concat": "Concat", "Split": "Split", "DMA_Transpose": "Transpose",
              "DMA_DepthToSpace": "DepthToSpace", "DMA_Outputs_Slice_SplitLike": "Split"}
REGISTERS_PER_STRENG = 14  # CTRL, ADDR, FSIZE, DEPTH, STRD, offsets, repeat, limits, cache, event, position
REGISTERS_PER_LINK = 1

# what bounds an epoch's cycles (`EpochTime.bound`), in table order
BOUND_CAUSES = ("setup", "program", "streng", "conflict", "port", "convacc", "eltwise", "host")
UNIT_CAUSE = {"CONVACC": "convacc", "ARITH": "eltwise", "POOL": "eltwise", "ACTIV": "eltwise"}


def stage_cause(name: str) -> str:
    """The bound cause of a stage name (`SE3`, `SE3 stream`, `conflicts npuRAM5`, `port 1`, `CONVACC0`, `host`)."""
    if name.startswith("SE"):
        return "streng"
    if name.startswith("conflicts "):
        return "conflict"
    if name.startswith("port "):
        return "port"
    if name == "host":
        return "host"
    return UNIT_CAUSE.get(name.rstrip("0123456789"), "eltwise")


@dataclass(frozen=True)
class EpochTime:
    """One epoch's (or software block's) cycles and their parts."""

    setup: float = 0.0  # epoch.setup_cycles
    program: float = 0.0  # its configuration: register writes, or the epoch controller's instructions
    stages: dict = field(default_factory=dict)  # stage name -> busy cycles (they run concurrently)

    @property
    def body(self) -> float:
        return max(self.stages.values(), default=0.0)

    @property
    def cycles(self) -> float:
        return self.setup + self.program + self.body

    @property
    def critical(self) -> str:
        """The slowest stage ("" when the epoch has none)."""
        return max(self.stages, key=lambda k: (self.stages[k], k)) if self.stages else ""

    def bound(self) -> dict:
        """{cause: cycles} summing to `cycles`: setup, program, then the body split as the unit
        stages' time (the slowest unit's cause) and what the critical memory-side stage (an engine,
        a pool's conflicts, a port) adds beyond it."""
        out = dict.fromkeys(BOUND_CAUSES, 0.0)
        out["setup"], out["program"] = self.setup, self.program
        units = {k: v for k, v in self.stages.items() if stage_cause(k) in ("convacc", "eltwise", "host")}
        unit_time = max(units.values(), default=0.0)
        if units:
            out[stage_cause(max(units, key=lambda k: (units[k], k)))] += unit_time
        crit = self.critical
        if crit:
            out[stage_cause(crit)] += self.body - unit_time
        return out


def timing_profile(out, profile, view: str = "profile"):
    """`profile` with ST's pools (addresses and sizes from the compile). `view`: whose speeds a pool
    the profile names keeps: "profile" (the datasheets' figures, what timing uses) or "compile" (the
    byte width and clock ratio the compile declares, ST's compiler's own model from its `.mpool`; the
    bank geometry and cache stay the profile's)."""
    by_name = {p.name: p for p in profile.pools}
    pools = []
    for p in out.pools:
        like = by_name.get(p.name)
        if like is not None:
            speed = {} if view == "profile" else {"width": p.byte_width, "clock_ratio": p.freq_ratio}
            pools.append(replace(like, base=p.address, size=p.size, perms="r" if p.read_only else "rw", **speed))
        else:
            pools.append(HwPool(name=p.name, base=p.address, size=p.size, width=p.byte_width,
                                clock_ratio=p.freq_ratio, perms="r" if p.read_only else "rw",
                                cacheable=p.cacheable, banks=1, interleave=p.byte_width,
                                external=p.address >= 0x60000000))
    return replace(profile, pool=tuple(pools))


def pool_views(out, profile) -> list[dict]:
    """Each pool's bytes per NPU cycle as the compile declares it and as the profile has it (timing
    uses the profile's where it names the pool: its figures come from the parts' datasheets)."""
    by_name = {p.name: p for p in profile.pools}
    rows = []
    for p in out.pools:
        mine = by_name.get(p.name)
        rows.append({"pool": p.name, "compile_bytes_per_cycle": p.byte_width / p.freq_ratio,
                     "profile_bytes_per_cycle": mine.bytes_per_cycle if mine is not None else None,
                     "timing_uses": "profile" if mine is not None else "compile"})
    return rows


def _int(u, name, default, least=None) -> int:
    v = int(u.get(name, default) or default)
    return v if least is None else max(v, least)


class _Conv:
    """A CONVACC's work from its fields, per frame its input engine streams: output pixels x kernel
    taps x kernels x input depth MACs, at the 8x8 rate or half of it (CTRL.SIMD 16x8), Deep1x1 packing
    FBYTES input bytes per stream element (CTRL.DEEPMODE)."""

    __slots__ = ("out_px", "taps", "depth", "kernels", "half_rate", "packed")

    def __init__(self, u):
        sh, sv = _int(u, "hstride", 1, 1), _int(u, "vstride", 1, 1)
        self.out_px = math.ceil(_int(u, "fWidth", 0) / sh) * math.ceil(_int(u, "fHeight", 0) / sv)
        self.taps = _int(u, "kernelWidth", 1) * _int(u, "kernelHeight", 1)
        self.depth = _int(u, "batchDepth", 1, 1)
        self.kernels = _int(u, "nKernels", 1, 1)
        self.half_rate = _int(u, "simd", 1) == 2
        self.packed = _int(u, "inbytes_f", 1, 1) if _int(u, "deepmode", 0) else 1

    def outputs(self, frames: int) -> int:
        """Values it sends on its output link: output pixels x kernels x frames (to the next CONVACC's
        accumulator port in a chain, or to an ARITH or an engine)."""
        return self.out_px * self.kernels * max(frames, 1)

    def cycles(self, frames: int, profile) -> float:
        c = profile.compute
        macs = self.out_px * self.taps * self.kernels * self.depth * max(frames, 1)
        rate = c.macs("int8") / (2 if self.half_rate else 1)
        return macs / (rate * c.window_use(self.depth, self.taps, self.packed * c.tap_fill))


def _elements(u) -> int:
    return _int(u, "fWidth", 0) * _int(u, "fHeight", 0) * max(int(u.get("fChannels", u.get("batchDepth", 1)) or 1), 1)


ELEMENTWISE_KIND = {"ARITH": "arith", "POOL": "pool", "ACTIV": "activation"}


def fetched(p: AccessPattern, beat: int) -> AccessPattern:
    """The accesses that move `p` on the bus: pixels of a line (the innermost loop) closer than a bus
    beat share beats, so the engine fetches the line's span as one run; other patterns as they are."""
    if p.n1 > 1 and 0 < p.s1 <= beat and p.run < p.s1:
        return AccessPattern(p.base, (p.n1 - 1) * p.s1 + p.run, p.n2, p.s2, p.n3, p.s3)
    return p


def _program_words(ep) -> tuple[str, int]:
    """("ec", words) of an epoch-controller program, or ("registers", count) the Cortex-M55 writes."""
    if ep.ec_words is not None:
        return "ec", ep.ec_words
    if ep.ec_instructions is not None:  # a record without its word count: one word each, the least
        return "ec", ep.ec_instructions
    return "registers", (REGISTERS_PER_STRENG * len(ep.strengs) + sum(len(u.fields) for u in ep.units) +
                         REGISTERS_PER_LINK * len(ep.links))


CACHE_ANSWERS_KEPT = 8  # per engine reading through the NPU cache (and per pool's conflicts): figures kept


def _keep(kept: dict, key, value, keep: int):
    """`value`, stored under `key` in `kept`, which holds its newest `keep` entries."""
    if len(kept) >= keep:
        kept.pop(next(iter(kept)))
    kept[key] = value
    return value


class _ViaCache:
    """An engine that reads an external pool through the NPU cache: the pool, and its figures per answer of
    the cache to its look-ups (the newest CACHE_ANSWERS_KEPT)."""

    __slots__ = ("pool", "figures")

    def __init__(self, pool):
        self.pool, self.figures = pool, {}


class _EpochWork:
    """What one hardware epoch's time derives from its configuration alone: its enabled engines (placed)
    with their walks and stream words, each timed unit's work (`_Conv`, elements), the frames feeding
    each CONVACC, and its programming words. `time` puts a profile on it."""

    __slots__ = ("engines", "units", "program", "fetched")

    def __init__(self, ep, walks):
        """`walks`: ((placed engine, its walk), ...) of the epoch's enabled engines."""
        self.engines = []  # (engine, its walk, stream words, stage names: its memory and its stream side)
        frames_of = {}
        for s, walk in walks:
            frames_of[s.engine] = s.frame_tot_cnt
            self.engines.append((s, walk, se.moved_bytes(s) * 8 // max(s.mem_bits, 1), f"SE{s.engine}",
                                 f"SE{s.engine} stream"))
        feeds = {(lk.dst_kind, lk.dst_index, lk.dst_port): (lk.src_kind, lk.src_index) for lk in ep.links}
        on = set(ep.enabled)
        self.units = []  # (stage name, _Conv and its frames, or the elementwise kind and elements)
        for u in ep.units:
            if on and (u.kind, u.index) not in on:
                continue
            if u.kind == "CONVACC":
                src = feeds.get(("CONVACC", u.index, 0))
                frames = frames_of.get(src[1], 1) if src and src[0] == "STRENG" else 1
                self.units.append((f"CONVACC{u.index}", _Conv(u), frames))
            elif u.kind in ELEMENTWISE_KIND:
                self.units.append((f"{u.kind}{u.index}", ELEMENTWISE_KIND[u.kind], _elements(u)))
        self.program = _program_words(ep)
        self.fetched: dict = {}  # bus beat -> `_fetched`

    def program_cycles(self, prof) -> float:
        kind, n = self.program
        return (prof.epoch.ec_word_cycles if kind == "ec" else prof.epoch.register_cycles) * n

    def _fetched(self, beat: int) -> list:
        """Each engine's walk as the bus fetches it (`fetched`), the same objects run after run (the NPU
        cache's transcript compares them by identity first)."""
        got = self.fetched.get(beat)
        if got is None:
            got = self.fetched[beat] = [tuple(fetched(p, beat) for p in e[1]) for e in self.engines]
        return got

    def _engine(self, i: int, prof, walk, cache, mine):
        """(pool name, the costs of engine i's walk, their cycles, their beats, its bus port), or (None,)
        when no pool holds it. `mine` (`time`) keeps them in one entry per engine: the figures of an engine
        the NPU cache does not see, or a `_ViaCache` of one that reads through it (its look-ups are made
        every run: the cache's state carries over)."""
        kept = mine.get(i) if mine is not None else None
        if kept is not None and kept.__class__ is not _ViaCache:
            return kept
        s = self.engines[i][0]
        if kept is None:
            pool = prof.pool_at(s.addr)
            through_cache = pool is not None and s.cacheable and pool.cacheable
            if pool is None or cache is None or not through_cache:
                got = (None,) if pool is None else self._costs(i, prof, pool, walk, (None,) * len(walk))
                if mine is not None and not through_cache:  # (timed without the cache it would read through: not kept)
                    mine[i] = got
                return got
            kept = _ViaCache(pool)
            if mine is not None:
                mine[i] = kept
        looked = tuple(cache.access(p, s.direction) for p in walk)
        got = kept.figures.get(looked)
        if got is None:
            got = _keep(kept.figures, looked, self._costs(i, prof, kept.pool, walk, looked), CACHE_ANSWERS_KEPT)
        return got

    def _costs(self, i: int, prof, pool, walk, looked) -> tuple:
        s = self.engines[i][0]
        costs = [pattern_cost(pool, p, prof, access=s.direction, looked=r) for p, r in zip(walk, looked)]
        ports = prof.bus.stream_engine_port
        return (pool.name, costs, sum(c.cycles for c in costs), sum(c.beats for c in costs),
                ports[s.engine] if s.engine < len(ports) else 0)

    def _units(self, prof) -> list:
        """[(stage name, cycles)] of the units (module doc)."""
        wpc, out = prof.stream_engine.words_per_cycle, []
        for name, work, n in self.units:
            if work.__class__ is _Conv:
                out.append((name, work.cycles(n, prof)))
                if wpc > 0:  # its output link: one word per output value
                    out.append((f"{name} out", work.outputs(n) / wpc))
            else:
                out.append((name, n / float(prof.compute.elems_per_cycle[work])))
        return out

    def time(self, prof, cache: NpuCache | None = None, mine: dict | None = None) -> EpochTime:
        """Cycles of the epoch on `prof` (module doc). `cache`: the NPU cache, whose state carries over
        from the epochs before. `mine`: this epoch's figures kept for this profile (each a function of
        the walks, the pools, the profile and the cache's answers): {engine index: `_engine`'s entry},
        {("conflicts", pool): {the engines' figures on it, by identity: (those figures, cycles)}, the
        newest CACHE_ANSWERS_KEPT}, {"units": `_units`}, and {"time": the EpochTime} of an epoch none of
        whose engines reads through the NPU cache (nothing of it then varies from run to run)."""
        got = mine.get("time") if mine is not None else None
        if got is not None:
            return got
        stages: dict = {}
        by_pool: dict = {}
        by_port: dict = {}
        wpc = prof.stream_engine.words_per_cycle
        walks = self._fetched(prof.bus.beat_bytes)
        for i, (s, _, words, name, stream) in enumerate(self.engines):
            got = self._engine(i, prof, walks[i], cache, mine)
            if got[0] is None:
                continue
            stages[name] = stages.get(name, 0.0) + got[2]
            if wpc > 0:  # its stream side: one element per word
                stages[stream] = words / wpc
            by_pool.setdefault(got[0], []).append(got)
            by_port[got[4]] = by_port.get(got[4], 0.0) + got[3]
        for name, gots in by_pool.items():
            if sum(len(g[1]) for g in gots) > 1:
                per = mine.setdefault(("conflicts", name), {}) if mine is not None else {}
                ids = tuple(map(id, gots))  # the entry keeps `gots` alive: no other figures can take their ids
                got = per.get(ids)
                if got is None:
                    pool_costs = [c for g in gots for c in g[1]]
                    got = _keep(per, ids, (gots, max(c.cycles for c in pool_costs) +
                                           conflict_cycles(pool_costs, name, prof).cycles), CACHE_ANSWERS_KEPT)
                stages[f"conflicts {name}"] = got[1]
        for port, beats in by_port.items():
            stages[f"port {port}"] = float(beats)
        units = mine.get("units") if mine is not None else None
        if units is None:
            units = self._units(prof)
            if mine is not None:
                mine["units"] = units
        stages.update(units)
        t = EpochTime(setup=float(prof.epoch.setup_cycles), program=self.program_cycles(prof), stages=stages)
        if mine is not None and all(i in mine and mine[i].__class__ is not _ViaCache for i in range(len(self.engines))):
            mine["time"] = t
        return t


def epoch_time(ep, symbols: dict, prof, cache: NpuCache | None = None) -> EpochTime:
    """Cycles of one hardware epoch and their parts (module doc). `cache`: the NPU cache, whose state
    carries over from the epochs before; an engine with its cacheable bit set reads through it."""
    return _EpochWork(ep, se.epoch_walks(ep, symbols)).time(prof, cache)


def epoch_cycles(ep, symbols: dict, prof) -> float:
    """Cycles of one hardware epoch (module doc)."""
    return epoch_time(ep, symbols, prof).cycles


def sw_time(blk, buffers_by_name: dict, prof) -> EpochTime:
    """A software block: the host cost model of each library operator on its buffers' shapes."""
    total = 0.0
    for op in blk.sw_ops:
        onnx = SW_AS_ONNX.get(op.kind, "Identity")
        shapes = []
        for ref in op.inputs + op.operands + op.outputs:
            b = buffers_by_name.get(ref)
            if b is not None and b.shape:
                shapes.append(tuple(b.shape))
        if not shapes:
            shapes = [(1,)]
        total += host_cycles(onnx, shapes[:-1] or shapes, shapes[-1:], prof)
    return EpochTime(stages={"host": total})


def sw_cycles(blk, buffers_by_name: dict, prof) -> float:
    return sw_time(blk, buffers_by_name, prof).cycles


def dma_time(traffic, buffers_by_name: dict, prof) -> EpochTime:
    """A hybrid block: the Cortex-M55 programs an input and an output stream engine and waits while
    they move the bytes the block reads (its buffers, whole) and writes (the replay's written ranges)."""
    sides = {"SE in": [AccessPattern.linear(b.start, b.size) for b in
                       (buffers_by_name.get(n) for n in sorted(traffic.reads)) if b is not None and b.size > 0],
             "SE out": [AccessPattern.linear(lo, hi - lo) for lo, hi, _ in traffic.written if hi > lo]}
    stages, by_pool = {}, {}
    for name, patterns in sides.items():
        for p in patterns:
            pool = prof.pool_at(p.base)
            if pool is None:
                continue
            c = pattern_cost(pool, p, prof, access="read" if name == "SE in" else "write")
            stages[name] = stages.get(name, 0.0) + c.cycles
            by_pool.setdefault(pool.name, []).append(c)
    for name, costs in by_pool.items():
        if len(costs) > 1:
            stages[f"conflicts {name}"] = sum(c.cycles for c in costs) + conflict_cycles(costs, name, prof).cycles
    registers = 2 * REGISTERS_PER_STRENG + 2 * REGISTERS_PER_LINK
    return EpochTime(setup=prof.host_to_npu_cycles(float(prof.host.call_cycles)),
                     program=prof.epoch.register_cycles * registers, stages=stages)


def _work(out, symbols: dict) -> dict:
    """{(block index, epoch number): _EpochWork} of every hardware epoch, kept with the loaded output
    per placement of the user I/O."""
    def build():
        return {(blk.index, ep.number): _EpochWork(ep, se.placed_walks(out, symbols, ep))
                for blk in out.blocks for ep in blk.epochs}
    return out.memo("timing work", tuple(sorted(symbols.items())), build)


def program_timing(out, rep, profile, view: str = "profile") -> dict:
    """{(block index, epoch, software part?): EpochTime} of every epoch and software block
    (`view`: whose pool speeds, `timing_profile`). What the program decides (walks, units' work) is
    computed once per loaded output and placement (`_work`); per profile (its canonical identity), each
    epoch's engine costs and conflicts (`_EpochWork.time`) and the NPU cache's answers (a transcript,
    followed while the look-ups are the same: `memory/cache.py`) are kept too. The cyclic collector is
    paused meanwhile (`collector.paused`)."""
    with collector.paused():
        return _program_timing(out, rep, profile, view)


def _program_timing(out, rep, profile, view: str) -> dict:
    prof = timing_profile(out, profile, view)
    symbols = {k: v[0] for k, v in rep.placements.items()}
    work = _work(out, symbols)
    kept = out.memo("timing per profile", (tuple(sorted(symbols.items())), prof.identity()),
                    lambda: {"transcript": None, "epochs": {}})
    by_name = {b.name: b for b in out.buffers}
    traffic = {(t.block, t.epoch): t for t in rep.epochs if t.sw}
    cache = NpuCache(prof)
    cache.record()
    cache.follow(kept["transcript"])
    times = {}
    for blk in out.blocks:
        for ep in blk.epochs:
            key = (blk.index, ep.number)
            times[(blk.index, ep.number, False)] = work[key].time(prof, cache, kept["epochs"].setdefault(key, {}))
        if blk.sw_ops:
            num = blk.epoch_num if blk.epoch_num is not None else blk.index
            t = traffic.get((blk.index, num))
            times[(blk.index, num, True)] = (dma_time(t, by_name, prof) if blk.kind == "hybrid" and t is not None
                                             else sw_time(blk, by_name, prof))
    got = cache.transcript()
    if got is not None:
        kept["transcript"] = got
    return times


def program_cycles(out, rep, profile) -> dict:
    """{(block index, epoch, software part?): cycles} of every epoch and software block."""
    return {k: t.cycles for k, t in program_timing(out, rep, profile).items()}
