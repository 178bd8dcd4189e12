"""Epoch-controller programs of ST Edge AI Core (`*_ecblobs.h`): read, decode, list and lift.

`read_ecblobs(path)` reads every `uint64_t` blob array of the header with tree-sitter's C grammar and
decodes it into an `EcProgram`: its 32-bit instructions (two per array word, low half first), the
relocations of a relocatable binary (symbol and offset kept on the value they patch) and its epochs
(one per label, with the polls that wait for it to end). `disassemble(program)` prints the program
as ST's own listings do. `lift_epochs(program, symbols)` replays the register writes and rebuilds
each epoch's stream engines, stream-switch links, processing units and enabled units as `model`
records.

The encoding and the container are data: `isa/stedgeai_ec.toml`; the registers the lifter reads:
`isa/aton/ec_lift_units.toml`, resolved against the register map of `isa/aton/`. A malformed blob
raises `StImportError` naming the blob and the instruction word.
"""

from __future__ import annotations

import array
import bisect
import functools
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ...errors import StImportError
from ...program.spec import isa_file
from ...program.aton import load_aton_map
from . import csource
from .model import UNIT_KINDS, HwEpoch, Link, Streng, Unit
from .streng import hardware_limit

MASK32 = 0xFFFFFFFF


# ------------------------------------------------------------------------------------------ specs
def _bits(msb_lsb) -> tuple[int, int]:
    """(shift, mask) of an inclusive [msb, lsb] bit range."""
    msb, lsb = msb_lsb
    return lsb, (1 << (msb - lsb + 1)) - 1


@dataclass(frozen=True)
class OpcodeSpec:
    """One instruction kind: its fields as (shift, mask) and the data words that follow it."""

    name: str
    code: int
    listing: str
    fields: dict
    data_words: int | str  # a count, or the name of the field holding it


@dataclass(frozen=True)
class EcSpec:
    """The encoding of `isa/stedgeai_ec.toml`, ready for the decoder."""

    program_magic: int
    max_instructions: int
    binaries: dict  # magic -> {section: header entry index}
    reloc_entry: dict
    max_relocations: int
    opcode_shift: int
    opcode_mask: int
    opcodes: dict  # code -> OpcodeSpec
    layouts: dict  # code -> the decoder's tuple: name and (shift, mask) of each field, data words
    unit_names: tuple  # unit number -> "STRENG3", ...
    unit_kinds: tuple  # unit number -> (kind, index) | None
    end_poll: tuple  # (register, msb, lsb, expected value) of the poll that waits for an epoch's end


@functools.lru_cache(maxsize=2)
def load_ec_spec(path: str | None = None) -> EcSpec:
    """Load the epoch-controller encoding (cached)."""
    p = Path(path) if path else isa_file("stedgeai_ec.toml")
    raw = tomllib.loads(p.read_text())
    cont = raw["container"]
    binaries = {b["magic"]: {k: v for k, v in b.items() if k != "magic"} for b in cont["binary"]}
    reloc = cont["relocation"]
    opcodes = {}
    for name, o in raw["opcode"].items():
        fields = {k: _bits(v) for k, v in o.items() if isinstance(v, list)}
        opcodes[o["code"]] = OpcodeSpec(name, o["code"], o["listing"], fields, o["data_words"])
    unit_shift, unit_mask = _bits(raw["opcode"]["write"]["unit"])
    kinds: list = [None] * (unit_mask + 1)
    for kind, first, count in raw["units"]["blocks"]:
        for i in range(count):
            kinds[first + i] = (kind, i)
    names = tuple(f"{k}{i}" if k else f"UNIT{n}" for n, (k, i) in enumerate(x or ("", 0) for x in kinds))
    op_shift, op_mask = _bits(raw["instruction"]["opcode"])
    end = raw["epochs"]["end_poll"]
    return EcSpec(cont["program_magic"], cont["max_instructions"], binaries,
                  {k: reloc[k] for k in ("entry_words", "name", "count", "list")}, reloc["max_relocations"],
                  op_shift, op_mask, opcodes, {c: _layout(o) for c, o in opcodes.items()}, names, tuple(kinds),
                  (end["reg"], *end["field"], end["value"]))


def _layout(o: OpcodeSpec) -> tuple:
    """The decoder's view of an opcode: name, (shift, mask) of unit, register, high and low bit of
    the field (a single bit's number for both), the value inside the instruction, the data-word
    count field, and the fixed data-word count. A mask of 0: the field is absent."""
    f, none = o.fields, (0, 0)
    high = f.get("msb", f.get("bit", none))
    low = f.get("lsb", f.get("bit", none))
    count = f[o.data_words] if isinstance(o.data_words, str) else none
    fixed = o.data_words if isinstance(o.data_words, int) else 0
    return (o.name, f.get("unit", none), f.get("reg", none), high, low, f.get("value", none), count, fixed)


# ------------------------------------------------------------------------------------- the model
class EcInstruction(NamedTuple):
    """One decoded instruction.

    `index`: its word index in the program (0 = the first word after the magic and the count).
    `values`: the values written (write: one; burst: one per register; writebit: the bit), the
    expected value of a poll, or the number of a label / irq. `relocs`: (position in `values`,
    symbol) for each value a relocation adds a symbol's address to; the value is then the offset.
    """

    index: int
    op: str  # write | writebit | burst | burstinc | poll | irq | label
    unit: int = 0
    reg: int = 0
    msb: int = 31
    lsb: int = 0
    values: tuple[int, ...] = ()
    timeout: int = 0
    relocs: tuple[tuple[int, str], ...] = ()

    @property
    def words(self) -> int:
        """Words the instruction occupies, data words included."""
        return 1 + {"write": 1, "poll": 2, "burst": len(self.values), "burstinc": len(self.values)}.get(self.op, 0)


@dataclass(frozen=True)
class EcRelocation:
    """A relocation of a relocatable blob: the symbol id of the table (`_user_io_input_0`, as ST's
    listings print it), the C symbol the runtime adds (`_mem_pool__user_io_input_0_<network>`, ""
    when the header does not name it) and the program words it patches."""

    symbol: str
    c_symbol: str
    words: tuple[int, ...]


@dataclass(frozen=True)
class EcEpoch:
    """One epoch: the instructions from its label up to the next label (`start`, `end` index
    `EcProgram.instructions`). `end_polls`: positions of the polls that wait for a unit to stop
    running, the end of the epoch's work; `waits`: the units they wait for."""

    number: int
    start: int
    end: int
    end_polls: tuple[int, ...] = ()
    waits: tuple[int, ...] = ()


@dataclass(frozen=True)
class EcProgram:
    """One blob: `symbol` is ST's blob name (`_ec_blob_1`, `_ec_blob_reid_99`), the name the
    epoch-block table's `blob_address` gives without a `_reloc` / `_ptr` / `_address` suffix."""

    symbol: str
    magic: int  # the container's first word: program magic, or a relocatable binary's magic
    count: int  # instruction words (the program's own count)
    instructions: tuple[EcInstruction, ...]
    epochs: tuple[EcEpoch, ...]
    relocations: tuple[EcRelocation, ...] = ()
    preamble: int = 0  # instructions before the first label (they belong to no epoch)

    @property
    def relocatable(self) -> bool:
        return bool(self.relocations) or self.magic != load_ec_spec().program_magic

    def epoch_instructions(self, epoch: EcEpoch) -> tuple[EcInstruction, ...]:
        return self.instructions[epoch.start:epoch.end]


# ---------------------------------------------------------------------------------- the C header
def read_c_arrays(path: str | Path) -> tuple[dict[str, list[int]], dict[str, str]]:
    """The `uint64_t` arrays with initializers of a C file, by name, and its object-like macros'
    bodies by name (raw text; the relocation base symbols are read from them)."""
    path = Path(path)
    try:
        src = path.read_bytes()
    except OSError as e:
        raise StImportError(f"{path}: cannot read ({e.strerror})") from None
    arrays, macros = csource.integer_arrays(src, str(path), ("uint64_t",))
    return {name: values for name, (_, values) in arrays.items()}, macros


def _macro_symbol(body: str) -> str:
    """The last identifier of a macro body such as `((unsigned char *)_mem_pool__x_Default)`."""
    tree = csource.parser().parse(b"void *x = " + body.encode() + b";")
    idents = []
    stack = [tree.root_node]
    while stack:
        n = stack.pop()
        if n.type == "identifier":
            idents.append((n.start_byte, n.text.decode()))
        stack.extend(n.children)
    idents = [s for _, s in sorted(idents) if s != "x"]
    return idents[-1] if idents else ""


# -------------------------------------------------------------------------------------- decoding
def _words32(words64: list[int]) -> list[int]:
    """The 32-bit halves of 64-bit words, low half first."""
    try:
        a = array.array("Q", words64)
    except OverflowError:
        raise StImportError("blob word wider than 64 bits") from None
    if sys.byteorder == "big":
        a.byteswap()
    b = array.array("I", a.tobytes())
    if sys.byteorder == "big":
        b.byteswap()
    return b.tolist()


def _fail(where: str, msg: str):
    raise StImportError(f"{where}: {msg}")


def _relocations(where: str, u: list[int], table_byte: int, end_byte: int, spec: EcSpec) -> list[tuple[str, list[int]]]:
    """(symbol, program word indices) of each relocation of a binary's table."""
    if table_byte % 4 or not 0 < table_byte < end_byte <= 4 * len(u):
        _fail(where, f"relocation table offset {table_byte:#x} outside the binary")
    base = table_byte // 4
    n = u[base]
    ent = spec.reloc_entry
    if n > spec.max_relocations or base + 1 + ent["entry_words"] * n > len(u):
        _fail(where, f"relocation count {n} runs past the binary")
    out = []
    for k in range(n):
        row = base + 1 + ent["entry_words"] * k
        name_byte = table_byte + u[row + ent["name"]]
        count, list_byte = u[row + ent["count"]], table_byte + u[row + ent["list"]]
        if list_byte % 4 or list_byte // 4 + count > len(u):
            _fail(where, f"relocation {k}: its list of {count} words runs past the binary")
        raw = b"".join(x.to_bytes(4, "little") for x in u[name_byte // 4:name_byte // 4 + 64])
        raw = raw[name_byte % 4:]
        if b"\0" not in raw:
            _fail(where, f"relocation {k}: symbol name is not terminated")
        name = raw[:raw.index(b"\0")].decode("ascii", "replace")
        if not (name.isascii() and name.isidentifier()):
            _fail(where, f"relocation {k}: symbol name {name[:40]!r} is not a C identifier")
        out.append((name, u[list_byte // 4:list_byte // 4 + count]))
    return out


def _split_container(where: str, words64: list[int], spec: EcSpec):
    """(magic, program words after magic and count, relocations) of a blob array."""
    u = _words32(words64)
    if not u:
        _fail(where, "empty blob")
    magic = u[0]
    relocs: list = []
    start = 0
    if magic in spec.binaries:
        head = spec.binaries[magic]
        top = max(head.values())
        if len(u) <= top:
            _fail(where, "relocatable header runs past the blob")
        offs = {k: u[i] for k, i in head.items()}
        prog_byte = offs["program"]
        if prog_byte % 4 or not 0 < prog_byte < 4 * len(u):
            _fail(where, f"program offset {prog_byte:#x} outside the binary")
        if offs.get("patch_table"):
            _fail(where, "patch table (a blob patched at run time) is not supported")
        if offs.get("reloc_table"):
            ends = [v for k, v in offs.items() if k != "reloc_table" and v > offs["reloc_table"]]
            relocs = _relocations(where, u, offs["reloc_table"], min(ends, default=4 * len(u)), spec)
        start = prog_byte // 4
    if u[start] != spec.program_magic:
        _fail(where, f"word {start}: magic {u[start]:#010x} is neither a program ({spec.program_magic:#010x}) nor a "
                     f"relocatable binary ({', '.join(f'{m:#010x}' for m in spec.binaries)})")
    if start + 1 >= len(u):
        _fail(where, "program has no instruction count")
    count = u[start + 1]
    if count > spec.max_instructions or start + 2 + count > len(u):
        _fail(where, f"instruction count {count} runs past the blob ({len(u) - start - 2} words)")
    return magic, u[start + 2:start + 2 + count], relocs


def decode_program(symbol: str, words64: list[int], c_symbols: dict[str, str] | None = None,
                   where: str = "") -> EcProgram:
    """Decode one blob array (plain program or relocatable binary). `c_symbols` maps a relocation
    id to the C symbol the runtime adds to it."""
    spec = load_ec_spec()
    where = f"{where}: {symbol}" if where else symbol
    magic, prog, relocs = _split_container(where, words64, spec)
    n = len(prog)
    op_shift, op_mask = spec.opcode_shift, spec.opcode_mask
    layouts = spec.layouts
    insts: list[EcInstruction] = []
    starts: list[int] = []
    append, start = insts.append, starts.append
    i = 0
    while i < n:
        w = prog[i]
        lay = layouts.get((w >> op_shift) & op_mask)
        if lay is None:
            _fail(where, f"instruction word {i}: unknown opcode {(w >> op_shift) & op_mask:#x} ({w:#010x})")
        name, (us, um), (rs, rm), (hs, hm), (ls, lm), (vs, vm), (cs, cm), nd = lay
        if cm:
            nd = (w >> cs) & cm
            if i + 1 + nd > n:
                _fail(where, f"instruction word {i}: {name} of {nd} data words runs past the program's {n} words")
        elif i + 1 + nd > n:
            _fail(where, f"instruction word {i}: {name} needs {nd} data words, past the program's {n} words")
        msb = (w >> hs) & hm if hm else 31
        lsb = (w >> ls) & lm if lm else 0
        if nd == 0:
            ins = EcInstruction(i, name, (w >> us) & um, (w >> rs) & rm, msb, lsb, ((w >> vs) & vm,))
        elif name == "poll":
            ins = EcInstruction(i, name, (w >> us) & um, (w >> rs) & rm, msb, lsb, (prog[i + 2],), prog[i + 1])
        else:
            ins = EcInstruction(i, name, (w >> us) & um, (w >> rs) & rm, msb, lsb, tuple(prog[i + 1:i + 1 + nd]))
        append(ins)
        start(i)
        i += 1 + nd
    relocations = _apply_relocations(where, insts, starts, relocs, c_symbols or {})
    epochs, preamble = _epochs(insts)
    return EcProgram(symbol, magic, n, tuple(insts), epochs, relocations, preamble)


def _apply_relocations(where, insts, starts, relocs, c_symbols) -> tuple[EcRelocation, ...]:
    """Attach each relocated word to the value it holds; only written values can be relocated."""
    by_inst: dict[int, list] = {}
    out = []
    for name, words in relocs:
        for wi in words:
            k = bisect.bisect_right(starts, wi) - 1
            ins = insts[k] if k >= 0 else None
            pos = wi - ins.index - 1 if ins else -1
            if ins is None or ins.op not in ("write", "burst", "burstinc") or not 0 <= pos < len(ins.values):
                _fail(where, f"instruction word {wi}: relocation {name} patches a word that is not a written value")
            by_inst.setdefault(k, []).append((pos, name))
        out.append(EcRelocation(name, c_symbols.get(name, ""), tuple(words)))
    for k, rs in by_inst.items():
        ins = insts[k]
        insts[k] = ins._replace(relocs=tuple(sorted(rs)))
    return tuple(out)


def _epochs(insts) -> tuple[tuple[EcEpoch, ...], int]:
    """One epoch per label, up to the next; and the number of instructions before the first."""
    end_poll = load_ec_spec().end_poll
    labels = [k for k, ins in enumerate(insts) if ins.op == "label"]
    epochs = []
    for j, k in enumerate(labels):
        end = labels[j + 1] if j + 1 < len(labels) else len(insts)
        polls = [p for p in range(k + 1, end)
                 if insts[p].op == "poll" and (insts[p].reg, insts[p].msb, insts[p].lsb, insts[p].values[0]) == end_poll]
        epochs.append(EcEpoch(insts[k].values[0], k, end, tuple(polls), tuple(insts[p].unit for p in polls)))
    return tuple(epochs), (labels[0] if labels else len(insts))


def blob_key(name: str) -> str:
    """ST's blob name from an array or alias name: `_ec_blob_1_reloc`, `_ec_blob_reid_99_ptr`,
    `_ec_blob_reid_99_address` -> `_ec_blob_1`, `_ec_blob_reid_99`."""
    for suffix in ("_reloc", "_ptr", "_address"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def ecblob_words(path: str | Path) -> dict[str, tuple[tuple[int, ...], dict[str, str]]]:
    """{ST's blob name (`blob_key`): (its 64-bit words, {relocation id: C symbol})} of a `*_ecblobs.h`.

    A `uint64_t` array is a blob when it starts with the program magic or a relocatable binary's
    magic; other arrays (the runtime copies' storage, base-address slots) are skipped. Relocation
    ids are paired with the C symbols of the header's `<blob>_<id>_BASE_SYMBOL` macros.
    """
    spec = load_ec_spec()
    arrays, macros = read_c_arrays(path)
    out: dict = {}
    for name, words in arrays.items():
        if not words or (words[0] & MASK32) not in (spec.program_magic, *spec.binaries):
            continue
        key = blob_key(name)
        prefix, suffix = key + "_", "_BASE_SYMBOL"
        out[key] = (tuple(words), {m[len(prefix):-len(suffix)]: _macro_symbol(body) for m, body in macros.items()
                                   if m.startswith(prefix) and m.endswith(suffix)})
    if not out:
        raise StImportError(f"{path}: no epoch-controller blob (no uint64_t array starting with a blob magic)")
    return out


def decode_programs(blobs: dict, where: str = "") -> dict[str, EcProgram]:
    """Every program of `ecblob_words`'s result, decoded, by name."""
    return {key: decode_program(key, list(words), c_symbols, where=where) for key, (words, c_symbols) in blobs.items()}


def read_ecblobs(path: str | Path) -> dict[str, EcProgram]:
    """Every epoch-controller blob of a `*_ecblobs.h`, decoded, by ST's blob name (`blob_key`)."""
    return decode_programs(ecblob_words(path), where=str(path))


# ---------------------------------------------------------------------------------- disassembly
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


# --------------------------------------------------------------------------------------- lifting
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
        fields[key] = (regs[reg], *_bits(bits))
    first = next(n for n, k in enumerate(ec.unit_kinds) if k and k[0] == "STRENG")
    count = sum(1 for k in ec.unit_kinds if k and k[0] == "STRENG")
    sw = raw["strswitch"]
    kinds = _load_unit_rules(raw.get("units", {}), raw["ctrl"])
    rules = tuple(kinds.get(k[0]) if k else None for k in ec.unit_kinds)
    return LiftSpec(raw["ctrl"]["reg"], raw["ctrl"]["enable"], raw["ctrl"]["config_clear"], first, count, regs,
                    {regs[k]: v for k, v in st["reset"].items()}, fields, sw["unit"], sw["first_destination_reg"],
                    _ports(sw["destinations"]), _ports(sw["sources"]),
                    {k: _bits(v) for k, v in sw["fields"].items()}, ec.unit_kinds, _register_names(raw), rules,
                    tuple(r.window if r else REGISTERS_PER_UNIT for r in rules))


def _register_names(raw: dict) -> dict:
    names = {("STRENG", reg): name for name, reg in raw["streng"]["registers"].items()}
    sw = raw["strswitch"]
    for k, (kind, index, port) in enumerate(_ports(sw["destinations"])):
        names[("STRSWITCH", sw["first_destination_reg"] + k)] = f"DST_{kind}{index}_{port}"
    gates = raw["clock_gates"]
    names[("CLKCTRL", gates["reg"])] = "BGATES"
    return names


REGISTERS_PER_UNIT = 1024  # the instruction's register field is 10 bits


# ------------------------------------------------------------------------------ processing units
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


def _load_unit_rules(raw: dict, ctrl: dict) -> dict:
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


class _UnitState:
    """A unit's memory (coefficients, function tables) as the program leaves it, by memory name,
    and the entries the current epoch wrote."""

    __slots__ = ("words", "written")

    def __init__(self, rules: UnitRules):
        self.words = {name: [0] * (entries * per) for name, _, entries, per, _ in rules.memory}
        self.written = {name: 0 for name in self.words}


def _write_memory(rules: UnitRules, state: _UnitState, regs: list, written) -> None:
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


def _lift_unit(rules: UnitRules, index: int, regs: list, state: _UnitState | None) -> Unit:
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
        self.states = {u: _UnitState(r) for u, r in enumerate(lift.unit_rules) if r is not None and r.memory}

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
                _write_memory(rules_of[unit], rf.states[unit], regs, written)
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
            units.append(_lift_unit(rf.rules[unit], lift.unit_kinds[unit][1], rf.values[unit], rf.states.get(unit)))
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
