"""The `.npu` file's container: framing, section table, metadata strings and checksum, shared by both
formats (npusim's own programs: `program.blob`; a program imported from ST Edge AI Core: its STEDGEAI
section, owned by `importers.stedgeai.stblob`).

Layout (all integers little-endian):

    fixed header (16 B): magic b"NPUS", format_version u16, isa_version u16,
                         file_size u32, section_count u16, reserved u16 (0)
    section table:       section_count x {id u16, reserved u16 (0), offset u32, length u32}
    sections:            each wholly inside the file, none overlapping the header,
                         the table or each other, 8-byte aligned when written

Format 1 holds sections 1-8 (`program.blob` lists their contents); format 2 holds STRINGS, META,
STEDGEAI and CHECKSUM, and its META source is "stedgeai". Each format's sections must all be present,
once. STRINGS: count u32, then count x {len u16, UTF-8 bytes}; META: profile, compiler,
compiler_version, min_runtime as string indices u32, then optionally source u32 (a blob without it is
read as source ""); CHECKSUM: CRC32 (zlib) u32 of the whole file with these 4 bytes read as zero.
Every read is bounded by the section it reads (`SectionReader`).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from ..errors import BlobError
from .model import Header
from .spec import IsaSpec, load_isa

MAGIC = b"NPUS"
FORMAT_VERSION = 1
IMPORTED_FORMAT = 2  # a program imported from ST Edge AI Core (section STEDGEAI)
SUPPORTED_FORMATS = (FORMAT_VERSION, IMPORTED_FORMAT)
IMPORTED_SOURCE = "stedgeai"  # META source of an imported program

S_STRINGS, S_META, S_COMMANDS, S_CONSTANTS, S_CONSTDATA, S_BUFFERS, S_DEBUG, S_CHECKSUM, S_STEDGEAI = range(1, 10)
SECTION_NAMES = {S_STRINGS: "strings", S_META: "meta", S_COMMANDS: "commands", S_CONSTANTS: "constants",
                 S_CONSTDATA: "constdata", S_BUFFERS: "buffers", S_DEBUG: "debug", S_CHECKSUM: "checksum",
                 S_STEDGEAI: "stedgeai"}
_ORDER = (S_STRINGS, S_META, S_COMMANDS, S_CONSTANTS, S_CONSTDATA, S_BUFFERS, S_DEBUG, S_CHECKSUM)
_SECTIONS_OF = {FORMAT_VERSION: _ORDER, IMPORTED_FORMAT: (S_STRINGS, S_META, S_STEDGEAI, S_CHECKSUM)}

_FIXED = struct.Struct("<4sHHIHH")
_ENTRY = struct.Struct("<HHII")
U32_MAX = 0xFFFFFFFF


@dataclass(frozen=True)
class Section:
    id: int
    offset: int
    length: int

    @property
    def name(self) -> str:
        return SECTION_NAMES.get(self.id, f"#{self.id}")

    @property
    def end(self) -> int:
        return self.offset + self.length


@dataclass(frozen=True)
class BlobHeader:
    format_version: int
    isa_version: int
    file_size: int
    sections: tuple[Section, ...]
    profile: str
    compiler: str
    compiler_version: str
    min_runtime: str
    source: str = ""

    def section(self, sid: int) -> Section:
        for s in self.sections:
            if s.id == sid:
                return s
        raise BlobError(f"missing {SECTION_NAMES.get(sid, sid)} section")

    def to_header(self) -> Header:
        return Header(profile=self.profile, compiler=self.compiler, compiler_version=self.compiler_version,
                      isa_version=self.isa_version, min_runtime=self.min_runtime,
                      format_version=self.format_version, source=self.source)


class Strings:
    def __init__(self):
        self.index: dict[str, int] = {}

    def __call__(self, s: str) -> int:
        if not isinstance(s, str):
            raise BlobError(f"expected a string, got {s!r}")
        if s not in self.index:
            if len(s.encode("utf-8")) > 0xFFFF:
                raise BlobError(f"string too long for the blob ({len(s)} characters)")
            self.index[s] = len(self.index)
        return self.index[s]

    def pack(self) -> bytes:
        out = [struct.pack("<I", len(self.index))]
        for s in self.index:
            b = s.encode("utf-8")
            out.append(struct.pack("<H", len(b)) + b)
        return b"".join(out)


def pack_container(fmt: int, isa_version: int, body: dict[int, bytes]) -> bytes:
    """The file: fixed header, section table, the sections of format `fmt` 8-byte aligned, checksum."""
    order = _SECTIONS_OF[fmt]
    body = {**body, S_CHECKSUM: b"\0\0\0\0"}
    offset = _FIXED.size + _ENTRY.size * len(order)
    table, chunks, where = [], [], {}
    for sid in order:
        pad = (-offset) % 8
        chunks.append(b"\0" * pad)
        offset += pad
        where[sid] = offset
        table.append(_ENTRY.pack(sid, 0, offset, len(body[sid])))
        chunks.append(body[sid])
        offset += len(body[sid])
    if offset > U32_MAX:
        raise BlobError(f"program too large for the blob format ({offset} bytes)")
    head = _FIXED.pack(MAGIC, fmt, isa_version, offset, len(order), 0)
    blob = bytearray(head + b"".join(table) + b"".join(chunks))
    struct.pack_into("<I", blob, where[S_CHECKSUM], zlib.crc32(blob))
    return bytes(blob)


def encode_imported(payload: bytes, header: Header, isa: IsaSpec | None = None) -> bytes:
    """A format-2 blob carrying an imported program: `payload` is the STEDGEAI section's content (its
    owner, the importer, versions it); `header` names the target profile and the toolchain."""
    isa = isa or load_isa()
    st = Strings()
    meta = struct.pack("<IIIII", st(header.profile), st(header.compiler), st(header.compiler_version),
                       st(header.min_runtime), st(IMPORTED_SOURCE))
    return pack_container(IMPORTED_FORMAT, isa.version, {S_STRINGS: st.pack(), S_META: meta, S_STEDGEAI: bytes(payload)})


class SectionReader:
    """Bounded reads inside one section; running past its end is a BlobError."""

    def __init__(self, data: bytes, sec: Section):
        self.data, self.pos, self.end, self.name = data, sec.offset, sec.end, sec.name

    def take(self, st: struct.Struct) -> tuple:
        if self.pos + st.size > self.end:
            raise BlobError(f"{self.name} section truncated at byte {self.pos}")
        out = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return out

    def u32(self) -> int:
        return self.take(_U32S)[0]

    def count(self, min_entry: int, what: str) -> int:
        n = self.u32()
        if n * min_entry > self.end - self.pos:
            raise BlobError(f"{self.name} section: {n} {what} do not fit in its {self.end - self.pos} bytes")
        return n

    def done(self) -> None:
        if self.pos != self.end:
            raise BlobError(f"{self.name} section has {self.end - self.pos} unexpected trailing bytes")


_U32S = struct.Struct("<I")
_U16S = struct.Struct("<H")


def as_bytes(data_or_path) -> bytes:
    if isinstance(data_or_path, (bytes, bytearray, memoryview)):
        return bytes(data_or_path)
    path = Path(data_or_path)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise BlobError(f"{path}: no such file") from None
    except OSError as e:
        raise BlobError(f"{path}: cannot read ({e.strerror or e})") from None


def _read_strings(data: bytes, sec: Section) -> list[str]:
    r = SectionReader(data, sec)
    n = r.count(_U16S.size, "strings")
    out = []
    for i in range(n):
        (ln,) = r.take(_U16S)
        if r.pos + ln > r.end:
            raise BlobError(f"strings section: string {i} runs past the section end")
        try:
            out.append(data[r.pos:r.pos + ln].decode("utf-8"))
        except UnicodeDecodeError:
            raise BlobError(f"strings section: string {i} is not valid UTF-8") from None
        r.pos += ln
    r.done()
    return out


def _parse_table(data: bytes) -> tuple[int, int, int, tuple[Section, ...]]:
    if len(data) < _FIXED.size:
        raise BlobError(f"file too short for a blob header ({len(data)} bytes)")
    magic, fmt, isa_v, size, count, reserved = _FIXED.unpack_from(data, 0)
    if magic != MAGIC:
        raise BlobError(f"bad magic {magic!r} (expected {MAGIC!r}): not an npusim blob")
    if fmt not in SUPPORTED_FORMATS:
        raise BlobError(f"unsupported blob format version {fmt} (this npusim reads {SUPPORTED_FORMATS})")
    if size != len(data):
        raise BlobError(f"header says the file has {size} bytes, it has {len(data)} (truncated or padded)")
    if reserved:
        raise BlobError("reserved header field is not zero")
    table_end = _FIXED.size + _ENTRY.size * count
    if table_end > len(data):
        raise BlobError(f"section table ({count} entries) runs past the end of the file")
    secs, seen = [], set()
    for i in range(count):
        sid, res, off, ln = _ENTRY.unpack_from(data, _FIXED.size + i * _ENTRY.size)
        if sid not in SECTION_NAMES:
            raise BlobError(f"section table entry {i}: unknown section id {sid}")
        sec = Section(sid, off, ln)
        if sid in seen:
            raise BlobError(f"duplicate {sec.name} section")
        seen.add(sid)
        if res:
            raise BlobError(f"{sec.name} section: reserved field is not zero")
        if off < table_end or sec.end > len(data):
            raise BlobError(f"{sec.name} section [{off}, {sec.end}) lies outside the file body [{table_end}, {len(data)})")
        secs.append(sec)
    want = _SECTIONS_OF[fmt]
    for sid in want:
        if sid not in seen:
            raise BlobError(f"missing {SECTION_NAMES[sid]} section")
    extra = sorted(seen - set(want))
    if extra:
        raise BlobError(f"{SECTION_NAMES[extra[0]]} section in a format-{fmt} blob")
    ordered = sorted(secs, key=lambda s: (s.offset, s.end))
    for a, b in zip(ordered, ordered[1:]):
        if b.offset < a.end:
            raise BlobError(f"{a.name} section [{a.offset}, {a.end}) overlaps {b.name} section [{b.offset}, {b.end})")
    return fmt, isa_v, size, tuple(secs)


def _check_crc(data: bytes, sec: Section) -> None:
    if sec.length != 4:
        raise BlobError(f"checksum section has {sec.length} bytes, expected 4")
    (stored,) = _U32S.unpack_from(data, sec.offset)
    mv = memoryview(data)  # the CRC over the file with its checksum field zeroed, without copying the file
    actual = zlib.crc32(mv[sec.end:], zlib.crc32(b"\0\0\0\0", zlib.crc32(mv[:sec.offset])))
    if stored != actual:
        raise BlobError(f"checksum mismatch (stored {stored:#010x}, computed {actual:#010x}): file is corrupted")


def _header(data: bytes) -> tuple[BlobHeader, list[str]]:
    fmt, isa_v, size, secs = _parse_table(data)
    hdr = BlobHeader(fmt, isa_v, size, secs, "", "", "", "")
    _check_crc(data, hdr.section(S_CHECKSUM))
    strings = _read_strings(data, hdr.section(S_STRINGS))
    r = SectionReader(data, hdr.section(S_META))
    idx = r.take(struct.Struct("<IIII"))
    if r.pos < r.end:  # the optional source
        idx += r.take(_U32S)
    r.done()
    vals = [string_at(strings, i, "meta") for i in idx]
    return BlobHeader(fmt, isa_v, size, secs, *vals), strings


def string_at(strings: list[str], i: int, where: str) -> str:
    if i >= len(strings):
        raise BlobError(f"{where}: string index {i} out of range ({len(strings)} strings)")
    return strings[i]


def read_header(data_or_path) -> BlobHeader:
    """Header, section table and metadata strings, after checking framing and checksum."""
    return named_header(as_bytes(data_or_path), data_or_path)[0]


def _model_kind(data: bytes, where: str) -> str:
    """What a file that is not a blob is when it is a model npusim compiles ("" otherwise): a TFLite
    flatbuffer carries "TFL3" at byte 4; an ONNX model is a protobuf ModelProto with a graph."""
    if len(data) >= 8 and data[4:8] == b"TFL3":
        return "a TFLite model"
    if where.lower().endswith(".onnx"):
        return "an ONNX model"
    try:
        import onnx

        m = onnx.load_model_from_string(data)
    except Exception:  # noqa: BLE001 - not a protobuf: not an ONNX model
        return ""
    return "an ONNX model" if m.graph.node and m.graph.output else ""


def named_header(data: bytes, source) -> tuple[BlobHeader, list[str]]:
    """`_header` of `data`; when `source` is its path, an error names the file and says when it is a model."""
    try:
        return _header(data)
    except BlobError as e:
        if not isinstance(source, (str, Path)):
            raise
        kind = _model_kind(data, str(source)) if str(e).startswith("bad magic") else ""
        if kind:
            raise BlobError(f"{source}: is {kind}, not a compiled blob: compile it first "
                            f"(npusim compile {source} -o {Path(source).with_suffix('.npu').name})") from None
        raise BlobError(f"{source}: {e}") from None


def is_imported(path) -> bool:
    """Whether the file at `path` starts like a blob carrying an imported program (format 2); the
    whole file is checked when it is read (`read_imported`)."""
    try:
        with open(path, "rb") as f:
            head = f.read(_FIXED.size)
    except OSError:
        return False
    return len(head) == _FIXED.size and head[:4] == MAGIC and _FIXED.unpack(head)[1] == IMPORTED_FORMAT


def read_imported(data_or_path) -> tuple[BlobHeader, memoryview]:
    """(header, the STEDGEAI section's bytes) of a format-2 blob, after checking its framing, checksum
    and metadata; anything else is a BlobError."""
    data = as_bytes(data_or_path)
    hdr, _ = named_header(data, data_or_path)
    if hdr.format_version != IMPORTED_FORMAT or hdr.source != IMPORTED_SOURCE:
        where = f"{data_or_path}: " if isinstance(data_or_path, (str, Path)) else ""
        raise BlobError(f"{where}a blob of npusim's own program, not an imported ST Edge AI Core program")
    sec = hdr.section(S_STEDGEAI)
    return hdr, memoryview(data)[sec.offset:sec.end]
