"""An imported ST Edge AI Core program as an npusim blob (`npusim import ST_OUTPUT -o model.npu`).

The blob is npusim's container (`program.container`, format 2: framing, section table, CRC32) whose STEDGEAI
section holds the `StOutput` as the importer read it: pools, the buffer table, the epoch blocks with
their hardware epochs (stream engines, units, switch links, as lifted from the C structs or the
epoch-controller programs), software operators, toolchain versions and the weight images; beside them
the epoch-controller programs' words, for `disasm`. It is not the C text again: loading it parses no C,
and the replay gets the very records the folder gives (`tests/test_stedgeai_blob.py` checks equality on
every shared compile).

Section content: a MessagePack map `{"version": CONTENT_VERSION, "output": <StOutput>, "ec_programs":
{name: {"words": [u64], "c_symbols": {id: symbol}}}}` (the last absent for explicit structs). A record is a
map of its field names to values, in the dataclass's field order; a frozenset is a sorted array, a tuple
an array, bytes a bin. Reading checks every field's type against the record's annotations, refuses an
unknown or missing field, and lets MessagePack bound every length by the bytes present (no allocation
sized by an unchecked count). Same records -> the same bytes.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from pathlib import Path

import msgpack

from ...errors import BlobError
from ...program.container import encode_imported, read_imported
from ...program.model import Header
from .ecblob import decode_programs
from .model import Buffer, EpochBlock, HwEpoch, Link, Pool, StOutput, Streng, SwOperator, Unit

CONTENT_VERSION = 1
COMPILER = "stedgeai"  # the blob header's compiler: the program is ST's
RECORDS = (StOutput, Pool, Buffer, EpochBlock, HwEpoch, Streng, Unit, Link, SwOperator)
DOCUMENT_KEYS = {"version", "output", "ec_programs"}
MAX_DEPTH = 8  # nesting of a free-form value (unit fields and operator parameters: arrays of arrays)


# ---------------------------------------------------------------- field types -> converters

_BY_NAME = {c.__name__: c for c in RECORDS}


@functools.cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


class _Bad(Exception):
    """A value that does not fit its field; `where` grows as the error leaves nested records."""

    def __init__(self, msg: str):
        super().__init__(msg)
        self.msg, self.where = msg, []


def _short(v) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def _kind(hint):
    """(kind, args) of a field type: record, union, free, scalar, dict, tuple (fixed), many, set."""
    if dataclasses.is_dataclass(hint):
        return "record", hint
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return ("union", inner[0]) if len(inner) == 1 else ("free", None)
    if hint is object:
        return "free", None
    if hint in (bool, int, float, str, bytes):
        return "scalar", hint
    if hint is dict or origin is dict:
        return "dict", None
    if origin is frozenset:
        return "set", args[0]
    if origin is tuple:
        return ("many", args[0]) if len(args) == 2 and args[1] is Ellipsis else ("tuple", args)
    raise TypeError(f"field type {hint!r} has no blob form")


@functools.cache
def _reader(hint):
    """A function checking a decoded MessagePack value against `hint` and building the field's value."""
    kind, arg = _kind(hint)
    if kind == "record":
        def read(v, cls=arg):
            return _record(cls, v)
    elif kind == "union":
        inner = _reader(arg)

        def read(v):
            return None if v is None else inner(v)
    elif kind == "free":
        read = _free
    elif kind == "scalar":
        def read(v, t=arg):
            if type(v) is t:
                return v
            raise _Bad(f"{type(v).__name__} {_short(v)} where the record holds {t.__name__}")
    elif kind == "dict":
        def read(v):
            if not isinstance(v, dict) or not all(type(k) is str for k in v):
                raise _Bad(f"{type(v).__name__} where the record holds a map with string keys")
            return {k: _free(x) for k, x in v.items()}
    elif kind == "set":
        inner = _reader(arg)

        def read(v):
            return frozenset(inner(x) for x in _array(v))
    elif kind == "many":
        inner = _reader(arg)
        if arg in (int, str, float):
            def read(v, t=arg):
                if type(v) is tuple and all(type(x) is t for x in v):
                    return v
                return tuple(inner(x) for x in _array(v))
        else:
            def read(v):
                return tuple(inner(x) for x in _array(v))
    else:
        parts = tuple(_reader(a) for a in arg)

        def read(v):
            if type(v) is not tuple or len(v) != len(parts):
                raise _Bad(f"{_short(v)} where the record holds {len(parts)} values")
            return tuple(r(x) for r, x in zip(parts, v))
    return read


def _array(v) -> tuple:
    if type(v) is not tuple:
        raise _Bad(f"{type(v).__name__} {_short(v)} where the record holds an array")
    return v


def _free(v, depth: int = 0):
    """A free-form value: a scalar, a tagged record, or an array of them (nested at most MAX_DEPTH deep)."""
    if v is None or type(v) in (bool, int, float, str, bytes):
        return v
    if type(v) is tuple and depth < MAX_DEPTH:
        return tuple(_free(x, depth + 1) for x in v)
    if type(v) is dict and v.keys() == {"record", "fields"} and v["record"] in _BY_NAME:
        return _record(_BY_NAME[v["record"]], v["fields"])
    raise _Bad(f"{type(v).__name__} {_short(v)} is not a plain value")


@functools.cache
def _fields(cls):
    """(readers by field name, the required field names) of a record class."""
    hints, fs = _hints(cls), dataclasses.fields(cls)
    return ({f.name: _reader(hints[f.name]) for f in fs},
            tuple(f.name for f in fs if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING))


def _record(cls, v):
    if type(v) is not dict:
        raise _Bad(f"{type(v).__name__} where a {cls.__name__} record is expected")
    readers, required = _fields(cls)
    for k in v:
        if k not in readers:
            raise _Bad(f"unknown {cls.__name__} field {_short(k)}")
    for k in required:
        if k not in v:
            raise _Bad(f"{cls.__name__} field '{k}' is missing")
    kwargs = {}
    try:
        for k, x in v.items():
            kwargs[k] = readers[k](x)
    except _Bad as e:
        name = v.get("name")
        e.where.append(f"{cls.__name__}{f' {name!r}' if isinstance(name, str) and name else ''}.{k}")
        raise
    return cls(**kwargs)


@functools.cache
def _writer(hint):
    """A function turning a field's value into MessagePack types (free-form positions tag records)."""
    kind, arg = _kind(hint)
    if kind == "record":
        write = _plain
    elif kind == "union":
        inner = _writer(arg)

        def write(v):
            return None if v is None else inner(v)
    elif kind in ("free", "dict"):
        write = _free_plain
    elif kind == "scalar":
        def write(v):
            return v
    elif kind == "set":
        inner = _writer(arg)

        def write(v):
            return sorted(inner(x) for x in v)
    elif kind == "many":
        inner = _writer(arg)
        if arg in (int, str, float):
            write = list
        else:
            def write(v):
                return [inner(x) for x in v]
    else:
        parts = tuple(_writer(a) for a in arg)

        def write(v):
            return [w(x) for w, x in zip(parts, v)]
    return write


@functools.cache
def _field_writers(cls) -> tuple:
    hints = _hints(cls)
    return tuple((f.name, _writer(hints[f.name])) for f in dataclasses.fields(cls))


def _plain(rec) -> dict:
    """A record as a map of its field names to MessagePack values, in field order."""
    return {n: w(getattr(rec, n)) for n, w in _field_writers(type(rec))}


def _free_plain(v):
    if dataclasses.is_dataclass(v):
        if type(v) not in RECORDS:
            raise TypeError(f"a {type(v).__name__} record has no blob form")
        return {"record": type(v).__name__, "fields": _plain(v)}
    if isinstance(v, (tuple, list)):
        return [_free_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _free_plain(x) for k, x in v.items()}
    return v


# ---------------------------------------------------------------- the blob


def encode(out: StOutput, ec_programs: dict | None = None, profile: str = "n657") -> bytes:
    """The blob bytes of an imported output, with the epoch-controller programs' words when given
    (`ecblob.ecblob_words`: `disasm` reads them). File paths are kept as the names the folder gave them
    (where it was read from is not part of the program)."""
    out = dataclasses.replace(out, files={role: Path(p).name for role, p in out.files.items() if role != "blob"})
    doc = {"version": CONTENT_VERSION, "output": _plain(out)}
    if ec_programs:
        doc["ec_programs"] = {name: {"words": list(words), "c_symbols": dict(symbols)}
                              for name, (words, symbols) in ec_programs.items()}
    try:
        payload = msgpack.packb(doc, use_bin_type=True)
    except (OverflowError, TypeError, ValueError) as e:
        raise BlobError(f"cannot write '{out.name}' as a blob: {e}") from None
    header = Header(profile=profile, compiler=COMPILER, compiler_version=out.toolchain.get("atonn", ""))
    return encode_imported(payload, header)


def _document(data_or_path) -> tuple[dict, str]:
    """The STEDGEAI section's map, its version checked, and the name errors give the blob."""
    _, payload = read_imported(data_or_path)
    where = str(data_or_path) if isinstance(data_or_path, (str, Path)) else "blob"
    try:
        doc = msgpack.unpackb(payload, use_list=False, raw=False, strict_map_key=True)
    except (ValueError, TypeError, msgpack.exceptions.ExtraData, msgpack.exceptions.FormatError,
            msgpack.exceptions.StackError) as e:
        raise BlobError(f"{where}: stedgeai section is not readable ({type(e).__name__}: {e})") from None
    if type(doc) is not dict or type(doc.get("version")) is not int or "output" not in doc:
        raise BlobError(f"{where}: stedgeai section has no version and program")
    if doc["version"] != CONTENT_VERSION:
        raise BlobError(f"{where}: stedgeai section version {doc['version']}, this npusim reads {CONTENT_VERSION}")
    extra = sorted(set(doc) - DOCUMENT_KEYS, key=str)
    if extra:
        raise BlobError(f"{where}: stedgeai section has an unknown entry {_short(extra[0])}")
    return doc, where


def decode(data_or_path) -> StOutput:
    """The `StOutput` a blob written by `encode` holds. Any damage (framing, checksum, a wrong type,
    an unknown field, a newer content version) is one BlobError line."""
    doc, where = _document(data_or_path)
    try:
        out = _record(StOutput, doc["output"])
    except _Bad as e:
        inside = " > ".join(reversed(e.where))
        raise BlobError(f"{where}: stedgeai section: {inside + ': ' if inside else ''}{e.msg}") from None
    _check(out, where)
    if isinstance(data_or_path, (str, Path)):
        out = dataclasses.replace(out, files={**out.files, "blob": str(data_or_path)})
    return out


def ec_programs(data_or_path) -> dict:
    """{blob name: EcProgram} of the epoch-controller programs a blob carries ({} for explicit structs),
    decoded from their words as from the folder's header."""
    doc, where = _document(data_or_path)
    progs = doc.get("ec_programs", {})
    ok = type(progs) is dict and all(
        type(k) is str and type(v) is dict and v.keys() == {"words", "c_symbols"}
        and type(v["words"]) is tuple and all(type(w) is int and 0 <= w < 1 << 64 for w in v["words"])
        and type(v["c_symbols"]) is dict and all(type(a) is str and type(b) is str for a, b in v["c_symbols"].items())
        for k, v in progs.items())
    if not ok:
        raise BlobError(f"{where}: stedgeai section: the epoch-controller programs are not names, words and symbols")
    return decode_programs({k: (v["words"], v["c_symbols"]) for k, v in progs.items()}, where=where)


def _check(out: StOutput, where: str) -> None:
    """What the reader guarantees of a folder's records, checked again for a blob's."""
    if not out.pools:
        raise BlobError(f"{where}: the imported program has no memory pool")
    if not out.blocks:
        raise BlobError(f"{where}: the imported program has no epoch block")
    if [b.index for b in out.blocks] != list(range(len(out.blocks))):
        raise BlobError(f"{where}: epoch blocks are not numbered 0..{len(out.blocks) - 1} in order")
    names = {p.name for p in out.pools}
    for pool, image in out.weights.items():
        if pool not in names or not isinstance(image, bytes):
            raise BlobError(f"{where}: a weight image for '{pool}', which is not a pool of the program")
