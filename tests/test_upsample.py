"""Upsample (opsets 7-9, issue 11 item 4): asymmetric coordinates, nearest and linear, whole and
fractional scales, against ONNX Runtime; on the NPU where the RESIZE unit's rule reproduces it, else on
the host's own kernel (ONNX's reference implements only whole-number nearest scales)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import npusim.runtime
from npusim.compiler import CompileOptions, compile
from npusim.compiler.driver import cpu_summary
from npusim.hw import load_profile
from npusim.reference import validate


def _upsample(mode: str, scales: list[float], opset: int, shape=(1, 3, 5, 4)):
    out = [int(np.floor(s * d)) for s, d in zip(scales, shape)]
    if opset >= 9:
        n = helper.make_node("Upsample", ["x", "s"], ["y"], mode=mode)
        inits = [numpy_helper.from_array(np.array(scales, np.float32), "s")]
    else:
        n, inits = helper.make_node("Upsample", ["x"], ["y"], mode=mode, scales=scales), []
    g = helper.make_graph([n], "m", [helper.make_tensor_value_info("x", TP.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TP.FLOAT, out)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("opset", [7, 9])
@pytest.mark.parametrize("mode,scales,where", [
    ("nearest", [1, 1, 2, 2], "NPU"), ("linear", [1, 1, 2, 2], "NPU"), ("linear", [1, 1, 2, 3], "NPU"),
    ("nearest", [1, 1, 1.5, 2.5], None), ("linear", [1, 1, 1.5, 1.5], "CPU"), ("nearest", [1, 2, 2, 1], "CPU"),
])
def test_upsample_matches_onnx_runtime(opset, mode, scales, where):
    m = _upsample(mode, [float(s) for s in scales], opset)
    prog = compile(m, CompileOptions(quantization="fp32"))
    on_cpu = cpu_summary(prog, load_profile())
    assert where is None or (where == "CPU") == any(line.startswith("Upsample ") for line in on_cpu), on_cpu
    rep = validate(prog, m, npusim.runtime.seeded_inputs(prog, 0))
    assert rep.run_result.status == "ok", rep.run_result.report_text()
    assert max(v.max_abs for v in rep.metrics.values()) < 1e-5, rep.text()


def test_upsample_linear_int8_on_the_npu():
    m = _upsample("linear", [1.0, 1.0, 2.0, 2.0], 9, shape=(1, 16, 6, 6))
    prog = compile(m, CompileOptions(quantization="int8"))
    assert not cpu_summary(prog, load_profile())
    rep = validate(prog, m, npusim.runtime.seeded_inputs(prog, 0))
    assert rep.run_result.status == "ok" and min(v.cosine for v in rep.metrics.values()) >= 0.99, rep.text()
