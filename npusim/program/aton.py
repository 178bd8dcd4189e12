"""ATON's register map (top-level `isa/aton/*.toml`) as frozen records.

ATON is the STM32N6 NPU's hardware: units (stream engines, convolution
accelerators, the stream switch...) at 4 KiB apart, each a bank of 32-bit
registers. A unit's *number* is its offset from the NPU base / 0x1000; a
register's *word index* is its byte offset / 4 (the epoch controller's
instructions name registers that way).

    m = load_aton_map()
    kind, index = m.unit_of(5)                 # ("STRENG", 0)
    reg = m.register("STRENG", 2)              # ADDR
    m.decode_fields("STRENG", 3, 0x00100020)   # {"WIDTH": 32, "HEIGHT": 16}
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ..errors import IsaSpecError

_ACCESS = ("rw", "ro", "wo")
_FIELD_KEYS = {"name", "lsb", "width", "reset", "access", "meaning", "locked_while_running", "self_clearing",
               "w1c", "ro_mask", "align", "min", "max", "valid", "refused", "ignored_mask", "zero_when", "values",
               "reset_by_instance"}
_REGISTER_KEYS = {"name", "offset", "meaning", "fields", "dest", "dest_port"}
_INSTANCE_KEYS = {"name", "index", "unit", "clock_gate", "clock_bit", "irq"}
_UNIT_KEYS = {"kind", "meaning", "version", "size", "instances", "register", "window", "values"}


@dataclass(frozen=True)
class AtonField:
    """A bit field of a register, and the rules the hardware applies to it."""

    name: str
    lsb: int
    width: int
    reset: int
    access: str  # "rw", "ro" (read-only) or "wo" (write-only)
    meaning: str
    locked_while_running: bool = False  # read-only while the unit's CTRL.RUNNING is set
    self_clearing: bool = False  # returns to 0 by itself after a write of 1
    w1c: bool = False  # status bit: writing 1 clears it, 0 has no effect
    ro_mask: int = 0  # bits of the field that writes cannot change
    align: int = 1  # the value must be a multiple of this
    min: int | None = None
    max: int | None = None
    valid: tuple[int, ...] | None = None  # the only documented values
    refused: bool = False  # the hardware refuses (does not take) values outside min/max/align
    ignored_mask: int = 0  # bits of the field the hardware ignores
    zero_when: str | None = None  # "REG.FIELD" of the same unit: when that is 1, this field reads as 0
    values: str | None = None  # name of a value set of AtonMap.values
    reset_by_instance: tuple[int, ...] | None = None

    @property
    def msb(self) -> int:
        return self.lsb + self.width - 1

    @property
    def mask(self) -> int:
        """The field's bits in the register."""
        return ((1 << self.width) - 1) << self.lsb

    def get(self, reg_value: int) -> int:
        return (reg_value >> self.lsb) & ((1 << self.width) - 1)

    def put(self, reg_value: int, value: int) -> int:
        """`reg_value` with this field set to `value` (which must fit)."""
        if not 0 <= value < 1 << self.width:
            raise ValueError(f"{self.name}: {value} does not fit {self.width} bits")
        return (reg_value & ~self.mask) | (value << self.lsb)

    def violations(self, value: int) -> list[str]:
        """The documented rules `value` breaks (empty if none)."""
        out = []
        if self.min is not None and value < self.min or self.max is not None and value > self.max:
            out.append(f"{self.name}={value} outside {self.min or 0}..{self.max}")
        if self.valid is not None and value not in self.valid:
            out.append(f"{self.name}={value} not one of {list(self.valid)}")
        if value % self.align:
            out.append(f"{self.name}=0x{value:x} not a multiple of {self.align}")
        return out


@dataclass(frozen=True)
class AtonRegister:
    name: str
    offset: int  # bytes from the unit's base
    meaning: str
    fields: tuple[AtonField, ...]
    dest: str | None = None  # stream switch: the unit instance this register feeds
    dest_port: int | None = None

    @property
    def word_index(self) -> int:
        return self.offset // 4

    @property
    def reset(self) -> int:
        v = 0
        for f in self.fields:
            v |= f.reset << f.lsb
        return v

    @property
    def defined_mask(self) -> int:
        """The bits covered by a field."""
        m = 0
        for f in self.fields:
            m |= f.mask
        return m

    def field(self, name: str) -> AtonField:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"{self.name} has no field {name!r}")


@dataclass(frozen=True)
class AtonInstance:
    name: str  # e.g. "STRENG3"
    kind: str  # e.g. "STRENG"
    index: int  # 3
    unit: int  # unit number: offset from the NPU base / 0x1000
    clock_gate: str | None = None  # "REG.FIELD" of CLKCTRL that gates this instance's clock
    clock_bit: int | None = None
    irq: tuple[tuple[str, int], ...] = ()  # (role, INTCTRL line): "main", "err", "noack"


@dataclass(frozen=True)
class AtonUnitKind:
    kind: str
    meaning: str
    version: str
    size: int
    instances: tuple[AtonInstance, ...]
    registers: tuple[AtonRegister, ...]
    windows: tuple[tuple[str, int], ...] = ()  # memory inside the unit's space: (name, byte offset)

    @functools.cached_property
    def by_word(self) -> dict[int, AtonRegister]:
        return {r.word_index: r for r in self.registers}

    @functools.cached_property
    def by_name(self) -> dict[str, AtonRegister]:
        return {r.name: r for r in self.registers}


@dataclass(frozen=True)
class AtonMap:
    size: int  # bytes of the NPU's register space
    unit_size: int
    kinds: dict[str, AtonUnitKind]
    values: dict[str, dict[str, int]]  # value set -> {name: code}
    source: str = ""

    @functools.cached_property
    def units(self) -> dict[int, AtonInstance]:
        """Unit number -> instance."""
        return {i.unit: i for k in self.kinds.values() for i in k.instances}

    @functools.cached_property
    def instances(self) -> dict[str, AtonInstance]:
        """Instance name ("STRENG3") -> instance."""
        return {i.name: i for k in self.kinds.values() for i in k.instances}

    def unit_of(self, number: int) -> tuple[str, int]:
        """(kind, instance index) of unit `number`; KeyError if there is none."""
        try:
            i = self.units[number]
        except KeyError:
            raise KeyError(f"no ATON unit number {number}") from None
        return i.kind, i.index

    def register(self, kind: str, word_index: int) -> AtonRegister | None:
        """The register of `kind` at `word_index`, None if none is there (unknown kind: KeyError)."""
        return self.kinds[kind].by_word.get(word_index)

    def register_named(self, kind: str, name: str) -> AtonRegister:
        return self.kinds[kind].by_name[name]

    def window(self, kind: str, word_index: int) -> str | None:
        """The name of the memory window of `kind` that holds `word_index`, if any."""
        off, best = word_index * 4, None
        for name, start in self.kinds[kind].windows:
            if start <= off < self.kinds[kind].size and (best is None or start > best[1]):
                best = (name, start)
        return best[0] if best else None

    def decode_fields(self, kind: str, word_index: int, value: int) -> dict[str, int]:
        """Each field of the register at `word_index` -> its value in `value`."""
        reg = self._reg(kind, word_index)
        return {f.name: f.get(value) for f in reg.fields}

    def encode_fields(self, kind: str, word_index: int, fields: dict[str, int], base: int | None = None) -> int:
        """A register value from field values; fields not given keep `base` (default: the reset value)."""
        reg = self._reg(kind, word_index)
        v = reg.reset if base is None else base
        for name, x in fields.items():
            v = reg.field(name).put(v, x)
        return v

    def violations(self, kind: str, word_index: int, value: int) -> list[str]:
        """The documented rules a write of `value` to the register breaks."""
        reg = self._reg(kind, word_index)
        return [msg for f in reg.fields for msg in f.violations(f.get(value))]

    def _reg(self, kind: str, word_index: int) -> AtonRegister:
        reg = self.register(kind, word_index)
        if reg is None:
            raise KeyError(f"{kind} has no register at word {word_index} (offset 0x{word_index * 4:03x})")
        return reg


def aton_path() -> Path:
    """The map's folder: shipped package data, or the source checkout's isa/aton."""
    from .spec import isa_file

    return isa_file("aton")


def _read(p: Path) -> dict:
    try:
        return tomllib.loads(p.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise IsaSpecError(f"{p}: cannot load ATON map ({e})") from None


def _keys(where: str, d: dict, allowed: set, required: tuple) -> None:
    extra = set(d) - allowed
    if extra:
        raise IsaSpecError(f"{where}: unknown key(s) {sorted(extra)}")
    for k in required:
        if k not in d:
            raise IsaSpecError(f"{where}: missing {k!r}")


def _field(where: str, d: dict) -> AtonField:
    _keys(where, d, _FIELD_KEYS, ("name", "lsb", "width", "reset", "access", "meaning"))
    d = dict(d)
    for k in ("valid", "reset_by_instance"):
        if k in d:
            d[k] = tuple(d[k])
    f = AtonField(**d)
    if f.width < 1 or f.lsb < 0 or f.lsb + f.width > 32:
        raise IsaSpecError(f"{where}: bits {f.lsb}+{f.width} do not fit 32")
    if f.reset >> f.width or f.access not in _ACCESS:
        raise IsaSpecError(f"{where}: bad reset 0x{f.reset:x} or access {f.access!r}")
    if not f.meaning.strip():
        raise IsaSpecError(f"{where}: empty meaning")
    return f


def _register(where: str, d: dict, unit_size: int) -> AtonRegister:
    _keys(where, d, _REGISTER_KEYS, ("name", "offset", "meaning", "fields"))
    off = d["offset"]
    if off % 4 or not 0 <= off < unit_size:
        raise IsaSpecError(f"{where}: offset 0x{off:x} is not a word inside the unit")
    fields = tuple(_field(f"{where}.{f.get('name')}", f) for f in d["fields"])
    used, names = 0, set()
    for f in fields:
        if used & f.mask:
            raise IsaSpecError(f"{where}.{f.name}: overlaps another field")
        if f.name in names:
            raise IsaSpecError(f"{where}.{f.name}: duplicate field")
        used |= f.mask
        names.add(f.name)
    return AtonRegister(d["name"], off, d["meaning"], fields, d.get("dest"), d.get("dest_port"))


def _unit_kind(p: Path, d: dict, unit_size: int) -> tuple[AtonUnitKind, dict]:
    where = p.name
    _keys(where, d, _UNIT_KEYS, ("kind", "meaning", "version", "size", "instances", "register"))
    kind = d["kind"]
    insts = []
    for i in d["instances"]:
        _keys(f"{where}: instance", i, _INSTANCE_KEYS, ("name", "index", "unit"))
        insts.append(AtonInstance(i["name"], kind, i["index"], i["unit"], i.get("clock_gate"), i.get("clock_bit"),
                                  tuple(sorted(i.get("irq", {}).items(), key=lambda kv: kv[1]))))
    regs = tuple(_register(f"{where}: {kind}.{r.get('name')}", r, d["size"]) for r in d["register"])
    if len({r.offset for r in regs}) != len(regs) or len({r.name for r in regs}) != len(regs):
        raise IsaSpecError(f"{where}: duplicate register offset or name")
    windows = tuple((w["name"], w["offset"]) for w in d.get("window", ()))
    if d["size"] != unit_size:
        raise IsaSpecError(f"{where}: unit size 0x{d['size']:x} differs from 0x{unit_size:x}")
    return AtonUnitKind(kind, d["meaning"], d["version"], d["size"], tuple(insts), regs, windows), d.get("values", {})


@functools.lru_cache(maxsize=4)
def load_aton_map(path: str | None = None) -> AtonMap:
    """Load and check the map in folder `path` (default: the shipped one). Cached; immutable."""
    folder = Path(path) if path else aton_path()
    head = _read(folder / "npu.toml")
    _keys("npu.toml", head, {"size", "unit_size", "unit_files", "values"}, ("size", "unit_size", "unit_files"))
    values = dict(head.get("values", {}))
    kinds: dict[str, AtonUnitKind] = {}
    for name in head["unit_files"]:
        p = folder / f"{name}.toml"
        k, vs = _unit_kind(p, _read(p), head["unit_size"])
        if k.kind in kinds:
            raise IsaSpecError(f"{p.name}: unit kind {k.kind} defined twice")
        kinds[k.kind] = k
        for vname, vset in vs.items():
            if vname in values:
                raise IsaSpecError(f"{p.name}: value set {vname} defined twice")
            values[vname] = vset
    m = AtonMap(head["size"], head["unit_size"], kinds, values, str(folder))
    _check_links(m)
    return m


def _check_links(m: AtonMap) -> None:
    """Cross-file consistency: unit numbers, clock gates, value sets, switch destinations."""
    seen: dict[int, str] = {}
    for k in m.kinds.values():
        for i in k.instances:
            if i.unit in seen or not 0 <= i.unit < m.size // m.unit_size:
                raise IsaSpecError(f"{i.name}: unit number {i.unit} reused or outside the NPU")
            seen[i.unit] = i.name
            if i.clock_gate:
                reg, fld = i.clock_gate.split(".")
                if m.kinds["CLKCTRL"].by_name[reg].field(fld).lsb != i.clock_bit:
                    raise IsaSpecError(f"{i.name}: clock gate {i.clock_gate} is not bit {i.clock_bit}")
        for r in k.registers:
            if r.dest is not None and r.dest not in m.instances:
                raise IsaSpecError(f"{k.kind}.{r.name}: unknown destination {r.dest}")
            for f in r.fields:
                if f.values is not None and f.values not in m.values:
                    raise IsaSpecError(f"{k.kind}.{r.name}.{f.name}: unknown value set {f.values}")
