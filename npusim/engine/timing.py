"""Fast (analytic) timing of one epoch: setup + the slowest of its pipelined stages.

Per stream engine i on pool P and bus port p (costs from npusim.memory.pattern_cost):
    own_i      = pattern_cost(...).cycles       bursts, pool bandwidth, splits, NPU cache misses
    conflict_P = conflict_cycles(costs of P)    bank conflicts among the epoch's engines on P;
                                                every requester of P waits for them (on an external
                                                serial memory, `pool.external`, this is bandwidth
                                                sharing: stall cause external_bandwidth, and no
                                                bank conflicts are counted)
    busy_b     = sum over engines j on P of own_j * passes_j[b] / max(passes_j)
                                                occupancy of bank b when requesters serialize on it
    serial_i   = max of busy_b over the banks engine i touches
    port_p     = sum over engines on p of (beats + bursts * burst_overhead_cycles)
    stage_i    = max(own_i + conflict_P, serial_i, port_p)
The bank-occupancy bound matters when whole bursts collide (a 128 B burst touches every bank
of a 128 B bank line): the requesters then take turns at the pool's own bandwidth.
Per unit: compute cycles (see `unit_cycles`) plus the cost of reading its parameter table.
A CA whose kernel of one output channel does not fit half its double-buffered kernel store
(`kernel_serial`) cannot fetch the next kernel while it computes: fetch and compute take turns,
    stage_CA   = compute_CA + stage of the stream engine feeding its weight port (`turns`).
Epoch body = max over stages; cycles = epoch.setup_cycles + body.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..memory import conflict_cycles
from .config import UnitConfig
from .stats import STALL_CAUSES


@dataclass
class Transfer:
    """One stream engine's demand traffic in an epoch."""

    name: str
    port: int
    pool: object  # Pool (None if the base is unmapped)
    cost: object  # PatternCost
    write: bool = False


@dataclass
class EpochTiming:
    body: float = 0.0
    stages: dict = field(default_factory=dict)  # name -> busy cycles
    critical: str = ""
    stall: dict = field(default_factory=lambda: {c: 0.0 for c in STALL_CAUSES})
    bank_conflicts: int = 0


def ca_utilisation(u: UnitConfig, compute) -> float:
    """Fraction of a CA's MAC array (compute.kernel_taps window taps x compute.lanes input
    channels) doing useful work on this conv, the product of:
      channel lanes  in_c/groups channels are consumed `lanes` at a time, so a partial last
                     pass leaves lanes idle (depthwise: 1 channel of `lanes`);
      window taps    a kh x kw kernel fills ceil(kh*kw / kernel_taps) passes of `kernel_taps`
                     taps; a kernel smaller than the window (1x1) fills the idle taps with up
                     to `tap_fill` times its own taps (more input channels per pass), capped
                     by the channels it has;
      depthwise      a depthwise conv (one channel per group) runs at `depthwise_efficiency`
                     of its one lane (the lane's accumulators serve one channel at a time)."""
    icg = max(u.args["in_c"] // max(u.args["groups"], 1), 1)
    lanes = compute.lanes
    lane_use = icg / (-(-icg // lanes) * lanes)
    taps = u.args["kh"] * u.args["kw"]
    window = compute.kernel_taps
    if taps >= window:
        tap_use = taps / (-(-taps // window) * window)
    else:
        passes = -(-icg // lanes)  # channel passes that could share the idle taps
        tap_use = min(window, taps * min(compute.tap_fill, passes)) / window
    depthwise = u.args["groups"] > 1 and icg == 1
    return lane_use * tap_use * (compute.depthwise_efficiency if depthwise else 1.0)


def kernel_serial(u: UnitConfig, compute) -> bool:
    """True when a CONV's kernel of one output channel (kh x kw x in_c/groups elements) is larger
    than half of the CA's kernel store (`compute.kernel_buffer`; 0 = unlimited): the CA cannot
    fetch the next output channel's kernel into the other half while it computes with this one,
    so its weight stream and its compute serialize instead of overlapping."""
    if u.op != "CONV" or compute.kernel_buffer <= 0:
        return False
    a = u.args
    kernel = a["kh"] * a["kw"] * max(a["in_c"] // max(a["groups"], 1), 1) * u.esize
    return 2 * kernel > compute.kernel_buffer


def unit_cycles(u: UnitConfig, profile) -> float:
    """Compute cycles of a unit: CA = MACs / (mac_per_cycle[dtype] x utilisation);
    POOL/RESIZE = max(input, output) elements / rate (the window walks the input);
    ARITH/ACT = output elements / rate."""
    c = profile.compute
    if u.op == "CONV":
        return u.work() / (c.macs(u.dtype) * ca_utilisation(u, c))
    if u.op in ("POOL", "RESIZE"):
        h, w, ch, _ = u.in_shapes()[0]
        return max(h * w * ch, u.work()) / float(c.elems_per_cycle["pool"])
    key = "arith" if u.op == "ARITH" else "activation"
    return u.work() / float(c.elems_per_cycle[key])


def port_cycles(cost, profile) -> float:
    return float(cost.beats + cost.bursts * profile.bus.burst_overhead_cycles)


def epoch_timing(transfers: list[Transfer], units: dict[str, float], profile, turns=None) -> EpochTiming:
    """Stage times, critical stage and stall attribution of one epoch body (no setup). `turns`
    maps a CA whose weight fetch and compute take turns (`kernel_serial`) to the stream engine
    feeding its weights."""
    t = EpochTiming()
    by_pool: dict[str, list[Transfer]] = {}
    for tr in transfers:
        if tr.pool is not None:
            by_pool.setdefault(tr.pool.name, []).append(tr)
    extra, serial = {}, {}
    for name in sorted(by_pool):
        group = by_pool[name]
        cc = conflict_cycles([g.cost for g in group], group[0].pool, profile)
        extra[name] = float(cc.cycles)
        if not group[0].pool.external:
            t.bank_conflicts += int(cc.bank_conflicts)
        if len(group) > 1:
            busy = np.zeros(group[0].pool.banks)
            for g in group:
                passes = np.asarray(g.cost.bank_passes, dtype=np.float64)
                if passes.max(initial=0) > 0:
                    busy += float(g.cost.cycles) * passes / passes.max()
            for g in group:
                touched = np.asarray(g.cost.bank_passes) > 0
                serial[g.name] = float(busy[touched].max()) if touched.any() else 0.0
    ports: dict[int, float] = {}
    for tr in transfers:
        ports[tr.port] = ports.get(tr.port, 0.0) + port_cycles(tr.cost, profile)
    parts = {}
    for tr in transfers:
        own = float(tr.cost.cycles)
        conf = extra.get(tr.pool.name, 0.0) if tr.pool is not None else 0.0
        conf = max(conf, serial.get(tr.name, 0.0) - own)
        port = max(0.0, ports[tr.port] - own - conf)
        t.stages[tr.name] = own + conf + port
        parts[tr.name] = (own, conf, port, tr.pool is not None and tr.pool.external)
    mem_max = max((t.stages[tr.name] for tr in transfers), default=0.0)
    comp_max = max(units.values(), default=0.0)
    t.stages.update(units)
    waits = {}
    for ca, se in sorted((turns or {}).items()):
        if ca in units and se in parts:
            waits[ca] = se
            t.stages[ca] = units[ca] + t.stages[se]
    if not t.stages:
        return t
    t.critical = max(sorted(t.stages), key=lambda n: t.stages[n])
    t.body = t.stages[t.critical]
    if t.critical in waits:  # CA and weight stream took turns: the body is the stream's time (by its
        own, conf, port, external = parts[waits[t.critical]]  # causes) plus the CA's compute
        t.stall["port"] = port
        t.stall["external_bandwidth" if external else "bank_conflict"] = conf
        t.stall["memory"] = own
        t.stall["compute"] = units[t.critical]
    elif t.critical in parts:
        excess = t.body - comp_max
        own, conf, port, external = parts[t.critical]
        p = min(port, excess)
        c = min(conf, excess - p)
        t.stall["port"] = p
        t.stall["external_bandwidth" if external else "bank_conflict"] = c
        t.stall["memory"] = excess - p - c
    else:
        t.stall["compute"] = t.body - mem_max
    return t


def own_bound(cost, pattern, pool, profile) -> float:
    """An upper bound of the cycles of one requester alone (`pattern_cost`'s formula) whatever the
    NPU cache holds, from its cost without a cache: beats, bursts and splits do not depend on the
    cache; on a cacheable pool every line look-up (at most ceil(run / line) + 1 per run) is taken
    both as a miss (its line moved) and as a hit (its hit cycles), and a write moves all its bytes."""
    if pool is None or not pool.cacheable:
        return float(cost.cycles)
    c, bus = profile.cache, profile.bus
    lines = pattern.n_runs * (-(-pattern.run // c.line) + 1)
    mem = max(lines * c.line, pattern.nbytes)
    return (max(float(cost.beats), mem / pool.bytes_per_cycle + lines * c.hit_cycles)
            + cost.bursts * bus.burst_overhead_cycles + cost.cross_bank_splits * profile.timing.cross_bank_penalty_cycles)


def body_bound(transfers: list[Transfer], owns: dict[str, float], units: dict[str, float], profile,
               turns=None) -> float:
    """An upper bound of `epoch_timing(...).body` whatever the NPU cache holds: `owns` bounds each
    transfer's own cycles (`own_bound`), `units` each unit's cycles. epoch_timing's stage of a
    transfer i on pool P and port p is max(own_i + conflict_P, serial_i, port_p), where conflict_P
    and port_p do not depend on the cache and serial_i <= the sum of own_j over P's transfers; a
    CA in `turns` has a stage of its cycles plus that bound of its weight stream's stage."""
    by_pool: dict[str, list[Transfer]] = {}
    ports: dict[int, float] = {}
    for tr in transfers:
        if tr.pool is not None:
            by_pool.setdefault(tr.pool.name, []).append(tr)
        ports[tr.port] = ports.get(tr.port, 0.0) + port_cycles(tr.cost, profile)
    bound = max(units.values(), default=0.0)
    stage = {tr.name: max(owns[tr.name], ports[tr.port]) for tr in transfers}
    for name in sorted(by_pool):
        group = by_pool[name]
        extra = float(conflict_cycles([g.cost for g in group], group[0].pool, profile).cycles)
        total = sum(owns[g.name] for g in group)
        for g in group:
            stage[g.name] = max(stage[g.name], total, owns[g.name] + extra)
    bound = max(bound, max(stage.values(), default=0.0))
    for ca, se in sorted((turns or {}).items()):
        if ca in units and se in stage:
            bound = max(bound, units[ca] + stage[se])
    return bound
