"""Softmax over the channels of a feature map on the NPU (issue 11 item 3; compiler/recipes/softmax.py): compiled in
int8, fp16 and fp32 at --mem-align 128 and 16, run through the checker, compared with ONNX Runtime; the
forms the NPU cannot take stay on the CPU with their reason."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import npusim.runtime
from npusim.cli import main
from npusim.compiler import CompileOptions, compile
from npusim.compiler.driver import cpu_summary
from npusim.hw import load_profile
from npusim.reference import validate
from npusim.testing import assert_check_clean

PROFILE = load_profile()
SLOW_HOST = load_profile(overrides=["host.cycles.transcendental=4000"])  # every channel Softmax pays on the NPU
TOL = {"int8": 0.999, "fp16": 0.99999, "fp32": 0.9999999}


def _model(c=21, shape=(24, 24), spread=1.0, opset=17, axis=1):
    """x [1, 16, *shape] -> 1x1 Conv to c channels (logits of the given spread) -> Softmax; a [1, 16, L] x is
    scaled by an ARITH Mul instead (the CA runs 2-D convolutions)."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((c, 16, 1, 1)) * spread / 4).astype(np.float32)
    if len(shape) == 1:
        c, w = 16, np.float32(spread)
    nodes = [helper.make_node("Conv" if len(shape) == 2 else "Mul", ["x", "w"], ["t"], name="conv"),
             helper.make_node("Softmax", ["t"], ["y"], name="softmax", axis=axis)]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 16, *shape])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)], [numpy_helper.from_array(w, "w")])
    return onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]))


def _fc_model(classes, opset=11):
    """GlobalAveragePool -> Flatten -> Gemm -> Softmax(axis=1): a classifier head ([1, classes])."""
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((classes, 16)) / 2).astype(np.float32)
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["p"]), helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "w"], ["t"], transB=1),
             helper.make_node("Softmax", ["t"], ["y"], name="softmax", axis=1)]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 16, 4, 4])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)], [numpy_helper.from_array(w, "w")])
    return onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]))


def _run(m, q, align=128, profile=PROFILE):
    prog = compile(m, CompileOptions(quantization=q, mem_align=align), profile=profile)
    rep = validate(prog, m, npusim.runtime.seeded_inputs(prog, 0), profile=profile)
    assert rep.run_result.status == "ok", rep.run_result.report_text()
    return prog, rep


def _on_npu(prog):
    assert cpu_summary(prog, PROFILE) == [], cpu_summary(prog, PROFILE)
    assert not any(c.op == "HOST" for c in prog.commands)
    units = {c.op for c in prog.commands}
    assert {"CONV", "ARITH", "ACT"} <= units


@pytest.mark.parametrize("align", [128, 16])
@pytest.mark.parametrize("q", ["int8", "fp16", "fp32"])
def test_channel_softmax_runs_on_the_npu_and_matches_onnx_runtime(q, align):
    prog, rep = _run(_model(), q, align)
    _on_npu(prog)
    assert min(v.cosine for v in rep.metrics.values()) >= TOL[q], rep.text()
    if q != "int8":
        assert max(v.max_abs for v in rep.metrics.values()) < (2e-3 if q == "fp16" else 1e-6), rep.text()
    kinds = [e.kind for e in rep.run_result.stats.epochs]
    assert kinds.count("host") == 0 and kinds.count("npu") == 1 + 5 + 2  # conv, ceil(log2 21) maxima, exp, sum
    assert_check_clean(prog)
    if q != "int8":
        assert any(c.op == "ACT" and c.args["func"] == "exp" for c in prog.commands)


@pytest.mark.parametrize("q", ["int8", "fp16"])
@pytest.mark.parametrize("c, shape, spread", [(3, (5, 7), 1.0), (64, (4, 4), 8.0), (1, (3, 3), 1.0), (16, (9,), 4.0)])
def test_channel_softmax_shapes_and_wide_logits(q, c, shape, spread):
    """Few channels (image layout), many, one (y = 1), a [1, C, L] map; logits spread over +-30 stay exact
    enough in int8 because each pixel subtracts its own maximum. (A slow host: maps this small would run
    faster on the default profile's CPU.)"""
    prog, rep = _run(_model(c, shape, spread), q, profile=SLOW_HOST)
    _on_npu(prog)
    assert min(v.cosine for v in rep.metrics.values()) >= TOL[q], rep.text()


@pytest.mark.parametrize("q", ["int8", "fp32"])
def test_classifier_softmax_before_opset_13_is_the_channel_axis(q):
    """Opset 11 normalizes over every axis from `axis` on: for a [1, classes] vector that is the channels.
    One pixel runs faster on the host (the epochs' setup), unless the profile's host is slow."""
    m = _fc_model(10)
    prog, rep = _run(m, q)
    assert [line.split(" (")[0] for line in cpu_summary(prog, PROFILE)] == ["Softmax x1 -> CPU"]
    assert "faster on the CPU" in cpu_summary(prog, PROFILE)[0]
    prog, rep = _run(m, q, profile=SLOW_HOST)
    _on_npu(prog)
    assert min(v.cosine for v in rep.metrics.values()) >= TOL[q], rep.text()


@pytest.mark.parametrize("m, why", [
    (_model(axis=-1), "axis -1 of [1, 21, 24, 24] is not the channel axis"),
    (_model(opset=11), "axis 1 of [1, 21, 24, 24] is not the channel axis"),  # opset 11: over C x H x W
    (_fc_model(1000), "1000 channels need"),
    (_model(c=150, shape=(4, 4)), "faster on the CPU (estimated"),
])
def test_softmax_the_npu_cannot_take_runs_on_the_cpu_with_a_reason(m, why):
    prog, rep = _run(m, "fp16")
    cpu = cpu_summary(prog, PROFILE)
    assert len(cpu) == 1 and cpu[0].startswith("Softmax x1 -> CPU (") and why in cpu[0], cpu
    assert rep.passed, rep.text()


def test_cli_compile_of_a_channel_softmax_lists_no_cpu_operator(tmp_path, capsys):
    src = tmp_path / "seg.onnx"
    onnx.save(_model(), src)
    assert main(["compile", str(src), "-o", str(tmp_path / "seg.npu"), "--no-cpu-fallback"]) == 0
    assert "CPU" not in capsys.readouterr().out.replace("0 CPU epochs", "")
    assert main(["validate", str(tmp_path / "seg.npu"), "--reference", str(src), "--random-input"]) == 0
