"""Replay an imported ST program's memory traffic: every stream engine's walk, epoch by epoch, and
every software operator's buffers, checked against two views at once.

- The hardware's view: the board's physical memory windows (`hw/profiles/n657_board.toml`), with the
  flash read-only and the NPU RAMs present only while powered.
- The compiler's view: ST's buffer table. A write must stay inside its buffer's
  `[offset_start, offset_end)`; a read may run on to `offset_limit` (the prefetch guard) but not past
  it. Without the full table (`--all-buffers-info` off) the pools stand in for the buffers.

Faults are the project's `Fault` records: the epoch is the board's `epoch_num`, the command the
epoch block's index (the runtime's array index), the layer the node ST named.

What the program and the options decide (the walks, the provenance of every access and its verdict on
the two views, the traffic) is a plan built once per loaded output, user-I/O placement and power state
(`_Plan`, kept by `StOutput.memo`); a run clones the plan's region table and judges only what depends on
the bytes written before each access (uninitialized reads, clobbered live buffers).

Why one module of ~600 lines: the two views, the provenance rule (which buffer an access belongs to) and
the clobber rule judge the same walk together, in the plan and in the run; the board and the placement of
the application's I/O (`board`), the walk itself (`streng`) and the time (`timing`) are apart.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field, replace

import numpy as np

from ...errors import StImportError, UsageError
from ...faults import COMMAND_KIND, NODE_KIND, Fault, Relation, merge_repeats
from ...memory.checker import Checker
from ...memory import pattern_math as pm
from ...memory.regions import Region, RegionTable
from . import collector
from . import streng as se
from .board import ReplayOptions, board_map, placement_faults, place_user_io, resolved_buffers
from .model import Buffer, StOutput
from .reader import read

HARDWARE_AND_BOUNDS = ("out-of-pool", "write-to-readonly", "buffer-overflow", "buffer-underflow")


@dataclass
class EpochTraffic:
    """What one epoch moved: bytes per pool and direction, buffers touched, masks."""

    block: int
    epoch: int
    kind: str
    sw: bool = False  # the software part of a block (its library operators on the CPU)
    read_bytes: dict = field(default_factory=dict)
    write_bytes: dict = field(default_factory=dict)
    buffers: set = field(default_factory=set)
    reads: set = field(default_factory=set)
    own_writes: list = field(default_factory=list)  # (lo, hi) extents of the epoch's own write engines
    written: list = field(default_factory=list)  # (lo, hi, buffer written) intervals, hardware view
    in_mask: int = 0
    out_mask: int = 0
    outputs_per_pool: dict = field(default_factory=dict)


@dataclass
class Replay:
    faults: list
    epochs: list  # EpochTraffic per epoch, in order
    placements: dict  # user-I/O symbol -> (address, size, where)
    undecided: list  # what the replay could not decide (blocks without decoded epochs)


def _layer_of(name: str) -> str:
    """The node a generated struct name belongs to (`Conv2D_3_dma_init_in_0_2` -> `Conv2D_3`)."""
    return re.sub(r"_(dma_init_(in|out)_\d+|init)_?\d*$", "", name) or name


_KIND = {"input": "input", "output": "output"}


class _Buffers:
    """ST's buffer table as regions, and the provenance rule: the buffer an access belongs to."""

    def __init__(self, buffers, regions: RegionTable, faults: list, pools_only: bool = False):
        self.rows: list[tuple[Buffer, Region]] = []
        self.pools: list[Region] = []  # provenance where the table lists only I/O buffers
        self.pools_only = pools_only
        for b in buffers:
            kind = "weight" if b.is_param else _KIND.get(b.role, "activation")
            try:
                made = f", produced by epoch {b.epoch}" if b.epoch is not None and not b.is_param else ""
                r = regions.add(b.name, kind, b.start, b.size, origin=f"buffer '{b.name}' of ST's table{made}")
            except UsageError:
                faults.append(Fault("out-of-pool", None, b.start, b.size, "", b.epoch, None, b.name, None,
                                    Relation("unmapped", 0),
                                    f"buffer '{b.name}' [{b.start:#x}, {b.end:#x}) lies outside the board's "
                                    f"memory (or in RAM that is not powered)", f"buffer '{b.name}' is unmapped"))
                continue
            if b.is_param or b.role == "input":
                regions.mark_range_written(r.start, r.size)
            self.rows.append((b, r))
        self.rows.sort(key=lambda br: br[0].start)
        self._memo: dict = {}  # (access, epoch) -> the buffers usable there, indexed (`_index`)
        # the usability rule's inputs as arrays over the rows (`_usable`, vectorised in `_index`)
        bufs = [br[0] for br in self.rows]
        self._always_read = np.array([b.is_param or b.role == "input" or b.epoch is None for b in bufs], bool)
        self._is_param = np.array([b.is_param for b in bufs], bool)
        self._no_epoch = np.array([b.epoch is None for b in bufs], bool)
        self._epoch = np.array([-1 if b.epoch is None else b.epoch for b in bufs], np.int64)
        self._starts = np.array([b.start for b in bufs], np.int64)
        self._ends = {"read": np.array([b.limit for b in bufs], np.int64),
                      "write": np.array([b.end for b in bufs], np.int64)}
        self._by_bounds: dict = {}
        for br in self.rows:
            self._by_bounds.setdefault((br[0].start, br[0].end), []).append(br)

    def _usable(self, b: Buffer, access: str, epoch: int) -> bool:
        """A buffer an epoch may read (produced before it, a parameter or an input) or write
        (produced by it; any non-parameter buffer when the table gives no producer)."""
        if access == "write":
            return not b.is_param and (b.epoch is None or b.epoch == epoch)
        # a buffer of the epoch's own is read back in it too (partial sums of a convolution split
        # over accumulating passes)
        return b.is_param or b.role == "input" or b.epoch is None or b.epoch <= epoch

    def exact(self, addr: int, end: int | None, access: str, epoch: int):
        """The usable buffer whose bounds are an engine's own (`addr` and the `end` the compiler gave it)."""
        if end is None:
            return None
        same = [br for br in self._by_bounds.get((addr, end), ()) if self._usable(br[0], access, epoch)]
        return max(same, key=lambda br: -1 if br[0].epoch is None else br[0].epoch) if same else None

    def _index(self, access: str, epoch: int):
        """The buffers usable at (access, epoch): rows by start, their starts and ends (the limit for a
        read) and the running maximum of the ends (to stop a backward scan early)."""
        got = self._memo.get((access, epoch))
        if got is None:
            if access == "write":
                usable = ~self._is_param & (self._no_epoch | (self._epoch == epoch))
            else:
                usable = self._always_read | (self._epoch <= epoch)
            keep = np.flatnonzero(usable)
            ends = self._ends["read" if access == "read" else "write"][keep]
            runmax = np.maximum.accumulate(ends) if len(ends) else ends
            got = self._memo[(access, epoch)] = ([self.rows[k] for k in keep.tolist()],
                                                 self._starts[keep].tolist(), ends.tolist(), runmax.tolist())
        return got

    def provenance(self, addr: int, access: str, epoch: int, upto: int | None = None):
        """(region, buffers) an access starting at `addr` may touch: the buffer holding `addr` that the
        epoch may use, joined with the usable buffers that continue it without a gap (concat inputs
        read by one engine, split outputs written by one), up to `upto` (the engine's limit). A read
        may run on to the last buffer's limit. None when no usable buffer holds `addr`."""
        rows, starts, ends, runmax = self._index(access, epoch)

        def holding(x: int) -> list:  # usable rows with start <= x < end
            out, k = [], bisect.bisect_right(starts, x) - 1
            while k >= 0 and runmax[k] > x:
                if ends[k] > x:
                    out.append(k)
                k -= 1
            return out

        first = holding(addr)
        if not first:
            return None
        h = max(first, key=lambda k: (addr < rows[k][0].end, -1 if rows[k][0].epoch is None else rows[k][0].epoch,
                                      -rows[k][0].size))
        chain, hi = [rows[h]], ends[h]
        bound = upto if upto is not None else hi
        while hi < bound and len(chain) < len(rows):
            prev_end = chain[-1][0].end
            nxt = [k for k in holding(hi) if starts[k] >= prev_end]
            if not nxt:
                break
            k = max(nxt, key=lambda k: (-1 if rows[k][0].epoch is None else rows[k][0].epoch, -starts[k]))
            chain.append(rows[k])
            hi = ends[k]
        b0, r0 = chain[0]
        whole = self.enclosing(b0, access, epoch, upto) if hi < bound else None
        if whole is not None:  # a part of a larger buffer (a concatenation's input written in place, its
            e, re = whole      # pixels strided in the whole's): the walk may cover the whole
            end = e.limit if access == "read" else e.end
            if end > hi:
                return Region(b0.name, r0.kind, r0.start, end, r0.pool, r0.perms, producer=r0.producer,
                              origin=r0.origin + f", a part of '{e.name}' [{e.start:#x}, {e.end:#x})"), chain
        if len(chain) == 1 and hi == r0.end:
            return r0, chain
        names = ", ".join(br[0].name for br in chain[1:])
        region = Region(b0.name, r0.kind, r0.start, hi, r0.pool, r0.perms, producer=r0.producer,
                        origin=r0.origin + (f", continued by {names}" if names else "") +
                        (", up to its limit" if access == "read" else ""))
        return region, chain

    def enclosing(self, b: Buffer, access: str, epoch: int, upto: int | None):
        """The whole `b` is a part of (a concatenation's input written in place, its pixels strided in
        the whole's): the largest buffer of the table holding all of `b` and more that ends within the
        engine's limit `upto` (ST gave the engine the whole's bounds), assembled from parts (a write:
        produced by this epoch or later) or complete (a read: produced after `b`, by this epoch)."""
        if upto is None:
            return None
        best = None
        for b2, r2 in self.rows:
            if b2.start > b.start:
                break
            if b2 is b or b2.is_param or b2.end < b.end or b2.size <= b.size or b2.end > upto:
                continue
            if access == "write":
                ok = b2.epoch is None or b2.epoch >= epoch
            else:
                ok = self._usable(b2, access, epoch) and (b2.epoch is None or b.epoch is None or b2.epoch >= b.epoch)
            if ok and (best is None or b2.size > best[0].size):
                best = (b2, r2)
        return best

    def operand(self, ref: str, role: str, epoch: int):
        """The buffer a software operand names: by name, or at an address the buffer that the block
        produces (an output) or the latest one produced before it (an input). An operand of unsaid
        role is the block's output where a buffer the block produces starts at its address (a call's
        unnamed rows: ST Edge AI 3.0's hybrid blocks), else its input."""
        if not ref.startswith("@"):
            return self.named(ref)
        addr = int(ref[1:].split("+")[0], 16)
        here = [br for br in self.rows if br[0].start == addr]
        if not here:
            return None

        def rank(br):
            e = -1 if br[0].epoch is None else br[0].epoch
            if role == "out":
                return (e == epoch, e <= epoch, e)
            return (e == epoch and role == "?", e < epoch or br[0].is_param, e if e < epoch else -1)

        return max(here, key=rank)

    def named(self, name: str):
        return next(((b, r) for b, r in self.rows if b.name == name), None)


def replay(out: StOutput, opts: ReplayOptions = ReplayOptions()) -> Replay:
    """Walk every epoch block in order; the faults (merged repeats unless `keep_going` is off and a
    fault stops the walk), the traffic per epoch and the user-I/O placements. The cyclic collector is paused
    during the walk (`collector.paused`)."""
    with collector.paused():
        return _Replayer(out, opts).run()


class _Access:
    """One access pattern of an engine, with what the program and the placement decide about it: its
    extent, the buffers it belongs to (the provenance rule), and whether the hardware-and-bounds check
    passes (`clean`: a verdict of geometry alone, since the replay never frees a region). What a run
    still decides is what depends on the bytes written before it: the uninitialized reads."""

    __slots__ = ("s", "p", "lo", "hi", "layer", "clean", "prov", "last", "check_layer", "uninit", "pool",
                 "own_overlap")

    def __init__(self, s, p, lo, hi, layer):
        self.s, self.p, self.lo, self.hi, self.layer = s, p, lo, hi, layer
        self.clean, self.prov, self.last, self.check_layer = True, None, None, layer
        self.uninit: tuple = ()  # (buffer, template region) pairs a read must find written
        self.pool = None  # the pool region standing in for a buffer (no provenance in the table)
        self.own_overlap = False  # a read meeting the epoch's own writes

    def needs_run(self) -> bool:
        """Whether a run can find a fault here: the verdict is one, or a read must find bytes written."""
        if not self.clean:
            return True
        if self.last is None:  # no buffer holds it: a read of its pool outside the epoch's own writes
            return self.pool is not None and not self.s.dir and not self.own_overlap
        return bool(self.uninit)


class _EpochPlan:
    """One hardware epoch as the program and the placement decide it: the faults of refused register
    values, the accesses a run must judge (`_Access.needs_run`) in walk order, the traffic it moves
    (`EpochTraffic` fields) and its writes."""

    __slots__ = ("block", "number", "kind", "refused", "accesses", "watch", "marks", "traffic")

    def __init__(self, block, number, kind):
        self.block, self.number, self.kind = block, number, kind
        self.refused: list = []
        self.accesses: list = []
        self.watch = None  # the buffers' regions its reads must find written, when that is all a run judges
        self.marks: list = []  # (covered intervals, extent) of each non-empty write, in walk order
        self.traffic: dict = {}  # EpochTraffic's fields, copied into each run's record


class _Plan:
    """What a replay derives from the program, the user-I/O placement and the board's power state:
    the board's map, ST's buffer table as a region table (the template each run clones, written
    state included), the table's faults, and every epoch block's steps with their verdicts. Built
    once per (output, placement, power state) and kept with the loaded output (`StOutput.memo`)."""

    def __init__(self, out: StOutput, symbols: dict, npu_ram_off: bool):
        self.amap, self.off = board_map(npu_ram_off)
        self.regions = RegionTable(self.amap)
        self.faults: list[Fault] = []
        self.table = _Buffers(resolved_buffers(out, symbols), self.regions, self.faults, pools_only=not out.all_buffers_info)
        if not out.all_buffers_info:  # the pools stand in for the buffers the tables do not list; adjacent
            for names, lo, hi, ro in _joined_pools(out.pools):  # pools of one kind are one range (virtual pools)
                if self.amap.is_mapped(lo, hi - lo):
                    self.table.pools.append(self.regions.add(
                        "+".join(names), "weight" if ro else "scratch", lo, hi - lo,
                        origin=f"pool {'+'.join(names)} of the compile (its buffers are not listed: "
                               f"compiled without --all-buffers-info)"))
        assert all(r.seq == i + 1 for i, r in enumerate(self.regions.regions))  # a clone's region i is seq i+1
        self.checker = Checker(self.amap, self.regions)
        self.out, self.symbols = out, symbols
        self.steps: list = []
        self.clobbers = None  # `_clobbers` of a run that went to the end (its traffic is the plan's)
        try:
            for blk in out.blocks:
                if blk.kind == "hw" and not blk.epochs:
                    self.steps.append(("undecoded", blk, self._produced_in(blk)))
                    continue
                for ep in blk.epochs:
                    self.steps.append(("hw", blk, self._epoch(blk, ep)))
                if blk.sw_ops:
                    self.steps.append(("sw", blk, self._operands(blk)))
        except StImportError as e:  # an engine no register can hold: refused when a run reaches it
            self.steps.append(("refused", None, e))

    def _produced_in(self, blk) -> list:
        """The table's regions an undecoded block produces (they count as written after it)."""
        return [r for b, r in self.table.rows if b.epoch is not None and blk.epoch_num is not None and
                blk.epoch_num <= b.epoch <= (blk.last_epoch_num or blk.epoch_num)]

    def _operands(self, blk) -> list:
        """(ref, role, the table's (buffer, region) or None, operator kind) of every operand of the block's operators."""
        epoch = blk.epoch_num if blk.epoch_num is not None else blk.index
        return [(ref, role, self.table.operand(ref, role, epoch), op.kind) for op in blk.sw_ops
                for ref, role in [(x, "in") for x in op.inputs] + [(x, "out") for x in op.outputs] +
                [(x, "?") for x in op.operands]]

    def _epoch(self, blk, ep) -> _EpochPlan:
        e = _EpochPlan(blk.index, ep.number, blk.kind)
        for msg in ep.refused:  # the epoch controller programmed a value a register field refuses
            where, what = msg.split(": ", 1)
            e.refused.append(Fault("bad-descriptor", None, None, 0, where.split(".", 1)[0], ep.number, blk.index,
                                   where, None, Relation("unmapped", 0), f"the hardware refuses the value: {what}",
                                   f"illegal configuration of {where}",
                                   why="a rule of ATON's register map (isa/aton) for this field"))
        walks = se.placed_walks(self.out, self.symbols, ep)
        own_writes = [p.extent() for s, pats in walks if s.dir for p in pats]  # read back in the same epoch
        tr = dict(read_bytes={}, write_bytes={}, buffers=[], reads=[], own_writes=own_writes, written=[],
                  in_mask=0, out_mask=0, outputs_per_pool={})
        for s, pats in walks:
            if s.dir:
                tr["out_mask"] |= 1 << s.engine
                pool = _pool_name(self.out, self.amap, s.addr)
                tr["outputs_per_pool"][pool] = tr["outputs_per_pool"].get(pool, 0) + 1
            else:
                tr["in_mask"] |= 1 << s.engine
            extents = [p.extent() for p in pats]
            span = (min(x[0] for x in extents), max(x[1] for x in extents)) if pats else None
            layer = _layer_of(s.name)
            for p, (lo, hi) in zip(pats, extents):
                a = _Access(s, p, lo, hi, layer)
                owner = self._judge(a, ep.number, own_writes, span, tr)
                if a.needs_run():
                    e.accesses.append(a)
                if s.dir:
                    e.marks.append((p, owner))
        if all(a.clean and a.last is not None for a in e.accesses):
            e.watch = tuple({id(r): r for a in e.accesses for _, r in a.uninit}.values())
        for p, owner in e.marks:  # an epoch's writes land after its reads are judged
            tr["written"].extend((int(lo), int(hi), owner) for lo, hi in _intervals(p))
        e.marks = [(pm.covered(p), p.extent()) for p, _ in e.marks if p.nbytes]
        tr["buffers"] = list(dict.fromkeys(tr["buffers"]))  # a run's sets are built in this order
        tr["reads"] = list(dict.fromkeys(tr["reads"]))
        e.traffic = tr
        return e

    def _judge(self, a: _Access, epoch: int, own_writes, span, tr) -> str:
        """Fill in what the program decides about access `a` (`_Access`); the buffer a write lands in."""
        s, p, lo, hi, table = a.s, a.p, a.lo, a.hi, self.table
        access = s.direction
        key = _pool_name(self.out, self.amap, lo)
        bucket = tr["write_bytes"] if s.dir else tr["read_bytes"]
        bucket[key] = bucket.get(key, 0) + p.nbytes
        got = None if table.pools_only else table.provenance(p.base, access, epoch, upto=s.limit)
        if got is None:  # no buffer of the table holds it: its pool, or a wild access
            a.pool = next((r for r in table.pools if r.start <= p.base < r.end), None)
            a.clean = self.checker.check(p, access, "", epoch, None, "", provenance=a.pool,
                                         only=HARDWARE_AND_BOUNDS) is None
            a.own_overlap = any(x < hi and lo < y for x, y in own_writes)
            return ""
        prov, chain = got
        chain = [(b, r) for b, r in chain if r.start < hi and lo < max(r.end, b.limit)] or chain[:1]
        tr["buffers"].extend(b.name for b, _ in chain)
        if access == "read":  # what it reads: the buffer of its own bounds where the compiler gave them and
            # the whole walk stays inside it (bounds can coincide with a part of a larger buffer)
            meant = table.exact(s.addr, s.offset_end, access, epoch) if span and span[0] == s.addr else None
            if meant is not None and span[1] > meant[0].limit:
                meant = None
            tr["reads"].extend([meant[0].name] if meant else [b.name for b, _ in chain])
            a.uninit = tuple((b, r) for b, r in chain if not b.is_param and b.role != "input" and b.epoch != epoch
                             and r.start < hi and lo < r.end)
        a.prov, a.last, a.check_layer = prov, chain[-1][0], a.layer or chain[0][0].name
        a.clean = self.checker.check(p, access, "", epoch, None, "", provenance=prov,
                                     only=HARDWARE_AND_BOUNDS) is None
        return chain[0][0].name if access == "write" else ""


def _plan(out: StOutput, symbols: dict, npu_ram_off: bool) -> _Plan:
    key = (tuple(sorted(symbols.items())), npu_ram_off)
    return out.memo("replay plan", key, lambda: _Plan(out, symbols, npu_ram_off))


class _Replayer:
    """The state of one replay: the region table (written bytes included, cloned from the plan's),
    the checker, and what was found."""

    def __init__(self, out: StOutput, opts: ReplayOptions):
        self.out, self.opts = out, opts
        self.placements = place_user_io(out, opts)
        self.symbols = {k: v[0] for k, v in self.placements.items()}
        plan = self.plan = _plan(out, self.symbols, opts.npu_ram_off)
        self.amap = plan.amap
        self.regions = plan.regions.clone()
        self.mine = self.regions.regions  # the run's region of the plan's region r: mine[r.seq - 1]
        self.faults: list[Fault] = placement_faults(out, opts, plan.off) + plan.faults
        self.table = plan.table
        self.checker = Checker(self.amap, self.regions)
        self.traffic: list[EpochTraffic] = []
        self.undecided: list[str] = []

    def _mine(self, r):
        """The run's copy of a region of the plan's table (a region made for one access stays as it is)."""
        return self.mine[r.seq - 1] if r is not None and r.seq else r

    def run(self) -> Replay:
        for step, blk, plan in self.plan.steps:
            if step == "hw":
                self._hw_epoch(plan)
                if self.faults and not self.opts.keep_going:
                    return self._result()
            elif step == "sw":
                self._sw_block(blk, plan)
            elif step == "undecoded":
                self._undecoded(blk, plan)
            else:
                raise plan
        if self.plan.clobbers is None:
            self.plan.clobbers = _clobbers(self.traffic, self.table.rows)
        self.faults += _clobber_faults(self.plan.clobbers, self._mine)
        return self._result()

    def _result(self) -> Replay:
        return Replay(merge_repeats(_st_nodes(self.faults)), self.traffic, self.placements, self.undecided)

    def _undecoded(self, blk, produced) -> None:
        self.undecided.append(f"epoch block {blk.index} (epochs {blk.epoch_num}-{blk.last_epoch_num}): "
                              f"its epoch-controller program is not decoded")
        for r in produced:  # what it produces counts as written, so later reads are judged
            self.regions.mark_range_written(r.start, r.size)

    def _hw_epoch(self, e: _EpochPlan) -> None:
        tr = e.traffic
        t = EpochTraffic(e.block, e.number, e.kind, False, dict(tr["read_bytes"]), dict(tr["write_bytes"]),
                         set(tr["buffers"]), set(tr["reads"]), list(tr["own_writes"]), list(tr["written"]),
                         tr["in_mask"], tr["out_mask"], dict(tr["outputs_per_pool"]))
        self.faults += e.refused
        regions, mine = self.regions, self.mine
        if e.watch is None or not all(regions.is_written(r.start, r.end) for r in (mine[x.seq - 1] for x in e.watch)):
            for a in e.accesses:  # (every watched region written: none of them can fault)
                f = self._access(a, e.number, e.block)
                if f is not None:
                    self.faults.append(f)
        for covered, extent in e.marks:  # an epoch's writes land after its reads are judged
            self.regions.mark_covered(covered, extent)
        self.traffic.append(t)

    def _sw_block(self, blk, operands) -> None:
        epoch = blk.epoch_num if blk.epoch_num is not None else blk.index
        t = EpochTraffic(blk.index, epoch, blk.kind, sw=True)
        for ref, role, got, kind in operands:
            if got is None:
                if ref.startswith("@") and "+" in ref and role != "in":  # no table row: the bytes the
                    a, n = ref[1:].split("+")  # call names are written (outputs, or operands of unsaid role)
                    self.regions.mark_range_written(int(a, 16), int(n))
                continue
            b, r = got[0], self._mine(got[1])
            t.buffers.add(b.name)
            if role == "out" or (role == "?" and b.epoch == epoch):
                self.regions.mark_range_written(r.start, r.size)
                t.written.append((r.start, r.end, b.name))
                continue
            t.reads.add(b.name)
            if not b.is_param and b.role != "input" and not self.regions.is_written(r.start, r.end):
                self.faults.append(_never_written(b, r, "CPU", epoch, blk.index, kind))
        self.traffic.append(t)

    def _access(self, a: _Access, epoch: int, block: int):
        """The fault of one access of the plan, or None: the hardware and bounds verdict (the plan's,
        checked again only where it found a fault, to report it), then the reads of bytes not written."""
        s, p, checker, regions = a.s, a.p, self.checker, self.regions
        access, unit = s.direction, f"SE{s.engine}"
        if a.last is None:  # no buffer of the table holds it: checked against its pool, or as a wild access;
            pool = self._mine(a.pool)  # a read of bytes nobody wrote, outside the epoch's own writes
            f = None if a.clean else checker.check(p, access, unit, epoch, block, a.layer, provenance=pool,
                                                   only=HARDWARE_AND_BOUNDS)
            if f is not None or pool is None or access != "read" or a.own_overlap:
                return f
            starts, ends = regions.unwritten(a.lo, a.hi)
            if len(starts) == 1 and starts[0] == a.lo and ends[0] == a.hi:  # not one byte of it was written
                f = checker.check(p, access, unit, epoch, block, a.layer, provenance=pool,
                                  only=("uninitialized-read",))
                return replace(f, why=f"no epoch before epoch {epoch} wrote any byte {unit} reads here")
            return None
        if not a.clean:
            f = checker.check(p, access, unit, epoch, block, a.check_layer, provenance=self._mine(a.prov),
                              only=HARDWARE_AND_BOUNDS)
            if f is not None:
                return replace(f, why=_why(f, a.last, s))
        for b, r in a.uninit:
            r = self._mine(r)
            if not regions.is_written(r.start, r.end):
                return _never_written(b, r, unit, epoch, block, a.layer, pattern=p, checker=checker)
        return None


def _joined_pools(pools) -> list[tuple[list[str], int, int, bool]]:
    """(names, start, end, read-only) of the compile's pools, adjacent pools of the same access joined."""
    out = []
    for p in sorted(pools, key=lambda p: p.address):
        if out and out[-1][2] == p.address and out[-1][3] == p.read_only:
            out[-1][0].append(p.name)
            out[-1][2] = p.end
        else:
            out.append([[p.name], p.address, p.end, p.read_only])
    return [tuple(x) for x in out]


def _pool_name(out: StOutput, amap, addr: int) -> str:
    """The compile's pool holding `addr`, else the board window, else "unmapped"."""
    p = out.pool_at(addr)
    if p is not None:
        return p.name
    w = amap.pool_of(addr)
    return w.name if w is not None else "unmapped"


def _st_nodes(faults) -> list[Fault]:
    """Faults whose layer is a node of ST's graph (the generated code's names), said so in reports."""
    return [replace(f, details={**f.details, NODE_KIND: "ST node", COMMAND_KIND: "epoch block"}) for f in faults]


def _why(f: Fault, b: Buffer, s) -> str:
    if f.cls not in ("buffer-overflow", "buffer-underflow"):
        return ""
    bound = "limit" if s.dir == 0 else "end"
    edge = b.limit if s.dir == 0 else b.end
    return (f"SE{s.engine} {s.direction}s {se.moved_bytes(s)} B from {s.addr:#x} "
            f"({'raw' if s.raw else f'{s.fwidth}x{s.fheight} px of {s.batch_depth} x {s.mem_bits} bit'}, "
            f"{s.frame_tot_cnt} frame(s)); buffer '{b.name}' [{b.start:#x}, {b.end:#x}) "
            f"has its {bound} at {edge:#x}")


def _never_written(b, r, unit, epoch, block, layer, pattern=None, checker=None) -> Fault:
    if pattern is not None and checker is not None:
        f = checker.check(pattern, "read", unit, epoch, block, layer, provenance=r, only=("uninitialized-read",))
        if f is not None:
            return replace(f, why=f"no epoch before epoch {epoch} wrote these bytes of '{b.name}' (ST's table "
                                  f"says epoch {b.epoch} produces it)")
    return Fault("uninitialized-read", "read", b.start, b.size, unit, epoch, block, layer, r.ref(),
                 Relation("inside", 0), f"bytes must be written before they are read; '{b.name}' never was",
                 f"read of '{b.name}' before any epoch wrote it",
                 why=f"ST's table says epoch {b.epoch} produces '{b.name}'")


def _intervals(p, cap: int = 4096):
    """The bytes a pattern touches as (lo, hi) intervals (its hull past `cap` intervals)."""
    starts, ends = pm.covered(p, max_runs=cap)
    if len(starts) == 0 and p.nbytes:
        return [p.extent()]
    return list(zip(starts.tolist(), ends.tolist()))


def _clobbers(traffic, table_rows) -> list[tuple]:
    """A buffer clobbered while it still holds data (the hardware's view): an epoch after the buffer's
    producer and before its last read writes bytes of it for another buffer (two buffers overlapping
    while both are live). Buffers nested in one another are not judged: a part of a larger buffer (a
    concatenation's input written in place, a view) has the same shape of addresses as a clobber, and
    the table does not say which tensor a reader means. [(clobbered row, writer row, (writing epoch,
    its block), lo, hi, last read epoch)] (a run's traffic is its plan's: `_Plan.clobbers`)."""
    last_read: dict[str, int] = {}
    for t in traffic:
        for n in t.reads:
            last_read[n] = t.epoch
    rows = {b.name: (b, r) for b, r in table_rows}
    found, seen = [], set()
    for name, last in last_read.items():
        if name not in rows:
            continue
        b1, r1 = rows[name]
        if b1.is_param or b1.epoch is None:
            continue
        for t in traffic:
            if not b1.epoch < t.epoch < last:
                continue
            for lo, hi, owner in t.written:
                if owner == name or owner not in rows or hi <= b1.start or lo >= b1.end or (owner, name) in seen:
                    continue
                seen.add((owner, name))
                b2 = rows[owner][0]
                if (b2.start <= b1.start and b1.end <= b2.end) or (b1.start <= b2.start and b2.end <= b1.end):
                    continue
                found.append(((b1, r1), rows[owner], (t.epoch, t.block), max(lo, b1.start), min(hi, b1.end), last))
    return found


def _clobber_faults(clobbers, mine) -> list[Fault]:
    """The `pool-overlap` faults of `_clobbers`; `mine`: a run's region of the plan's region."""
    faults = []
    for (b1, r1), (b2, _), (epoch, block), lo, hi, last in clobbers:
        name, owner = b1.name, b2.name
        faults.append(Fault(
            "pool-overlap", "write", lo, hi - lo, "", epoch, block, owner, mine(r1).ref(),
            Relation("inside", lo - b1.start),
            f"buffers '{name}' [{b1.start:#x}, {b1.end:#x}) and '{owner}' [{b2.start:#x}, {b2.end:#x}) "
            f"share bytes: epoch {epoch} writes '{owner}' over '{name}' (produced by epoch {b1.epoch}), "
            f"which is still read at epoch {last}",
            f"'{owner}' overwrites '{name}' while it is live"))
    return faults


def load(path) -> StOutput:
    return read(path)


__all__ = ["ReplayOptions", "Replay", "replay", "StImportError", "load"]
