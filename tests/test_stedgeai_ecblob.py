"""Epoch-controller blobs of ST Edge AI Core: decoding, ST's listings, bad input, and the stream-engine /
stream-switch lifter against ST's own trace of the same blobs (fallguard_pe_yolov8n_pose256)."""

from __future__ import annotations

import time
from functools import lru_cache
from pathlib import Path

import pytest

from npusim.errors import EXIT_INVALID_INPUT, StImportError
from npusim.importers.stedgeai.ecblob import disassemble, load_ec_spec, read_ecblobs


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


@needs_shared
def test_decoding_the_largest_compile_takes_under_a_second():
    header = next((SHARED / "st_od_yolox480_dk").glob("*_ecblobs.h"))
    best = float("inf")
    for _ in range(2):
        t = time.perf_counter()
        blobs = read_ecblobs(header)
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


def test_a_relocation_of_an_instruction_word_is_refused(tmp_path):
    # relocatable binary: header (magic, table at byte 16, no debug section, program at byte 44);
    # the table: one relocation, its name at table byte 20, its one word listed at table byte 16:
    # word 0, the label itself
    table = [1, 20, 1, 16, 0, int.from_bytes(b"_sym", "little"), 0]
    header = [0xECBF0020, 16, 0, 44]
    u = header + table + [0xCA057A7A, 1, LABEL_3]
    words = [u[k] | u[k + 1] << 32 for k in range(0, len(u), 2)]
    msg = _error(_header(tmp_path, words, "_ec_blob_7_reloc"))
    assert "_ec_blob_7" in msg and "instruction word 0" in msg and "_sym" in msg


def test_a_non_literal_element_is_refused(tmp_path):
    p = tmp_path / "x_ecblobs.h"
    p.write_text("static const uint64_t _ec_blob_1[] = { 0x00000001ca057a7aUL, FOO + 1 };\n")
    assert "not a number" in _error(p)


def test_the_encoding_is_data():
    spec = load_ec_spec()
    assert {o.name: o.code for o in spec.opcodes.values()} == {
        "write": 0, "writebit": 1, "burst": 2, "burstinc": 3, "poll": 4, "irq": 0x0C, "label": 0x1D}
    assert spec.unit_names[5] == "STRENG0" and spec.unit_names[14] == "STRENG9" and spec.unit_names[4] == "STRSWITCH0"
