"""The tables an explicit-struct unit configuration points to in memory, read as ST's runtime copies them
into the unit's own memory when it configures the unit (the epoch-controller lift reads the same memory from
the register writes, `ec_units`):

- ARITH in vector mode (`scalar` 0): `A/B/C_vector` into `mem_A/B/C`, one entry per coefficient the broadcast
  mode walks (`fChannels`, `fHeight`, `fWidth`, `fHeight * fWidth`, or one for BCAST_SCALAR; at most the
  coefficient memory's entries), `vec_precision` bits each, packed from bit 0 of little-endian words; a null
  vector repeats its scalar; the C values negated when `C_scalar` is -1; with COMBINEBC the C value's high
  half is B. Each entry is kept as its low 16 bits, as the memory holds it.
- ACTIV: `ROM0_vector` (`ROM0_nbytes` bytes) into `mem_rom0`, `ROM1_vector` (`ROM1_nbytes // 6` rows of three
  16-bit words) into `mem_rom1`.

A table in read-only memory (a weight image) is part of the program; one in RAM is read when the epoch runs.
"""

from __future__ import annotations

import functools
import tomllib

import numpy as np

from ...errors import StImportError
from ...program.spec import isa_file

@functools.lru_cache(maxsize=1)
def unit_facts() -> dict:
    """{unit kind: its entry of `isa/aton/ec_lift_units.toml`} (memories, broadcast reach, one-to-one)."""
    return tomllib.loads(isa_file("aton/ec_lift_units.toml").read_text()).get("units", {})


def _memory(kind: str, name: str) -> dict:
    return unit_facts()[kind]["memory"][name]


def _memory_bytes(kind: str, name: str) -> int:
    m = _memory(kind, name)
    return m["entries"] * m.get("words_per_entry", 1) * 4


def one_to_one_units() -> frozenset:
    """Unit kinds whose output stream has one element per element of each input stream."""
    return frozenset(k for k, u in unit_facts().items() if u.get("one_to_one"))


def arith_reach() -> dict:
    """{broadcast mode: the struct fields whose product counts an ARITH's vector coefficients}."""
    return unit_facts()["ARITH"]["coefficient_reach"]


def _address(u, field: str) -> int:
    """The absolute address a pointer field holds (0: none)."""
    v = u.get(field, 0)
    if isinstance(v, tuple):
        v = v[0] if v else 0
    if isinstance(v, str):
        raise StImportError(f"{u.kind}{u.index}: {field} points at '{v}', not an address the functional run "
                            "can read")
    return int(v or 0)


def needs_tables(u) -> bool:
    """Whether `u` reads tables from memory that its fields do not hold yet."""
    if u.kind == "ARITH":
        return not u.get("scalar") and u.get("mem_A") is None and u.get("bcast") in arith_reach()
    return u.kind == "ACTIV" and u.get("mem_rom0") is None and bool(table_spans(u))


def _arith_count(u) -> int:
    reach = arith_reach()[u.get("bcast")]
    count = int(np.prod([max(int(u.get(k) or 1), 1) for k in reach]))
    return min(count, _memory("ARITH", "coefficients")["entries"])


def table_spans(u) -> list[tuple[str, int, int, int]]:
    """[(field, address, bytes, bits per value)] of the tables `u` reads from memory (null pointers left out)."""
    if u.kind == "ARITH":
        count, bits = _arith_count(u), tuple(u.get("vec_precision") or (16, 16, 16))
        spans = [(f"{k}_vector", _address(u, f"{k}_vector"), -(-count * bits[i] // 32) * 4, bits[i])
                 for i, k in enumerate("ABC")]
    elif u.kind == "ACTIV":
        row = _memory("ACTIV", "rom1")["struct_row_bytes"]
        spans = [("ROM0_vector", _address(u, "ROM0_vector"), int(u.get("ROM0_nbytes") or 0), 8),
                 ("ROM1_vector", _address(u, "ROM1_vector"), int(u.get("ROM1_nbytes") or 0) // row * row, 16)]
        for (field, _, n, _), rom in zip(spans, ("rom0", "rom1")):
            if not 0 <= n <= _memory_bytes("ACTIV", rom):  # checked before anything is read
                raise StImportError(f"ACTIV{u.index}: {field} of {n} bytes, more than its {rom} memory holds "
                                    f"({_memory_bytes('ACTIV', rom)})")
    else:
        return []
    return [s for s in spans if s[1] and s[2]]


def _values(data: bytes, bits: int, count: int) -> np.ndarray:
    """`count` unsigned values of `bits` bits, packed from bit 0 of `data`."""
    if bits == 8:
        return np.frombuffer(data, np.uint8)[:count].astype(np.int64)
    if bits == 16:
        return np.frombuffer(data, "<u2")[:count].astype(np.int64)
    if bits == 32:
        return np.frombuffer(data, "<u4")[:count].astype(np.int64)
    if not 0 < bits <= 32:
        raise StImportError(f"coefficient precision of {bits} bits")
    b = np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little")[:count * bits].reshape(count, bits)
    return (b.astype(np.int64) << np.arange(bits, dtype=np.int64)).sum(axis=1)


def read_tables(u, read) -> dict:
    """The memory fields (`mem_*`) of `u` (`needs_tables`) from its tables; `read(addr, n)` gives n bytes."""
    spans = table_spans(u)
    if u.kind == "ARITH":
        count = _arith_count(u)
        got = {f: _values(read(a, n), bits, count) for f, a, n, bits in spans}
        a = got.get("A_vector", np.full(count, int(u.get("A_scalar") or 0), np.int64))
        b = got.get("B_vector", np.full(count, int(u.get("B_scalar") or 0), np.int64))
        c = got.get("C_vector")
        if c is None:
            c = np.full(count, int(u.get("C_scalar") or 0), np.int64)
        elif int(u.get("C_scalar") or 0) == -1:
            c = -c
        if u.get("combinebc"):
            b = c >> 16
        return {"mem_A": tuple(int(x) for x in a & 0xFFFF), "mem_B": tuple(int(x) for x in b & 0xFFFF),
                "mem_C": tuple(int(x) for x in c & 0xFFFF)}
    out = {}
    for f, a, n, bits in spans:
        out["mem_rom0" if f == "ROM0_vector" else "mem_rom1"] = tuple(int(x) for x in _values(read(a, n), bits, n * 8 // bits))
    return out
