"""Move a program inside memory: shift the buffers, constants and address fields of some pools.

`relocate(program, {pool: delta}, profile)` returns a new Program in which every buffer and
constant of those pools starts `delta` bytes later, and every command field the ISA marks
`address = true` (SE base/limit, CONV qparams, ARITH params, ACT lut, HOST src/dst) that
points into them moves by the same delta. Which pool a field points into is read from its
*hardware view* (`codec.hardware_view`: encoded, then decoded, so rounding and ignored low
bits count): the buffer or constant holding that address (or ending at it, for exclusive
ends such as a limit), else the pool holding it. Commands keep logical values: the delta is
added to the logical value, which moves the hardware value by exactly delta because delta must
be a multiple of every address field's step (`address_step`).
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..errors import UsageError
from .codec import UNKNOWN_OP, Command, hardware_view
from .model import Program
from .spec import IsaSpec, load_isa


def address_step(isa: IsaSpec, profile) -> int:
    """Least common multiple of the units, ignored-low and strict units of every address field:
    a delta that is a multiple of it moves every field's hardware value by exactly delta."""
    step = 1
    for c in isa.commands:
        for f in c.fields:
            if not f.address:
                continue
            for unit in (f.unit, f.ignore_low, f.strict):
                if unit is not None:
                    step = math.lcm(step, isa.unit_bytes(unit, profile))
    return step


def address_fields(isa: IsaSpec) -> dict[str, tuple[str, ...]]:
    """{command name: names of its address fields}, from the spec."""
    return {c.name: tuple(f.name for f in c.fields if f.address) for c in isa.commands
            if any(f.address for f in c.fields)}


def _spans(program: Program, profile) -> list[tuple[int, int, str]]:
    out = [(profile.pool_named(b.pool).base + b.offset, b.size, b.pool) for b in program.buffers]
    out += [(profile.pool_named(c.pool).base + c.offset, len(c.data), c.pool) for c in program.constants]
    return sorted((s, s + n, p) for s, n, p in out)


def _pool_of(addr: int, spans, profile) -> str | None:
    """Pool whose delta applies to `addr`: the span holding it, else ending at it, else the pool."""
    for s, e, p in spans:
        if s <= addr < e:
            return p
    for s, e, p in spans:
        if s < addr == e:
            return p
    pool = profile.pool_at(addr) or profile.pool_at(addr - 1)
    return pool.name if pool is not None else None


def relocate(program: Program, offsets: dict, profile, isa: IsaSpec | None = None) -> Program:
    """A copy of `program` moved by `offsets = {pool name: delta bytes}` (see module docstring).

    Raises UsageError for an unknown pool or a delta that is not a multiple of `address_step`.
    The result is not validated: `npusim.load(result, profile)` checks that it still fits.
    """
    isa = isa or load_isa()
    step = address_step(isa, profile)
    for name, delta in sorted(offsets.items()):
        profile.pool_named(name)  # ProfileError for an unknown pool
        if isinstance(delta, bool) or not isinstance(delta, int) or delta % step:
            raise UsageError(f"relocate: delta {delta!r} for pool {name} is not a multiple of {step} B "
                             f"(the address fields' step)")
    deltas = {k: int(v) for k, v in offsets.items() if v}
    if not deltas:
        return replace(program, commands=list(program.commands), buffers=list(program.buffers),
                       constants=list(program.constants), debug=dict(program.debug))
    spans = _spans(program, profile)
    fields = address_fields(isa)
    cmds = []
    for cmd in program.commands:
        names = fields.get(cmd.op, ()) if cmd.op != UNKNOWN_OP else ()
        if not names:
            cmds.append(cmd)
            continue
        hw = hardware_view(cmd, isa, profile)
        args = dict(cmd.args)
        for n in names:
            pool = _pool_of(int(hw.args.get(n, 0)), spans, profile) if hw.args.get(n, 0) else None
            if pool in deltas:
                args[n] = int(args.get(n, 0)) + deltas[pool]
        cmds.append(Command(cmd.op, args))
    buffers = [replace(b, offset=b.offset + deltas[b.pool]) if b.pool in deltas else b for b in program.buffers]
    constants = [replace(c, offset=c.offset + deltas[c.pool]) if c.pool in deltas else c for c in program.constants]
    return Program(commands=cmds, buffers=buffers, constants=constants, debug=dict(program.debug),
                   header=program.header)
