"""Every fault path of the engine: faults are data in the RunResult, with exact addresses."""

from __future__ import annotations

import numpy as np

import npusim
from npusim.faults import validate_fault_json
from npusim.hw import load_profile
from npusim.program.codec import Command
from test_engine_build import PROFILE, Builder, arith_cmd, conv_cmd, copy_program

RNG = np.random.default_rng(7)


def x_for(b, name="x"):
    buf = next(x for x in b.buffers if x.name == name)
    return RNG.integers(-100, 100, size=buf.shape).astype(np.float32)


def only_fault(res, cls):
    assert res.status == "fault", res.report_text()
    assert res.faults and res.faults[0].cls == cls, [f.cls for f in res.faults]
    for entry in res.report_json()["faults"]:
        assert validate_fault_json(entry) == []
    return res.faults[0]


def test_granule_round_up_overflows_the_compilers_buffer():
    h, w, c = 4, 13, 16  # line = 208 B: the compiler aligns it to 16, the hardware stores 128 B granules
    b = copy_program(h, w, c, line_align=16)
    x = b.buffers[0]
    assert x.line_stride == 208 and x.size == 208 * h
    res = npusim.run(b.program(), {"x": x_for(b)})
    f = only_fault(res, "buffer-overflow")
    # hardware line stride 256: run 3 covers [768, 976), the buffer ends at 832
    assert f.address == b.addr(x) + 208 * h
    assert f.unit == "SE0" and f.epoch == 0 and f.command == 1 and f.layer == "copy"
    assert f.region.name == "x" and f.relation.where == "after" and f.relation.offset == 0
    assert res.end_reason == "fault"
    assert "buffer-overflow" in res.report_text()


def test_granule_aligned_compiler_runs_clean():
    b = copy_program(4, 13, 16, line_align=128)
    res = npusim.run(b.program(), {"x": x_for(b)})
    assert res.status == "ok" and not res.faults


def test_wrong_hardware_stride_gives_wrong_data_in_keep_going():
    b = copy_program(4, 13, 16, line_align=16, builder=Builder())
    x = x_for(b)
    res = npusim.run(b.program(), {"x": x}, options=npusim.RunOptions(keep_going=True))
    assert res.faults and res.end_reason == "done"
    y = res.raw_outputs["y"]
    assert np.array_equal(y[:, :, 0], x[:, :, 0])  # line 0 is read right
    assert not np.array_equal(y, x.astype(np.int8))  # later lines come from the wrong addresses


def _tail_buffer_program(pool, size, run, limit):
    b = Builder()
    p = PROFILE.pool_named(pool)
    x = b.fm("x", "input", 1, 1, size, pool=pool, offset=p.size - size)
    y = b.fm("y", "output", 1, 1, run, pool="npuRAM4")
    b.epoch(0, "tail")
    b.se(0, "read", b.addr(x), run, limit=limit)
    arith_cmd(b, 0, "copy", 1, 1, run)
    b.se_buf(5, "write", y)
    b.link("SE0", "ARITH0")
    b.link("ARITH0", "SE5")
    b.run_wait()
    return b, p


def test_read_past_the_pool_is_out_of_pool():
    b, p = _tail_buffer_program("npuRAM6", 64, 128, limit=0)
    f = only_fault(npusim.run(b.program(), {"x": x_for(b)}), "out-of-pool")
    assert f.address == p.end and f.access == "read" and f.unit == "SE0"


def test_prefetch_past_the_pool_is_a_bus_error_unless_limited():
    b, p = _tail_buffer_program("npuRAM6", 64, 64, limit=0)
    f = only_fault(npusim.run(b.program(), {"x": x_for(b)}), "out-of-pool")
    assert f.address == p.end and "prefetch" in f.message
    b, p = _tail_buffer_program("npuRAM6", 64, 64, limit=PROFILE.pool_named("npuRAM6").end)
    res = npusim.run(b.program(), {"x": x_for(b)})
    assert res.status == "ok", res.report_text()


def test_write_into_octoflash_is_write_to_readonly():
    b = Builder()
    x = b.fm("x", "input", 8, 8, 16)
    y = b.fm("y", "output", 8, 8, 16, pool="octoFlash")
    b.epoch(0, "copy")
    b.se_buf(0, "read", x)
    arith_cmd(b, 0, "copy", 8, 8, 16)
    b.se_buf(5, "write", y)
    b.link("SE0", "ARITH0")
    b.link("ARITH0", "SE5")
    b.run_wait()
    f = only_fault(npusim.run(b.program(), {"x": x_for(b)}), "write-to-readonly")
    assert f.address == b.addr(y) and f.access == "write" and f.unit == "SE5"


def test_misaligned_qparams_is_refused():
    b = Builder()
    x = b.fm("x", "input", 4, 4, 16)
    waddr = b.const("w", bytes(16 * 16))
    qaddr = b.const("q", bytes(12 * 16 + 8))
    y = b.fm("y", "output", 4, 4, 16, pool="npuRAM4")
    b.epoch(0, "conv")
    b.se_buf(0, "read", x)
    b.se_const(1, waddr, 256)
    ci = len(b.commands)
    conv_cmd(b, 0, x, 16, 1, 1, qparams=qaddr + 4)
    b.se_buf(5, "write", y)
    for s, d, p in (("SE0", "CA0", 0), ("SE1", "CA0", 1), ("CA0", "SE5", 0)):
        b.link(s, d, p)
    b.run_wait()
    f = only_fault(npusim.run(b.program(), {"x": x_for(b)}), "misaligned-access")
    assert f.unit == "CA0" and f.command == ci and f.address == qaddr + 4
    assert "residue 4" in f.rule


def _copy_with(mutate):
    b = copy_program()
    mutate(b)
    return npusim.run(b.program(), {"x": x_for(b)})


def _replace(b, index, **changes):
    c = b.commands[index]
    b.commands[index] = Command(c.op, {**c.args, **changes})


def test_bad_descriptors():
    f = only_fault(_copy_with(lambda b: _replace(b, 1, port=1)), "bad-descriptor")
    assert "wired to bus port 0" in f.message and f.command == 1
    f = only_fault(_copy_with(lambda b: _replace(b, 1, engine=12, port=0)), "bad-descriptor")
    assert "stream_engines" in f.message
    f = only_fault(_copy_with(lambda b: _replace(b, 2, layout="image")), "bad-descriptor")
    assert "must be blocked16" in f.message and f.unit == "ARITH0"
    f = only_fault(_copy_with(lambda b: _replace(b, 1, n1=0)), "bad-descriptor")
    assert "zero count" in f.message
    f = only_fault(_copy_with(lambda b: _replace(b, 4, dst_port=2)), "bad-descriptor")
    assert "no input port 2" in f.message


def test_unknown_opcode_from_a_real_blob():
    import pytest

    from npusim.errors import BlobError
    from npusim.program.blob import encode_blob, load_blob
    from npusim.program.codec import UNKNOWN_OP

    b = copy_program()
    b.commands.insert(0, Command(UNKNOWN_OP, {"opcode": 0x99, "word": 0xAB00_0000_0000_0099}))
    blob = encode_blob(b.program(), PROFILE)
    with pytest.raises(BlobError, match="unknown opcode 0x99"):
        load_blob(blob)
    prog = load_blob(blob, verify=False)
    assert prog.commands[0] == Command(UNKNOWN_OP, {"opcode": 0x99, "word": 0xAB00_0000_0000_0099})
    assert encode_blob(prog, PROFILE) == blob  # the unknown word round-trips unchanged
    f = only_fault(npusim.run(prog, {"x": x_for(b)}), "unknown-opcode")
    assert f.command == 0 and "0x99" in f.message and f.unit == "EC"


def _hang_run(mutate):
    prof = load_profile(overrides=["epoch.timeout_cycles=10000"])
    b = copy_program()
    mutate(b)
    return npusim.run(b.program(), {"x": x_for(b)}, profile=prof), prof


def test_hang_when_a_unit_input_is_never_linked():
    res, prof = _hang_run(lambda b: b.commands.pop(4))  # drop LINK SE0 -> ARITH0
    f = only_fault(res, "hang")
    assert "ARITH0" in f.unit and "SE5" in f.unit and res.end_reason == "hang"
    assert "no link" in f.message
    assert res.stats.cycles >= prof.epoch.timeout_cycles


def test_hang_on_stream_size_mismatch():
    res, _ = _hang_run(lambda b: _replace(b, 1, n1=7))  # SE0 delivers 7 lines, ARITH0 expects 8
    f = only_fault(res, "hang")
    assert "ARITH0" in f.unit and "expects 1024 B but SE0 delivers 896 B" in f.message


def test_hang_when_write_se_expects_more_than_produced():
    res, _ = _hang_run(lambda b: _replace(b, 3, n1=9, limit=0))
    f = only_fault(res, "hang")
    assert "SE5" in f.unit


def test_keep_going_collects_faults_and_continues():
    b = copy_program(4, 13, 16, line_align=16)
    x = x_for(b)
    stop = npusim.run(b.program(), {"x": x})
    go = npusim.run(b.program(), {"x": x}, options=npusim.RunOptions(keep_going=True))
    assert len(stop.faults) == 1 and stop.end_reason == "fault"
    assert len(go.faults) >= 2 and go.end_reason == "done" and go.status == "fault"
    assert {f.unit for f in go.faults} == {"SE0", "SE5"}
    assert go.stats.cycles > stop.stats.cycles
    rep = go.report_json()
    assert rep["status"] == "fault" and len(rep["faults"]) == len(go.faults)


def test_two_write_engines_on_the_same_bytes_race():
    b = Builder()
    x = b.fm("x", "input", 8, 8, 16)
    y = b.fm("y", "output", 8, 8, 16, pool="npuRAM4")
    b.epoch(0, "dup")
    b.se_buf(0, "read", x)
    arith_cmd(b, 0, "copy", 8, 8, 16)
    b.se_buf(5, "write", y)
    b.se_buf(6, "write", y)
    b.link("SE0", "ARITH0")
    b.link("ARITH0", "SE5")
    b.link("ARITH0", "SE6")  # broadcast to two sinks writing the same buffer
    b.run_wait()
    f = only_fault(npusim.run(b.program(), {"x": x_for(b)}), "write-write-race")
    assert f.address == b.addr(y) and {f.unit, f.details["other_unit"]} == {"SE5", "SE6"}


def test_broadcast_to_two_buffers_is_legal():
    b = Builder()
    x = b.fm("x", "input", 8, 8, 16)
    y = b.fm("y", "output", 8, 8, 16, pool="npuRAM4")
    z = b.fm("z", "output", 8, 8, 16, pool="npuRAM5")
    b.epoch(0, "dup")
    b.se_buf(0, "read", x)
    arith_cmd(b, 0, "copy", 8, 8, 16)
    b.se_buf(5, "write", y)
    b.se_buf(6, "write", z)
    b.link("SE0", "ARITH0")
    b.link("ARITH0", "SE5")
    b.link("ARITH0", "SE6")
    b.run_wait()
    xin = x_for(b)
    res = npusim.run(b.program(), {"x": xin})
    assert res.status == "ok", res.report_text()
    np.testing.assert_array_equal(res.outputs["y"], res.outputs["z"])
    np.testing.assert_array_equal(res.outputs["z"], xin)


def test_link_endpoint_out_of_range_is_refused():
    f = only_fault(_copy_with(lambda b: _replace(b, 5, src=9)), "bad-descriptor")  # LINK ARITH9 -> SE5
    assert "ARITH9" in f.message and "4 ARITH" in f.message


def test_keep_going_clips_a_read_past_the_pool():
    b, p = _tail_buffer_program("npuRAM6", 64, 128, limit=0)
    x = x_for(b)
    res = npusim.run(b.program(), {"x": x}, options=npusim.RunOptions(keep_going=True))
    assert [f.cls for f in res.faults][:1] == ["out-of-pool"] and res.end_reason == "done"
    y = res.raw_outputs["y"].reshape(-1)
    np.testing.assert_array_equal(y[:64], x.reshape(-1).astype(np.int8))
    assert not y[64:].any()  # bytes past the pool read as 0 after the bus error


def test_read_of_a_never_written_activation_is_uninitialized_read():
    b = copy_program()
    b.buffers[0] = b.buffers[0].__class__(**{**b.buffers[0].__dict__, "kind": "activation"})
    res = npusim.run(b.program())
    f = only_fault(res, "uninitialized-read")
    assert f.address == b.addr(b.buffers[0]) and f.unit == "SE0" and f.layer == "copy"
