"""Encode and decode commands, driven by the ISA spec.

A `Command` holds *logical* values: bytes for address/stride/size fields, plain
integers for counts and raw bit patterns, names for enum fields. `encode`
converts them to the hardware units of the spec (rounding as the spec says);
`decode` converts back, so `decode(encode(c))` shows exactly what the hardware
will use -- which differs from `c` when the compiler asked for a stride the
hardware cannot store (`hardware_view`).

A word whose opcode the ISA does not define decodes (with `strict=False`) into a one-word
`Command(UNKNOWN_OP, {"opcode", "word"})` that encodes back to the same word: the epoch
controller reports it as an `unknown-opcode` fault when it reaches it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from ..errors import BlobError, NpusimError
from .spec import CommandSpec, FieldSpec, IsaSpec


UNKNOWN_OP = "UNKNOWN"  # a command word whose opcode the ISA does not define


class EncodeError(NpusimError):
    """A command cannot be encoded (value out of range, not a multiple of its unit)."""


class FrozenArgs(dict):
    """A command's arguments: a dict that refuses changes (commands are values; results derived from
    a Program, such as its decoded view, are cached by the identity of its commands)."""

    def _refuse(self, *a, **k):
        raise TypeError("command arguments are read-only: build a new Command({**cmd.args, ...})")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]
    __ior__ = _refuse  # type: ignore[assignment]

    def __reduce__(self):
        return (FrozenArgs, (dict(self),))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


@dataclass(frozen=True)
class Command:
    op: str
    args: Mapping[str, int | str] = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.args, FrozenArgs):
            object.__setattr__(self, "args", FrozenArgs(self.args))

    def __getitem__(self, key: str):
        return self.args[key]

    def get(self, key: str, default=None):
        return self.args.get(key, default)


def field_unit_bytes(isa: IsaSpec, f: FieldSpec, args: Mapping, profile) -> int:
    if f.unit == "enum":
        return 1
    return isa.unit_bytes(f.unit, profile, layout=args.get("layout") if f.unit == "layout" else None)


class _Field:
    """A field with what encoding and decoding it need, resolved once for one (ISA, profile)."""

    __slots__ = ("spec", "name", "word", "shift", "mask", "bits", "signed", "codes", "names", "step", "steps",
                 "up", "scaled")

    def __init__(self, isa: IsaSpec, f: FieldSpec, profile):
        self.spec, self.name, self.word, self.shift, self.mask = f, f.name, f.word, f.shift, f.mask
        self.bits, self.signed, self.up = f.bits, f.signed, f.round == "up"
        self.codes = self.names = None
        if f.enum is not None:
            self.codes = isa.enums[f.enum]
            self.names = {}
            for name, code in self.codes.items():  # decoding names a code by its first name
                self.names.setdefault(code, name)
        # bytes per stored step; a "layout" unit's step per layout name (None: resolved per command)
        self.step = None if f.unit == "layout" else field_unit_bytes(isa, f, {}, profile)
        self.steps = {lay: isa.unit_bytes(f.unit, profile, layout=lay) for lay in isa.layouts} \
            if f.unit == "layout" else {}
        self.scaled = f.enum is None and f.unit not in ("count", "raw", "byte")  # decoding multiplies by the step


_PLANS: dict = {}  # (id(isa), id(profile)) -> (isa, profile, {command name: (CommandSpec, [_Field])})


def _plan(isa: IsaSpec, profile) -> dict:
    """Every command's fields resolved for (isa, profile), built once per pair (profiles and specs are
    immutable); a few pairs are kept."""
    hit = _PLANS.get((id(isa), id(profile)))
    if hit is not None and hit[0] is isa and hit[1] is profile:
        return hit[2]
    plan = {c.name: (c, [_Field(isa, f, profile) for f in c.fields], frozenset(f.name for f in c.fields))
            for c in isa.commands}
    for name, (c, fields, names) in plan.items():
        for f in fields:  # an enum code wider than its field spills into the next one: only words show that
            if f.codes is not None and any(not 0 <= code <= f.mask for code in f.codes.values()):
                plan[name] = (c, fields, names, "spills")
    if len(_PLANS) >= 16:
        _PLANS.clear()
    _PLANS[(id(isa), id(profile))] = (isa, profile, plan)
    return plan


def encode_field(isa: IsaSpec, spec: CommandSpec, f: FieldSpec, args: Mapping, profile) -> int:
    """Stored bits of one field."""
    value = args.get(f.name, 0 if f.enum is None else None)
    where = f"{spec.name}.{f.name}"
    if f.enum is not None:
        if value is None:
            raise EncodeError(f"{where}: missing value")
        codes = isa.enums[f.enum]
        if value not in codes:
            raise EncodeError(f"{where}={value!r}: not one of {', '.join(codes)}")
        return codes[value]
    if isinstance(value, bool) or not isinstance(value, int):
        raise EncodeError(f"{where}={value!r}: expected an integer")
    step = field_unit_bytes(isa, f, args, profile)
    if step > 1:
        q, r = divmod(value, step)
        if r:
            if f.round != "up":
                raise EncodeError(f"{where}={value}: not a multiple of {step} B")
            q += 1
        value = q
    if f.signed:
        lo, hi = -(1 << (f.bits - 1)), (1 << (f.bits - 1)) - 1
        if not lo <= value <= hi:
            raise EncodeError(f"{where}={value}: out of range [{lo}, {hi}]")
        return value & f.mask
    if not 0 <= value <= f.mask:
        raise EncodeError(f"{where}={value}: does not fit in {f.bits} bits (unit {step} B)")
    return value


def _stored(f: _Field, value, args: Mapping) -> int | None:
    """The stored bits of an integer field in the common case (a plain int that fits, a step known
    from the plan); None sends the field through `encode_field`, which also words every error."""
    if type(value) is not int:
        return None
    step = f.step if f.step is not None else f.steps.get(args.get("layout"))
    if step is None:
        return None
    if step > 1:
        q, r = divmod(value, step)
        if r:
            if not f.up:
                return None
            q += 1
        value = q
    if f.signed:
        half = 1 << (f.bits - 1)
        return value & f.mask if -half <= value < half else None
    return value if 0 <= value <= f.mask else None


def _encoded(cmd: Command, isa: IsaSpec, profile, entry=None) -> tuple[CommandSpec, list, list[int]]:
    """(spec, resolved fields, stored bits of each field) of a command of the ISA; `entry`: its `_plan` entry."""
    entry = entry or _plan(isa, profile).get(cmd.op)
    if entry is None:
        raise EncodeError(f"unknown command {cmd.op!r}")
    spec, fields, names = entry[:3]
    args = cmd.args
    if not names.issuperset(args):
        raise EncodeError(f"{spec.name}: unknown fields {sorted(set(args) - names)}")
    out = []
    for f in fields:
        value = args.get(f.name, 0)
        if f.codes is not None:
            bits = f.codes.get(value) if isinstance(value, str) else None
        elif f.step == 1 and type(value) is int and 0 <= value <= f.mask and not f.signed:  # most fields
            bits = value
        else:
            bits = _stored(f, value, args)
        out.append(encode_field(isa, spec, f.spec, args, profile) if bits is None else bits)
    return spec, fields, out


def _unknown_word(cmd: Command, isa: IsaSpec) -> int:
    word = cmd.args.get("word")
    if isinstance(word, bool) or not isinstance(word, int) or not 0 <= word < 1 << isa.word_bits:
        raise EncodeError(f"{UNKNOWN_OP}: word={word!r} is not a {isa.word_bits}-bit integer")
    code = word & ((1 << isa.opcode_bits) - 1)
    if code in isa.by_opcode or cmd.args.get("opcode", code) != code:
        raise EncodeError(f"{UNKNOWN_OP}: word {word:#x} has a defined opcode or disagrees with opcode=")
    return word


def encode(cmd: Command, isa: IsaSpec, profile) -> list[int]:
    """The 64-bit words of one command."""
    if cmd.op == UNKNOWN_OP:
        return [_unknown_word(cmd, isa)]
    spec, fields, bits = _encoded(cmd, isa, profile)
    words = [0] * spec.words
    words[0] = spec.opcode
    for f, b in zip(fields, bits):
        words[f.word] |= b << f.shift
    return words


def encode_all(cmds: Iterable[Command], isa: IsaSpec, profile) -> list[int]:
    out: list[int] = []
    for c in cmds:
        out.extend(encode(c, isa, profile))
    return out


def decode_one(words, at: int, isa: IsaSpec, profile, strict: bool = True) -> tuple[Command, int]:
    """Decode the command starting at word `at`; return it and the next word index.

    Raises BlobError for a truncated command, an enum code the spec does not define, and
    (when `strict`) an unknown opcode; with strict=False that word becomes an UNKNOWN_OP command.
    """
    op = int(words[at]) & ((1 << isa.opcode_bits) - 1)
    spec = isa.by_opcode.get(op)
    if spec is None:
        if strict:
            raise BlobError(f"word {at}: unknown opcode {op:#04x}")
        return Command(UNKNOWN_OP, {"opcode": op, "word": int(words[at])}), at + 1
    if at + spec.words > len(words):
        raise BlobError(f"word {at}: {spec.name} needs {spec.words} words, only {len(words) - at} left")
    own = [int(w) for w in words[at:at + spec.words]]
    fields = _plan(isa, profile)[spec.name][1]
    return _view(spec, fields, [(own[f.word] >> f.shift) & f.mask for f in fields], at, isa, profile), \
        at + spec.words


def _view(spec: CommandSpec, fields: list, stored: list[int], at: int, isa: IsaSpec, profile) -> Command:
    """The command the hardware reads from the stored bits of each field (of the command at word `at`)."""
    args: dict[str, int | str] = {}
    layout_field = None
    for f, raw in zip(fields, stored):
        if f.names is not None:
            name = f.names.get(raw)
            if name is None:
                raise BlobError(f"word {at}: {spec.name}.{f.name} has undefined code {raw}")
            args[f.name] = name
            if f.name == "layout":
                layout_field = name
        elif f.signed and raw >> (f.bits - 1):
            args[f.name] = raw - (1 << f.bits)
        else:
            args[f.name] = raw
    for f in fields:
        if f.scaled:
            step = f.step if f.step is not None else f.steps.get(layout_field)
            if step is None:
                step = isa.unit_bytes(f.spec.unit, profile, layout=layout_field)
            args[f.name] = args[f.name] * step
    return Command(spec.name, args)


def decode(words, isa: IsaSpec, profile, strict: bool = True) -> list[Command]:
    """Decode a whole command stream. Every command is decoded; nothing is executed."""
    cmds, at = [], 0
    while at < len(words):
        c, at = decode_one(words, at, isa, profile, strict)
        cmds.append(c)
    return cmds


def hardware_view(cmd: Command, isa: IsaSpec, profile) -> Command:
    """`cmd` as the hardware reads it: encoded with the spec's rounding, then decoded back (from the
    fields' stored bits, without assembling the words)."""
    entry = _plan(isa, profile).get(cmd.op)
    if entry is None or len(entry) > 3:  # an unknown word, or an ISA whose enum codes overflow their fields
        return decode_one(encode(cmd, isa, profile), 0, isa, profile, strict=False)[0]
    return _view(*_encoded(cmd, isa, profile, entry), 0, isa, profile)


def command_offsets(cmds: Iterable[Command], isa: IsaSpec) -> list[int]:
    """Word offset of each command in the encoded stream."""
    out, at = [], 0
    for c in cmds:
        out.append(at)
        at += 1 if c.op == UNKNOWN_OP else isa.command(c.op).words
    return out
