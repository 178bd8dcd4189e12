"""Epoch-controller blobs of ST Edge AI Core: decoding, ST's listings, bad input, and the stream-engine /
stream-switch lifter against ST's own trace of the same blobs (fallguard_pe_yolov8n_pose256)."""

from __future__ import annotations

import time
from functools import lru_cache
from pathlib import Path

import pytest

from npusim.errors import EXIT_INVALID_INPUT, StImportError
from npusim.importers.stedgeai.ecblob import disassemble, lift_epochs, load_ec_spec, read_ecblobs
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
def test_decoding_and_lifting_the_largest_compile_takes_under_a_second():
    header = next((SHARED / "st_od_yolox480_dk").glob("*_ecblobs.h"))
    best = float("inf")
    for _ in range(2):
        t = time.perf_counter()
        blobs = read_ecblobs(header)
        for program in blobs.values():
            lift_epochs(program)
        best = min(best, time.perf_counter() - t)
    assert sum(len(p.instructions) for p in blobs.values()) == 23791
    assert best <= 1.0, f"{best:.2f} s"


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
    engines = links = stream_width_unseen = 0
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
                    # the memory width; the stream width is the consuming unit's (lifted with the units)
                    assert s.nbits_out == s.nbits_in < expected.pop("nbits_out"), f"{where} STRENG{s.engine}"
                    stream_width_unseen += 1
                assert {k: getattr(s, k) for k in expected} == expected, f"{where} STRENG{s.engine}"
                engines += 1
            assert _links(got.links) == _links(want.links), where
            links += len(got.links)
            assert list(got.enabled) == list(want.enabled), where
    assert engines == 680
    assert stream_width_unseen == 229
    assert links > 0


@needs_shared
def test_disassembly_can_name_units_and_registers():
    lines = disassemble(_blobs(FALLGUARD)["_ec_blob_147"], names=True)
    assert lines[3] == "write 7 0 0x880100  ; STRENG2.CTRL"
    assert "write 4 10 0x5  ; STRSWITCH0.DSTSTRENG8" in lines  # names from ATON's register map (isa/aton)
    assert lines[0] == "label 0x93"
