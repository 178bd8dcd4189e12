"""A `Program` in the `.npu` file (format 1): its sections' contents, encoded and decoded. The framing
(header, section table, strings, checksum) is `program.container`'s.

Format 1's sections (every one must appear exactly once; the framing: `program.container`):
    1 STRINGS    count u32, then count x {len u16, UTF-8 bytes}; other sections name strings by index
    2 META       profile, compiler, compiler_version, min_runtime: 4 x string index u32, then, only for a
                 program not compiled from ONNX, source ("tflite"): 1 string index u32 (a blob without it
                 is read as source ""; ONNX programs keep the 16-byte section older readers expect)
    3 COMMANDS   the command stream, 64-bit LE words
    4 CONSTANTS  count u32, then count x {name u32, pool u32, offset u32, data_offset u32, size u32}
    5 CONSTDATA  raw bytes of all constants (indexed by data_offset/size)
    6 BUFFERS    count u32, then per buffer: name u32, kind u8, dtype u8, layout u8, ndim u8,
                 pool u32, offset u32, size u32, align u32, producer u32, scale f64, zero_point i32,
                 line_stride u32, plane_stride u32, nconsumers u16, ndim x dim u32, nconsumers x u32
    7 DEBUG      count u32, then count x {command index u32, node name u32}
    8 CHECKSUM   CRC32 (zlib) u32 of the whole file with these 4 bytes read as zero
    9 STEDGEAI   a program imported from ST Edge AI Core (`npusim import`): its records as the importer
                 reads them (`npusim.importers.stedgeai.stblob` owns the section's content and version)

A buffer or constant starts inside its `pool` and may run on into the pools that follow it
contiguously with the same perms (npuRAM3..6 act as one 1.75 MiB span); gaps are refused.

`load_blob` checks every field before it returns, and never sizes an allocation by a
field it has not checked against the bytes actually present.
"""

from __future__ import annotations

import struct
from pathlib import Path

from ..errors import BlobError
from .codec import EncodeError, decode, encode_all
from .container import (FORMAT_VERSION, IMPORTED_FORMAT, S_BUFFERS, S_COMMANDS, S_CONSTANTS, S_CONSTDATA, S_DEBUG,
                        S_META, S_STRINGS, U32_MAX, BlobHeader, SectionReader, Strings, as_bytes, named_header,
                        pack_container, read_header, string_at)
from .model import BUFFER_KINDS, Buffer, Constant, Program
from .spec import IsaSpec, load_isa
from .validate import check_versions, mark_hardware_view, resolve_target_profile, validate_program

__all__ = ["BlobHeader", "encode_blob", "load_blob", "read_header"]

_CONST = struct.Struct("<IIIII")
_BUF_HEAD = struct.Struct("<IBBBBIIIIIdiIIH")
_DEBUG = struct.Struct("<II")


def _u32(where: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= U32_MAX:
        raise BlobError(f"{where}={v!r}: must be an integer in [0, 2^32)")
    return v


def _code(isa: IsaSpec, enum: str, where: str, value: str) -> int:
    codes = isa.enums[enum]
    if value not in codes:
        raise BlobError(f"{where}={value!r}: not one of {', '.join(codes)}")
    return codes[value]


def encode_blob(program: Program, profile, isa: IsaSpec | None = None) -> bytes:
    """The blob bytes of `program` for `profile` (deterministic)."""
    isa = isa or load_isa()
    st = Strings()
    h = program.header
    meta = struct.pack("<IIII", st(h.profile), st(h.compiler), st(h.compiler_version), st(h.min_runtime))
    if h.source:
        meta += struct.pack("<I", st(h.source))
    try:
        words = encode_all(program.commands, isa, profile)
    except EncodeError as e:
        raise BlobError(f"cannot encode commands: {e}") from None
    commands = struct.pack(f"<{len(words)}Q", *words)
    consts, data = [struct.pack("<I", len(program.constants))], []
    at = 0
    for c in program.constants:
        where = f"constant {c.name!r}"
        consts.append(_CONST.pack(st(c.name), st(c.pool), _u32(f"{where} offset", c.offset),
                                  _u32(f"{where} data", at), _u32(f"{where} size", len(c.data))))
        data.append(bytes(c.data))
        at += len(c.data)
    bufs = [struct.pack("<I", len(program.buffers))]
    for b in program.buffers:
        where = f"buffer {b.name!r}"
        if b.kind not in BUFFER_KINDS:
            raise BlobError(f"{where} kind={b.kind!r}: not one of {', '.join(BUFFER_KINDS)}")
        if len(b.shape) > 255 or len(b.consumers) > 0xFFFF:
            raise BlobError(f"{where}: too many dimensions or consumers")
        if not -(1 << 31) <= b.zero_point < 1 << 31:
            raise BlobError(f"{where} zero_point={b.zero_point}: out of range")
        bufs.append(_BUF_HEAD.pack(
            st(b.name), BUFFER_KINDS.index(b.kind), _code(isa, "elem", f"{where} dtype", b.dtype),
            _code(isa, "layout", f"{where} layout", b.layout), len(b.shape), st(b.pool),
            _u32(f"{where} offset", b.offset), _u32(f"{where} size", b.size), _u32(f"{where} align", b.align),
            st(b.producer), float(b.scale), int(b.zero_point), _u32(f"{where} line_stride", b.line_stride),
            _u32(f"{where} plane_stride", b.plane_stride), len(b.consumers)))
        bufs.append(b"".join(struct.pack("<I", _u32(f"{where} shape", d)) for d in b.shape))
        bufs.append(b"".join(struct.pack("<I", st(n)) for n in b.consumers))
    dbg = [struct.pack("<I", len(program.debug))]
    for i in sorted(program.debug):
        dbg.append(_DEBUG.pack(_u32("debug command index", i), st(program.debug[i])))
    body = {S_META: meta, S_COMMANDS: commands, S_CONSTANTS: b"".join(consts), S_CONSTDATA: b"".join(data),
            S_BUFFERS: b"".join(bufs), S_DEBUG: b"".join(dbg)}
    body[S_STRINGS] = st.pack()
    return pack_container(FORMAT_VERSION, isa.version, body)


def _read_constants(data, hdr, strings) -> list[Constant]:
    cdata = hdr.section(S_CONSTDATA)
    r = SectionReader(data, hdr.section(S_CONSTANTS))
    out = []
    for i in range(r.count(_CONST.size, "constants")):
        name_i, pool_i, off, doff, size = r.take(_CONST)
        name = string_at(strings, name_i, f"constant {i}")
        where = f"constant {name!r}"
        if doff + size > cdata.length:
            raise BlobError(f"{where}: data [{doff}, {doff + size}) lies outside the {cdata.length}-byte constdata section")
        out.append(Constant(name, string_at(strings, pool_i, where), off,
                            data[cdata.offset + doff:cdata.offset + doff + size]))
    r.done()
    return out


def _read_buffers(data, hdr, strings, isa) -> list[Buffer]:
    r = SectionReader(data, hdr.section(S_BUFFERS))
    out = []
    for i in range(r.count(_BUF_HEAD.size, "buffers")):
        (name_i, kind, dt, lay, ndim, pool_i, off, size, align, prod_i, scale, zp, ls, ps,
         ncons) = r.take(_BUF_HEAD)
        name = string_at(strings, name_i, f"buffer {i}")
        where = f"buffer {name!r}"
        if kind >= len(BUFFER_KINDS):
            raise BlobError(f"{where}: undefined kind code {kind}")
        dtype, layout = isa.enum_name("elem", dt), isa.enum_name("layout", lay)
        if dtype is None or layout is None:
            raise BlobError(f"{where}: undefined {'dtype' if dtype is None else 'layout'} code "
                            f"{dt if dtype is None else lay}")
        if (ndim + ncons) * 4 > r.end - r.pos:
            raise BlobError(f"{where}: shape and consumers run past the buffers section")
        shape = r.take(struct.Struct(f"<{ndim}I")) if ndim else ()
        cons = r.take(struct.Struct(f"<{ncons}I")) if ncons else ()
        out.append(Buffer(name=name, kind=BUFFER_KINDS[kind], pool=string_at(strings, pool_i, where), offset=off, size=size, align=align,
                          shape=tuple(shape), dtype=dtype, layout=layout, producer=string_at(strings, prod_i, where),
                          consumers=tuple(string_at(strings, c, where) for c in cons), scale=scale,
                          zero_point=zp, line_stride=ls, plane_stride=ps))
    r.done()
    return out


def _read_debug(data, hdr, strings, ncommands: int) -> dict[int, str]:
    r = SectionReader(data, hdr.section(S_DEBUG))
    out: dict[int, str] = {}
    for _ in range(r.count(_DEBUG.size, "debug entries")):
        idx, name_i = r.take(_DEBUG)
        if idx >= ncommands:
            raise BlobError(f"debug entry for command {idx}, but the program has {ncommands} commands")
        if idx in out:
            raise BlobError(f"duplicate debug entry for command {idx}")
        out[idx] = string_at(strings, name_i, f"debug entry {idx}")
    r.done()
    return out


def load_blob(data_or_path, profile=None, verify: bool = True, isa: IsaSpec | None = None) -> Program:
    """Decode and validate a blob (bytes or a path); `profile` defaults to the header's target.

    With `verify=False` the ISA verifier is skipped and a word with an undefined opcode decodes
    into an UNKNOWN_OP command (the engine then reports the hardware faults such a program
    causes); framing, checksum, field ranges and `validate_program`'s checks always run.
    """
    isa = isa or load_isa()
    data = as_bytes(data_or_path)
    hdr, strings = named_header(data, data_or_path)
    if hdr.format_version == IMPORTED_FORMAT:
        where = f"{data_or_path}: " if isinstance(data_or_path, (str, Path)) else ""
        raise BlobError(f"{where}holds a program imported from ST Edge AI Core ({hdr.compiler_version}): "
                        f"this command takes npusim's own programs; run, check, inspect, validate, doctor, "
                        f"stress and grid replay it")
    check_versions(hdr, isa)
    profile = resolve_target_profile(hdr, profile)
    csec = hdr.section(S_COMMANDS)
    if csec.length % 8:
        raise BlobError(f"commands section has {csec.length} bytes, not a whole number of 64-bit words")
    words = struct.unpack_from(f"<{csec.length // 8}Q", data, csec.offset)
    commands = decode(words, isa, profile, strict=verify)
    constants = _read_constants(data, hdr, strings)
    buffers = _read_buffers(data, hdr, strings, isa)
    debug = _read_debug(data, hdr, strings, len(commands))
    prog = Program(commands=commands, buffers=buffers, constants=constants, debug=debug, header=hdr.to_header())
    mark_hardware_view(prog, isa, profile)
    validate_program(prog, profile, isa, verify=verify)
    return prog
