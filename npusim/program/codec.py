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


def encode(cmd: Command, isa: IsaSpec, profile) -> list[int]:
    """The 64-bit words of one command."""
    if cmd.op == UNKNOWN_OP:
        word = cmd.args.get("word")
        if isinstance(word, bool) or not isinstance(word, int) or not 0 <= word < 1 << isa.word_bits:
            raise EncodeError(f"{UNKNOWN_OP}: word={word!r} is not a {isa.word_bits}-bit integer")
        code = word & ((1 << isa.opcode_bits) - 1)
        if code in isa.by_opcode or cmd.args.get("opcode", code) != code:
            raise EncodeError(f"{UNKNOWN_OP}: word {word:#x} has a defined opcode or disagrees with opcode=")
        return [word]
    if cmd.op not in isa.by_name:
        raise EncodeError(f"unknown command {cmd.op!r}")
    spec = isa.command(cmd.op)
    unknown = set(cmd.args) - {f.name for f in spec.fields}
    if unknown:
        raise EncodeError(f"{spec.name}: unknown fields {sorted(unknown)}")
    words = [0] * spec.words
    words[0] = spec.opcode
    for f in spec.fields:
        words[f.word] |= encode_field(isa, spec, f, cmd.args, profile) << f.shift
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
    args: dict[str, int | str] = {}
    layout_field = None
    for f in spec.fields:
        raw = (int(words[at + f.word]) >> f.shift) & f.mask
        if f.enum is not None:
            name = isa.enum_name(f.enum, raw)
            if name is None:
                raise BlobError(f"word {at}: {spec.name}.{f.name} has undefined code {raw}")
            args[f.name] = name
            if f.name == "layout":
                layout_field = name
        elif f.signed and raw >> (f.bits - 1):
            args[f.name] = raw - (1 << f.bits)
        else:
            args[f.name] = raw
    for f in spec.fields:
        if f.enum is None and f.unit not in ("count", "raw", "byte"):
            step = isa.unit_bytes(f.unit, profile, layout=layout_field)
            args[f.name] = int(args[f.name]) * step
    return Command(spec.name, args), at + spec.words


def decode(words, isa: IsaSpec, profile, strict: bool = True) -> list[Command]:
    """Decode a whole command stream. Every command is decoded; nothing is executed."""
    cmds, at = [], 0
    while at < len(words):
        c, at = decode_one(words, at, isa, profile, strict)
        cmds.append(c)
    return cmds


def hardware_view(cmd: Command, isa: IsaSpec, profile) -> Command:
    """`cmd` as the hardware reads it: encoded with the spec's rounding, then decoded back."""
    return decode_one(encode(cmd, isa, profile), 0, isa, profile, strict=False)[0]


def command_offsets(cmds: Iterable[Command], isa: IsaSpec) -> list[int]:
    """Word offset of each command in the encoded stream."""
    out, at = [], 0
    for c in cmds:
        out.append(at)
        at += 1 if c.op == UNKNOWN_OP else isa.command(c.op).words
    return out
