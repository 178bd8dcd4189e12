"""Load the ISA spec (top-level `isa/n657.toml`) into frozen records.

Field positions (word, shift) are derived here from declaration order, so the
encoder, decoder, assembler and generated docs all share one layout.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..errors import IsaSpecError

_FIELD_KEYS = {"name", "bits", "unit", "round", "signed", "enum", "ignore_low", "strict", "min", "max_profile", "address", "doc"}


@dataclass(frozen=True)
class FieldSpec:
    name: str
    bits: int
    word: int  # index of the 64-bit word inside the command
    shift: int  # LSB position inside that word
    unit: str  # a key of IsaSpec.units, or "enum"
    round: str = "exact"  # "exact" or "up"
    signed: bool = False
    enum: str | None = None
    ignore_low: str | None = None
    strict: str | None = None
    min: int = 0
    max_profile: str | None = None
    address: bool = False  # the value is a memory address (moved by `relocate`)
    doc: str = ""

    @property
    def mask(self) -> int:
        return (1 << self.bits) - 1


@dataclass(frozen=True)
class CommandSpec:
    name: str
    opcode: int
    words: int
    fields: tuple[FieldSpec, ...]
    doc: str = ""

    def field(self, name: str) -> FieldSpec:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"{self.name} has no field {name!r}")


@dataclass(frozen=True)
class IsaSpec:
    name: str
    version: int
    word_bits: int
    opcode_bits: int
    units: dict  # unit name -> int bytes, or a profile key path (str), or "layout"
    layouts: dict  # layout name -> {code, stride_unit, ...}
    enums: dict  # enum name -> {value name -> code}
    commands: tuple[CommandSpec, ...]
    source: str = ""

    @functools.cached_property
    def by_name(self) -> dict[str, CommandSpec]:
        return {c.name: c for c in self.commands}

    @functools.cached_property
    def by_opcode(self) -> dict[int, CommandSpec]:
        return {c.opcode: c for c in self.commands}

    def command(self, name: str) -> CommandSpec:
        try:
            return self.by_name[name]
        except KeyError:
            raise IsaSpecError(f"unknown command {name!r}") from None

    def enum_name(self, enum: str, code: int) -> str | None:
        for k, v in self.enums[enum].items():
            if v == code:
                return k
        return None

    def dtype_bytes(self, dtype: str) -> int:
        return int(self.enums["dtype_bytes"][dtype])

    def registers(self, counts: dict[str, int]) -> int:
        """Configuration registers of an epoch programming `counts` {command name: how many}: one per
        field of each (the setup cost's unit, hw.profile.Epoch.setup)."""
        return sum(n * len(self.command(name).fields) for name, n in counts.items())

    def unit_bytes(self, unit: str, profile, layout: str | None = None) -> int:
        """Bytes per step of `unit` on `profile`; `layout` resolves the "layout" unit."""
        spec = self.units[unit]
        if spec == "layout":
            if layout is None:
                raise IsaSpecError("unit 'layout' needs the command's layout field")
            return self.unit_bytes(self.layouts[layout]["stride_unit"], profile)
        if isinstance(spec, int):
            return spec
        node = profile
        for part in spec.split("."):
            node = getattr(node, part)
        return int(node)


def _layout_fields(cmd_name: str, raw_fields: list, word_bits: int, opcode_bits: int) -> tuple[tuple[FieldSpec, ...], int]:
    fields, word, pos = [], 0, opcode_bits
    seen = set()
    for raw in raw_fields:
        unknown = set(raw) - _FIELD_KEYS
        if unknown:
            raise IsaSpecError(f"{cmd_name}: field {raw.get('name')!r} has unknown keys {sorted(unknown)}")
        name, bits = raw.get("name"), raw.get("bits")
        if not isinstance(name, str) or name in seen:
            raise IsaSpecError(f"{cmd_name}: bad or duplicate field name {name!r}")
        seen.add(name)
        if not isinstance(bits, int) or not 1 <= bits <= word_bits:
            raise IsaSpecError(f"{cmd_name}.{name}: bits must be 1..{word_bits}")
        if pos + bits > word_bits:
            word, pos = word + 1, 0
        unit = "enum" if "enum" in raw else raw.get("unit", "count")
        fields.append(FieldSpec(name=name, bits=bits, word=word, shift=pos, unit=unit,
                                round=raw.get("round", "exact"), signed=raw.get("signed", False),
                                enum=raw.get("enum"), ignore_low=raw.get("ignore_low"), strict=raw.get("strict"),
                                min=raw.get("min", 0), max_profile=raw.get("max_profile"),
                                address=raw.get("address", False), doc=raw.get("doc", "")))
        pos += bits
    return tuple(fields), word + 1


def isa_file(name: str) -> Path:
    """A file (or folder) of the ISA data: shipped package data, or the source checkout's isa/ folder."""
    try:
        p = Path(str(resources.files("npusim.isa_data") / name))
        if p.exists():
            return p
    except ModuleNotFoundError:
        pass
    return Path(__file__).resolve().parents[2] / "isa" / name


def isa_path() -> Path:
    """The spec file of npusim's own ISA."""
    return isa_file("n657.toml")


@functools.lru_cache(maxsize=8)
def load_isa(path: str | None = None) -> IsaSpec:
    """Load and check the ISA spec (cached; the result is immutable)."""
    p = Path(path) if path else isa_path()
    try:
        raw = tomllib.loads(p.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise IsaSpecError(f"{p}: cannot load ISA spec ({e})") from None
    head = raw["isa"]
    word_bits, opcode_bits = head["word_bits"], head["opcode_bits"]
    units, enums, layouts = raw["units"], raw["enums"], raw["layouts"]
    cmds, opcodes = [], set()
    for rc in raw["command"]:
        name, op = rc["name"], rc["opcode"]
        if op in opcodes or not 0 <= op < 1 << opcode_bits:
            raise IsaSpecError(f"{name}: bad or duplicate opcode {op:#x}")
        opcodes.add(op)
        fields, words = _layout_fields(name, rc.get("fields", []), word_bits, opcode_bits)
        for f in fields:
            if f.unit != "enum" and f.unit not in units:
                raise IsaSpecError(f"{name}.{f.name}: unknown unit {f.unit!r}")
            if f.enum is not None and f.enum not in enums:
                raise IsaSpecError(f"{name}.{f.name}: unknown enum {f.enum!r}")
            for attr in ("ignore_low", "strict"):
                if getattr(f, attr) is not None and getattr(f, attr) not in units:
                    raise IsaSpecError(f"{name}.{f.name}: unknown {attr} unit {getattr(f, attr)!r}")
            if not isinstance(f.address, bool) or (f.address and (f.enum is not None or f.signed)):
                raise IsaSpecError(f"{name}.{f.name}: address must be true/false, on an unsigned non-enum field")
            if f.round not in ("exact", "up"):
                raise IsaSpecError(f"{name}.{f.name}: round must be 'exact' or 'up'")
            if f.unit == "layout" and "layout" not in {g.name for g in fields}:
                raise IsaSpecError(f"{name}.{f.name}: unit 'layout' needs a layout field")
        cmds.append(CommandSpec(name=name, opcode=op, words=words, fields=fields, doc=rc.get("doc", "").strip()))
    for lname, lay in layouts.items():
        if enums["layout"].get(lname) != lay["code"]:
            raise IsaSpecError(f"layouts.{lname}: code disagrees with enums.layout")
    return IsaSpec(name=head["name"], version=head["version"], word_bits=word_bits, opcode_bits=opcode_bits,
                   units=units, layouts=layouts, enums=enums, commands=tuple(cmds), source=str(p))
