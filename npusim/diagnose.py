"""Explain a fault: compare what a stream engine really did with what the buffer table planned.

The engine faults from addresses alone; this module only adds the likely cause (`Fault.why`) by
looking at the faulting descriptor in its hardware encoding next to the buffer table entry the
compiler wrote -- e.g. "the hardware walked 896 B lines (7 x 128 B granules) where the compiler laid
out 832 B lines". It never changes the fault's class, address or region.
"""

from __future__ import annotations

from dataclasses import replace

from .faults import NODE_KIND, NODE_KINDS
from .program.codec import hardware_view

_STRIDES = (("s1", "line_stride", "line"), ("s2", "plane_stride", "plane"))


def explain(fault, program, profile, isa):
    """`fault` with `why` filled in when a stream-engine descriptor disagrees with its buffer."""
    if fault.why or fault.command is None or fault.region is None or not fault.unit.startswith("SE"):
        return fault
    if fault.context and fault.region.owner not in (None, fault.context):
        return fault  # the region is another process's: this program's buffer table does not describe it
    if not 0 <= fault.command < len(program.commands):
        return fault
    cmd = program.commands[fault.command]
    if cmd.op != "SE":
        return fault
    try:
        buf = program.buffer(fault.region.name)
    except KeyError:
        return fault
    hw = hardware_view(cmd, isa, profile)
    reasons = []
    unit_name = isa.layouts[hw["layout"]]["stride_unit"]
    unit = isa.unit_bytes(unit_name, profile)
    for field, planned_attr, what in _STRIDES:
        planned = getattr(buf, planned_attr)
        used = int(hw[field])
        count = int(hw["n1" if field == "s1" else "n2"])
        if planned and count > 1 and used != planned:
            reasons.append(f"the hardware walked {used} B {what}s ({used // unit} x {unit} B {unit_name}s: "
                           f"{hw['layout']} {what} strides are stored in {unit_name}s) where the compiler laid "
                           f"out {planned} B {what}s in buffer '{buf.name}' (alignment {buf.align}); "
                           f"{count} {what}s drift {(used - planned) * (count - 1)} B")
    word = profile.alignment.word
    raw_base = int(cmd["base"])
    if raw_base % word:
        reasons.append(f"the hardware ignores address bits below {word} B: base {raw_base:#x} was used as "
                       f"{raw_base - raw_base % word:#x}")
    if not reasons:
        return fault
    fix = ""
    if any(r.startswith("the hardware walked") for r in reasons):
        fix = f"; compile with --mem-align {profile.alignment.granule} (the hardware granule)"
    return replace(fault, why="; ".join(reasons) + fix)


def explain_all(faults, program, profile, isa) -> list:
    """Every fault explained, its layer named as the program's model format names it (`faults.NODE_KINDS`)."""
    kind = NODE_KINDS.get(program.header.source)
    out = [explain(f, program, profile, isa) for f in faults]
    if kind is None:
        return out
    return [f if not f.layer or NODE_KIND in f.details else replace(f, details={**f.details, NODE_KIND: kind})
            for f in out]
