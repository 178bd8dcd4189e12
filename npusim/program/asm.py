"""Text assembly of programs: `disassemble(program, profile)` and `assemble(text, profile)`.

    .header profile=n657 compiler=npusim compiler_version="0.1.0" min_runtime="0.1.0"
    .buffer name=x kind=input pool=npuRAM3 offset=0x0 size=3072 align=128 shape=[1,3,32,32] ...
    .const name=w0 pool=octoFlash offset=0x0 size=40
    .data 0a0b0c...                      ; hex bytes of the constant above, any number of lines
    .layer conv1                         ; debug name (ONNX node) of the next command
    EPOCH id=0
    SE engine=0 dir=read ... s1=896      ; hw: s1=7 (granule 128 B)
    END

Command values are the decoded view, in bytes (what the hardware uses); the trailing
comment shows the stored hardware units. `;` starts a comment. Values are bare tokens,
integers (decimal or 0x hex), JSON strings ("a b") or JSON lists ([1,3,32,32]).
`encode_blob(assemble(disassemble(p)))` equals `encode_blob(p)` byte for byte.
"""

from __future__ import annotations

import json
import re
from dataclasses import fields as dc_fields

from ..errors import AssemblyError, NpusimError
from .codec import (
    UNKNOWN_OP,
    Command,
    EncodeError,
    decode,
    encode,
    encode_all,
    field_unit_bytes,
)
from .model import Buffer, Constant, Header, Program
from .spec import IsaSpec, load_isa
from .validate import resolve_target_profile

_BARE = re.compile(r"^[A-Za-z0-9_./:+-]+$")
_HEX_WIDTH = 32  # bytes per .data line
_HEADER_KEYS = ("profile", "compiler", "compiler_version", "isa_version", "min_runtime", "format_version")
_BUFFER_KEYS = tuple(f.name for f in dc_fields(Buffer))


def _value(v) -> str:
    if isinstance(v, str):
        return v if _BARE.match(v) and not _looks_numeric(v) else json.dumps(v)
    if isinstance(v, tuple):
        return json.dumps(list(v), separators=(",", ":"))
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _looks_numeric(s: str) -> bool:
    return bool(re.match(r"^[+-]?(\d|0x)", s))


def _kv(pairs) -> str:
    return " ".join(f"{k}={_value(v)}" for k, v in pairs)


def _is_address(f) -> bool:
    return f.unit in ("byte", "limit") and f.name != "run"


def _hw_comment(isa: IsaSpec, cmd: Command, profile) -> str:
    spec = isa.command(cmd.op)
    notes = []
    for f in spec.fields:
        if f.enum is not None or f.unit in ("count", "raw"):
            continue
        v = cmd.args[f.name]
        if f.unit != "byte":
            step = field_unit_bytes(isa, f, cmd.args, profile)
            unit = f.unit if f.unit != "layout" else isa.layouts[cmd.args["layout"]]["stride_unit"]
            if step > 1 and v:
                q = v // step
                notes.append(f"{f.name}={q:#x} ({unit} {step} B)" if _is_address(f) else f"{f.name}={q} ({unit} {step} B)")
        if f.ignore_low is not None:
            step = isa.unit_bytes(f.ignore_low, profile)
            if v % step:
                notes.append(f"{f.name} low bits ignored -> {v - v % step:#x}")
    return f"  ; hw: {', '.join(notes)}" if notes else ""


def format_command(cmd: Command, isa: IsaSpec, profile) -> str:
    """One assembly line for a decoded command (with its hardware-unit comment)."""
    if cmd.op == UNKNOWN_OP:
        return f"{UNKNOWN_OP} opcode={cmd.args['opcode']:#04x} word={cmd.args['word']:#x}  ; not an ISA opcode"
    spec = isa.command(cmd.op)
    parts = [cmd.op]
    for f in spec.fields:
        v = cmd.args[f.name]
        parts.append(f"{f.name}={v:#x}" if _is_address(f) and isinstance(v, int) else f"{f.name}={v}")
    return " ".join(parts) + _hw_comment(isa, cmd, profile)


def disassemble_commands(commands, debug: dict, isa: IsaSpec, profile) -> list[str]:
    """Lines for decoded commands, each preceded by its `.layer` directive if it has one."""
    out = []
    for i, c in enumerate(commands):
        if i in debug:
            out.append(f".layer {_value(debug[i])}")
        out.append(format_command(c, isa, profile))
    return out


def disassemble(program: Program, profile, isa: IsaSpec | None = None) -> str:
    """Assembly text of `program`, commands shown as the hardware decodes them."""
    isa = isa or load_isa()
    try:
        cmds = decode(encode_all(program.commands, isa, profile), isa, profile, strict=False)
    except EncodeError as e:
        raise AssemblyError(f"cannot disassemble: {e}") from None
    h = program.header
    lines = [f"; npusim assembly, ISA {isa.name} v{isa.version}",
             ".header " + _kv((k, getattr(h, k)) for k in _HEADER_KEYS + (("source",) if h.source else ()))]
    for b in program.buffers:
        lines.append(".buffer " + _kv((k, getattr(b, k)) for k in _BUFFER_KEYS))
    for c in program.constants:
        lines.append(".const " + _kv((("name", c.name), ("pool", c.pool), ("offset", c.offset), ("size", len(c.data)))))
        data = bytes(c.data)
        for at in range(0, len(data), _HEX_WIDTH):
            lines.append(".data " + data[at:at + _HEX_WIDTH].hex())
    lines.extend(disassemble_commands(cmds, program.debug, isa, profile))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- assembly

_DECODER = json.JSONDecoder()
_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=")


_SPACE = re.compile(r"\s*")  # `\s` is exactly str.isspace
_WORD = re.compile(r"[^\s;]*")  # a bare word or value: up to whitespace or a `;` comment
_PLAIN = re.compile(r"[^=;\"\[]*")  # no key, comment or quoted value anywhere


def _tokens(line: str, lineno: int) -> list[str | tuple[str, object]]:
    """Split a line into words and (key, value) pairs; stops at a `;` comment."""
    if _PLAIN.fullmatch(line):  # bare words only (a `.data` line): str.split splits on what \s matches
        return line.split()
    out, n = [], len(line)
    i = _SPACE.match(line).end()
    while i < n and line[i] != ";":
        m = _KEY.match(line, i)
        if m is None:
            if line[i] in "\"[":
                val, i = _json_at(line, i, lineno)
                out.append(val)
            else:
                j = _WORD.match(line, i).end()
                out.append(line[i:j])
                i = j
        else:
            key, i = m.group(1), m.end()
            if i < n and line[i] in "\"[":
                val, i = _json_at(line, i, lineno)
            else:
                j = _WORD.match(line, i).end()
                val, i = _scalar(line[i:j]), j
            out.append((key, val))
        i = _SPACE.match(line, i).end()
    return out


def _json_at(line: str, i: int, lineno: int):
    try:
        return _DECODER.raw_decode(line, i)
    except json.JSONDecodeError as e:
        raise AssemblyError(f"line {lineno}: bad quoted value ({e.msg})") from None


def _scalar(tok: str):
    if re.fullmatch(r"[+-]?0[xX][0-9a-fA-F]+", tok):
        return int(tok, 16)
    if re.fullmatch(r"[+-]?\d+", tok):
        return int(tok)
    if re.fullmatch(r"[+-]?(\d+\.\d*|\d*\.\d+|\d+)([eE][+-]?\d+)?|[+-]?inf|nan", tok):
        return float(tok)
    return tok


def _pairs(toks, lineno: int, what: str) -> dict:
    out = {}
    for t in toks:
        if not isinstance(t, tuple):
            raise AssemblyError(f"line {lineno}: {what}: expected key=value, got {t!r}")
        k, v = t
        if k in out:
            raise AssemblyError(f"line {lineno}: {what}: {k} given twice")
        out[k] = v
    return out


def _typed(lineno: int, what: str, key: str, value, kind):
    if kind is int and isinstance(value, int):
        return value
    if kind is float and isinstance(value, (int, float)):
        return float(value)
    if kind is str:
        return value if isinstance(value, str) else str(value)
    if kind is tuple and isinstance(value, list):
        want = str if key == "consumers" else int
        if all(isinstance(x, want) and not isinstance(x, bool) for x in value):
            return tuple(value)
        raise AssemblyError(f"line {lineno}: {what} {key}={value!r}: expected a list of {want.__name__}")
    raise AssemblyError(f"line {lineno}: {what} {key}={value!r}: expected {kind.__name__}")


def _build(cls, kv: dict, lineno: int, what: str, required=()):
    types = {f.name: f.type for f in dc_fields(cls)}
    for k in kv:
        if k not in types:
            raise AssemblyError(f"line {lineno}: {what}: unknown key {k!r}")
    for k in required:
        if k not in kv:
            raise AssemblyError(f"line {lineno}: {what}: missing {k}=")
    args = {}
    for k, v in kv.items():
        t = types[k]
        kind = int if t in ("int", int) else float if t in ("float", float) else str if t in ("str", str) else tuple
        args[k] = _typed(lineno, what, k, v, kind)
    return cls(**args)


def _command(toks, lineno: int, isa: IsaSpec, profile, strict: bool, notes: list | None) -> Command:
    op = toks[0]
    if not isinstance(op, str) or (op not in isa.by_name and op != UNKNOWN_OP):
        raise AssemblyError(f"line {lineno}: unknown command or directive {op!r}")
    kv = _pairs(toks[1:], lineno, op)
    names = ["opcode", "word"] if op == UNKNOWN_OP else [f.name for f in isa.command(op).fields]
    for k in kv:
        if k not in names:
            raise AssemblyError(f"line {lineno}: {op} has no field {k!r}")
    for k in names:
        if k not in kv:
            raise AssemblyError(f"line {lineno}: {op}: missing field {k}=")
    cmd = Command(op, {k: kv[k] for k in names})
    try:
        words = encode(cmd, isa, profile)
    except EncodeError as e:
        raise AssemblyError(f"line {lineno}: {e}") from None
    if op != UNKNOWN_OP:
        for msg in _unrepresentable(cmd, decode(words, isa, profile, strict=False)[0], isa, profile):
            if strict:
                raise AssemblyError(f"line {lineno}: {msg}")
            if notes is not None:
                notes.append(f"line {lineno}: {msg}")
    return cmd


def _unrepresentable(cmd: Command, hw: Command, isa: IsaSpec, profile) -> list[str]:
    """Values the encoding changes (a stride that is not a whole number of its hardware unit is
    rounded as the spec says: the hardware then uses another value than the text shows)."""
    out = []
    for f in isa.command(cmd.op).fields:
        v, got = cmd.args[f.name], hw.args[f.name]
        if v == got or not isinstance(v, int):
            continue
        step = field_unit_bytes(isa, f, cmd.args, profile)
        unit = f.unit if f.unit != "layout" else isa.layouts[cmd.args["layout"]]["stride_unit"]
        out.append(f"{cmd.op} {f.name}={v} is not a whole number of {unit}s of {step} B: the hardware uses {got}")
    return out


def assemble(text: str, profile=None, isa: IsaSpec | None = None, strict: bool = False,
             notes: list | None = None) -> Program:
    """Program from assembly text; `profile` defaults to the `.header`'s target.

    A value the encoding rounds (e.g. a blocked16 line stride of 224 B, stored as 2 granules =
    256 B: the compiler-vs-hardware mismatch npusim exists to show) is kept as written and
    reported in `notes` (one line each, if given); `strict=True` refuses it (AssemblyError)."""
    isa = isa or load_isa()
    header, buffers, constants, commands, debug = None, [], [], [], {}
    pending_layer, pending_const = None, None  # (lineno, name), [lineno, kv, bytearray]

    def close_const():
        nonlocal pending_const
        if pending_const is not None:
            ln, kv, data = pending_const
            size = kv.pop("size", None)
            if not isinstance(size, int) or size != len(data):
                raise AssemblyError(f"line {ln}: .const size={size!r} but {len(data)} data bytes follow")
            offset = _typed(ln, ".const", "offset", kv["offset"], int)
            constants.append(Constant(kv["name"], kv["pool"], offset, bytes(data)))
            pending_const = None

    lines = text.splitlines()
    for lineno, line in enumerate(lines, 1):
        toks = _tokens(line, lineno)
        if not toks:
            continue
        head = toks[0]
        if head == ".data":
            if pending_const is None:
                raise AssemblyError(f"line {lineno}: .data without a preceding .const")
            for t in toks[1:]:
                try:
                    pending_const[2].extend(bytes.fromhex(str(t)))
                except ValueError:
                    raise AssemblyError(f"line {lineno}: .data: {t!r} is not hex bytes") from None
            continue
        close_const()
        if head == ".header":
            if header is not None or commands or buffers or constants:
                raise AssemblyError(f"line {lineno}: .header must come once, before everything else")
            header = _build(Header, _pairs(toks[1:], lineno, ".header"), lineno, ".header")
        elif head == ".buffer":
            buffers.append(_build(Buffer, _pairs(toks[1:], lineno, ".buffer"), lineno, ".buffer",
                                  ("name", "kind", "pool", "offset", "size", "align")))
        elif head == ".const":
            kv = _pairs(toks[1:], lineno, ".const")
            for k in kv:
                if k not in ("name", "pool", "offset", "size"):
                    raise AssemblyError(f"line {lineno}: .const: unknown key {k!r}")
            for k in ("name", "pool", "offset", "size"):
                if k not in kv:
                    raise AssemblyError(f"line {lineno}: .const: missing {k}=")
            kv["name"], kv["pool"] = str(kv["name"]), str(kv["pool"])
            pending_const = [lineno, kv, bytearray()]
        elif head == ".layer":
            if len(toks) != 2 or isinstance(toks[1], tuple):
                raise AssemblyError(f"line {lineno}: .layer takes one name")
            if pending_layer is not None:
                raise AssemblyError(f"line {lineno}: two .layer directives for one command (line {pending_layer[0]})")
            pending_layer = (lineno, str(toks[1]))
        elif isinstance(head, str) and head.startswith("."):
            raise AssemblyError(f"line {lineno}: unknown directive {head!r}")
        else:
            if profile is None:
                profile = _default_profile(header, lineno)
            commands.append(_command(toks, lineno, isa, profile, strict, notes))
            if pending_layer is not None:
                debug[len(commands) - 1] = pending_layer[1]
                pending_layer = None
    close_const()
    if pending_layer is not None:
        raise AssemblyError(f"line {pending_layer[0]}: .layer is not followed by a command")
    return Program(commands=commands, buffers=buffers, constants=constants, debug=debug,
                   header=header or Header())


def _default_profile(header: Header | None, lineno: int):
    """The built-in profile the header targets (never a file path named in the text)."""
    name = header.profile if header is not None else "n657"
    try:
        return resolve_target_profile(header or Header())
    except NpusimError as e:
        raise AssemblyError(f"line {lineno}: target profile {name!r}: {e}") from None
