"""Burst-level reference timing (mode="burst"): every AXI burst is its own timed request.

Small programs only. Each stream engine issues its bursts in stream order; a burst
  1. acquires the SimPy Resources of the RAM banks it touches (ascending bank order, so no
     deadlock), then its bus port;
  2. holds the port for beats + burst_overhead_cycles;
  3. holds its banks for max(beats, ram_bytes / pool.bytes_per_cycle) + burst_overhead_cycles
     + cross_bank_penalty_cycles per bank-line crossing (ram_bytes scaled by the NPU cache's
     miss fraction for cacheable pools).
Bursts follow the same split rules as npusim.memory.pattern_cost (max burst beats, 4 KiB
boundary, partial first/last beats). Units compute in parallel for their unit_cycles; a CA whose
weight fetch and compute take turns (`timing.kernel_serial`) computes after its weight stream ends.
"""

from __future__ import annotations

import numpy as np
import simpy

from ..errors import UsageError

from ..memory.banks import banks_of
from ..memory.pattern import runs


def bursts_of(pattern, profile) -> np.ndarray:
    """[k, 2] array of (start, end) byte addresses of every burst, in issue order."""
    bus = profile.bus
    beat, maxb, bound = bus.beat_bytes, bus.max_burst_beats, bus.burst_boundary
    out = []
    for s in runs(pattern).tolist():
        e = s + pattern.run
        a = s
        while a < e:
            b = min(e, (a // beat + maxb) * beat, (a // bound + 1) * bound)
            out.append((a, b))
            a = b
    return np.array(out, dtype=np.int64).reshape(-1, 2)


class BurstSim:
    """Shared bus-port and bank Resources of one epoch's burst-level simulation."""

    def __init__(self, env: simpy.Environment, profile):
        self.env = env
        self.profile = profile
        self.ports = [simpy.Resource(env, 1) for _ in range(profile.bus.ports)]
        self.banks: dict[tuple[str, int], simpy.Resource] = {}

    def _bank(self, pool, b: int) -> simpy.Resource:
        key = (pool.name, b)
        if key not in self.banks:
            self.banks[key] = simpy.Resource(self.env, 1)
        return self.banks[key]

    def engine(self, transfer, pattern):
        """SimPy process: the bursts of one stream engine; returns its finish time."""
        prof = self.profile
        bus, tim = prof.bus, prof.timing
        pool = transfer.pool
        bl = bursts_of(pattern, prof)
        cost = transfer.cost
        ram_frac = (cost.mem_bytes / cost.bytes) if cost.bytes else 1.0
        port = self.ports[transfer.port]
        for a, b in bl.tolist():
            beats = (b - 1) // bus.beat_bytes - a // bus.beat_bytes + 1
            hold_port = beats + bus.burst_overhead_cycles
            if pool is None:
                with port.request() as rq:
                    yield rq
                    yield self.env.timeout(hold_port)
                continue
            splits = (b - 1 - pool.base) // pool.bank_line - (a - pool.base) // pool.bank_line
            ram = (max(float(beats), (b - a) * ram_frac / pool.bytes_per_cycle) + bus.burst_overhead_cycles
                   + splits * tim.cross_bank_penalty_cycles)
            first = a - (a - pool.base) % pool.interleave
            chunks = np.arange(first, b, pool.interleave, dtype=np.int64)
            banks = sorted(set(banks_of(pool, chunks)[0].tolist()))
            reqs = []
            for bk in banks:
                r = self._bank(pool, bk).request()
                reqs.append((bk, r))
                yield r
            with port.request() as rq:
                yield rq
                yield self.env.timeout(hold_port)
            if ram > hold_port:
                yield self.env.timeout(ram - hold_port)
            for bk, r in reqs:
                self._bank(pool, bk).release(r)
        return self.env.now


MAX_BURSTS = 50_000  # per epoch; the burst-level reference is for micro-benchmarks


def burst_body(transfers, patterns, units: dict[str, float], profile, turns=None) -> tuple[float, dict]:
    """Body cycles of one epoch (no setup) and per-stage busy cycles, burst by burst."""
    total = sum(int(tr.cost.bursts) for tr in transfers)
    if total > MAX_BURSTS:
        raise UsageError(f"mode='burst' is for small programs: an epoch has {total} bursts (limit {MAX_BURSTS}); "
                         "use mode='fast'")
    env = simpy.Environment()
    sim = BurstSim(env, profile)
    procs = {tr.name: env.process(sim.engine(tr, patterns[tr.name])) for tr in transfers}
    env.run()
    stages = {name: float(p.value) for name, p in procs.items()}
    stages.update(units)
    for ca, se in sorted((turns or {}).items()):
        if ca in units and se in procs:
            stages[ca] = units[ca] + stages[se]
    return max(stages.values(), default=0.0), stages
