"""An epoch-controller program read against ATON's register map: its listing, register names, rule checks.

`disassemble(program)` prints a decoded `EcProgram` (ecblob.py) as ST's own listings do; `register_name`
names a unit's register or memory window; `rule_violations(program)` lists the register writes whose values
a field of the register map refuses (the hardware's illegal configurations), by epoch.
"""

from __future__ import annotations

import bisect

from ...program.aton import load_aton_map
from .ecblob import EcInstruction, EcProgram, load_ec_spec


def _value(v: int, sym: str | None) -> str:
    return f"{sym}({v:#x})" if sym else f"{v:#x}"


def _field(ins: EcInstruction) -> str:
    return f"[{ins.msb}]" if ins.msb == ins.lsb else f"[{ins.msb}:{ins.lsb}]"


def disassemble(program: EcProgram, names: bool = False) -> list[str]:
    """The program as ST's listings print it (`ec_asm/debug__<blob>.s`), one line per instruction:
    units and registers by number, values in hex, relocated values as `symbol(offset)`. With
    `names`, each unit access ends in a comment naming the unit and register (`; STRENG2.ADDR`)."""
    spec = load_ec_spec()
    listing = {o.name: o.listing for o in spec.opcodes.values()}
    lines = []
    for ins in program.instructions:
        syms = dict(ins.relocs)
        op = ins.op
        if op == "write":
            v = _value(ins.values[0], syms.get(0))
            if ins.msb == 31 and ins.lsb == 0:
                line = f"{listing[op]} {ins.unit} {ins.reg} {v}"
            else:
                line = f"writefield {ins.unit} {ins.reg} {_field(ins)} {v}"
        elif op == "writebit":
            line = f"{listing[op]} {ins.unit} {ins.reg} [{ins.lsb}] {ins.values[0]:#x}"
        elif op in ("burst", "burstinc"):
            vals = " ".join(_value(v, syms.get(k)) for k, v in enumerate(ins.values))
            line = f"{listing[op]} {ins.unit} {ins.reg} {vals}"
        elif op == "poll":
            line = f"{listing[op]} {ins.unit} {ins.reg} {_field(ins)} {ins.values[0]:#x} {ins.timeout}"
        else:
            lines.append(f"{listing[op]} {ins.values[0]:#x}")
            continue
        if names:
            line += f"  ; {register_name(ins.unit, ins.reg)}"
        lines.append(line)
    return lines


def register_name(unit: int, reg: int) -> str:
    """`UNIT.REGISTER` from ATON's register map (`isa/aton`): a memory window's name, or `r<n>` for a
    word no register or window holds."""

    amap = load_aton_map()
    unit_name = load_ec_spec().unit_names[unit]
    try:
        kind, _ = amap.unit_of(unit)
    except KeyError:
        return f"{unit_name}.r{reg}"
    r = amap.register(kind, reg)
    return f"{unit_name}.{r.name if r is not None else (amap.window(kind, reg) or f'r{reg}')}"



def rule_violations(program: EcProgram) -> dict[int, list[str]]:
    """{epoch number: messages} of the register writes that break a rule ATON's register map states
    (values a field refuses: alignments, ranges, value sets), the hardware's illegal configurations.
    A relocated value is judged once placed (its offset alone says nothing); a write to part of a
    register judges that part's fields only."""

    amap, names = load_aton_map(), load_ec_spec().unit_names
    epoch_at = sorted((e.start, e.number) for e in program.epochs)
    out: dict[int, list[str]] = {}
    for pos, ins in enumerate(program.instructions):
        if ins.op not in ("write", "burst", "burstinc"):
            continue
        try:
            kind, _ = amap.unit_of(ins.unit)
        except KeyError:
            continue
        relocated = {k for k, _ in ins.relocs}
        for k, value in enumerate(ins.values):
            reg_index = ins.reg + (k if ins.op == "burstinc" else 0)
            reg = amap.register(kind, reg_index)
            if reg is None or k in relocated:
                continue
            whole = ins.op != "write" or (ins.msb, ins.lsb) == (31, 0)
            width = ins.msb - ins.lsb + 1
            full = value if whole else (value & ((1 << width) - 1)) << ins.lsb
            for f in reg.fields:
                if not whole and (f.lsb > ins.msb or f.lsb + f.width - 1 < ins.lsb):
                    continue
                for msg in f.violations(f.get(full)):
                    i = bisect.bisect_right(epoch_at, (pos, 1 << 62)) - 1
                    epoch = epoch_at[i][1] if i >= 0 else 0
                    out.setdefault(epoch, []).append(
                        f"{names[ins.unit]}.{reg.name}: {msg} (instruction word {ins.index})")
    return out
