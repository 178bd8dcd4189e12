"""An epoch's values on the machine: stream reads, the units' kernels, stream writes.

`EpochValues` is the part of `Machine` (engine/machine.py) that moves an epoch's bytes: read SEs gather,
each unit computes from its inputs and parameter table (int8 CONV units that share an input run as one
GEMM, `_split_group`), write SEs scatter (`_values`); a unit refusing its table is a `bad-descriptor`
fault. A static walk decides the same refusals from the tables known before the run (`_static_tables`);
`Machine.replay` runs the values alone (`_replay_epoch`). What the configuration and the constants
decide is kept in the epoch plan's `values` for the next run (streams' windows, table verdicts, split
candidates, kernel set-ups; in a replay, constants' streams, and once a replay kept them, the epoch's
bound steps: `_bind_steps`, run by `_run_steps` with only the input-dependent work). It uses the
machine's state (`memory`,
`_fault`, `_knows`, `_layer`, the per-program memos `_weights`, `_verdicts`).
"""

from __future__ import annotations

import numpy as np

from ..errors import NpusimError
from ..memory import Split, Window, stream_bytes, window
from ..memory.pattern_math import covered, first_overlap
from .hwfaults import make_fault
from .streams import read_stream, write_stream
from .units import (constant_root, cached_table_problem, kept_conv_input, kept_int8_conv, run_conv_split,
                    run_kept_conv, run_kept_conv_stream, run_unit, split_key, table_problem)


class ReplayRefused(Exception):
    """`Machine.replay` met something its values-only walk cannot stand for (a fault, a software
    epoch's operator record other than the memoised one, a wait for simulated time): the caller
    runs the program in full instead."""


class EpochValues:
    """`Machine`'s epoch values (and the table refusals they decide)."""

    def _replay_epoch(self, cfg, plan) -> None:
        """`replay`: the epoch's values alone, from its static plan."""
        if plan.refused or plan.slow or plan.flow.waiting:  # faults: a fault-free run had none
            raise ReplayRefused("epoch")
        if plan.checks is None:  # the patterns by unit, as a full run of the plan keeps them
            self._plan_checks(plan)
        self._values(cfg, plan.flow, plan.patterns, plan.table_patterns, plan.values)

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

    def _split_group(self, cfg, flow, name, streams, tables, done, tabs, memo, read_table) -> list:
        """The int8 CONV units that compute with `name` in one GEMM (`units.run_conv_split`): later
        units of the epoch with its split key and input stream, weights already read, their tables
        acceptable, no stream written between (so every byte they read is what they would read at
        their turn; their tables, read here by `read_table(unit)`, are kept in `tabs` for it). [name]
        alone when there are none. The candidates (what the configuration decides) are kept in `memo`."""
        cands = memo.get(("split candidates", name))
        if cands is None:
            cands = memo[("split candidates", name)] = self._split_candidates(cfg, flow, name, tables)
        group = [name]
        for other in cands:
            if other in done or flow.inputs[other].get(1) not in streams:
                continue
            if other not in tabs:
                tabs[other] = read_table(other)
            if cached_table_problem(cfg.units[other], tabs[other], memo) is None:
                group.append(other)
        return group

    @staticmethod
    def _split_candidates(cfg, flow, name, tables) -> tuple:
        """Later units that may join `name`'s GEMM, from the configuration alone: int8 CONVs of its split
        key and input stream, not waiting, with a table, before the next write SE."""
        key = split_key(cfg.units[name])
        if key is None or name not in tables:
            return ()
        src = flow.inputs[name].get(0)
        out = []
        for other in flow.order[flow.order.index(name) + 1:]:
            if other.startswith("SE"):
                if not cfg.ses[other].read:
                    break
                continue
            if (other not in flow.waiting and other in tables and split_key(cfg.units[other]) == key
                    and flow.inputs[other].get(0) == src):
                out.append(other)
        return tuple(out)

    @staticmethod
    def _bind_conv(cfg, flow, group, streams, table, tabs, memo) -> None:
        """Keep in `memo` how a replay computes the int8 CONV units of `group` (one unit, or a split
        conv's GEMM) at its next turn (`_bound_conv`): their kept set-up (`units.kept_int8_conv`) with the
        constant streams it was made from (weights and tables, kept by `_constant_stream`: the same
        objects at every replay while the constants are). Nothing is kept for other units."""
        units = [cfg.units[n] for n in group]
        conv = kept_int8_conv(units, memo) if split_key(units[0]) is not None else None
        if conv is None:
            return
        consts = []
        for n, t in zip(group, [table] + [tabs.get(n) for n in group[1:]]):
            w = streams.get(flow.inputs[n].get(1))
            if t is None or w is None or constant_root(t) is None or constant_root(w) is None:
                return
            consts.append((n, t, flow.inputs[n][1], w))
        memo[("bound", group[0])] = (tuple(consts), units[0], conv, group[1:])

    def _bound_conv(self, name, flow, streams, table, memo, scratch, done) -> bool:
        """Run the units `_bind_conv` kept for `name` when every constant stream they were made from is
        the one this replay reads (their verdicts, split group and set-up are then those of the last
        run); False when none is kept or a stream differs (the caller takes the full path)."""
        got = memo.get(("bound", name))
        if got is None:
            return False
        consts, u, conv, partners = got
        for n, t, w_src, w in consts:
            if streams.get(w_src) is not w or (table if n == name else memo.get(("constant", ("table", n)))) is not t:
                return False
        outs = run_kept_conv(u, conv, {p: streams[s] for p, s in flow.inputs[name].items()}, scratch)
        streams[name] = outs[0]
        done.update(zip(partners, outs[1:]))
        return True

    @staticmethod
    def _in_place_reads(cfg, flow, patterns, wins) -> frozenset:
        """Read SEs whose stream can be a view of memory instead of a copy (`_read_in_place`): bytes of
        one writable pool (a dense run, or a strided `Window`: a band of rows over blocked16 planes) that
        no write SE of the epoch touches, so they hold the values read until the epoch ends; nothing
        keeps an epoch's streams past it, and units never write their inputs. (Read-only pools keep
        `read_stream`, which views constants without copying.)"""
        writes = [patterns[n].extent() for n in flow.order
                  if n.startswith("SE") and not cfg.ses[n].read and n not in flow.waiting]
        out = []
        for name in flow.order:
            if not name.startswith("SE") or not cfg.ses[name].read:
                continue
            win = wins.get(name)
            if not isinstance(win, Window) or not win.pool.writable:
                continue
            lo, hi = patterns[name].extent()
            if all(hi <= w_lo or w_hi <= lo for w_lo, w_hi in writes):
                out.append(name)
        return frozenset(out)

    def _read_in_place(self, win, pattern):
        """The stream of a pattern as a view of its pool's bytes (`_in_place_reads`): flat for a dense
        one, else its [n3][n2][n1][run] strided view (the stream's bytes in C order, which the units'
        `layout.planes_view` keeps a view where it can); None when the pool was never written
        (`read_stream` gives its zeros)."""
        arr = self.memory.existing(win.pool, win.lo, win.hi)
        return None if arr is None else win.stream_of(arr)

    def _constant_stream(self, key, pattern, win, memo: dict):
        """`read_stream` in a replay, the stream kept in `memo` when it views a constant's bytes: a
        replay runs a Program alone in a fresh memory holding its constants (`runtime.setup`), where
        nothing writes a read-only pool, so such a stream (a single run inside one constant of a
        read-only pool, `Memory.constant_view`) reads the same bytes at every replay."""
        got = memo.get(("constant", key))
        if got is None:
            got = read_stream(self.memory, pattern) if win is None else read_stream(self.memory, pattern, win=win)
            if constant_root(got) is not None:
                memo[("constant", key)] = got
        return got

    def _values(self, cfg, flow, patterns, tables, memo: dict | None = None) -> None:
        """Gather, compute, scatter the epoch's streams in dataflow order. `memo`: the epoch plan's
        (`EpochPlan.values`): what the configuration and constant tables and weights decide, kept for
        the next run."""
        memo = {} if memo is None else memo
        # a replay alone in its memory without hooks keeps constants' bytes (`_constant_stream`)
        kept = self.opt.replay and self.opt.context is None and self.before_step is None and self.after_step is None
        steps = memo.get("steps") if kept else None
        if steps:
            self._run_steps(cfg, steps, memo)
            return
        wins = memo.get("windows")  # every stream's `memory.window`
        if wins is None:
            wins = memo["windows"] = {name: window(self.memory, p) for name, p in patterns.items()}
        in_place = memo.get("in place")
        if in_place is None:
            in_place = memo["in place"] = self._in_place_reads(cfg, flow, patterns, wins)
        streams = {}
        tabs: dict = {}  # parameter tables read ahead by `_split_group`
        # unpacked inputs and im2col shared by the units of this epoch; the Program's prepared weights;
        # the plan's kernel set-ups (`units._int8_conv`)
        scratch: dict = {"weights": self._weights, "plans": memo}
        done: dict = {}  # output streams of units computed ahead with another (`_split_group`)

        def read_table(unit):
            return (self._constant_stream(("table", unit), tables[unit], None, memo) if kept
                    else read_stream(self.memory, tables[unit]))
        for name in flow.order:
            if name in flow.waiting and not name.startswith("SE"):
                continue
            if name.startswith("SE"):
                se = cfg.ses[name]
                if se.read:
                    view = self._read_in_place(wins[name], patterns[name]) if name in in_place else None
                    streams[name] = (view if view is not None else
                                     self._constant_stream(name, patterns[name], wins[name], memo) if kept
                                     else read_stream(self.memory, patterns[name], win=wins[name]))
                elif name not in flow.waiting:
                    src = flow.inputs[name][0]
                    write_stream(self.memory, patterns[name], streams[src], win=wins[name])
                continue
            u = cfg.units[name]
            table = None
            if name in tables:
                table = tabs.pop(name) if name in tabs else read_table(name)
            if kept and name not in done and self._bound_conv(name, flow, streams, table, memo, scratch, done):
                continue
            problem = cached_table_problem(u, table, memo)
            if problem is None and name in done:
                streams[name] = done.pop(name)
            elif problem is None:
                group = self._split_group(cfg, flow, name, streams, tables, done, tabs, memo, read_table)
                if len(group) > 1:
                    try:
                        outs = run_conv_split([cfg.units[n] for n in group],
                                              [{p: streams[s] for p, s in flow.inputs[n].items()} for n in group],
                                              [table] + [tabs[n] for n in group[1:]], scratch)
                        streams[name] = outs[0]
                        done.update(zip(group[1:], outs[1:]))
                    except NpusimError:  # each unit meets its own refusal at its turn
                        pass
                if name not in streams:
                    ins = {port: streams[src] for port, src in flow.inputs[name].items()}
                    try:
                        streams[name] = run_unit(u, ins, table, scratch)
                    except NpusimError as e:  # a configuration the unit's kernel refuses
                        problem = str(e)
                if kept and name in streams and all(n in done for n in group[1:]):  # computed as `group`
                    self._bind_conv(cfg, flow, group, streams, table, tabs, memo)
            if problem is not None:
                streams[name] = np.zeros(u.stream_bytes(u.out_shape()), dtype=np.uint8)
                self._unit_refused(cfg, name, problem)
        if kept and steps is None:
            memo["steps"] = self._bind_steps(cfg, flow, patterns, tables, memo, wins, in_place)

    @staticmethod
    def _bind_steps(cfg, flow, patterns, tables, memo, wins, in_place) -> tuple:
        """What `_values` does in a replay that keeps constants, bound once the first such replay kept
        its set-ups in `memo`: per node of the dataflow, a step doing only the work that depends on the
        inputs (`_run_steps`), with what the configuration decides worked out here: a read in place or a
        write of one pool's `Window` (a view or a store into the pool's array), the pieces of a stream over
        adjacent writable pools (`memory.Split`: copies from and to their arrays), a kept conv's input
        (`units.kept_conv_input`), its output streams and whether another conv of the epoch reads its
        input (else it needs no shared im2col cache). Every check left out is one whose answer
        the memo fixes: the kept constant streams are the same objects at every replay, so a bound conv
        (`_bind_conv`) always runs from its kept set-up and a constant table's verdict is kept. () when a
        unit is not bound so (an int8 conv that may join a split group and was not bound, a table that is
        not a kept constant): `_values` then takes its full path at every replay."""
        steps, partners, store_at = [], set(), {}
        conv_reads: dict = {}  # stream -> CONV units of the epoch reading it as their feature map
        for name in flow.order:
            if not name.startswith("SE") and cfg.units[name].op == "CONV":
                src = flow.inputs[name].get(0)
                conv_reads[src] = conv_reads.get(src, 0) + 1
        for name in flow.order:
            if name.startswith("SE"):
                win = wins[name]
                if cfg.ses[name].read and ("constant", name) in memo:  # the same object at every replay
                    steps.append(("constant", name, memo[("constant", name)]))
                elif cfg.ses[name].read and isinstance(win, Split) and all(w.pool.writable for _, _, w in win.pieces):
                    steps.append(("gather", name, patterns[name].nbytes, win.pieces))  # `gather`'s copies
                elif cfg.ses[name].read:
                    steps.append(("in place" if name in in_place else "read", name, patterns[name], win))
                elif isinstance(win, Window) and win.disjoint:  # `scatter`'s one strided copy
                    store_at[name] = len(steps)
                    steps.append(("store", flow.inputs[name][0], patterns[name].nbytes,
                                  win if win.pool.writable else None))
                elif isinstance(win, Split) and win.disjoint:  # `scatter`'s copy per piece of a writable pool
                    steps.append(("scatter", flow.inputs[name][0], patterns[name].nbytes,
                                  tuple(p for p in win.pieces if p[2].pool.writable)))
                else:
                    steps.append(("write", flow.inputs[name][0], patterns[name], win))
                continue
            if name in partners:  # computed with the first unit of its split conv
                continue
            bound = memo.get(("bound", name))
            ports = tuple(flow.inputs[name].items())
            if bound is not None:
                _, u, conv, group = bound
                partners.update(group)
                src = flow.inputs[name][0]
                steps.append(("conv", (name, *group), conv, src, kept_conv_input(u),
                              conv_reads[src] > 1 + len(group), None))
                continue
            u = cfg.units[name]
            if memo.get(("split candidates", name)):
                return ()
            table = None
            if name in tables:
                table = memo.get(("constant", ("table", name)))
                got = memo.get(("verdict", u.command))
                if table is None or got is None or got[0] is not constant_root(table) or got[1] is not None:
                    return ()
            steps.append(("unit", name, u, table, ports))
        return _direct_stores(cfg, flow, patterns, steps, store_at)

    def _pool_array(self, pool, create: bool):
        """The run's array of a pool with every constant mapped into it copied in (`Memory.array`; without
        `create`, `Memory.existing`: None for a pool never written nor holding constants), kept for the
        rest of the run: a pool's array, once made, is the same object until the run ends."""
        arrays = self._arrays
        got = arrays.get(pool.name)
        if got is None:
            got = self.memory.array(pool) if create else self.memory.existing(pool)
            if got is not None:
                arrays[pool.name] = got
        return got

    def _run_steps(self, cfg, steps, memo) -> None:
        """`_values` of a replay from its bound steps (`_bind_steps`)."""
        streams: dict = {}
        scratch: dict = {"weights": self._weights, "plans": memo}
        arrays = self._arrays
        for step in steps:
            kind = step[0]
            if kind == "conv":
                _, outs, conv, src, spec, shared, targets = step
                into = None
                if targets is not None:  # parts requantized straight into their write SE's bytes
                    into = []
                    for t in targets:
                        if t is None:
                            into.append(None)
                            continue
                        pool, off, ps, ls = t
                        arr = arrays.get(pool.name)
                        into.append(((self._pool_array(pool, True) if arr is None else arr).view(np.int8), off, ps, ls))
                streams.update(zip(outs, run_kept_conv_stream(conv, streams[src], spec, scratch, shared, into)))
            elif kind == "store":
                _, src, nbytes, win = step
                buf = stream_bytes(streams[src], nbytes)
                if win is not None:  # a read-only pool: the bus drops the bytes
                    arr = arrays.get(win.pool.name)
                    win.store(self._pool_array(win.pool, True) if arr is None else arr, buf)
            elif kind == "constant":
                streams[step[1]] = step[2]
            elif kind == "in place":
                _, name, pattern, win = step
                arr = arrays.get(win.pool.name)
                if arr is None:
                    arr = self._pool_array(win.pool, False)
                streams[name] = (win.stream_of(arr) if arr is not None
                                 else self._constant_stream(name, pattern, win, memo))
            elif kind == "gather":  # a stream over adjacent writable pools, piece by piece
                _, name, nbytes, pieces = step
                out = streams[name] = np.empty(nbytes, dtype=np.uint8)
                for at, n, w in pieces:
                    arr = arrays.get(w.pool.name)
                    if arr is None:
                        arr = self._pool_array(w.pool, False)
                    if arr is None:
                        out[at:at + n] = 0
                    else:
                        w.load(arr, out[at:at + n])
            elif kind == "scatter":
                _, src, nbytes, pieces = step
                buf = stream_bytes(streams[src], nbytes)
                for at, n, w in pieces:
                    arr = arrays.get(w.pool.name)
                    w.store(self._pool_array(w.pool, True) if arr is None else arr, buf[at:at + n])
            elif kind == "read":
                _, name, pattern, win = step
                streams[name] = self._constant_stream(name, pattern, win, memo)
            elif kind == "write":
                _, src, pattern, win = step
                write_stream(self.memory, pattern, streams[src], win=win)
            else:
                _, name, u, table, ports = step
                try:
                    streams[name] = run_unit(u, {p: streams[s] for p, s in ports}, table, scratch)
                except NpusimError as e:  # a configuration the unit's kernel refuses
                    self._unit_refused(cfg, name, str(e))


def _direct_stores(cfg, flow, patterns, steps: list, store_at: dict) -> tuple:
    """`_bind_steps`' steps with the stores that a kept conv can make itself: a part's output stream whose
    one reader is a write SE storing it into a writable pool's disjoint `Window` whose planes
    (`Int8Conv.out_planes`) are rows of bytes at fixed plane and line strides (`_planes_at`), and whose
    bytes no other stream of the epoch touches (so storing at the conv's turn instead of the SE's
    changes no byte any stream reads or leaves). Such a part is requantized straight into the pool's
    array (the conv step's targets: (pool, offset, plane stride, line stride) per part) and its store
    step goes: the same bytes, without the new array and its copy."""
    readers: dict = {}  # stream -> the nodes it feeds
    for name in flow.order:
        for src in flow.inputs.get(name, {}).values():
            readers.setdefault(src, []).append(name)
    dropped = set()
    for i, step in enumerate(steps):
        if step[0] != "conv":
            continue
        conv, targets = step[2], []
        for j, out in enumerate(step[1]):
            se = readers.get(out, [None])
            at = store_at.get(se[0]) if len(se) == 1 else None
            win = steps[at][3] if at is not None else None
            strides = None
            if win is not None and not _touched_by_others(se[0], patterns):
                strides = _planes_at(win, conv.out_planes(j), steps[at][2])
            targets.append(None if strides is None else (win.pool, win.off, *strides))
            if strides is not None:
                dropped.add(at)
        if any(t is not None for t in targets):
            steps[i] = (*step[:6], tuple(targets))
    return tuple(s for i, s in enumerate(steps) if i not in dropped)


def _touched_by_others(se: str, patterns: dict) -> bool:
    """Whether a byte of SE `se`'s pattern is in the pattern of another SE of the epoch (read or write)."""
    mine = covered(patterns[se])
    return any(first_overlap(mine, covered(p)) is not None for name, p in patterns.items()
               if name != se and name.startswith("SE") and p.nbytes)


def _planes_at(win, planes: tuple, nbytes: int):
    """(plane stride, line stride) in bytes of planes (P, OH, OW, B) stored in stream order at a `Window`'s
    bytes, when each line of OW*B bytes is one dense run of them (so a kernel can write its lines there);
    else None."""
    p, oh, ow, b = planes
    if p * oh * ow * b != nbytes:
        return None
    view = np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), win.shape, win.strides, writeable=False)
    try:  # the strides of the stream's bytes as [P][OH][OW*B], set in place: never a copy (which would read past
        view.shape = (p, oh, ow * b)  # the view's one-byte base); `np.reshape(copy=False)` needs numpy 2.1
    except AttributeError:  # no strides give that order
        return None
    if ow * b > 1 and view.strides[2] != 1:
        return None
    return view.strides[0], view.strides[1]
