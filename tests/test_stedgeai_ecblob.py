"""Epoch-controller blobs of ST Edge AI Core: decoding, ST's listings, bad input, and the stream-engine /
stream-switch lifter against ST's own trace of the same blobs (fallguard_pe_yolov8n_pose256)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

from npusim.errors import EXIT_INVALID_INPUT, StImportError
from npusim.importers.stedgeai.ec_lift import lift_epochs
from npusim.importers.stedgeai.ec_registers import disassemble
from npusim.importers.stedgeai.ecblob import load_ec_spec, read_ecblobs
from npusim.importers.stedgeai.model import Link


def _shared() -> Path | None:
    """../shared/stedgeai beside the checkout (or beside the folder of worktrees)."""
    for parent in Path(__file__).resolve().parents:
        candidate = parent.parent / "shared" / "stedgeai"
        if candidate.is_dir():
            return candidate
    return None


SHARED = _shared()
needs_shared = pytest.mark.skipif(SHARED is None, reason="../shared/stedgeai (ST test data) not found")
FALLGUARD = "fallguard_pe_yolov8n_pose256"

# blobs and decoded instructions of each shared compile
COMPILES = {
    FALLGUARD: (13, 15892),
    "st_ic_mnv1_nucleo": (1, 2973),
    "st_od_yolox480_dk": (6, 23791),
    "st_pose_movenet192_dk": (5, 8779),
    "st_reid_osnet_dk_v113": (15, 22988),
}


@lru_cache(maxsize=None)
def _blobs(compile_name: str):
    (header,) = sorted((SHARED / compile_name).glob("*_ecblobs.h"))
    return read_ecblobs(header)


# ------------------------------------------------------------------------------------ decoding
@needs_shared
def test_disassembly_equals_st_listings_line_for_line():
    """ST's `debug__<blob>.s` is the blob as shipped; `_initial.s` is the same program before ST's
    optimiser merged register writes into bursts (it is not what the blob holds)."""
    blobs = _blobs(FALLGUARD)
    assert len(blobs) == 13
    lines = 0
    for name, program in blobs.items():
        want = (SHARED / FALLGUARD / "ec_asm" / f"debug_{name}.s").read_text().splitlines()
        assert disassemble(program) == want, name
        lines += len(want)
    assert lines == 15892


@needs_shared
def test_initial_listings_differ_only_in_write_grouping():
    """The labels, polls and interrupts of `_initial.s` are the blob's, in the same order."""
    keep = ("label", "poll", "irq")
    for name, program in _blobs(FALLGUARD).items():
        initial = (SHARED / FALLGUARD / "ec_asm" / f"debug_{name}_initial.s").read_text().splitlines()
        assert [x for x in initial if x.startswith(keep)] == [x for x in disassemble(program) if x.startswith(keep)]


@needs_shared
@pytest.mark.parametrize("compile_name", sorted(COMPILES))
def test_every_shared_compile_decodes(compile_name):
    blobs = _blobs(compile_name)
    n_blobs, n_instructions = COMPILES[compile_name]
    assert len(blobs) == n_blobs
    assert sum(len(p.instructions) for p in blobs.values()) == n_instructions
    seen = set()
    for program in blobs.values():
        numbers = [e.number for e in program.epochs]
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))  # one label per epoch, in order
        assert not seen & set(numbers)
        seen |= set(numbers)
        assert program.preamble == 0
        assert program.instructions[-1].op == "irq"
        # every epoch that configures something waits for it to end
        for e in program.epochs:
            if any(i.op not in ("label", "irq") for i in program.epoch_instructions(e)):
                assert e.end_polls, (program.symbol, e.number)


@needs_shared
def test_relocations_keep_symbol_and_offset_and_resolve():
    blobs = _blobs(FALLGUARD)
    (reloc,) = blobs["_ec_blob_1"].relocations
    assert (reloc.symbol, reloc.c_symbol, reloc.words) == ("_user_io_input_0", "_mem_pool__user_io_input_0_Default",
                                                           (30, 44))
    relocated = [i for i in blobs["_ec_blob_1"].instructions if i.relocs]
    assert [r for i in relocated for r in i.relocs] == [(0, "_user_io_input_0"), (1, "_user_io_input_0")]
    assert not any(i.relocs for name, p in blobs.items() if name not in ("_ec_blob_1", "_ec_blob_147")
                   for i in p.instructions)
    # ST Edge AI 3.0's container (0xECBF0050) relocates too
    (reid_reloc,) = _blobs("st_reid_osnet_dk_v113")["_ec_blob_reid_99"].relocations
    assert reid_reloc.c_symbol == "_mem_pool__user_io_output_0_reid"

    epoch2 = lift_epochs(blobs["_ec_blob_1"], {"_user_io_input_0": 0x34000000})[1]
    (reader,) = [s for s in epoch2.strengs if s.dir == 0]
    assert (reader.addr, reader.limit, reader.base_symbol) == (0x34000000, 0x34000000 + 196616,
                                                             "_mem_pool__user_io_input_0_Default")
    by_c_symbol = lift_epochs(blobs["_ec_blob_1"], {"_mem_pool__user_io_input_0_Default": 0x100})[1]
    assert [s.addr for s in by_c_symbol.strengs if s.dir == 0] == [0x100]
    unresolved = lift_epochs(blobs["_ec_blob_1"])[1]
    assert [s.addr for s in unresolved.strengs if s.dir == 0] == [0]


@needs_shared
def test_the_largest_compile_decodes_and_lifts_whole():
    # its speed is measured by scripts/bench_st.py (no timing in tests)
    header = next((SHARED / "st_od_yolox480_dk").glob("*_ecblobs.h"))
    blobs = read_ecblobs(header)
    assert sum(len(p.instructions) for p in blobs.values()) == 23791
    assert sum(len(lift_epochs(p)) for p in blobs.values()) == 222


# ------------------------------------------------------------------------------------ bad input
def _header(tmp_path: Path, words: list[int], name: str = "_ec_blob_7") -> Path:
    body = ", ".join(f"0x{w:016x}UL" for w in words)
    p = tmp_path / "net_ecblobs.h"
    p.write_text(f"ECBLOB_CONST_SECTION\nstatic const uint64_t {name} [] =\n{{\n  {body},\n}};\n")
    return p


def _program(*instructions: int, count: int | None = None) -> list[int]:
    """A plain program as 64-bit words (magic, count, instructions; zero padding)."""
    u = [0xCA057A7A, len(instructions) if count is None else count, *instructions]
    if len(u) % 2:
        u.append(0)
    return [u[k] | u[k + 1] << 32 for k in range(0, len(u), 2)]


LABEL_3 = 3 << 5 | 0x1D
WRITE_STRENG0_CTRL = 5 << 26 | 0 << 16 | 31 << 10 | 0 << 5 | 0x00


def _error(path: Path) -> str:
    with pytest.raises(StImportError) as info:
        read_ecblobs(path)
    assert info.value.exit_code == EXIT_INVALID_INPUT
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def test_a_minimal_program_decodes(tmp_path):
    (program,) = read_ecblobs(_header(tmp_path, _program(LABEL_3, WRITE_STRENG0_CTRL, 0x880100, 0x0C))).values()
    assert disassemble(program) == ["label 0x3", "write 5 0 0x880100", "irq 0x0"]
    assert [(e.number, e.start, e.end) for e in program.epochs] == [(3, 0, 3)]


def test_unknown_opcode_names_blob_and_word(tmp_path):
    msg = _error(_header(tmp_path, _program(LABEL_3, 0x1F)))
    assert "_ec_blob_7" in msg and "instruction word 1" in msg and "unknown opcode 0x1f" in msg


def test_data_words_past_the_program_are_refused(tmp_path):
    msg = _error(_header(tmp_path, _program(LABEL_3, WRITE_STRENG0_CTRL)))
    assert "_ec_blob_7" in msg and "instruction word 1" in msg
    burst_of_2000 = 5 << 26 | 2 << 16 | 2000 << 5 | 0x03
    msg = _error(_header(tmp_path, _program(LABEL_3, burst_of_2000, 1, 2)))
    assert "instruction word 1" in msg and "2000" in msg


def test_a_count_past_the_array_is_refused_before_allocating(tmp_path):
    msg = _error(_header(tmp_path, _program(LABEL_3, count=0xFFFFFFF0)))
    assert "_ec_blob_7" in msg and "instruction count" in msg


def test_a_wrong_magic_is_refused(tmp_path):
    msg = _error(_header(tmp_path, [0xCA057A7B | 2 << 32]))
    assert "no epoch-controller blob" in msg  # not a blob at all: nothing to decode
    words = _program(LABEL_3)
    relocatable = [0xECBF0020 | 0 << 32, 0 | 16 << 32, 0xDEADBEEF | 0 << 32] + words[1:]
    msg = _error(_header(tmp_path, relocatable))
    assert "_ec_blob_7" in msg and "magic 0xdeadbeef" in msg


def _relocatable(symbol: bytes) -> list[int]:
    """A relocatable binary: header (magic, table at byte 16, no debug section, program at byte 44);
    the table: one relocation, its name at table byte 20, its one word listed at table byte 16:
    word 0, the label itself."""
    table = [1, 20, 1, 16, 0, int.from_bytes(symbol, "little"), 0]
    u = [0xECBF0020, 16, 0, 44] + table + [0xCA057A7A, 1, LABEL_3]
    return [u[k] | u[k + 1] << 32 for k in range(0, len(u), 2)]


def test_a_relocation_of_an_instruction_word_is_refused(tmp_path):
    msg = _error(_header(tmp_path, _relocatable(b"_sym"), "_ec_blob_7_reloc"))
    assert "_ec_blob_7" in msg and "instruction word 0" in msg and "_sym" in msg


def test_a_relocation_name_that_is_not_an_identifier_is_refused(tmp_path):
    msg = _error(_header(tmp_path, _relocatable(b"a\nb"), "_ec_blob_7_reloc"))
    assert "relocation 0" in msg and "not a C identifier" in msg


def test_a_lifted_epoch_from_a_hand_written_program(tmp_path):
    """Stream engine 0 reads 64 raw bytes at 0x34000000 into engine 1, which writes them at
    0x34001000 (switch destination register 2 + 1 takes source 0); both are enabled; the epoch ends
    at the poll of engine 1."""
    write = lambda unit, reg, value: (unit << 26 | reg << 16 | 31 << 10 | 0x00, value)  # noqa: E731
    enable = lambda unit: unit << 26 | 0 << 21 | 1 << 13 | 0 << 5 | 0x01  # noqa: E731
    poll_end = 6 << 26 | 0 << 16 | 31 << 10 | 31 << 5 | 0x04
    program = [LABEL_3, *write(5, 0, 1 << 8 | 8 << 16), *write(5, 2, 0x34000000), *write(5, 3, 64),
               *write(5, 13, 1), *write(6, 0, 1 << 3 | 1 << 8 | 8 << 16), *write(6, 2, 0x34001000),
               *write(4, 3, 0 << 1 | 1), enable(6), enable(5), poll_end, 100, 0,
               *write(5, 0, 1 << 30), 0x0C]
    (blob,) = read_ecblobs(_header(tmp_path, _program(*program))).values()
    (epoch,) = lift_epochs(blob)
    reader, writer = epoch.strengs
    assert (writer.engine, writer.dir, writer.addr) == (1, 1, 0x34001000)
    assert (reader.engine, reader.dir, reader.addr, reader.raw, reader.frame_count, reader.frame_tot_cnt,
            reader.nbits_in, reader.nbits_out, reader.limit) == (0, 0, 0x34000000, True, 64, 1, 8, 8, None)
    assert epoch.links == (Link("STRENG", 1, 0, "STRENG", 0, 0),)
    assert epoch.enabled == (("STRENG", 1), ("STRENG", 0))


def test_lifting_a_write_to_a_unit_that_does_not_exist_is_refused(tmp_path):
    (blob,) = read_ecblobs(_header(tmp_path, _program(LABEL_3, 40 << 26 | 31 << 10, 7, 0x0C))).values()
    with pytest.raises(StImportError, match="instruction word 1: unit 40 does not exist"):
        lift_epochs(blob)


def test_a_non_literal_element_is_refused(tmp_path):
    p = tmp_path / "x_ecblobs.h"
    p.write_text("static const uint64_t _ec_blob_1[] = { 0x00000001ca057a7aUL, FOO + 1 };\n")
    assert "not a number" in _error(p)


def test_the_encoding_is_data():
    spec = load_ec_spec()
    assert {o.name: o.code for o in spec.opcodes.values()} == {
        "write": 0, "writebit": 1, "burst": 2, "burstinc": 3, "poll": 4, "irq": 0x0C, "label": 0x1D}
    assert spec.unit_names[5] == "STRENG0" and spec.unit_names[14] == "STRENG9" and spec.unit_names[4] == "STRSWITCH0"


# ------------------------------------------------------------------------------ the lifter vs ST
# ST's blob trace file holds, for each blob, the explicit structs it encodes: read with the importer's
# C reader (cstructs), they are the ground truth of the lifter.
_COMMON = ("dir", "addr", "raw", "limit", "base_symbol", "frame_offset", "loop_offset", "frame_loop_cnt",
           "frame_tot_cnt", "nbits_in", "nbits_out", "noblk", "align_right", "continuous", "cacheable",
           "cache_allocate")


def _trace():
    from npusim.importers.stedgeai import csource, cstructs

    path = SHARED / FALLGUARD / "network_blob_trace.c"
    tree = csource.parse(path.read_text(), str(path))
    return {blob: {e.number: e for e in eps}
            for blob, eps in cstructs.read_hw_epochs(tree, csource.declarations(tree)).items()}


def _expected_streng(s) -> dict:
    """What the registers hold for a trace struct, by `Streng` field (the runtime's rules applied)."""
    e = {k: getattr(s, k) for k in _COMMON}
    if s.align_right:
        e["nbits_unsigned"] = s.nbits_unsigned
    if s.raw:
        e["frame_count"] = s.frame_count
    else:
        e.update(fwidth=s.fwidth, fheight=s.fheight, batch_depth=s.batch_depth, batch_offset=s.batch_offset,
                 line_offset=s.line_offset or s.fwidth * s.batch_offset)
    return e


def _links(links) -> set:
    return {(l.dst_kind, l.dst_index, l.dst_port, l.src_kind, l.src_index, l.src_port, l.context, l.frames, l.slot)
            for l in links}


@needs_shared
def test_lifted_stream_engines_links_and_enables_equal_st_trace_structs():
    trace = _trace()
    blobs = _blobs(FALLGUARD)
    assert set(trace) == set(blobs)
    engines = links = stream_width_from_units = 0
    for name, program in blobs.items():
        lifted = {e.number: e for e in lift_epochs(program)}
        assert set(lifted) == set(trace[name]), name
        for number, want in trace[name].items():
            got = lifted[number]
            where = f"{name} epoch {number}"
            assert {s.engine for s in got.strengs} == {s.engine for s in want.strengs}, where
            by_engine = {s.engine: s for s in want.strengs}
            for s in got.strengs:
                expected = _expected_streng(by_engine[s.engine])
                if expected["align_right"] and expected["dir"] == 0 and expected["nbits_out"] != expected["nbits_in"]:
                    # a right-aligned element read into a wider stream: the engine's registers hold only
                    # the memory width; the stream width is the input width of the unit it feeds
                    stream_width_from_units += 1
                assert {k: getattr(s, k) for k in expected} == expected, f"{where} STRENG{s.engine}"
                engines += 1
            assert _links(got.links) == _links(want.links), where
            links += len(got.links)
            assert list(got.enabled) == list(want.enabled), where
    assert engines == 680
    assert stream_width_from_units == 229
    assert links > 0


@needs_shared
def test_disassembly_can_name_units_and_registers():
    lines = disassemble(_blobs(FALLGUARD)["_ec_blob_147"], names=True)
    assert lines[3] == "write 7 0 0x880100  ; STRENG2.CTRL"
    assert "write 4 10 0x5  ; STRSWITCH0.DSTSTRENG8" in lines  # names from ATON's register map (isa/aton)
    assert lines[0] == "label 0x93"


# the register-held values of C `short` fields: a literal outside -32768..32767 is the same short
_SHORT = {"A_scalar", "B_scalar", "C_scalar", "clipmin", "clipmax", "zfbias", "mulval", "pad_val"}
# a field a trace struct leaves out is C's zero; for an enum, its member of code 0
_ZERO = {"afilt_mode": "AFILT_MODE_NONE"}
# (kind, field) -> trace structs whose field the registers do not hold, and why
_IRRECOVERABLE = {
    # where a table was read from: the blob carries the values (checked below), not their address
    ("ARITH", "A_vector"): 107, ("ARITH", "B_vector"): 107, ("ARITH", "C_vector"): 107,
    ("ACTIV", "ROM0_vector"): 65, ("ACTIV", "ROM1_vector"): 65, ("ACTIV", "LUT_vector"): 65,
    ("ARITH", "vec_precision"): 176,  # the tables' packing, undone before the values reach the unit
    # scalar mode programs neither the broadcast counters nor the coefficients
    ("ARITH", "bcast"): 38, ("ARITH", "fWidth"): 38, ("ARITH", "fHeight"): 38, ("ARITH", "fChannels"): 38,
    ("ARITH", "batchDepth"): 38,
    # no register in the STM32N6's units
    ("ACTIV", "nbytes"): 65, ("POOL", "nbytes"): 6, ("POOL", "avgnopad"): 6, ("POOL", "pad_val_en"): 6,
    ("POOL", "pad_val"): 6,
}


def _trace_tables():
    """The trace's copy of the parameter pool (bytes) and, by struct name, each vector field's offset
    into it (`__ec_params_memory_pool_base + offset`, as the trace writes the tables' addresses)."""
    from npusim.importers.stedgeai import csource
    from npusim.importers.stedgeai.csource import Call

    path = SHARED / FALLGUARD / "network_blob_trace.c"
    tree = csource.parse(path.read_text(), str(path))
    params, offsets = b"", {}
    for d in csource.declarations(tree):
        if d.name == "__ec_params_memory_pool_base":
            params = b"".join(w.to_bytes(8, "little") for w in d.value)
        elif d.type in ("LL_Arithacc_InitTypeDef", "LL_Activacc_InitTypeDef"):
            for k, v in d.value.items():
                if k.endswith("_vector") and isinstance(v, tuple) and isinstance(v[0], Call):
                    assert v[0].name == "+" and isinstance(v[0].args[1], int)
                    assert (d.name, k) not in offsets
                    offsets[(d.name, k)] = v[0].args[1]
    assert params
    return params, offsets


def _bits_at(params: bytes, byte: int, index: int, nbits: int) -> int:
    """Value `index` of a table of `nbits`-bit values packed from bit 0 of byte `byte` upwards."""
    first = byte * 8 + index * nbits
    chunk = int.from_bytes(params[first // 8:first // 8 + 8], "little")
    return chunk >> (first % 8) & ((1 << nbits) - 1)


def _table_values(unit, params: bytes, offsets: dict) -> dict:
    """What the unit's memory must hold for the trace struct `unit`: mem_* field -> values."""
    g = unit.get
    if unit.kind == "ACTIV":
        rom0 = offsets[(unit.name, "ROM0_vector")], g("ROM0_nbytes")
        rom1 = offsets[(unit.name, "ROM1_vector")], g("ROM1_nbytes")
        return {"mem_rom0": tuple(params[rom0[0]:rom0[0] + rom0[1]]),
                "mem_rom1": tuple(int.from_bytes(params[rom1[0] + 2 * i:rom1[0] + 2 * i + 2], "little")
                                  for i in range(rom1[1] // 2))}
    n = min(g("fChannels"), 512)
    a_bits, b_bits, c_bits = g("vec_precision")
    out = {}
    if (unit.name, "A_vector") in offsets:
        out["mem_A"] = tuple(_bits_at(params, offsets[(unit.name, "A_vector")], i, a_bits) & 0xFFFF for i in range(n))
    if (unit.name, "C_vector") in offsets:
        sign = -1 if g("C_scalar") == -1 else 1
        c = [sign * _bits_at(params, offsets[(unit.name, "C_vector")], i, c_bits) & 0xFFFFFFFF for i in range(n)]
        if g("combinebc"):
            out["mem_B"] = tuple(x >> 16 for x in c)
        out["mem_C"] = tuple(x & 0xFFFF for x in c)
    return out


@needs_shared
def test_lifted_units_equal_st_trace_structs():
    """CONVACC, ARITH, POOL and ACTIV of every epoch of the 13 blobs, field by field, against the
    structs ST traced for them; each field the registers cannot give is counted, and where the blob
    carries a table's values instead of its address, the values are checked against the table."""
    from npusim.importers.stedgeai.ec_lift import load_lift_spec

    rules = {r.kind: r for r in load_lift_spec().unit_rules if r is not None}
    params, offsets = _trace_tables()
    trace = _trace()
    units = fields = area_only = tables = 0
    irrecoverable: dict = {}
    for name, program in _blobs(FALLGUARD).items():
        lifted = {e.number: e for e in lift_epochs(program)}
        for number, want in trace[name].items():
            got = lifted[number]
            where = f"{name} epoch {number}"
            assert [(u.kind, u.index) for u in got.units] == [(u.kind, u.index) for u in want.units], where
            for g, w in zip(got.units, want.units):
                have, expect = dict(g.fields), dict(w.fields)
                assert set(expect) <= set(rules[w.kind].struct), f"{where} {w.kind}{w.index}"
                for key in rules[w.kind].struct:
                    exp = expect.get(key, _ZERO.get(key, 0))
                    if key not in have:
                        irrecoverable[(w.kind, key)] = irrecoverable.get((w.kind, key), 0) + 1
                        continue
                    val = have[key]
                    if key in _SHORT:
                        val, exp = val & 0xFFFF, int(exp) & 0xFFFF
                    if w.kind == "ARITH" and key in ("fWidth", "fHeight") and val != exp:
                        # one coefficient per channel: the counters hold the plane's size, not its sides
                        assert have["fWidth"] * have["fHeight"] == w.get("fWidth") * w.get("fHeight"), where
                        area_only += key == "fWidth"
                        continue
                    assert val == exp, f"{where} {w.kind}{w.index}.{key}: lifted {val!r}, traced {exp!r}"
                    fields += 1
                for key, values in _table_values(w, params, offsets).items() if w.kind in ("ARITH", "ACTIV") \
                        and not w.get("scalar") else ():
                    assert have[key] == values, f"{where} {w.kind}{w.index}.{key}"
                    tables += 1
                units += 1
    assert units == 481
    assert fields > 15000
    assert irrecoverable == _IRRECOVERABLE
    assert area_only == 138
    assert tables == 69 + 69 * 2 + 65 * 2


def test_unit_registers_without_a_struct_field_are_kept(tmp_path):
    """A CONVACC with its iteration register set (the runtime's struct has no field for it) and a
    DECUN (no struct rebuilt): both keep their register fields as `reg_<REGISTER>_<FIELD>`; an ARITH
    whose coefficients are written through the translated window holds them as `mem_*`."""
    write = lambda unit, reg, value: (unit << 26 | reg << 16 | 31 << 10 | 0x00, value)  # noqa: E731
    poll_end = 5 << 26 | 0 << 16 | 31 << 10 | 31 << 5 | 0x04
    # ARITH in vector mode, one coefficient per channel: depth 2, planes of 6 elements, 2 channels
    arith_ctrl = 1 << 2 | 1 << 3 | 1 << 4 | 1 << 7 | 1 << 21 | 1 << 22 | 2 << 26
    program = [LABEL_3, *write(15, 11, 7 | 2 << 16), *write(19, 2, 0x1234),
               *write(23, 0, arith_ctrl), *write(23, 4, 2 - 1), *write(23, 5, 6 * 2 - 1), *write(23, 6, 6 * 2 - 1),
               *write(23, 11, 1), *write(23, 256, 0x00050003), *write(23, 257, 9), *write(23, 258, 0x00060004),
               *write(23, 259, 10), poll_end, 100, 0, 0x0C]
    (blob,) = read_ecblobs(_header(tmp_path, _program(*program))).values()
    (epoch,) = lift_epochs(blob)
    arith, conv, decun = epoch.units
    assert (conv.kind, conv.get("reg_ITER_PERIOD"), conv.get("reg_ITER_NUMBER")) == ("CONVACC", 7, 2)
    assert conv.get("fWidth") == 0xFFFF // 1 and conv.get("right_crop") == 0  # registers at reset
    assert decun.kind == "DECUN" and all(k.startswith("reg_") for k, _ in decun.fields) and decun.fields
    assert (arith.get("bcast"), arith.get("batchDepth"), arith.get("fWidth"), arith.get("fChannels")) == (
        "ARITH_BCAST_CHAN", 2, 6, 2)
    assert (arith.get("mem_A"), arith.get("mem_B"), arith.get("mem_C")) == ((3, 4), (5, 6), (9, 10))
    assert arith.get("A_vector") is None and arith.get("vec_precision") is None
