"""An epoch's time on the machine: transfers and units costed, the NPU cache asked, stats filled in.

`TimedEpochs` is the part of `Machine` (engine/machine.py) that times an epoch once its accesses are
checked and its values moved: each stream's and table's `pattern_cost` (the NPU cache asked for
cacheable pools), `timing.epoch_timing` (or `burst_body` in burst mode) over them, the figures into the
epoch's `EpochStats`, and the trace events (`_time_epoch`). In the fast mode the figures of a plan are
memoised per set of NPU cache answers (`_Timed`). A static walk decides the watchdog by a cache-free
upper bound where that suffices (`_timed_watchdog`). It uses the machine's state (`profile`, `memory`,
`cache`, `trace`, `opt`, the per-program memo `_costs`, `_skipped_lookups`).
"""

from __future__ import annotations

from ..memory import pattern_cost, unmapped_cost
from .burst import burst_body
from .stats import add_bank_bytes
from .timing import Transfer, body_bound, epoch_timing, own_bound


class TimedEpochs:
    """`Machine`'s epoch timing."""

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
                tp = plan.timed = _Timed(list(self._lookups(cfg, flow, patterns, tables)))
            looked = self.cache.access_all(tp.lookups)
            fresh = not (es.bytes_read or es.bytes_written or es.pools)
            snap = tp.results.get(looked) if fresh else None
            if snap is None:
                late, body, stages = self._figures(cfg, flow, patterns, tables, es, plan, iter(looked))
                if fresh and len(tp.results) < TIMED_KEPT:
                    tp.results[looked] = _snapshot(es, late, body, stages)
            else:
                late, body, stages = _restore(es, snap)
                if not (late is not None or self.opt.static or self.trace.enabled):
                    return None, snap[-1]  # the cycles to its end, worked out with the snapshot
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

    def __init__(self, lookups: list):
        self.lookups = lookups
        self.results: dict = {}


def _snapshot(es, late, body, stages) -> tuple:
    """What `Machine._figures` set on a fresh EpochStats, what it returned, and the cycles from the epoch's
    start to its end (`_time_epoch`)."""
    setup = es.setup_cycles
    return ({k: getattr(es, k) for k in _TIMED_FIELDS}, dict(es.pools),
            (tuple(es.bank_bytes), tuple(tuple(v) for v in es.bank_bytes.values())), dict(es.stages),
            dict(es.stall_cycles),
            late, body, stages, max([setup + v for v in stages.values()] + [setup + body]))


def _restore(es, snap) -> tuple:
    """Set a `_snapshot` on a fresh EpochStats (copies of its containers); (late, body, stages)."""
    vals, pools, bank, stages_es, stall, late, body, stages, _ = snap
    d = es.__dict__
    d.update(vals)
    d["pools"] = pools.copy()
    d["bank_bytes"] = dict(zip(bank[0], map(list, bank[1])))
    d["stages"] = stages_es.copy()
    d["stall_cycles"] = stall.copy()
    return late, body, stages
