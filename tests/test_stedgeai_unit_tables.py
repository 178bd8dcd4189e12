"""Tables an explicit-struct unit configuration points to in memory (ARITH `A/B/C_vector`, ACTIV
`ROM0/ROM1_vector`), read from the weight image as ST's runtime copies them into the unit at configuration.
Built from the explicit-struct shared compile st_audio_yamnet1024_v111 (no weight image shipped: a synthetic one
holds the tables at the addresses its structs name)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from npusim.importers.stedgeai import load
from npusim.importers.stedgeai import units_exec as ux
from npusim.importers.stedgeai.board import board_windows
from npusim.importers.stedgeai.exec_memory import Memory
from npusim.importers.stedgeai.exec_plan import UnitFields
from npusim.importers.stedgeai.execute import _with_tables

from test_stedgeai_ecblob import SHARED as ST, needs_shared  # noqa: E402

pytestmark = needs_shared


def _arith_units(epoch: int = 2) -> dict:
    out = load(ST / "st_audio_yamnet1024_v111")
    ep = next(e for b in out.blocks for e in b.epochs if e.number == epoch)
    return {u.index: u for u in ep.units if u.kind == "ARITH"}


def _memory() -> Memory:
    mem = Memory([(w.name, w.base, w.size, "w" not in w.perms) for w in board_windows()], seed=0)
    return mem


def _per_channel(u, fields) -> tuple:
    """The (A, B, C) coefficients of the first element of every channel of one pixel frame."""
    depth, chans = u.get("batchDepth"), u.get("fChannels")
    plane = u.get("fWidth") * u.get("fHeight")
    (a, b, c), shape = ux.arith_coefficients(fields, plane * chans, 0)
    assert shape == (chans // depth, plane, depth)
    return tuple(np.broadcast_to(t, (chans // depth, 1, depth)).reshape(-1) for t in (a, b, c))


def test_arith_a_vector_is_read_from_the_weight_image():
    """ARITH 0 of epoch 2: a 16-bit A per channel at `A_vector`; B and C null (their scalars repeat)."""
    u = _arith_units()[0]
    chans = u.get("fChannels")
    table = np.random.default_rng(1).integers(-32768, 32768, chans).astype("<i2")
    mem = _memory()
    mem.load(u.get("A_vector")[0], table.tobytes())
    mem.sealed = True
    fields = _with_tables(u, UnitFields(u), mem)
    a, b, c = _per_channel(u, fields)
    assert a.tolist() == table.tolist()
    assert set(b.tolist()) == {u.get("B_scalar")} and set(c.tolist()) == {u.get("C_scalar")}


def test_arith_combined_bc_vector_of_32_bits():
    """ARITH 1 of epoch 2: COMBINEBC with a 32-bit C per channel (the bias), A the scalar."""
    u = _arith_units()[1]
    chans = u.get("fChannels")
    table = np.random.default_rng(2).integers(-(1 << 31), 1 << 31, chans).astype("<i4")
    mem = _memory()
    mem.load(u.get("C_vector")[0], table.tobytes())
    mem.sealed = True
    a, b, c = _per_channel(u, _with_tables(u, UnitFields(u), mem))
    assert c.tolist() == table.tolist() and set(b.tolist()) == {0}
    assert set(a.tolist()) == {u.get("A_scalar")}


def test_arith_c_vector_negated_when_c_scalar_is_minus_one():
    u = _arith_units()[1]
    u = replace(u, fields=tuple((k, -1 if k == "C_scalar" else v) for k, v in u.fields))
    table = np.arange(1, u.get("fChannels") + 1, dtype="<i4") * 1000
    mem = _memory()
    mem.load(u.get("C_vector")[0], table.tobytes())
    _, _, c = _per_channel(u, _with_tables(u, UnitFields(u), mem))
    assert c.tolist() == (-table).tolist()


def test_arith_vector_mode_without_a_table_repeats_its_scalars():
    """Vector mode with every vector null: the runtime writes the scalars into each entry."""
    u = _arith_units()[0]
    u = replace(u, fields=tuple((k, (0,) if k == "A_vector" else v) for k, v in u.fields))
    a, b, c = _per_channel(u, _with_tables(u, UnitFields(u), _memory()))
    assert set(a.tolist()) == {u.get("A_scalar")} and a.size == u.get("fChannels")


def test_a_table_in_ram_is_read_when_the_epoch_runs():
    """A table outside read-only memory is read for the run alone, not kept in the plan's fields."""
    u = _arith_units()[0]
    ram = 0x34100000
    u = replace(u, fields=tuple((k, (ram,) if k == "A_vector" else v) for k, v in u.fields))
    plan_fields = UnitFields(u)
    for value in (3, 5):
        mem = _memory()
        mem.load(ram, np.full(u.get("fChannels"), value, "<i2").tobytes())
        a, _, _ = _per_channel(u, _with_tables(u, plan_fields, mem))
        assert set(a.tolist()) == {value}
    assert plan_fields.get("mem_A") is None


def test_activ_function_tables_are_read_from_the_weight_image():
    """ei_person_logo_od_nonec's ACTIV_FUNC units name ROM0 / ROM1 tables in the weight image."""
    out = load(ST / "ei_person_logo_od_nonec")
    u = next(u for b in out.blocks for e in b.epochs for u in e.units if u.kind == "ACTIV")
    rom0 = np.random.default_rng(3).integers(0, 256, u.get("ROM0_nbytes")).astype(np.uint8)
    rom1 = np.random.default_rng(4).integers(0, 1 << 16, u.get("ROM1_nbytes") // 2).astype("<u2")
    mem = _memory()
    mem.load(u.get("ROM0_vector")[0], rom0.tobytes())
    mem.load(u.get("ROM1_vector")[0], rom1.tobytes())
    mem.sealed = True
    fields = _with_tables(u, UnitFields(u), mem)
    assert fields.get("mem_rom0") == tuple(rom0.tolist())
    assert fields.get("mem_rom1") == tuple(rom1.tolist())


def _ram_after_epoch(out, epoch: int) -> str:
    """SHA-256 of the RAM after `epoch` of a functional run of `out` on seeded inputs (the run goes on
    until yamnet's software softmax, which it refuses)."""
    import hashlib

    from npusim.importers.stedgeai.execute import buffer_dtype, run
    from npusim.importers.stedgeai.units_exec import Refused

    got = {}

    def after(n, mem, bufs):
        if n == epoch:
            got["h"] = hashlib.sha256(b"".join(s.data.tobytes() for s in mem.segments
                                               if not s.read_only and s.data is not None)).hexdigest()

    rng = np.random.default_rng(5)
    ins = {b.name: rng.integers(-128, 128, b.size).astype(buffer_dtype(b))
           for b in out.buffers if b.role == "input" and not b.is_param}
    with pytest.raises(Refused, match="softmax"):
        run(out, ins, after_epoch=after)
    return got["h"]


@pytest.mark.slow  # yamnet's epochs run three times (~4 CPU s); tables read from the image: the unit tests above
def test_a_whole_run_reads_the_tables_from_the_attached_image():
    """yamnet's hardware epochs run on a synthetic weight image (refused before: 'ARITH0: coefficient 1
    needed, its memory holds 1'); the same image gives the same memory, another A table another memory."""
    from npusim.importers.stedgeai.weights import param_extent

    out = load(ST / "st_audio_yamnet1024_v111")
    (pool, n), = param_extent(out).items()
    image = np.random.default_rng(6).integers(0, 256, n, dtype=np.uint8)
    u = _arith_units()[0]
    at = u.get("A_vector")[0] - out.pool_named(pool).address
    other = image.copy()
    other[at:at + 2 * u.get("fChannels")] ^= 0x5A
    first = _ram_after_epoch(replace(out, weights={pool: image.tobytes()}), 2)
    assert first == _ram_after_epoch(replace(out, weights={pool: image.tobytes()}), 2)
    assert first != _ram_after_epoch(replace(out, weights={pool: other.tobytes()}), 2)


def test_an_activ_table_larger_than_its_memory_is_refused_before_it_is_read():
    from npusim.errors import StImportError
    from npusim.importers.stedgeai import unit_tables as ut
    from npusim.importers.stedgeai.model import Unit

    u = UnitFields(Unit("ACTIV", 2, (("ROM0_vector", 0x70000000), ("ROM0_nbytes", 1 << 26))))
    with pytest.raises(StImportError, match="ACTIV2: ROM0_vector of 67108864 bytes, more than its rom0 memory"):
        ut.table_spans(u)
