"""The timing memo of functional runs (`runtime.run`): a second functional run of the same Program
computes values only and takes stats, trace and memory map from the first, fault-free run. It must
give exactly what a full run gives -- outputs, cycles, stats, faults, report, trace -- and give up
wherever values decide more than values (a parameter table read from an input, software epochs)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import npusim
from npusim import zoo
from npusim.compiler import CompileOptions, compile as compile_model
from npusim.engine import Machine
from npusim.runtime import RunOptions, seeded_inputs

from test_check import FLASH, HEAD, RAM3, RAM4, buf, link, program, se, arith  # noqa: F401


def same(a, b):
    """Two RunResults are the same run: outputs, report (stats, faults, memory map), text and trace."""
    assert a.status == b.status and a.end_reason == b.end_reason
    assert sorted(a.raw_outputs) == sorted(b.raw_outputs)
    for k in a.raw_outputs:
        np.testing.assert_array_equal(a.raw_outputs[k], b.raw_outputs[k])
        np.testing.assert_array_equal(a.outputs[k], b.outputs[k])
    assert a.report_json() == b.report_json()
    assert a.report_text() == b.report_text()
    assert a.trace == b.trace


def no_timing(monkeypatch):
    """Make any timing of an epoch fail: a run that still passes used the memo."""
    def boom(*_a, **_k):
        raise AssertionError("epoch timed: the memo was not used")
    monkeypatch.setattr(Machine, "_time_epoch", boom)


MODELS = [("resnet_style", lambda: zoo.resnet_style(), "int8"), ("mobilenet_style", lambda: zoo.mobilenet_style(), "fp16"),
          ("yolo_style", lambda: zoo.yolo_style(size=64), "int8")]


@pytest.mark.parametrize("name,make,q", MODELS, ids=[m[0] for m in MODELS])
@pytest.mark.parametrize("trace", [False, True])
def test_a_memoised_run_equals_a_full_run(name, make, q, trace, monkeypatch):
    prog = compile_model(make(), CompileOptions(quantization=q))
    opts = RunOptions(trace=trace)
    first = npusim.run(prog, seeded_inputs(prog, 0), opts)
    assert first.ok
    other = seeded_inputs(prog, 1)
    fresh = npusim.run(copy.deepcopy(prog), other, opts)  # another Program object: no memo
    with monkeypatch.context() as m:
        no_timing(m)
        again = npusim.run(prog, other, opts)
        rerun = npusim.run(prog, other, opts)
    same(again, fresh)
    same(rerun, fresh)
    assert any(not np.array_equal(first.raw_outputs[k], again.raw_outputs[k]) for k in first.raw_outputs)
    # a result is the caller's: changing it changes no later run
    again.stats.epochs[0].cycles = -1.0
    if again.trace:
        again.trace["traceEvents"].clear()
    with monkeypatch.context() as m:
        no_timing(m)
        same(npusim.run(prog, other, opts), fresh)


def test_other_options_are_other_memo_entries_and_limits_are_never_memoised():
    prog = compile_model(zoo.resnet_style(), CompileOptions(quantization="int8"))
    ins = seeded_inputs(prog, 0)
    npusim.run(prog, ins, RunOptions(trace=False))
    for opts in (RunOptions(trace=True), RunOptions(trace=False, keep_going=True), RunOptions(trace=False, mode="burst"),
                 RunOptions(trace=False, max_cycles=1000), RunOptions(timing_only=True, trace=False)):
        same(npusim.run(prog, ins, opts), npusim.run(copy.deepcopy(prog), ins, opts))
    limited = npusim.run(prog, ins, RunOptions(trace=False, max_cycles=1000))
    assert limited.end_reason == "cycle-limit"


def _table_from_input():
    """ARITH add whose requantization table is the first 16 bytes of the input x: whether the unit
    runs is decided by the input's values."""
    text = (HEAD + buf("x", "input", "npuRAM3", 0, 128) + buf("y", "output", "npuRAM4", 0, 128)
            + ".layer add\nEPOCH id=0\n" + se(0, "read", RAM3, 128) + se(1, "read", RAM3, 128)
            + arith("add", params=RAM3) + se(5, "write", RAM4, 128)
            + link("SE0", "ARITH0") + link("SE1", "ARITH0", 1) + link("ARITH0", "SE5") + "RUN\nWAIT\nEND\n")
    return program(text)


def _x(shift: int) -> dict:
    x = np.zeros(128, np.float32)
    x[:16] = np.frombuffer(np.array([[1, 1, shift, 0]], "<i4").tobytes(), np.int8)
    return {"x": x.reshape(1, 128, 1, 1)}


@pytest.mark.parametrize("keep_going", [False, True])
def test_a_fault_decided_by_values_is_met_by_the_full_run(keep_going):
    prog = _table_from_input()
    opts = RunOptions(trace=False, keep_going=keep_going)
    ok = npusim.run(prog, _x(0), opts)
    assert ok.ok
    bad = npusim.run(prog, _x(99), opts)  # the memo of the clean run holds, but a value faults
    assert [f.cls for f in bad.faults] == ["bad-descriptor"] and "shift 99" in bad.faults[0].message
    same(bad, npusim.run(copy.deepcopy(prog), _x(99), opts))
    same(npusim.run(prog, _x(2), opts), npusim.run(copy.deepcopy(prog), _x(2), opts))


def _host_program(record_from_input: bool, rec_len: int = 0):
    """x (fp32, 10) -> HOST -> y: the operator record a constant (Softmax), or the input `rec`."""
    from test_engine_build import Builder

    b = Builder()
    x = b.fm("x", "input", 1, 1, 10, dtype="fp32")
    y = b.fm("y", "output", 1, 1, 10, dtype="fp32", pool="npuRAM4")
    if not record_from_input:
        b.host("Softmax", [x], [y], layer="softmax")
        return b.program()
    rec = b.fm("rec", "input", 1, 1, rec_len)
    assert rec.layout == "linear"
    b.htensor(0, "read", x)
    b.htensor(0, "write", y)
    b.cmd("HOST", n_in=1, n_out=1, node_bytes=rec_len, node=b.addr(rec))
    return b.program()


def _record(op: str) -> bytes:
    from onnx import helper

    from npusim.program.hostop import encode_record

    return encode_record(helper.make_node(op, ["i0"], ["o0"]), 17, "hand-assembled")


def test_software_epochs_are_replayed_from_their_values(monkeypatch):
    prog = _host_program(False)
    opts = RunOptions(trace=False)
    x = np.arange(10, dtype=np.float32).reshape(1, 10, 1, 1)
    assert npusim.run(prog, {"x": x}, opts).ok
    fresh = npusim.run(copy.deepcopy(prog), {"x": -x}, opts)
    with monkeypatch.context() as m:
        no_timing(m)
        m.setattr(Machine, "_wait", lambda *_a, **_k: (_ for _ in ()).throw(AssertionError("timed")))
        same(npusim.run(prog, {"x": -x}, opts), fresh)


def test_a_software_epoch_whose_record_is_data_is_run_in_full():
    relu, tanh = _record("Relu"), _record("Tanh")
    assert len(relu) == len(tanh) and relu != tanh
    prog = _host_program(True, len(relu))
    opts = RunOptions(trace=False)
    x = np.linspace(-2, 2, 10, dtype=np.float32).reshape(1, 10, 1, 1)

    def ins(rec: bytes):
        return {"x": x, "rec": np.frombuffer(rec, np.int8).astype(np.float32).reshape(1, len(rec), 1, 1)}

    first = npusim.run(prog, ins(relu), opts)
    assert first.ok and first.outputs["y"].min() == 0
    other = npusim.run(prog, ins(tanh), opts)  # the memo holds Relu's record: a full run decides
    same(other, npusim.run(copy.deepcopy(prog), ins(tanh), opts))
    assert other.outputs["y"].min() < 0
