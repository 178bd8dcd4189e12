"""Epoch-controller programs of ST Edge AI Core (`*_ecblobs.h`): the container read and decoded.

`read_ecblobs(path)` reads every `uint64_t` blob array of the header with tree-sitter's C grammar and
decodes it into an `EcProgram`: its 32-bit instructions (two per array word, low half first), the
relocations of a relocatable binary (symbol and offset kept on the value they patch) and its epochs
(one per label, with the polls that wait for it to end). Reading a program against the register map
(listing, register names, rule checks) is `ec_registers.py`; lifting its epochs to `model` records is
`ec_lift.py` (processing units: `ec_units.py`).

The encoding and the container are data: `isa/stedgeai_ec.toml`. A malformed blob
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
from . import csource

MASK32 = 0xFFFFFFFF


# ------------------------------------------------------------------------------------------ specs
def bit_range(msb_lsb) -> tuple[int, int]:
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
        fields = {k: bit_range(v) for k, v in o.items() if isinstance(v, list)}
        opcodes[o["code"]] = OpcodeSpec(name, o["code"], o["listing"], fields, o["data_words"])
    unit_shift, unit_mask = bit_range(raw["opcode"]["write"]["unit"])
    kinds: list = [None] * (unit_mask + 1)
    for kind, first, count in raw["units"]["blocks"]:
        for i in range(count):
            kinds[first + i] = (kind, i)
    names = tuple(f"{k}{i}" if k else f"UNIT{n}" for n, (k, i) in enumerate(x or ("", 0) for x in kinds))
    op_shift, op_mask = bit_range(raw["instruction"]["opcode"])
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
    for suffix in ("_reloc", "_binary", "_ptr", "_address"):
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
