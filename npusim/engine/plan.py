"""What an epoch's configuration alone decides, worked out once per program and profile.

A program's decoded commands never change between runs (`Program.memo`), so neither does anything
derived from its epoch configurations alone: which epochs the hardware refuses, the stream
dataflow, the watchdog's verdict from the counts, every demand pattern and its prefetch window,
the units' parameter tables and compute cycles. The machine keeps the dynamic part per run: access
checks against the region table, values, written bytes, the NPU cache, timing.

`plain_blocks(decoded, isa)`: for every EPOCH whose commands up to its RUN are all configuration
commands, the built `EpochConfig` and the index of that RUN (other epochs are built command by
command by the controller, which reports what is wrong with them). `epoch_plan(cfg, ...)`: the
`EpochPlan` of one configuration. `written_intervals`: the bytes an epoch's writes cover, as the
region table marks them; `command_layers`: every command's layer name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..memory import AccessPattern
from ..memory.pattern_math import covered, merge_intervals
from .config import EpochConfig
from .dataflow import Flow, resolve
from .hwfaults import check_epoch
from .streams import check_prefetch, min_cycles, prefetch_range, se_pattern
from .timing import kernel_serial, unit_cycles
from .units import table_spec

CONFIG_OPS = ("SE", "LINK", "CONV", "POOL", "RESIZE", "ARITH", "ACT")


@dataclass
class EpochPlan:
    refused: list  # Faults: the hardware refuses the epoch
    flow: Flow | None = None
    slow: tuple | None = None  # (stage, reason): the watchdog fires from the counts alone
    reads: list = field(default_factory=list)  # (SE name, pattern, command, layer, prefetch Fault | None)
    tables: list = field(default_factory=list)  # (unit name, pattern, command, layer)
    writes: list = field(default_factory=list)  # (SE name, pattern, command, layer)
    may_race: bool = False  # two write SEs have overlapping extents
    compute: dict = field(default_factory=dict)  # unit name -> compute cycles (table reads excluded)
    serial: dict = field(default_factory=dict)  # CA -> SE feeding its weights, when they take turns (kernel_serial)
    fp32: bool = False
    body_bound: float | None = None  # static walks: an upper bound of the timed body (timing.body_bound)
    stats: dict | None = None  # the machine's EpochStats fields of the epoch as it starts (`Machine._epoch`)
    timed: object = None  # the machine's timing memo of this epoch (`Machine._time_epoch`)
    checks: list | None = None  # the machine's per-access check geometry (`Machine._plan_checks`)
    patterns: dict = field(default_factory=dict)  # SE name -> demand pattern (`Machine._plan_checks`)
    table_patterns: dict = field(default_factory=dict)  # unit name -> table pattern (likewise)
    written: tuple | None = None  # the bytes the writes cover (`written_intervals`)
    races: bool = False  # two writes share a byte (write_write_races), when may_race
    trace: tuple | None = None  # the machine's trace event templates of the epoch's stages (`Trace.templates`)
    marker: list | None = None  # the machine's trace template of the epoch's marker (`Trace.marker_template`)
    values: dict = field(default_factory=dict)  # the machine's memo of the epoch's values (`EpochValues._values`)


def plain_blocks(decoded, isa) -> dict[int, tuple[EpochConfig, int]]:
    """{EPOCH command index: (EpochConfig, index of its RUN)} for epochs made of configuration
    commands only."""
    block = int(isa.layouts["blocked16"]["block"])
    out = {}
    for i, d in enumerate(decoded):
        if d.op != "EPOCH":
            continue
        cfg = EpochConfig(d.args["id"], d.index, block)
        for j in range(i + 1, len(decoded)):
            e = decoded[j]
            if e.op in CONFIG_OPS:
                cfg.add(e)
                continue
            if e.op == "RUN":
                out[i] = (cfg, j)
            break
    return out


def watchdog(cfg: EpochConfig, flow: Flow, profile):
    """(stage, reason) of the first stage that cannot finish before epoch.timeout_cycles, from
    its counts alone (nothing is materialised), else None. A max pool is charged its window work
    (kh x kw per output): that is what its kernel does, whatever the unit's streaming rate."""
    limit = float(profile.epoch.timeout_cycles)
    for name in flow.order:
        if name.startswith("SE"):
            p = se_pattern(cfg.ses[name].args, profile)
            need = min_cycles(p, profile)
            what = f"{p.nbytes} B in {p.n_runs} runs of {p.run} B"
        else:
            u = cfg.units[name]
            need = unit_cycles(u, profile)
            what = f"{u.work()} {'MACs' if u.op == 'CONV' else 'elements'}"
            if u.op == "POOL" and u.args.get("mode") not in ("global_avg", "global_max"):
                window = u.work() * u.args["kh"] * u.args["kw"]
                wneed = window / float(profile.compute.elems_per_cycle["pool"])
                if wneed > need:
                    need, what = wneed, f"{window} window elements"
        if need > limit:
            return name, f"must move {what}: at least {int(need)} cycles, past the watchdog"
    return None


def epoch_plan(cfg: EpochConfig, profile, isa, layer_of, amap) -> EpochPlan:
    plan = EpochPlan(check_epoch(cfg, profile, isa, layer_of))
    plan.fp32 = any(u.dtype == "fp32" for u in cfg.units.values()) or any(
        s.args["dtype"] == "fp32" for s in cfg.ses.values())
    if plan.refused:
        return plan
    flow = plan.flow = resolve(cfg)
    plan.slow = watchdog(cfg, flow, profile)
    if plan.slow:
        return plan
    for name in flow.order:
        if name.startswith("SE") and cfg.ses[name].read:
            se = cfg.ses[name]
            p = se_pattern(se.args, profile)
            lay = layer_of(se.command)
            lo, hi = prefetch_range(p, se.args["limit"], profile)
            pf = check_prefetch(amap, lo, hi, unit=name, epoch=cfg.id, command=se.command, layer=lay)
            plan.reads.append((name, p, se.command, lay, pf))
    for name in flow.order:
        u = cfg.units.get(name)
        spec = table_spec(u) if u is not None else None
        if spec is not None:
            plan.tables.append((name, AccessPattern(spec[1], spec[2]), u.command, layer_of(u.command)))
    for name in flow.order:
        if name.startswith("SE") and not cfg.ses[name].read and name not in flow.waiting:
            se = cfg.ses[name]
            plan.writes.append((name, se_pattern(se.args, profile), se.command, layer_of(se.command)))
    ext = sorted(p.extent() for _, p, _, _ in plan.writes if p.nbytes)
    plan.may_race = any(b[0] < a[1] for a, b in zip(ext, ext[1:]))
    for name in flow.order:
        if not name.startswith("SE"):
            u = cfg.units[name]
            plan.compute[name] = unit_cycles(u, profile)
            src = flow.inputs.get(name, {}).get(1)
            if src is not None and src.startswith("SE") and kernel_serial(u, profile.compute):
                plan.serial[name] = src
    return plan


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
