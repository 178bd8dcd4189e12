"""One set of load-time checks for blobs and in-memory Programs; hardware view; strict fields; inputs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import npusim
from npusim.errors import AssemblyError, BlobError, DataError, InvalidInputError
from npusim.program.asm import assemble, disassemble
from npusim.program.codec import UNKNOWN_OP, Command, decode, encode, hardware_view
from npusim.program.model import Header
from npusim.program.spec import load_isa
from npusim.program.validate import check_versions, resolve_target_profile, validate_program
from test_engine_build import PROFILE, Builder, arith_cmd, copy_program

ISA = load_isa()


def _x(b):
    return np.zeros(b.buffers[0].shape, np.float32)


def _add_epoch(b, x, y, params):
    """One ARITH add epoch x + x -> y with its parameter table at `params`."""
    b.epoch(0, "add")
    b.se_buf(0, "read", x)
    b.se_buf(1, "read", x)
    arith_cmd(b, 0, "add", 4, 4, 16, params=params)
    b.se_buf(5, "write", y)
    b.link("SE0", "ARITH0", 0)
    b.link("SE1", "ARITH0", 1)
    b.link("ARITH0", "SE5")
    b.run_wait()


@pytest.mark.parametrize("mutate,needle", [
    (lambda p: p.buffers.__setitem__(0, dataclasses.replace(p.buffers[0], offset=0x7FFFF)), "lies outside pool"),
    (lambda p: p.buffers.__setitem__(0, dataclasses.replace(p.buffers[0], pool="nowhere")), "unknown pool"),
    (lambda p: p.buffers.__setitem__(0, dataclasses.replace(p.buffers[0], scale=float("nan"))), "scale"),
    (lambda p: p.buffers.__setitem__(0, dataclasses.replace(p.buffers[0], align=3)), "power of two"),
    (lambda p: p.buffers.append(p.buffers[0]), "duplicate buffer name 'x'"),
    (lambda p: p.commands.insert(0, Command("BOGUS", {})), "unknown command 'BOGUS'"),
    (lambda p: p.debug.__setitem__(999, "ghost"), "debug entry for command 999"),
])
def test_run_of_an_in_memory_program_makes_the_load_time_checks(mutate, needle):
    b = copy_program()
    prog = b.program()
    mutate(prog)
    with pytest.raises(InvalidInputError, match=needle):
        npusim.run(prog, {"x": _x(b)})
    with pytest.raises(BlobError, match=needle):
        validate_program(prog, PROFILE)


def test_in_memory_program_versions_are_checked_once():
    b = copy_program()
    for header, needle in ((Header(isa_version=99), "ISA version 99"), (Header(min_runtime="99.0"), "runtime >= 99.0"),
                           (Header(min_runtime="one"), "not a version")):
        prog = dataclasses.replace(b.program(), header=header)
        with pytest.raises(InvalidInputError, match=needle):
            npusim.run(prog, {"x": _x(b)})
        with pytest.raises(BlobError, match=needle):
            check_versions(header, ISA)


def test_target_profile_is_a_builtin_name_never_a_path(tmp_path):
    evil = tmp_path / "evil.toml"
    evil.write_text("this is not read")
    for name in (str(evil), "../n657", "evil.toml"):
        with pytest.raises(BlobError, match="invalid target profile"):
            resolve_target_profile(Header(profile=name))
    with pytest.raises(BlobError, match="unknown profile 'n999'"):
        resolve_target_profile(Header(profile="n999"))
    assert resolve_target_profile(Header(profile="n657")).name == "n657"
    with pytest.raises(AssemblyError, match="invalid target profile"):
        assemble(f'.header profile="{evil}"\nEND\n')
    b = copy_program()
    with pytest.raises(InvalidInputError, match="invalid target profile"):
        npusim.run(dataclasses.replace(b.program(), header=Header(profile=str(evil))), {"x": _x(b)})


def test_two_configs_of_one_engine_are_refused_by_the_epoch_controller():
    b = copy_program()
    i = next(k for k, c in enumerate(b.commands) if c.op == "SE")
    b.commands.insert(i + 1, b.commands[i])  # SE0 configured twice
    res = npusim.run(b.program(), {"x": _x(b)})
    assert res.faults[0].cls == "bad-descriptor" and "SE0 is configured twice" in res.faults[0].message
    assert res.faults[0].command == i + 1
    with pytest.raises(InvalidInputError, match="configured twice"):
        npusim.load(b.program(), verify=True)


def test_unknown_opcode_decodes_only_when_not_strict():
    word = 0x1234_0000_0000_00EE
    with pytest.raises(BlobError, match="unknown opcode 0xee"):
        decode([word], ISA, PROFILE)
    (cmd,) = decode([word], ISA, PROFILE, strict=False)
    assert cmd == Command(UNKNOWN_OP, {"opcode": 0xEE, "word": word})
    assert encode(cmd, ISA, PROFILE) == [word] and hardware_view(cmd, ISA, PROFILE) == cmd
    b = copy_program()
    b.commands.insert(0, cmd)
    text = disassemble(b.program(), PROFILE)
    assert "UNKNOWN opcode=0xee" in text
    assert assemble(text).commands[0] == cmd


def test_hardware_view_rounds_like_the_hardware():
    b = copy_program(4, 13, 16, line_align=16)
    se = next(c for c in b.commands if c.op == "SE")
    assert se["s1"] == 208 and hardware_view(se, ISA, PROFILE)["s1"] == 256


def test_a_compiled_program_carries_the_hardware_view_of_every_command():
    """compile encodes and decodes every command once; what it keeps is what the hardware reads
    (a stride the encoding rounds up stays rounded), and a changed program forgets it."""
    from npusim import zoo
    from npusim.program.validate import hardware_views

    isa, profile = load_isa(), npusim.load_profile()
    prog = npusim.compile(zoo.resnet50(size=32), npusim.CompileOptions(mem_align=16), profile=profile)
    views = hardware_views(prog, isa, profile)
    assert views == [hardware_view(c, isa, profile) for c in prog.commands]
    assert views != prog.commands  # at --mem-align 16 some strides take the hardware's 128 B rounding
    assert hardware_views(prog, isa, npusim.load_profile(overrides=["pool.npuRAM3.banks=2"])) is None
    changed = dataclasses.replace(prog, commands=list(prog.commands[:-1]) + [dataclasses.replace(prog.commands[-1])])
    assert hardware_views(changed, isa, profile) is None


def test_strict_fields_come_from_the_spec():
    """Marking ARITH.params strict to the 128 B granule (in the spec) makes an 8 B-aligned table
    a misaligned-access: the engine reads FieldSpec.strict, not a table of its own."""
    b = Builder()
    x = b.fm("x", "input", 4, 4, 16)
    y = b.fm("y", "output", 4, 4, 16, pool="npuRAM4")
    b.const("p", np.array([1 << 30, 0, 30, 0], "<i4").tobytes(), align=8)
    b.const("pad", b"\0" * 8, align=8)
    params = b.const("p2", np.array([1 << 30, 0, 30, 0], "<i4").tobytes(), align=8)
    assert params % 128
    _add_epoch(b, x, y, params)
    from npusim.engine.hwfaults import strict_problems

    arith = next(c for c in b.commands if c.op == "ARITH")
    assert strict_problems("ARITH", arith.args, ISA, PROFILE) == []
    spec = ISA.command("ARITH")
    fields = tuple(dataclasses.replace(f, strict="granule") if f.name == "params" else f for f in spec.fields)
    isa2 = dataclasses.replace(ISA, commands=tuple(dataclasses.replace(c, fields=fields) if c.name == "ARITH" else c
                                                   for c in ISA.commands))
    assert strict_problems("ARITH", arith.args, isa2, PROFILE) == [("params", params, "granule", 128)]


def test_block_size_comes_from_the_isa():
    from npusim.engine.config import UnitConfig

    args = dict(dtype="int8", layout="blocked16", op="copy", h=2, w=3, c=20, c2=0)
    assert UnitConfig("ARITH", 0, "ARITH", args, 0, 16).stream_bytes((2, 3, 20, "blocked16")) == 2 * 2 * 3 * 16
    assert UnitConfig("ARITH", 0, "ARITH", args, 0, 8).stream_bytes((2, 3, 20, "blocked16")) == 3 * 2 * 3 * 8
    assert ISA.layouts["blocked16"]["block"] == 16


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_inputs_are_refused_by_name(bad):
    b = copy_program()
    x = _x(b)
    x.flat[3] = bad
    with pytest.raises(DataError, match="input 'x': 1 NaN or infinite"):
        npusim.run(b.program(), {"x": x})


def test_missing_input_message_names_both_ways():
    b = copy_program()
    with pytest.raises(DataError, match=r"bind it, or use random inputs \(--random-input / random_inputs=True\)"):
        npusim.run(b.program())


def test_a_table_the_unit_cannot_execute_is_a_fault_not_an_exception():
    b = Builder()
    x = b.fm("x", "input", 4, 4, 16)
    y = b.fm("y", "output", 4, 4, 16, pool="npuRAM4")
    params = b.const("p", np.array([[1 << 30, 1 << 30, 99, 0]] * 1, "<i4").tobytes())  # shift 99
    _add_epoch(b, x, y, params)
    res = npusim.run(b.program(), {"x": _x(b)})
    assert res.end_reason == "fault" and res.faults[0].cls == "bad-descriptor"
    assert res.faults[0].unit == "ARITH0" and "cannot execute" in res.faults[0].message
    assert npusim.run(b.program(), {"x": _x(b)}, options=npusim.RunOptions(timing_only=True)).status == "ok"
