"""Fast (analytic) timing of one epoch: setup + the slowest of its pipelined stages.

Per stream engine i on pool P and bus port p (costs from npusim.memory.pattern_cost):
    own_i      = pattern_cost(...).cycles       bursts, pool bandwidth, splits, NPU cache misses
    conflict_P = conflict_cycles(costs of P)    bank conflicts among the epoch's engines on P;
                                                every requester of P waits for them (on an external
                                                serial memory, `pool.external`, this is bandwidth
                                                sharing: stall cause external_bandwidth, and no
                                                bank conflicts are counted)
    wait_P     = port waits of P's engines (`port_waits`): a burst holds its banks while it waits
                 for its bus port, so bursts of other pools on that port stretch P's busy time
    busy_b     = sum over engines j on P of (own_j + wait_j) * passes_j[b] / max(passes_j)
                                                occupancy of bank b when requesters serialize on it
    serial_i   = max of busy_b over the banks engine i touches
    port_p     = sum over engines on p of (beats + bursts * burst_overhead_cycles)
    stage_i    = max(own_i + conflict_P + wait_P, serial_i, port_p)
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

from ..memory import conflict_cycles, passes_conflicts
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
    depthwise = u.args["groups"] > 1 and icg == 1
    use = compute.window_use(icg, u.args["kh"] * u.args["kw"])
    return use * (compute.depthwise_efficiency if depthwise else 1.0)


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


def _bank_shares(by_pool, profile) -> tuple[dict, dict]:
    """Per pool with several requesters: its bank conflicts (`passes_conflicts`), and its engines,
    their own cycles, passes / max(passes) per engine and bank (rows of zeros for an engine
    touching no bank) and the banks each touches."""
    conflicts, out = {}, {}
    for name in sorted(by_pool):
        group = by_pool[name]
        if len(group) < 2:
            continue
        passes = np.stack([np.asarray(g.cost.bank_passes, dtype=np.int64) for g in group])
        if passes.shape[1] != group[0].pool.banks:
            conflict_cycles([g.cost for g in group], group[0].pool, profile)  # raises its UsageError
        conflicts[name] = passes_conflicts(passes, profile)
        top = passes.max(axis=1, keepdims=True).astype(np.float64)
        share = np.divide(passes, top, out=np.zeros(passes.shape), where=top > 0)
        own = np.array([float(g.cost.cycles) for g in group])
        out[name] = ([g.name for g in group], own, share, passes > 0)
    return conflicts, out


def _serial(shares, waits) -> dict[str, float]:
    """serial_i of the engines of pools with several requesters: the busiest bank i touches, each
    engine j occupying its banks for own_j + waits[j] cycles in proportion to its passes."""
    serial = {}
    for names, own, share, touched in shares.values():
        if waits:
            own = own + np.array([waits.get(n, 0.0) for n in names])
        busy = own @ share
        ser = np.where(touched, busy, 0.0).max(axis=1)
        serial.update(zip(names, ser.tolist()))
    return serial


def port_cycles(cost, profile) -> float:
    return float(cost.beats + cost.bursts * profile.bus.burst_overhead_cycles)


def port_waits(transfers: list[Transfer], base: dict[str, float], profile) -> dict[str, float]:
    """Per engine on a mapped pool P: the cycles its bursts wait for their bus port while holding
    P's banks (burst mode's order: banks, then the port). A burst of P holds its banks for
    hold_P + slack_P cycles, its port for the first hold_P (beats + burst overhead); slack_P is the
    pool-side rest (pool bandwidth below the beat rate, bank-line splits). A burst of an engine k
    of another pool (or unmapped) on the same port p holds p for hold_k cycles; when it takes the
    port between two bursts of P, the next burst of P on p waits hold_k - slack_P with its banks
    held, if that burst is on p: a fraction f_(P,p) of P's busy time (own cycles of P's engines on
    p over those of all of P's engines; phases taken as random). So P's engines on port p wait
        wait_(P,p) = f_(P,p) * sum over such k of n_k * max(0, hold_k - slack_(P,p))
        n_k        = min(bursts_k * min(1, T_P / T_k), bursts of P on p)
    (hold_k and slack_(P,p) burst-weighted means; n_k: k's bursts issued while P is busy, at most
    one per burst of P; T: the stage times in `base`, before port sharing), shared by P's engines
    on p in proportion to their bursts. The waits of P's engines sum to wait_P. This is what
    stretches a conv whose per-CA reads serialize on one RAM's banks while its weights stream from
    flash on the same port (grouped convs: the busiest bank, not the port, is critical)."""
    by_port: dict[int, list] = {}
    for tr in transfers:
        by_port.setdefault(tr.port, []).append(tr)
    waits: dict[str, float] = {}
    ov = profile.bus.burst_overhead_cycles
    t_pool = own_pool = None
    for port in sorted(by_port):
        group = by_port[port]
        pools = {tr.pool.name if tr.pool is not None else None for tr in group}
        if len(pools) < 2:  # the port carries one pool's bursts only
            continue
        if t_pool is None:
            t_pool, own_pool = {}, {}
            for tr in transfers:
                if tr.pool is not None:
                    n = tr.pool.name
                    t_pool[n] = max(t_pool.get(n, 0.0), base[tr.name])
                    own_pool[n] = own_pool.get(n, 0.0) + tr.cost.cycles
        rows = [(tr.name, tr.pool.name if tr.pool is not None else None, tr.cost.bursts,
                 tr.cost.beats + tr.cost.bursts * ov, tr.cost.cycles, base[tr.name]) for tr in group]
        for pool in sorted(p for p in pools if p is not None):
            mine = [r for r in rows if r[1] == pool]
            n = sum(r[2] for r in mine)
            if n == 0:
                continue
            slack = max(0.0, sum(r[4] - r[3] for r in mine) / n)
            wait = 0.0
            for _, kpool, kb, khold, _, kt in rows:
                if kpool == pool or kb <= 0 or khold <= kb * slack:
                    continue
                share = min(1.0, t_pool[pool] / kt) if kt > 0 else 1.0
                wait += min(kb * share, n) * (khold / kb - slack)
            if wait > 0:
                frac = sum(r[4] for r in mine) / own_pool[pool] if own_pool[pool] > 0 else 1.0
                for r in mine:
                    waits[r[0]] = waits.get(r[0], 0.0) + frac * wait * r[2] / n
    return waits


def epoch_timing(transfers: list[Transfer], units: dict[str, float], profile, turns=None) -> EpochTiming:
    """Stage times, critical stage and stall attribution of one epoch body (no setup). `turns`
    maps a CA whose weight fetch and compute take turns (`kernel_serial`) to the stream engine
    feeding its weights."""
    t = EpochTiming()
    by_pool: dict[str, list[Transfer]] = {}
    for tr in transfers:
        if tr.pool is not None:
            by_pool.setdefault(tr.pool.name, []).append(tr)
    conflicts, shares = _bank_shares(by_pool, profile)
    extra = {name: 0.0 for name in by_pool}
    for name in sorted(conflicts):
        extra[name] = float(conflicts[name].cycles)
        if not by_pool[name][0].pool.external:
            t.bank_conflicts += int(conflicts[name].bank_conflicts)
    serial = _serial(shares, {})
    base = {}
    for tr in transfers:
        own = float(tr.cost.cycles)
        conf = extra[tr.pool.name] if tr.pool is not None else 0.0
        base[tr.name] = max(own + conf, serial.get(tr.name, 0.0))
    waits = port_waits(transfers, base, profile)
    pool_wait = dict.fromkeys(by_pool, 0.0)
    for tr in transfers:
        if tr.name in waits:
            pool_wait[tr.pool.name] += waits[tr.name]
    serial_w = serial
    if waits:  # the pools whose engines wait for a port, again with the waits
        serial_w = {**serial, **_serial({n: v for n, v in shares.items() if pool_wait[n] > 0}, waits)}
    ports: dict[int, float] = {}
    for tr in transfers:
        ports[tr.port] = ports.get(tr.port, 0.0) + port_cycles(tr.cost, profile)
    parts = {}
    for tr in transfers:
        own = float(tr.cost.cycles)
        mem = base[tr.name]
        if tr.pool is not None:
            mem = max(own + extra[tr.pool.name] + pool_wait[tr.pool.name], serial_w.get(tr.name, 0.0))
        conf = base[tr.name] - own  # bank conflicts / serialized banks, before the port waits
        port = max(mem, ports[tr.port]) - own - conf  # waits for the port, with banks held or not
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
    transfer i on pool P and port p is max(own_i + conflict_P + wait_P, serial_i, port_p), where
    conflict_P and port_p do not depend on the cache, wait_P <= the port cycles of the other pools'
    transfers on P's ports (`port_waits`) and serial_i <= the sum of own_j over P's transfers plus
    wait_P; a CA in `turns` has a stage of its cycles plus that bound of its weight stream's stage."""
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
        used = {g.port for g in group}
        wait = sum(port_cycles(k.cost, profile) for k in transfers
                   if k.port in used and (k.pool is None or k.pool.name != name))
        for g in group:
            stage[g.name] = max(stage[g.name], total + wait, owns[g.name] + extra + wait)
    bound = max(bound, max(stage.values(), default=0.0))
    for ca, se in sorted((turns or {}).items()):
        if ca in units and se in stage:
            bound = max(bound, units[ca] + stage[se])
    return bound
