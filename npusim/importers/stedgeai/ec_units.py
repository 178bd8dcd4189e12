"""Processing units lifted from their registers: the struct <-> register rules of each unit kind.

`UnitRules` of a kind (CONVACC, ARITH, POOL, ACTIV, ...) come from `[units.<KIND>]` of
`isa/aton/ec_lift_units.toml`, resolved against ATON's register map (`load_unit_rules`); `lift_unit`
rebuilds one unit's `model.Unit` from its register words (and the memory it was written, `UnitState`),
each kind's derived fields by its `_DERIVE` rule. Used by the epoch lifter (`ec_lift.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import StImportError
from ...program.aton import load_aton_map
from .ecblob import MASK32
from .model import UNIT_KINDS, Unit

REGISTERS_PER_UNIT = 1024  # the instruction's register field is 10 bits


@dataclass(frozen=True)
class UnitRules:
    """One unit kind's struct <-> register rules (`[units.<KIND>]` of the lift data, resolved
    against the register map): bit positions as (word, shift, mask)."""

    kind: str
    struct: tuple  # the struct's fields in declaration order ((): none rebuilt, registers kept only)
    plain: tuple  # (struct field, word, shift, mask, width, how)
    enums: tuple  # (struct field, word, shift, mask, {code: enum name})
    fields: dict  # "REG.FIELD" -> (word, shift, mask, reset) of every field of the kind
    extras: tuple  # (word, its bits, their reset, (("reg_<REG>_<FIELD>", shift, mask, reset), ...)): the
    #                writable fields no rule reads, by register
    reset: tuple  # the unit's register words at reset (REGISTERS_PER_UNIT of them)
    window: int  # first word of the unit's memory (REGISTERS_PER_UNIT: none)
    memory: tuple  # (name, first word, entries, words per entry, translate (word, shift, mask) | None)
    inputs: tuple  # struct field of each input port's bytes per value ("" : not known)


def _unit_rules(kind: str, raw: dict, aton, ctrl_bits: set) -> UnitRules:
    """Resolve one kind's rules; a name the register map lacks is an `StImportError`."""
    k = aton.kinds[kind]
    fields, rw = {}, []
    reset = [0] * REGISTERS_PER_UNIT
    for r in k.registers:
        reset[r.word_index] = r.reset
        for f in r.fields:
            fields[f"{r.name}.{f.name}"] = (r.word_index, f.lsb, (1 << f.width) - 1, f.reset)
            if f.access != "ro" and not (r.word_index == 0 and f.lsb in ctrl_bits and f.width == 1):
                rw.append((f"{r.name}.{f.name}", r))

    def at(name: str, rule: str):
        if name not in fields:
            raise StImportError(f"lift data: {kind}.{rule}: the register map has no field {name}")
        return fields[name]

    plain = []
    for field, rule in raw.get("plain", {}).items():
        name, how = (rule, "") if isinstance(rule, str) else rule
        word, shift, mask, _ = at(name, field)
        plain.append((field, word, shift, mask, mask.bit_length(), how))
    enums = []
    for field, e in raw.get("enum", {}).items():
        word, shift, mask, _ = at(e["field"], field)
        value_set = next((f.values for r in k.registers for f in r.fields if f"{r.name}.{f.name}" == e["field"]), None)
        codes = {}
        for enum_name, v in e["names"].items():
            codes[v if isinstance(v, int) else aton.values[value_set][v]] = enum_name
        enums.append((field, word, shift, mask, codes))
    consumed = {name for name in raw.get("derived", ())} | {
        (rule if isinstance(rule, str) else rule[0]) for rule in raw.get("plain", {}).values()} | {
        e["field"] for e in raw.get("enum", {}).values()}
    for name in consumed:
        at(name, "derived")
    groups: dict = {}
    for name, _ in rw:
        if name not in consumed:
            word, shift, mask, field_reset = fields[name]
            groups.setdefault(word, []).append((f"reg_{name.replace('.', '_')}", shift, mask, field_reset))
    extras = tuple((word, sum(m << s for _, s, m, _ in g), sum(r << s for _, s, _, r in g), tuple(g))
                   for word, g in groups.items())
    windows = dict(k.windows)
    memory = []
    for name, m in raw.get("memory", {}).items():
        first = windows[m["window"]] // 4
        translate = at(m["translate"], name)[:3] if m.get("translate") else None
        memory.append((name, first, m["entries"], m["words_per_entry"], translate))
    window = min((m[1] for m in memory), default=REGISTERS_PER_UNIT)
    return UnitRules(kind, tuple(raw.get("struct", ())), tuple(plain), tuple(enums), fields, extras, tuple(reset),
                     window, tuple(memory), tuple(raw.get("inputs", ())))


def load_unit_rules(raw: dict, ctrl: dict) -> dict:
    """Rules of every processing-unit kind of the register map: the lift data's, or (DECUN, RECBUF
    without rules) an empty struct whose register fields are all kept as `reg_` fields."""

    aton = load_aton_map()
    bits = {ctrl["enable"], ctrl["clear"], ctrl["config_clear"]}
    return {kind: _unit_rules(kind, raw.get(kind, {}), aton, bits)
            for kind in UNIT_KINDS if kind != "STRENG" and kind in aton.kinds}


def _signed(v: int, width: int) -> int:
    return v - (1 << width) if width and v >> (width - 1) else v


_HOW = {"": lambda v, w: v, "signed": _signed, "shift": lambda v, w: v - 16, "not": lambda v, w: int(v == 0),
        "bit0": lambda v, w: v & 1, "bit1": lambda v, w: v >> 1 & 1}


class UnitState:
    """A unit's memory (coefficients, function tables) as the program leaves it, by memory name,
    and the entries the current epoch wrote."""

    __slots__ = ("words", "written")

    def __init__(self, rules: UnitRules):
        self.words = {name: [0] * (entries * per) for name, _, entries, per, _ in rules.memory}
        self.written = {name: 0 for name in self.words}


def write_memory(rules: UnitRules, state: UnitState, regs: list, written) -> None:
    """Register writes that land in the unit's memory (a memory with `translate` maps its window's
    first word to entry 0 while that bit is set, else the unit's word w to memory word w)."""
    lo, hi = written[0], written[-1] + 1
    for name, first, entries, per, translate in rules.memory:
        size = entries * per
        base = first if translate is None or (regs[translate[0]] >> translate[1]) & translate[2] else 0
        a, b = max(lo, first), min(hi, base + size)
        if a < b:
            state.words[name][a - base:b - base] = regs[a:b]
            state.written[name] = max(state.written[name], (b - base - 1) // per + 1)


def lift_unit(rules: UnitRules, index: int, regs: list, state: UnitState | None) -> Unit:
    """A unit's struct fields from its registers (see `lift_epochs`)."""
    out: dict = {}
    for field, word, shift, mask, width, how in rules.plain:
        out[field] = _HOW[how]((regs[word] >> shift) & mask, width)
    for field, word, shift, mask, codes in rules.enums:
        code = (regs[word] >> shift) & mask
        out[field] = codes.get(code, code)

    def f(name: str) -> int:
        word, shift, mask, _ = rules.fields[name]
        return (regs[word] >> shift) & mask

    extra = _DERIVE[rules.kind](rules, f, out, state) if rules.kind in _DERIVE else {}
    fields = [(k, out[k]) for k in rules.struct if k in out]
    for word, bits, at_reset, group in rules.extras:
        if regs[word] & bits != at_reset:
            fields += [(name, (regs[word] >> shift) & mask) for name, shift, mask, reset in group
                       if (regs[word] >> shift) & mask != reset]
    fields += sorted(extra.items())
    return Unit(kind=rules.kind, index=index, fields=tuple(fields))


def _untouched(rules: UnitRules, f, name: str) -> bool:
    """The register holding `name` is at its reset value in every field."""
    word = rules.fields[name][0]
    return all(f(k) == reset for k, (w, _, _, reset) in rules.fields.items() if w == word)


def _derive_convacc(rules, f, out, state) -> dict:
    depth = max(out["batchDepth"], 1)
    out["fWidth"] = f("FFORMAT.WIDTH") // depth
    out["left_padding"] = f("SAMPLE.LPAD") + f("ZFRAME.LEFT") // depth
    out["right_padding"] = f("SAMPLE.RPAD") + f("ZFRAME.RIGHT") // depth
    out["top_padding"] = f("SAMPLE.TPAD") + f("ZFRAME.TOP")
    out["bot_padding"] = f("SAMPLE.BPAD") + f("ZFRAME.BOTTOM")
    right, bottom = f("FHCROP.RIGHT"), f("FVCROP.BOTTOM")
    out["left_crop"] = f("FHCROP.LEFT") // depth
    out["right_crop"] = 0 if right == rules.fields["FHCROP.RIGHT"][3] else (right - (depth - 1)) // depth
    out["top_crop"] = f("FVCROP.TOP")
    out["bot_crop"] = 0 if bottom == rules.fields["FVCROP.BOTTOM"][3] else bottom
    out["fstatcnt"] = f("SAMPLE.FSTATCNT") if out["fstat"] else 0
    afilt, kfilt = f("CTRL.AFILTMODE") != 0, not _untouched(rules, f, "KFILT.TOT")
    for part in ("TOT", "FIRST", "LAST"):
        out[f"afilt_{part.lower()}"] = f(f"AFILT.{part}") if afilt else 0
        out[f"kfilt_{part.lower()}"] = f(f"KFILT.{part}") if kfilt else 0
    return {}


def _derive_arith(rules, f, out, state) -> dict:
    if out["scalar"]:
        return {}  # scalar mode writes neither the broadcast counters nor the coefficient memory
    if f("CTRL.CNT2"):  # one coefficient per channel
        depth = f("RSTCNT1.RSTCNT") + 1
        plane = (f("RSTCNT2.RSTCNT") + 1) // depth
        out.update(bcast="ARITH_BCAST_CHAN", batchDepth=depth, fWidth=plane, fHeight=1,
                   fChannels=(f("RSTCNT3.RSTCNT") + 1) // max(plane, 1))
        count = out["fChannels"]
    elif f("INCOFFSET.VAL") == 0:  # one coefficient for all
        out["bcast"] = "ARITH_BCAST_SCALAR"
        count = 1
    else:  # a coefficient per run of INCCNT + 1 elements, RSTCNT1 + 1 elements in all
        run = f("INCCNT.INCVAL") + 1
        count = (f("RSTCNT1.RSTCNT") + 1) // run
        out.update(bcast="ARITH_BCAST_WIDTH", batchDepth=run, fWidth=count)
    name, _, entries, per, _ = rules.memory[0]
    words = state.words[name]
    n = min(count, entries)
    ab, cc = words[0:per * n:per], words[1:per * n:per]
    a = tuple(x & 0xFFFF for x in ab)
    b = tuple(x >> 16 & 0xFFFF for x in ab)
    c = tuple(x & 0xFFFF for x in cc)
    if all(x == out["A_scalar"] & 0xFFFF for x in a):
        out["A_vector"] = (0,)
    if out["combinebc"]:
        if all((hi << 16 | lo) == out["C_scalar"] & MASK32 for hi, lo in zip(b, c)):
            out["C_vector"] = (0,)
    else:
        if all(x == out["B_scalar"] & 0xFFFF for x in b):
            out["B_vector"] = (0,)
        if all(x == out["C_scalar"] & 0xFFFF for x in c):
            out["C_vector"] = (0,)
    return {"mem_A": a, "mem_B": b, "mem_C": c}


def _derive_pool(rules, f, out, state) -> dict:
    batch = max(out["batchSize"], 1)
    right = f("XCROP.RCROP")
    out["inputX"] = f("FDIMS.FEATX") // batch
    out["leftCrop"] = f("XCROP.LCROP") // batch
    out["rightCrop"] = (right - (batch - 1)) // batch if right else 0
    return {}


def _derive_activ(rules, f, out, state) -> dict:
    rom0, rom1 = state.written["rom0"], state.written["rom1"]
    out["ROM0_nbytes"] = rom0
    out["ROM1_nbytes"] = 6 * rom1
    w0, w1 = state.words["rom0"], state.words["rom1"]
    extra = {"mem_rom0": tuple(w0[i] & 0xFF for i in range(rom0)),
             "mem_rom1": tuple(v for i in range(rom1)
                               for v in (w1[2 * i] & 0xFFFF, w1[2 * i] >> 16 & 0xFFFF, w1[2 * i + 1] & 0xFFFF))}
    return {k: v for k, v in extra.items() if v}


_DERIVE = {"CONVACC": _derive_convacc, "ARITH": _derive_arith, "POOL": _derive_pool, "ACTIV": _derive_activ}
