"""Epochs lifted from an epoch-controller program: its register writes replayed into `model` records.

`lift_epochs(program, symbols)` replays a decoded `EcProgram`'s (ecblob.py) register writes and rebuilds
each epoch's stream engines, stream-switch links, processing units (ec_units.py) and enabled units as
`HwEpoch` records. The registers it reads are data: `isa/aton/ec_lift_units.toml` (`load_lift_spec`).
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ...errors import StImportError
from ...program.spec import isa_file
from .ec_units import REGISTERS_PER_UNIT, UnitState, lift_unit, load_unit_rules, write_memory
from .ecblob import MASK32, EcInstruction, EcProgram, bit_range, load_ec_spec
from .model import UNIT_KINDS, HwEpoch, Link, Streng
from .streng import hardware_limit


@dataclass(frozen=True)
class LiftSpec:
    """The registers of `isa/aton/ec_lift_units.toml`, ready for the lifter."""

    ctrl_reg: int
    enable_bit: int
    config_clear_bit: int
    streng_first_unit: int
    streng_count: int
    streng_regs: dict  # name -> word index
    streng_reset: dict  # word index -> reset value
    streng_fields: dict  # "REG.field" -> (word index, shift, mask)
    switch_unit: int
    switch_first_reg: int
    destinations: tuple  # register k -> (kind, index, port)
    sources: tuple  # source number -> (kind, index, port)
    switch_fields: dict  # field -> (shift, mask)
    unit_kinds: tuple  # unit number -> (kind, index) | None
    register_names: dict  # (unit kind, word index) -> register name
    unit_rules: tuple  # unit number -> UnitRules of a processing unit | None
    windows: tuple  # unit number -> first word of its memory (REGISTERS_PER_UNIT: none)


def _ports(rows) -> tuple:
    return tuple((kind, i, p) for kind, units, ports in rows for i in range(units) for p in range(ports))


@functools.lru_cache(maxsize=2)
def load_lift_spec(path: str | None = None) -> LiftSpec:
    """Load the lifter's register data (cached)."""
    p = Path(path) if path else isa_file("aton/ec_lift_units.toml")
    raw = tomllib.loads(p.read_text())
    ec = load_ec_spec()
    st = raw["streng"]
    regs = st["registers"]
    fields = {}
    for key, bits in st["fields"].items():
        reg, _ = key.split(".")
        fields[key] = (regs[reg], *bit_range(bits))
    first = next(n for n, k in enumerate(ec.unit_kinds) if k and k[0] == "STRENG")
    count = sum(1 for k in ec.unit_kinds if k and k[0] == "STRENG")
    sw = raw["strswitch"]
    kinds = load_unit_rules(raw.get("units", {}), raw["ctrl"])
    rules = tuple(kinds.get(k[0]) if k else None for k in ec.unit_kinds)
    return LiftSpec(raw["ctrl"]["reg"], raw["ctrl"]["enable"], raw["ctrl"]["config_clear"], first, count, regs,
                    {regs[k]: v for k, v in st["reset"].items()}, fields, sw["unit"], sw["first_destination_reg"],
                    _ports(sw["destinations"]), _ports(sw["sources"]),
                    {k: bit_range(v) for k, v in sw["fields"].items()}, ec.unit_kinds, _register_names(raw), rules,
                    tuple(r.window if r else REGISTERS_PER_UNIT for r in rules))


def _register_names(raw: dict) -> dict:
    names = {("STRENG", reg): name for name, reg in raw["streng"]["registers"].items()}
    sw = raw["strswitch"]
    for k, (kind, index, port) in enumerate(_ports(sw["destinations"])):
        names[("STRSWITCH", sw["first_destination_reg"] + k)] = f"DST_{kind}{index}_{port}"
    gates = raw["clock_gates"]
    names[("CLKCTRL", gates["reg"])] = "BGATES"
    return names


class _RegisterFile:
    """The NPU's registers as the program leaves them: one list of values per unit, and the
    relocation symbol a register holds (by unit, then register)."""

    def __init__(self, lift: LiftSpec):
        self.streng_reset = [0] * REGISTERS_PER_UNIT
        for reg, value in lift.streng_reset.items():
            self.streng_reset[reg] = value
        self.is_streng = [bool(k and k[0] == "STRENG") for k in lift.unit_kinds]
        self.rules = lift.unit_rules
        self.values = [self._reset_values(u) for u in range(len(lift.unit_kinds))]
        self.symbols: dict[int, dict[int, str]] = {}
        self.states = {u: UnitState(r) for u, r in enumerate(lift.unit_rules) if r is not None and r.memory}

    def _reset_values(self, unit: int) -> list[int]:
        if self.is_streng[unit]:
            return list(self.streng_reset)
        rules = self.rules[unit]
        return list(rules.reset) if rules is not None else [0] * REGISTERS_PER_UNIT

    def reset_unit(self, unit: int) -> None:
        self.values[unit] = self._reset_values(unit)
        self.symbols.pop(unit, None)


def _streng_field(lift: LiftSpec, regs: list, key: str) -> int:
    reg, shift, mask = lift.streng_fields[key]
    return (regs[reg] >> shift) & mask


def _signed32(v: int) -> int:
    return v - (1 << 32) if v & 0x80000000 else v


def _element_bits(direction: int, sizes: tuple[int, int, int], gap: int, align_right: bool) -> tuple[int, int]:
    """(nbits_in, nbits_out) from the byte-lane sizes and the gap, inverting the runtime's rule: the
    lanes carry the narrower side's bits; a wider memory side is a front or back gap; without a
    gap, a left-aligned element placed in higher lanes tells the stream side's width, else the two
    sides are taken as equal (a right-aligned narrower memory element is not recoverable)."""
    carried = sum(sizes)
    lanes = max((k + 1 for k, s in enumerate(sizes) if s), default=0)
    if gap:
        wide = carried + gap
        return (wide, carried) if direction == 0 else (carried, wide)
    other = carried if align_right or -(-carried // 8) >= lanes else 8 * lanes
    return (carried, other) if direction == 0 else (other, carried)


def _lift_streng(lift: LiftSpec, engine: int, regs: list, syms: dict, resolve) -> Streng:
    """A stream engine's `Streng` from its registers (see `lift_epochs`)."""
    f = functools.partial(_streng_field, lift, regs)
    r = lift.streng_regs
    direction, raw = f("CTRL.dir"), bool(f("CTRL.raw"))
    align_right = bool(f("CTRL.lsbmode"))
    front, back = f("STRD.front_gap"), f("STRD.back_gap")
    nbits_in, nbits_out = _element_bits(direction, (f("CTRL.size0"), f("CTRL.size1"), f("CTRL.size2")),
                                        front or back, align_right)
    addr, base_symbol = resolve(regs[r["ADDR"]], syms.get(r["ADDR"], ""))
    limit = None
    if f("LIMITEN.addr_limit"):
        last, _ = resolve(regs[r["LIMITADDR"]], syms.get(r["LIMITADDR"], ""))
        limit = hardware_limit(last)
    geometry = dict(frame_count=regs[r["FSIZE"]]) if raw else dict(
        fwidth=f("FSIZE.width"), fheight=f("FSIZE.height"), batch_depth=f("DEPTH.size"),
        batch_offset=f("DEPTH.offset") | f("LIMITEN.doff_msb") << 16,
        line_offset=f("STRD.line_offset") | f("CID_CACHE.loff_msb") << 16)
    extra = {"bus_cid": f("CID_CACHE.cid"), "bus_pfetch": f("CID_CACHE.prefetch"),
             "cache_linesize": f("CID_CACHE.line_size"), "mem_lsb": int(bool(front)), "gap_bits": front or back,
             "sync_with_other": f("EVENT.frame_trigger_enable"), "sync_dma": f("EVENT.frame_trigger_source"),
             "frame_overflow_irq": f("EVENT.frame_overflow_irq"), "illegal_config_irq": f("EVENT.illegal_config_irq"),
             "line_gap_cycles": f("POS.gap_cycles")}
    return Streng(
        engine=engine, dir=direction, addr=addr, limit=limit, raw=raw, **geometry,
        frame_offset=_signed32(regs[r["FOFFSET"]]), loop_offset=_signed32(regs[r["FRPTOFF"]]),
        frame_loop_cnt=regs[r["FRAME_RPT"]], frame_tot_cnt=regs[r["LIMIT"]],
        nbits_in=nbits_in, nbits_out=nbits_out, continuous=bool(f("CTRL.continuous")), noinc=bool(f("CTRL.noinc")),
        noblk=bool(f("CTRL.noblk")), align_right=align_right,
        nbits_unsigned=align_right and not f("CTRL.signext"),
        cacheable=bool(f("CID_CACHE.cacheable")), cache_allocate=bool(f("CID_CACHE.cache_allocate")),
        base_symbol=base_symbol, extra=tuple((k, v) for k, v in extra.items() if v))


def _lift_links(lift: LiftSpec, regs: list) -> tuple[Link, ...]:
    """The stream switch's connections: one `Link` per destination context that is enabled or
    holds a source or a frame count."""
    sf = lift.switch_fields
    links = []
    for k, (dkind, dindex, dport) in enumerate(lift.destinations):
        v = regs[lift.switch_first_reg + k]
        if not v:
            continue
        for slot in (0, 1):
            en, src, frames = ((v >> s) & m for s, m in (sf[f"enable{slot}"], sf[f"link{slot}"], sf[f"frames{slot}"]))
            if not (en or src or frames):
                continue
            if src >= len(lift.sources):
                raise StImportError(f"stream switch destination {dkind}{dindex}.{dport}: source {src} does not exist")
            skind, sindex, sport = lift.sources[src]
            links.append(Link(dkind, dindex, dport, skind, sindex, sport, context=en, frames=frames, slot=slot))
    return tuple(links)


def lift_epochs(program: EcProgram, symbols: dict[str, int] | None = None) -> list[HwEpoch]:
    """Replay a program's register writes and rebuild each epoch (one per label) as a `HwEpoch`:
    its stream engines, stream-switch links and enabled units, as the registers stand at the first
    poll that waits for the epoch's end (at the next label when there is none).

    The registers start at their reset values and a unit's configuration clear (control bit 30)
    resets it. An epoch lists the stream engines it configured or enabled, in the order it first
    wrote them; `enabled` lists the units whose enable bit it set, in program order.

    `symbols` maps a relocation's symbol (the table's id, e.g. `_user_io_input_0`, or its C symbol,
    e.g. `_mem_pool__user_io_input_0_Default`) to an address; a relocated address whose symbol is
    not given stays the offset from it, with `Streng.base_symbol` naming it (the C symbol when the
    header names one). Lifted values are the registers' own: `line_offset` is the programmed one
    (fwidth * batch_offset when the struct left 0), `frame_count` of a raw engine is the frame size
    register (the struct's 0 means "computed from the buffer length"); `nbits_unsigned` is only
    recoverable for right-aligned elements (False otherwise). Register fields with no struct field
    are kept in `Streng.extra` when not 0: bus_cid, bus_pfetch, cache_linesize, mem_lsb (the gap is
    at the front), gap_bits, sync_with_other, sync_dma, frame_overflow_irq, illegal_config_irq,
    line_gap_cycles. A right-aligned read whose stream width its registers cannot tell takes the
    input width (`inbytes_*`) of the unit it feeds.

    `HwEpoch.units`: each CONVACC, ARITH, POOL and ACTIV the epoch configured or enabled, sorted by
    kind and index, with the fields of its `LL_*_InitTypeDef` under the struct's names (rules:
    `[units]` of the lift data). Enum fields are the enum's names; C `short` fields are signed.
    Left out, because no register holds them: ARITH `vec_precision`, and in scalar mode `bcast`,
    `fWidth`, `fHeight`, `fChannels`, `batchDepth`; the table addresses (ARITH `A/B/C_vector`, ACTIV
    `ROM0/ROM1/LUT_vector`) unless there is no table (`(0,)`: every coefficient equals the scalar;
    B with `combinebc` never); ACTIV and POOL `nbytes`, POOL `avgnopad`, `pad_val_en`, `pad_val`.
    Stand-ins where the registers hold less than the struct: an ARITH with one coefficient per
    channel gives its plane as `fWidth` = width * height, `fHeight` = 1; per-height, per-width and
    per-plane broadcasts program the same counters and read back as `ARITH_BCAST_WIDTH`; a KFILT
    register at reset reads as kfilt_* = 0. Extra fields: `reg_<REGISTER>_<FIELD>`, a writable
    register field no rule reads that differs from its reset value (a DECUN or RECBUF has only
    these); `mem_A`, `mem_B`, `mem_C` (ARITH: the coefficients the epoch uses, 16 bits each) and
    `mem_rom0`, `mem_rom1` (ACTIV: the function table bytes and 16-bit A, B, C rows it wrote).
    """
    lift = load_lift_spec()
    symbols = symbols or {}
    c_symbol = {r.symbol: r.c_symbol for r in program.relocations}

    def resolve(value: int, sym: str) -> tuple[int, str]:
        if not sym:
            return value, ""
        name = c_symbol.get(sym) or sym
        base = symbols.get(sym, symbols.get(name))
        return ((base + value) & MASK32, name) if base is not None else (value, name)

    rf = _RegisterFile(lift)
    ctrl, en_bit, clear_bit = lift.ctrl_reg, lift.enable_bit, lift.config_clear_bit
    kinds = lift.unit_kinds
    first, count = lift.streng_first_unit, lift.streng_count
    windows, rules_of = lift.windows, lift.unit_rules
    where = program.symbol
    out: list[HwEpoch] = []
    insts = program.instructions
    for ep in program.epochs:
        snapshot_at = ep.end_polls[0] if ep.end_polls else ep.end
        touched: dict[int, None] = {}
        enabled: dict[int, None] = {}
        snap = None
        for state in rf.states.values():
            state.written = dict.fromkeys(state.written, 0)
        for k in range(ep.start, ep.end):
            if k == snapshot_at:
                snap = _snapshot(rf, touched, enabled, first, count, lift)
            ins = insts[k]
            op = ins.op
            if op == "label" or op == "irq" or op == "poll":
                continue
            unit, reg, vals = ins.unit, ins.reg, ins.values
            if kinds[unit] is None:
                raise StImportError(f"{where}: instruction word {ins.index}: unit {unit} does not exist")
            regs = rf.values[unit]
            if op == "burstinc":
                if reg + len(vals) > REGISTERS_PER_UNIT:
                    raise StImportError(f"{where}: instruction word {ins.index}: burst past the unit's last register")
                regs[reg:reg + len(vals)] = vals
                written = range(reg, reg + len(vals))
            elif op == "burst":
                regs[reg] = vals[-1]
                written = (reg,)
            elif ins.msb == 31 and ins.lsb == 0:
                regs[reg] = vals[0]
                written = (reg,)
            else:
                mask = ((1 << (ins.msb - ins.lsb + 1)) - 1) << ins.lsb if ins.msb >= ins.lsb else 0
                regs[reg] = (regs[reg] & ~mask) | ((vals[0] << ins.lsb) & mask)
                written = (reg,)
            if ins.relocs or unit in rf.symbols:
                _track_symbols(rf, ins, written)
            if written[-1] >= windows[unit]:
                write_memory(rules_of[unit], rf.states[unit], regs, written)
            covers_ctrl = reg == ctrl or op == "burstinc" and reg <= ctrl < reg + len(vals)
            if covers_ctrl:
                value = regs[ctrl]
                if value >> clear_bit & 1:
                    rf.reset_unit(unit)
                    continue
                if value >> en_bit & 1 and ins.lsb <= en_bit <= ins.msb:
                    enabled.setdefault(unit, None)
            # configuration: any write but the single-bit control writes (enable, clear)
            if snap is None and not (covers_ctrl and ins.msb == ins.lsb):
                touched.setdefault(unit, None)
        if snap is None:
            snap = _snapshot(rf, touched, enabled, first, count, lift)
        regs_by_engine, switch_regs, enabled_units, units = snap
        strengs = tuple(_lift_streng(lift, e, regs, syms, resolve) for e, (regs, syms) in regs_by_engine.items())
        links = _lift_links(lift, switch_regs)
        out.append(HwEpoch(number=ep.number, strengs=_stream_widths(strengs, links, units, lift), units=units,
                           links=links,
                           enabled=tuple(kinds[u] for u in enabled_units if kinds[u] and kinds[u][0] in UNIT_KINDS)))
    return out


def _track_symbols(rf: _RegisterFile, ins: EcInstruction, written) -> None:
    """Registers a relocated value lands in keep its symbol; any other write drops it (a burst to
    one register keeps the last value's)."""
    syms = rf.symbols.setdefault(ins.unit, {})
    by_pos = dict(ins.relocs)
    if ins.op == "burst":
        pairs = [(ins.reg, by_pos.get(len(ins.values) - 1))]
    else:
        pairs = [(reg, by_pos.get(j)) for j, reg in enumerate(written)]
    for reg, sym in pairs:
        if sym:
            syms[reg] = sym
        else:
            syms.pop(reg, None)


def _snapshot(rf: _RegisterFile, touched, enabled, first: int, count: int, lift: LiftSpec):
    """The registers an epoch's records are built from, copied at its end poll, and its processing
    units, rebuilt there (by kind and index, as the explicit-struct path lists them)."""
    engines = {}
    units = []
    for unit in list(touched) + [u for u in enabled if u not in touched]:
        if first <= unit < first + count and unit - first not in engines:
            engines[unit - first] = (list(rf.values[unit]), dict(rf.symbols.get(unit, {})))
        elif rf.rules[unit] is not None:
            units.append(lift_unit(rf.rules[unit], lift.unit_kinds[unit][1], rf.values[unit], rf.states.get(unit)))
    units.sort(key=lambda u: (u.kind, u.index))
    return engines, list(rf.values[lift.switch_unit]), tuple(enabled), tuple(units)


def _stream_widths(strengs: tuple, links: tuple, units: tuple, lift: LiftSpec) -> tuple:
    """Right-aligned reads whose stream width the engine's registers cannot tell (nbits_out taken
    equal to nbits_in) get the width of the unit input they feed, when every unit they feed gives
    one and it is wider."""
    from dataclasses import replace  # noqa: PLC0415

    open_ = [s for s in strengs if s.dir == 0 and s.align_right and s.nbits_out == s.nbits_in]
    if not open_ or not units:
        return strengs
    by_unit = {(u.kind, u.index): u for u in units}
    rules = {r.kind: r for r in lift.unit_rules if r is not None}
    widths: dict[int, set] = {}
    for lk in links:
        if lk.src_kind != "STRENG":
            continue
        unit, r = by_unit.get((lk.dst_kind, lk.dst_index)), rules.get(lk.dst_kind)
        field = r.inputs[lk.dst_port] if r is not None and lk.dst_port < len(r.inputs) else ""
        value = unit.get(field) if unit is not None and field else None
        widths.setdefault(lk.src_index, set()).add(8 * value if isinstance(value, int) and value > 0 else None)
    out = []
    for s in strengs:
        w = widths.get(s.engine, set())
        if s in open_ and len(w) == 1 and None not in w and next(iter(w)) > s.nbits_in:
            s = replace(s, nbits_out=next(iter(w)))
        out.append(s)
    return tuple(out)
