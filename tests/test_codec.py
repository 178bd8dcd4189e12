"""Encode/decode round trip of every command kind, generated from the ISA spec."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npusim.errors import BlobError
from npusim.hw import load_profile
from npusim.program.codec import Command, command_offsets, decode, decode_one, encode, field_unit_bytes, hardware_view
from npusim.program.spec import load_isa

ISA = load_isa()
PROFILE = load_profile()


@st.composite
def command_and_expected(draw, spec):
    """A random valid command of `spec` and the decoded values the hardware will see."""
    args, expected = {}, {}
    for f in spec.fields:
        if f.enum is not None:
            args[f.name] = expected[f.name] = draw(st.sampled_from(sorted(ISA.enums[f.enum])))
    for f in spec.fields:
        if f.enum is not None:
            continue
        step = field_unit_bytes(ISA, f, args, PROFILE)
        if f.signed:
            q = draw(st.integers(-(1 << (f.bits - 1)), (1 << (f.bits - 1)) - 1))
        else:
            q = draw(st.integers(0, f.mask))
        under = draw(st.integers(0, step - 1)) if f.round == "up" and q > 0 else 0
        args[f.name] = q * step - under
        expected[f.name] = q * step
    return Command(spec.name, args), expected


@pytest.mark.parametrize("name", [c.name for c in ISA.commands])
def test_round_trip_every_command(name):
    spec = ISA.command(name)

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(command_and_expected(spec))
    def check(pair):
        cmd, expected = pair
        words = encode(cmd, ISA, PROFILE)
        assert len(words) == spec.words and all(0 <= w < 1 << 64 for w in words)
        assert words[0] & 0xFF == spec.opcode
        back, nxt = decode_one(words, 0, ISA, PROFILE)
        assert nxt == spec.words and back.op == name
        assert dict(back.args) == expected
        assert encode(back, ISA, PROFILE) == words  # decoded values re-encode exactly
        assert hardware_view(cmd, ISA, PROFILE) == back  # from the fields' bits, no words: the same view

    check()


def test_fields_fit_their_words():
    for c in ISA.commands:
        for f in c.fields:
            assert f.shift + f.bits <= 64 and f.word < c.words, (c.name, f.name)
        assert len({c.opcode for c in ISA.commands}) == len(ISA.commands)


def se(**kw):
    base = dict(engine=0, dir="read", port=0, layout="blocked16", dtype="int8", base=0x34200000, limit=0,
                run=448, n1=14, s1=448, n2=1, s2=0, n3=1, s3=0)
    base.update(kw)
    return Command("SE", base)


def test_granule_round_up_832_becomes_896():
    back = decode(encode(se(s1=832, s2=832 * 14), ISA, PROFILE), ISA, PROFILE)[0]
    assert back["s1"] == 896 and back["s2"] == 11648
    # the stride unit follows the layout: image strides are 8 B words, linear ones bytes
    assert decode(encode(se(layout="image", s1=834), ISA, PROFILE), ISA, PROFILE)[0]["s1"] == 840
    assert decode(encode(se(layout="linear", s1=833), ISA, PROFILE), ISA, PROFILE)[0]["s1"] == 833


def test_granule_comes_from_the_profile():
    p64 = load_profile(overrides=["alignment.granule=64"])
    assert decode(encode(se(s1=832), ISA, p64), ISA, p64)[0]["s1"] == 832
    assert decode(encode(se(s1=833), ISA, p64), ISA, p64)[0]["s1"] == 896


def test_limit_rounds_up_to_8_bytes_and_base_keeps_low_bits():
    back = decode(encode(se(limit=0x34201C21, base=0x34200003), ISA, PROFILE), ISA, PROFILE)[0]
    assert back["limit"] == 0x34201C28
    assert back["base"] == 0x34200003  # stored; the hardware ignores the low bits when it runs


@pytest.mark.parametrize("cmd, needle", [
    (se(engine=16), "engine=16"),
    (se(run=1 << 24), "run"),
    (se(dir="sideways"), "dir='sideways'"),
    (se(base=-8), "base"),
    (se(n1="3"), "expected an integer"),
    (se(n1=None), "expected an integer"),
    (se(n1=True), "expected an integer"),
    (se(dir=None), "missing value"),
    (Command("CONV", {"dtype": "int8", "in_layout": "image", "out_layout": "linear", "act": "none",
                      "in_zp": 128}), "in_zp=128"),
    (Command("NOPE", {}), "unknown command"),
    (Command("RUN", {"x": 1}), "unknown fields"),
])
def test_encode_errors(cmd, needle):
    from npusim.errors import NpusimError

    with pytest.raises(NpusimError) as e:
        encode(cmd, ISA, PROFILE)
    assert needle in str(e.value)
    with pytest.raises(NpusimError) as v:  # the view refuses it with the same words
        hardware_view(cmd, ISA, PROFILE)
    assert str(v.value) == str(e.value)


def test_view_follows_each_profile():
    """Field steps are resolved once per (ISA, profile): two profiles, two views of the same command."""
    p64 = load_profile(overrides=["alignment.granule=64"])
    for _ in range(2):
        assert hardware_view(se(s1=833), ISA, PROFILE)["s1"] == 896
        assert hardware_view(se(s1=833), ISA, p64)["s1"] == 896 and hardware_view(se(s1=832), ISA, p64)["s1"] == 832
        assert hardware_view(se(s1=832), ISA, PROFILE)["s1"] == 896
    unknown = Command("UNKNOWN", {"opcode": 0x02, "word": 0x102})
    assert hardware_view(unknown, ISA, PROFILE) == decode_one([0x102], 0, ISA, PROFILE, strict=False)[0]


def test_decode_errors():
    with pytest.raises(BlobError, match="unknown opcode 0x02"):
        decode([0x02], ISA, PROFILE)
    words = encode(se(), ISA, PROFILE)
    with pytest.raises(BlobError, match="needs 4 words"):
        decode(words[:2], ISA, PROFILE)
    f = ISA.command("SE").field("layout")
    bad = list(words)
    bad[f.word] |= 3 << f.shift  # layout code 3 is undefined
    with pytest.raises(BlobError, match="undefined code 3"):
        decode(bad, ISA, PROFILE)


def test_command_offsets():
    cmds = [Command("EPOCH", {"id": 1}), se(), Command("RUN"), Command("END")]
    assert command_offsets(cmds, ISA) == [0, 1, 1 + ISA.command("SE").words, 2 + ISA.command("SE").words]


def test_isa_readme_is_generated_from_the_spec():
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("gen_isa_doc", root / "scripts" / "gen_isa_doc.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    text = (root / "isa" / "README.md").read_text()
    assert gen.updated(text, ISA) == text, "isa/README.md is stale: run python scripts/gen_isa_doc.py"
    for c in ISA.commands:
        assert f"#### {c.name} (opcode {c.opcode:#04x}" in text
        for f in c.fields:
            assert f"| {c.name} | {f.name} | {f.word} | [{f.shift}, {f.shift + f.bits}) |" in text
