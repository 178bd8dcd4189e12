"""CPU fallback epochs (HOST software epochs) and general tensors, through the public API and CLI."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper

import npusim
import npusim.runtime
from npusim import zoo
from npusim.cli import main
from npusim.compiler import CompileOptions, compile
from npusim.compiler.driver import cpu_summary
from npusim.errors import ModelError
from npusim.hw import load_profile
from npusim.program.codec import Command
from npusim.program.verify import verify
from npusim.reference import validate

PROFILE = load_profile()
QS = ("int8", "fp16", "fp32")


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = oh.make_graph(nodes, "m", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in dict(inits).items()])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)])


def _vi(name, shape, t=TP.FLOAT):
    return oh.make_tensor_value_info(name, t, shape)


def _lrn_model():
    """Two operators no NPU recipe maps: Pow by a constant (LRN, used here before, has an int8 recipe since issue 40)."""
    b = zoo.Builder(0)
    y = b.node("Pow", [b.conv("input", 3, 16), b.const(np.array(2.0, np.float32))])
    y = b.node("Pow", [b.conv(y, 16, 16), b.const(np.array(3.0, np.float32))])
    return b.model([1, 3, 16, 16], [y], "lrn")


def _run_and_compare(m, q, inputs, rtol=1e-5, atol=1e-5):
    import onnxruntime as ort

    prog = compile(m, CompileOptions(quantization=q))
    res = npusim.run(prog, inputs)
    assert res.status == "ok", res.report_text()
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, inputs)
    for o, w in zip(m.graph.output, want):
        np.testing.assert_allclose(res.outputs[o.name], w, rtol=rtol, atol=atol)
    return prog, res


# ------------------------------------------------------------------ pass-through, constants, reshapes

@pytest.mark.parametrize("q", QS)
def test_pass_through_constant_and_squeeze_outputs(q):
    """An Identity from the input to an output, an output that is a constant, and outputs that are
    a Squeeze / Unsqueeze of the input: each output gets its own buffer and the right values."""
    nodes = [oh.make_node("Identity", ["x"], ["same"]),
             oh.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3))),
             oh.make_node("Squeeze", ["x", "ax"], ["sq"]),
             oh.make_node("Unsqueeze", ["x", "ax"], ["unsq"])]
    m = _model(nodes, [_vi("x", [3, 1, 4, 5])], [_vi("same", None), _vi("k", None), _vi("sq", None),
                                                  _vi("unsq", None)], {"ax": np.array([1], np.int64)})
    x = np.random.default_rng(0).standard_normal((3, 1, 4, 5)).astype(np.float32)
    tol = {"int8": 0.03, "fp16": 2e-3, "fp32": 1e-6}[q]
    prog, res = _run_and_compare(m, q, {"x": x}, rtol=tol, atol=tol)
    names = {b.name for b in prog.buffers_of("output")}
    assert names == {"same", "k", "sq", "unsq"}
    assert res.outputs["unsq"].shape == (3, 1, 1, 4, 5) and res.outputs["k"].shape == (2, 3)


@pytest.mark.parametrize("op", ["Squeeze", "Unsqueeze"])
def test_single_squeeze_or_unsqueeze_model(op):
    shape = [1, 3, 1, 7] if op == "Squeeze" else [1, 3, 7]
    axes = [2] if op == "Squeeze" else [0]
    m = _model([oh.make_node(op, ["x", "ax"], ["y"])], [_vi("x", shape)], [_vi("y", None)],
               {"ax": np.array(axes, np.int64)})
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    for q in QS:
        _run_and_compare(m, q, {"x": x}, rtol=0.03, atol=0.03)


def test_opset11_unsqueeze_with_axes_attribute_folds_and_runs():
    """Constant folding evaluates each node at the model's opset (axes was an attribute before 13)."""
    nodes = [oh.make_node("Unsqueeze", ["c"], ["cu"], axes=[0]),
             oh.make_node("Add", ["x", "cu"], ["y"])]
    m = _model(nodes, [_vi("x", [1, 4])], [_vi("y", None)], {"c": np.arange(4, dtype=np.float32)}, opset=11)
    _run_and_compare(m, "fp32", {"x": np.ones((1, 4), np.float32)})


def test_rank0_rank5_and_batch_tensors():
    nodes = [oh.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             oh.make_node("Mul", ["v", "s"], ["y"])]
    m = _model(nodes, [_vi("x", [2, 3]), _vi("v", [2, 1, 3, 2, 2])], [_vi("s", None), _vi("y", None)])
    rng = np.random.default_rng(2)
    inp = {"x": rng.standard_normal((2, 3)).astype(np.float32), "v": rng.standard_normal((2, 1, 3, 2, 2)).astype(np.float32)}
    prog, res = _run_and_compare(m, "fp32", inp)
    assert res.outputs["s"].shape == () and prog.buffer("v").layout == "linear"


def test_integer_and_bool_tensors():
    """Gather with int64 indices from an input, Where on a bool mask: native element types in memory."""
    nodes = [oh.make_node("Gather", ["x", "idx"], ["g"], axis=1),
             oh.make_node("Greater", ["g", "zero"], ["mask"]),
             oh.make_node("Where", ["mask", "g", "zero"], ["y"])]
    m = _model(nodes, [_vi("x", [1, 8]), _vi("idx", [3], TP.INT64)], [_vi("y", None), _vi("mask", None, TP.BOOL)],
               {"zero": np.array(0.0, np.float32)})
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)
    prog, res = _run_and_compare(m, "fp32", {"x": x, "idx": np.array([7, 0, 3], np.int64)})
    assert prog.buffer("idx").dtype == "int64" and prog.buffer("mask").dtype == "bool"
    assert res.outputs["mask"].dtype == np.bool_


# ------------------------------------------------------------------ LRN models, summary, strict mode

@pytest.mark.parametrize("q", ["int8", "fp16"])
def test_lrn_runs_on_the_cpu_and_validates(q):
    m = _lrn_model()
    prog = compile(m, CompileOptions(quantization=q))
    assert cpu_summary(prog, PROFILE) == ["Pow x2 -> CPU (no NPU unit)"]
    rep = validate(prog, m, npusim.runtime.seeded_inputs(prog, 0))
    assert rep.run_result.status == "ok" and rep.passed, rep.text()
    assert min(x.cosine for x in rep.metrics.values()) >= 0.99
    kinds = [e.kind for e in rep.run_result.stats.epochs]
    assert kinds.count("host") == 2 and kinds.count("npu") == 2


def test_cli_compile_prints_the_cpu_summary_and_strict_mode_exits_65(tmp_path, capsys):
    src, blob = tmp_path / "lrn.onnx", tmp_path / "lrn.npu"
    onnx.save(_lrn_model(), src)
    assert main(["compile", str(src), "-o", str(blob)]) == 0
    out = capsys.readouterr().out
    assert "2 NPU epochs, 2 CPU epochs" in out and "Pow x2 -> CPU (no NPU unit)" in out
    assert main(["compile", str(src), "-o", str(tmp_path / "x.npu"), "--no-cpu-fallback"]) == 65
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Pow" in err[0] and "no NPU unit" in err[0]
    # inspect, the run report and the trace name the CPU epochs
    assert main(["inspect", str(blob)]) == 0
    assert "CPU epoch Pow (no NPU unit)" in capsys.readouterr().out
    trace = tmp_path / "t.json"
    assert main(["run", str(blob), "--random-input", "--json", str(tmp_path / "r.json"), "--trace", str(trace)]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["stats"]["cpu_epochs"] == 2 and report["stats"]["npu_epochs"] == 2
    assert report["stats"]["cpu_cycles"] > 0
    events = json.loads(trace.read_text())["traceEvents"]
    assert sum(1 for e in events if e.get("cat") == "host" and e.get("args", {}).get("cpu")) == 2


# ------------------------------------------------------------------ the HOST step in simulated memory

def _host_operand(prog, direction):
    return next(i for i, c in enumerate(prog.commands) if c.op == "HTENSOR" and c.args["dir"] == direction)


def test_a_host_operand_at_a_wrong_offset_faults():
    prog = compile(_lrn_model(), CompileOptions(quantization="fp16"))
    i = _host_operand(prog, "write")
    cmd = prog.commands[i]
    out = next(b for b in prog.buffers if b.address(PROFILE) == cmd.args["addr"])
    moved = Command("HTENSOR", {**cmd.args, "addr": cmd.args["addr"] + out.size - 64})
    bad = replace(prog, commands=[*prog.commands[:i], moved, *prog.commands[i + 1:]])
    res = npusim.run(bad, random_inputs=True)
    f = res.faults[0]
    assert res.status == "fault" and (f.cls, f.unit, f.access) == ("buffer-overflow", "HOST", "write")


def test_host_operand_slots_must_match_the_host_call():
    prog = compile(_lrn_model(), CompileOptions(quantization="fp16"))
    i = _host_operand(prog, "read")
    moved = Command("HTENSOR", {**prog.commands[i].args, "slot": 3})
    cmds = [*prog.commands[:i], moved, *prog.commands[i + 1:]]
    assert any("n_in=2" in p and "inputs [1, 3]" in p for p in verify(cmds, PROFILE))
    res = npusim.run(replace(prog, commands=cmds), random_inputs=True)  # in-memory programs skip the verifier
    assert res.status == "fault" and res.faults[0].cls == "bad-descriptor" and res.faults[0].unit == "HOST"


def test_host_cost_model_comes_from_the_profile():
    prog = compile(_lrn_model(), CompileOptions(quantization="fp16"))
    base = npusim.run(prog, random_inputs=True, options=npusim.RunOptions(timing_only=True))
    slow = load_profile(overrides=["host.cycles.transcendental=80", "host.clock=400MHz"])
    res = npusim.run(prog, random_inputs=True, profile=slow, options=npusim.RunOptions(timing_only=True))
    host = [e.cycles for e in base.stats.epochs if e.kind == "host"]
    slower = [e.cycles for e in res.stats.epochs if e.kind == "host"]
    h = PROFILE.host
    n = 16 * 16 * 16
    assert host == [pytest.approx((h.call_cycles + h.cycles["transcendental"] * n) * PROFILE.clock / h.clock)] * 2
    assert slower[0] == pytest.approx((h.call_cycles + 80 * n) * PROFILE.clock / 400e6)


def test_cpu_blob_round_trips_through_asm_and_disasm():
    from npusim.program.asm import assemble, disassemble
    from npusim.program.blob import encode_blob, load_blob

    blob = encode_blob(compile(_lrn_model(), CompileOptions()), PROFILE)
    prog = load_blob(blob, PROFILE)
    assert encode_blob(assemble(disassemble(prog, PROFILE), PROFILE), PROFILE) == blob


def test_strict_mode_refuses_a_cpu_op_by_name():
    with pytest.raises(ModelError, match=r"node 'pow2' \(Pow\) cannot run on the NPU: no NPU unit"):
        compile(_lrn_model(), CompileOptions(no_cpu_fallback=True))
