"""Text assembly: byte-exact round trip, hardware-unit comments, errors naming the line."""

from __future__ import annotations

import dataclasses

import pytest

from conftest import conv_program
from npusim.errors import AssemblyError
from npusim.hw import load_profile
from npusim.program.asm import assemble, disassemble
from npusim.program.blob import encode_blob, load_blob
from npusim.program.model import Buffer, Constant, Header

PROFILE = load_profile()

HAND = """\
; a copy epoch written by hand
.header profile=n657 compiler=hand compiler_version="0.0.1"
.buffer name=a kind=input pool=npuRAM3 offset=0x0 size=3136 align=128 shape=[1,16,14,14] layout=blocked16
.buffer name=b kind=output pool=npuRAM4 offset=0x100 size=3136 align=128 shape=[1,16,14,14] layout=blocked16 \
producer=copy
.layer copy
EPOCH id=3
SE engine=0 dir=read port=0 layout=blocked16 dtype=int8 base=0x34200000 limit=0x34200c80 run=224 n1=14 s1=224 \
n2=1 s2=0 n3=1 s3=0
SE engine=5 dir=write port=1 layout=blocked16 dtype=int8 base=0x34270100 limit=0 run=224 n1=14 s1=224 n2=1 s2=0 \
n3=1 s3=0
LINK src_kind=SE src=0 dst_kind=SE dst=5 dst_port=0   ; straight through the stream switch
RUN
WAIT
END
""".replace("\\\n", "")


def test_round_trip_is_byte_exact(program):
    text = disassemble(program, PROFILE)
    again = assemble(text)
    assert encode_blob(again, PROFILE) == encode_blob(program, PROFILE)
    assert disassemble(again, PROFILE) == text


def test_disassembly_shows_decoded_bytes_and_hardware_units(program):
    text = disassemble(program, PROFILE)
    se0 = next(line for line in text.splitlines() if line.startswith("SE engine=0"))
    assert "s1=256" in se0 and "s1=2 (granule 128 B)" in se0  # compiler asked 224 B
    assert ".layer conv1\nEPOCH id=0" in text
    assert text.count(".data ") == -(-len(program.constants[0].data) // 32) + -(-len(program.constants[1].data) // 32)


def test_hand_written_program(tmp_path):
    prog = assemble(HAND)
    assert prog.header.compiler == "hand" and prog.debug == {0: "copy"}
    assert prog.buffer("b").producer == "copy" and prog.buffer("a").shape == (1, 16, 14, 14)
    assert prog.commands[1]["s1"] == 224
    loaded = load_blob(encode_blob(prog, PROFILE))
    assert loaded.commands[1]["s1"] == 256  # what the hardware uses
    assert encode_blob(assemble(disassemble(loaded, PROFILE)), PROFILE) == encode_blob(prog, PROFILE)


def test_odd_names_and_values_round_trip():
    p = conv_program()
    b = dataclasses.replace(p.buffers[0], name="in put; \"x\"", consumers=("a b", "1st"), scale=1e-05,
                            producer="node/with:chars", zero_point=-128)
    c = Constant("empty", "octoFlash", 0x4000, b"")
    q = dataclasses.replace(p, buffers=[b] + p.buffers[1:], constants=p.constants + [c],
                            debug={0: "conv 1 ; tricky", 10: "123"},
                            header=Header(compiler="x y", compiler_version="2.0-rc1"))
    again = assemble(disassemble(q, PROFILE))
    assert again.buffers[0] == b and again.constants[-1] == c and again.debug == q.debug
    assert encode_blob(again, PROFILE) == encode_blob(q, PROFILE)


def test_granule_override_changes_disassembly(program):
    p64 = load_profile(overrides=["alignment.granule=64"])
    assert "s1=256" in disassemble(program, PROFILE)
    assert "s1=224" not in disassemble(program, PROFILE)
    assert "s1=256" in disassemble(program, p64) and "s1=4 (granule 64 B)" in disassemble(program, p64)


@pytest.mark.parametrize("edit, line, needle", [
    (("EPOCH id=3", "EPOCH id=3 speed=9"), 6, "EPOCH has no field 'speed'"),
    (("EPOCH id=3", "EPOCH"), 6, "missing field id="),
    (("EPOCH id=3", "EPOHC id=3"), 6, "unknown command or directive 'EPOHC'"),
    (("dir=read", "dir=up"), 7, "SE.dir='up'"),
    (("engine=0", "engine=99"), 7, "engine=99"),
    (("EPOCH id=3", "EPOCH id=3 id=4"), 6, "id given twice"),
    ((".layer copy", ".layer"), 5, ".layer takes one name"),
    ((".layer copy", ".frob copy"), 5, "unknown directive '.frob'"),
    (("kind=input", "kind=input colour=red"), 3, "unknown key 'colour'"),
    (("offset=0x0 ", ""), 3, "missing offset="),
    (("shape=[1,16,14,14]", "shape=[1,"), 3, "bad quoted value"),
    (("shape=[1,16,14,14]", "shape=[\"a\"]"), 3, "expected a list of int"),
    ((".header profile=n657", ".header profile=n999"), 6, "target profile 'n999'"),
    (("END", "END\n.layer dangling"), 13, ".layer is not followed by a command"),
])
def test_errors_name_the_line(edit, line, needle):
    text = HAND.replace(*edit, 1)
    with pytest.raises(AssemblyError) as e:
        assemble(text)
    msg = str(e.value)
    assert msg.startswith(f"line {line}:") and needle in msg, msg
    assert "\n" not in msg


def test_const_data_errors():
    head = ".const name=w pool=octoFlash offset=0 size=4\n"
    assert assemble(head + ".data 0102\n.data 0304\nEND\n").constants[0].data == b"\1\2\3\4"
    with pytest.raises(AssemblyError, match="line 1: .const size=4 but 2 data bytes"):
        assemble(head + ".data 0102\nEND\n")
    with pytest.raises(AssemblyError, match="line 2: .data: 'zz' is not hex"):
        assemble(head + ".data zz\n")
    with pytest.raises(AssemblyError, match="line 1: .data without"):
        assemble(".data 00\n")


def test_header_must_come_first():
    with pytest.raises(AssemblyError, match="line 2: .header must come once"):
        assemble("END\n.header profile=n657\n")


def test_buffer_defaults_follow_the_model():
    prog = assemble(".buffer name=t kind=scratch pool=cpuRAM2 offset=64 size=8 align=8\nEND\n")
    assert prog.buffers == [Buffer("t", "scratch", "cpuRAM2", 64, 8, 8)]


def test_unrepresentable_values_are_reported_or_refused(tmp_path, capsys):
    """s1=224 on a blocked16 stream is stored as 2 granules: the hardware walks 256 B lines."""
    notes = []
    prog = assemble(HAND, notes=notes)
    assert prog.commands[1]["s1"] == 224
    assert len(notes) == 2 and all("s1=224 is not a whole number of granules of 128 B: the hardware uses 256" in n
                                   for n in notes)
    assert notes[0].startswith("line ")
    with pytest.raises(AssemblyError, match=r"line \d+: SE s1=224 .* the hardware uses 256"):
        assemble(HAND, strict=True)
    from npusim.cli import main

    src = tmp_path / "hand.s"
    src.write_text(HAND)
    assert main(["asm", str(src), "-o", str(tmp_path / "h.npu")]) == 0
    err = capsys.readouterr().err
    assert err.count("npusim: warning:") == 2 and "the hardware uses 256" in err
    assert main(["asm", str(src), "-o", str(tmp_path / "h.npu"), "--strict"]) == 65
    assert "the hardware uses 256" in capsys.readouterr().err


@pytest.mark.parametrize("line, want", [
    (".data 0a0b0c", [".data", "0a0b0c"]),
    ("  .data\u00a0ff\u2003ee  ", [".data", "ff", "ee"]),  # every whitespace str.isspace knows splits
    ("SE a=1 b=0x10 c=-2.5 d=x ; comment e=2", ["SE", ("a", 1), ("b", 16), ("c", -2.5), ("d", "x")]),
    ('.buffer name="a b" shape=[1, 2] w[3]', [".buffer", ("name", "a b"), ("shape", [1, 2]), "w[3]"]),
    ('"q";x', ["q"]),
    ("a;b", ["a"]),
    ("k= v", [("k", ""), "v"]),
    ("", []),
])
def test_tokens_split_words_pairs_and_quoted_values(line, want):
    from npusim.program.asm import _tokens

    assert _tokens(line, 1) == want
