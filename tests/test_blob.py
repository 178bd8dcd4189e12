"""Blob container: round trip, one test per class of bad blob, verifier, fuzzing."""

from __future__ import annotations

import dataclasses
import re
import struct
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import npusim
from conftest import conv_program
from npusim.errors import BlobError, NpusimError
from npusim.hw import load_profile
from npusim.program.blob import encode_blob, load_blob, read_header
from npusim.program.container import MAGIC
from npusim.program.codec import Command
from npusim.program.model import Buffer, Header, Program
from npusim.program.verify import verify

PROFILE = load_profile()
BLOB = encode_blob(conv_program(), PROFILE)
IDS = {"strings": 1, "meta": 2, "commands": 3, "constants": 4, "constdata": 5, "buffers": 6, "debug": 7,
       "checksum": 8}


def table(blob: bytes) -> dict[int, tuple[int, int, int]]:
    """section id -> (position of its table entry, offset, length); parsed independently of the loader."""
    count = struct.unpack_from("<H", blob, 12)[0]
    out = {}
    for i in range(count):
        pos = 16 + 12 * i
        sid, _, off, ln = struct.unpack_from("<HHII", blob, pos)
        out[sid] = (pos, off, ln)
    return out


def reseal(blob: bytes | bytearray) -> bytes:
    """Fix the file size and checksum after a deliberate corruption."""
    b = bytearray(blob)
    struct.pack_into("<I", b, 8, len(b))
    _, off, _ = table(b).get(IDS["checksum"], (0, len(b), 0))
    if off + 4 <= len(b):
        b[off:off + 4] = b"\0\0\0\0"
        struct.pack_into("<I", b, off, zlib.crc32(b))
    return bytes(b)


def patch(blob: bytes, at: int, fmt: str, *values) -> bytes:
    b = bytearray(blob)
    struct.pack_into(fmt, b, at, *values)
    return reseal(b)


def set_entry(blob, name, offset=None, length=None, sid=None):
    pos, off, ln = table(blob)[IDS[name]]
    return patch(blob, pos, "<HHII", IDS[name] if sid is None else sid, 0,
                 off if offset is None else offset, ln if length is None else length)


def test_round_trip(program):
    back = load_blob(BLOB)
    assert back.buffers == program.buffers
    assert back.constants == program.constants
    assert back.debug == program.debug
    assert back.header == dataclasses.replace(program.header, format_version=1, isa_version=4)
    assert back.commands[1]["s1"] == 256  # 224 B lines occupy two 128 B granules on the hardware
    assert encode_blob(back, PROFILE) == BLOB
    assert encode_blob(conv_program(), PROFILE) == BLOB  # deterministic


def test_load_from_path_and_header(tmp_path):
    f = tmp_path / "m.npu"
    f.write_bytes(BLOB)
    assert encode_blob(load_blob(f), PROFILE) == BLOB
    assert encode_blob(load_blob(str(f), PROFILE), PROFILE) == BLOB
    h = read_header(f)
    assert (h.format_version, h.isa_version, h.profile, h.compiler, h.compiler_version, h.min_runtime) == \
        (1, 4, "n657", "npusim", "0.1.0", "0.1.0")
    assert h.file_size == len(BLOB) and len(h.sections) == 8
    with pytest.raises(BlobError, match="no such file"):
        load_blob(tmp_path / "missing.npu")


def expect(blob, needle, **kw):
    with pytest.raises(BlobError) as e:
        load_blob(blob, **kw)
    msg = str(e.value)
    assert needle in msg, msg
    assert "\n" not in msg
    return msg


def test_bad_magic():
    expect(b"ELF\x7f" + BLOB[4:], "bad magic")


def test_too_short():
    expect(BLOB[:10], "too short")
    expect(b"", "too short")


def test_unsupported_format_version():
    expect(patch(BLOB, 4, "<H", 3), "unsupported blob format version 3")


def test_format_sections_must_match():
    """A program's sections relabelled as an imported program's format (2) are refused by their set."""
    expect(patch(BLOB, 4, "<H", 2), "missing stedgeai section")


def test_unsupported_isa_version():
    expect(patch(BLOB, 6, "<H", 9), "ISA version 9")


def test_runtime_too_old():
    prog = dataclasses.replace(conv_program(), header=Header(min_runtime="99.0"))
    expect(encode_blob(prog, PROFILE), "needs runtime >= 99.0")
    prog = dataclasses.replace(conv_program(), header=Header(min_runtime="soon"))
    expect(encode_blob(prog, PROFILE), "not a version")


def test_truncated_and_padded():
    expect(BLOB[:-7], "truncated")
    expect(BLOB + b"\0", f"has {len(BLOB) + 1}")


def test_section_outside_file():
    expect(set_entry(BLOB, "buffers", length=10**6), "outside the file")
    expect(set_entry(BLOB, "strings", offset=4), "outside the file")  # inside the header


def test_overlapping_sections():
    _, off, _ = table(BLOB)[IDS["meta"]]
    expect(set_entry(BLOB, "commands", offset=off), "overlaps")


def test_duplicate_unknown_and_missing_sections():
    expect(set_entry(BLOB, "debug", sid=IDS["buffers"]), "duplicate buffers section")
    expect(set_entry(BLOB, "debug", sid=42), "unknown section id 42")
    short = patch(BLOB, 12, "<H", 7)  # drop the checksum entry from the table
    expect(short, "missing checksum section")


def test_checksum_mismatch():
    b = bytearray(BLOB)
    _, off, _ = table(BLOB)[IDS["constdata"]]
    b[off] ^= 0x40
    expect(bytes(b), "checksum mismatch")


def test_commands_not_whole_words():
    _, off, ln = table(BLOB)[IDS["commands"]]
    expect(set_entry(BLOB, "commands", length=ln - 3), "whole number of 64-bit words")


def test_unknown_opcode():
    _, off, _ = table(BLOB)[IDS["commands"]]
    expect(patch(BLOB, off, "<B", 0x02), "unknown opcode 0x02")


def test_undefined_enum_code():
    from npusim.program.spec import load_isa

    f = load_isa().command("SE").field("dtype")
    _, off, _ = table(BLOB)[IDS["commands"]]
    at = off + 8 * (1 + f.word)  # command 1 is an SE
    word = struct.unpack_from("<Q", BLOB, at)[0] | (3 << f.shift)
    expect(patch(BLOB, at, "<Q", word), "SE.dtype has undefined code 3")


def test_string_index_out_of_range():
    _, off, _ = table(BLOB)[IDS["meta"]]
    expect(patch(BLOB, off, "<I", 10**6), "string index 1000000 out of range")


def test_count_larger_than_section_is_refused_without_allocating():
    for name in ("strings", "constants", "buffers", "debug"):
        _, off, _ = table(BLOB)[IDS[name]]
        expect(patch(BLOB, off, "<I", 0xFFFFFFFF), "do not fit")


def with_(**kw) -> bytes:
    return encode_blob(dataclasses.replace(conv_program(), **kw), PROFILE)


def test_buffer_outside_its_pool():
    p = conv_program()
    late = dataclasses.replace(p.buffers[0], pool="npuRAM6", offset=448 * 1024 - 16)  # npuRAM6 -> gap
    expect(with_(buffers=[late] + p.buffers[1:]), "outside pool npuRAM6: it runs past npuRAM6's end")
    past = dataclasses.replace(p.buffers[0], offset=448 * 1024)  # starts past its own pool
    expect(with_(buffers=[past] + p.buffers[1:]), "outside pool npuRAM3")


def test_buffer_may_span_contiguous_pools():
    p = conv_program()
    span = dataclasses.replace(p.buffers[0], offset=448 * 1024 - 16)  # npuRAM3 -> npuRAM4
    whole = dataclasses.replace(p.buffers[0], name="all", offset=0, size=4 * 448 * 1024)  # npuRAM3..6 exactly
    q = load_blob(with_(buffers=[span, whole] + p.buffers[1:]), profile=PROFILE)
    assert (q.buffers[0].pool, q.buffers[0].offset) == ("npuRAM3", 448 * 1024 - 16)
    assert q.buffers[1].size == 4 * 448 * 1024
    over = dataclasses.replace(whole, size=4 * 448 * 1024 + 1)
    expect(with_(buffers=[over] + p.buffers[1:]), "into unmapped memory")


def test_span_into_readonly_pool_is_refused():
    prof = load_profile(overrides=["pool.npuRAM4.perms='r'"])  # a read-only pool right after npuRAM3
    p = conv_program()
    span = dataclasses.replace(p.buffers[0], offset=448 * 1024 - 16)
    with pytest.raises(BlobError, match="runs into pool npuRAM4 .perms 'r'.") as e:
        load_blob(encode_blob(dataclasses.replace(p, buffers=[span] + p.buffers[1:]), prof), profile=prof)
    assert "\n" not in str(e.value)


def test_buffer_larger_than_target_memory():
    p = conv_program()
    big = dataclasses.replace(p.buffers[0], size=0xFFFFFFFF)
    expect(with_(buffers=[big] + p.buffers[1:]), "outside pool")


def test_unknown_pool():
    p = conv_program()
    b = dataclasses.replace(p.buffers[0], pool="npuRAM9")
    expect(with_(buffers=[b] + p.buffers[1:]), "unknown pool 'npuRAM9'")
    c = dataclasses.replace(p.constants[0], pool="SRAM")
    expect(with_(constants=[c] + p.constants[1:]), "unknown pool 'SRAM'")


def test_constant_outside_pool_and_outside_file():
    p = conv_program()
    c = dataclasses.replace(p.constants[0], offset=61 * 1024 * 1024 - 10)
    expect(with_(constants=[c] + p.constants[1:]), "outside pool octoFlash")
    _, off, _ = table(BLOB)[IDS["constants"]]
    expect(patch(BLOB, off + 4 + 16, "<I", 10**7), "outside the")  # size field of constant 0


def test_bad_buffer_fields():
    p = conv_program()
    for change, needle in ((dict(align=24), "not a power of two"), (dict(scale=float("nan")), "scale"),
                           (dict(scale=0.0), "scale")):
        b = dataclasses.replace(p.buffers[0], **change)
        expect(with_(buffers=[b] + p.buffers[1:]), needle)
    _, off, _ = table(BLOB)[IDS["buffers"]]
    expect(patch(BLOB, off + 4 + 4, "<B", 9), "undefined kind code 9")
    expect(patch(BLOB, off + 4 + 6, "<B", 7), "undefined layout code 7")


def test_duplicate_names():
    p = conv_program()
    expect(with_(buffers=p.buffers + [p.buffers[0]]), "duplicate buffer name 'x'")


def test_debug_index_out_of_range():
    expect(with_(debug={0: "conv1", 99: "ghost"}), "debug entry for command 99")


def test_unknown_target_profile():
    expect(with_(header=Header(profile="n999")), "unknown profile 'n999'")
    expect(with_(header=Header(profile="../../etc/passwd")), "invalid target profile")
    assert load_blob(with_(header=Header(profile="n999")), PROFILE).header.profile == "n999"


def test_encode_refuses_unencodable(program):
    bad = dataclasses.replace(program, commands=[Command("SE", {"engine": 99})])
    with pytest.raises(BlobError, match="cannot encode"):
        encode_blob(bad, PROFILE)


# ---------------------------------------------------------------- verifier

def replace_cmd(i, **args):
    p = conv_program()
    cmds = list(p.commands)
    cmds[i] = Command(cmds[i].op, {**cmds[i].args, **args})
    return cmds


def test_verifier_accepts_the_recipe(program):
    assert verify(program.commands, PROFILE) == []


@pytest.mark.parametrize("cmds, needle", [
    (replace_cmd(1, port=1), "stream engine 0 is wired to bus port 0"),
    (replace_cmd(1, engine=12), "the profile has only 10"),
    (replace_cmd(3, unit=3, kh=0), "kh=0 is below its minimum 1"),
    (replace_cmd(5, src=7), "source SE7 is not configured in this epoch"),
    (replace_cmd(5, dst_kind="POOL", dst=1), "sink POOL1 is not configured"),
    (replace_cmd(5, src=9, src_kind="CA"), "source CA9 does not exist"),
    (replace_cmd(7, dst=0), "sink SE0 is a read engine"),
    (replace_cmd(6, dst_port=2), "dst_port=2: CA has no input port 2"),
    (conv_program().commands[:-1], "does not end with END"),
    (conv_program().commands[1:], "outside an epoch"),
    ([c for c in conv_program().commands if c.op != "WAIT"], "WAIT"),
    ([c for c in conv_program().commands if c.op != "RUN"], "WAIT without a running epoch"),
    (conv_program().commands + [Command("RUN")], "comes after END"),
    (conv_program().commands[:2] + conv_program().commands[1:], "SE0 is configured twice"),
    ([], "program is empty"),
])
def test_verifier_flags(cmds, needle):
    problems = verify(cmds, PROFILE)
    assert any(needle in p for p in problems), problems


def test_loader_runs_the_verifier_unless_told_not_to():
    blob = encode_blob(dataclasses.replace(conv_program(), commands=replace_cmd(1, port=1)), PROFILE)
    expect(blob, "fails verification: command 1 (SE): port=1")
    assert load_blob(blob, verify=False).commands[1]["port"] == 1


def test_verifier_uses_the_profile():
    cmds = replace_cmd(1, port=1)
    p = load_profile(overrides=["bus.stream_engine_port=[1,0,0,0,0,1,1,1,1,1]"])
    assert verify(cmds, p) == []


# ---------------------------------------------------------------- fuzzing

RUN_PROFILE = load_profile(overrides=["epoch.timeout_cycles=200000"])  # short watchdog: bounded work


def _load_or_blob_error(data: bytes) -> None:
    """Whatever load_blob accepts (verified or not) runs, timing-only and functional, to a
    RunResult or an NpusimError: the loader and the engine are fuzzed as a pair."""
    for verify in (True, False):
        try:
            prog = load_blob(data, verify=verify)
        except NpusimError as e:
            assert isinstance(e, BlobError), repr(e)
            assert "\n" not in str(e)
            continue
        for timing_only in (True, False):  # functional runs keep going: every epoch's values run
            opts = npusim.RunOptions(timing_only=timing_only, keep_going=not timing_only, trace=False)
            try:
                res = npusim.run(prog, random_inputs=True, profile=RUN_PROFILE, options=opts)
            except NpusimError as e:
                assert "\n" not in str(e), repr(e)
            else:
                assert res.status in ("ok", "fault") and res.end_reason in ("done", "fault", "hang")


_T = dict(dtype="fp32", elem="fp32", layout="linear", rank=1, zp=0, d0=10, d1=0, d2=0, d3=0, d4=0, d5=0, d6=0, d7=0, line=0, plane=0,
          scale=0)
OTHER = encode_blob(Program([Command("HTENSOR", dict(slot=0, dir="read", addr=0x34200000, **_T)),
                             Command("HTENSOR", dict(slot=0, dir="write", addr=0x34200100, **_T)),
                             Command("HOST", dict(n_in=1, n_out=1, node_bytes=16, node=0x34200200)),
                             Command("END")],
                            buffers=[Buffer("v", "scratch", "npuRAM4", 64, 40, 8)],
                            debug={0: "softmax"}), PROFILE)
# no wall-clock deadline (the suite's profile has none): with two suites at once (load 13 on 2 cores) one
# example of test_fuzz_flip took 5.5 s against a 2 s deadline, while ~10 ms is typical on an idle machine
FUZZ = settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])


def test_no_property_test_has_a_wall_clock_deadline():
    assert FUZZ.deadline is None
    timed = [f"{p.name}: {m.group(0)}" for p in Path(__file__).parent.glob("*.py")
             for m in re.finditer(r"deadline\s*=\s*[0-9][^,)]*", p.read_text(encoding="utf-8"))]
    assert timed == []


@FUZZ
@given(st.integers(0, len(BLOB)))
def test_fuzz_truncate(n):
    _load_or_blob_error(BLOB[:n])


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(BLOB) - 1), st.integers(1, 255)), min_size=1, max_size=4),
       st.booleans())
def test_fuzz_flip(flips, sealed):
    b = bytearray(BLOB)
    for at, x in flips:
        b[at] ^= x
    if sealed and len(b) >= 64:  # recompute the checksum so corruption reaches the deeper checks
        try:
            b = bytearray(reseal(b))
        except struct.error:
            pass
    _load_or_blob_error(bytes(b))


@FUZZ
@given(st.integers(0, len(BLOB)), st.integers(0, len(OTHER)), st.booleans())
def test_fuzz_splice(i, j, sealed):
    b = BLOB[:i] + OTHER[j:]
    if sealed and len(b) >= 112:
        try:
            b = reseal(b)
        except struct.error:
            pass
    _load_or_blob_error(b)


@FUZZ
@given(st.binary(max_size=400))
def test_fuzz_random_bytes(data):
    _load_or_blob_error(MAGIC + b"\x01\x00\x01\x00" + data)
    _load_or_blob_error(data)


_CMD = table(BLOB)[IDS["commands"]]


@FUZZ
@given(st.lists(st.tuples(st.integers(0, _CMD[2] // 8 - 1), st.integers(8, 63)), min_size=1, max_size=3))
def test_fuzz_command_fields_then_run(flips):
    """Flip field bits (never the opcode byte) of the command words, reseal, load and run."""
    b = bytearray(BLOB)
    for word, bit in flips:
        b[_CMD[1] + word * 8 + bit // 8] ^= 1 << (bit % 8)
    _load_or_blob_error(reseal(b))
