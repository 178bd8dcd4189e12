"""ONNX semantics the first trial got wrong (issue 11 item 4), each against ONNX Runtime in fp32: Resize
with given scales that differ from output / input, antialiased Resize, default nearest Resize x2 on the
NPU, 1-D pools, the pre-opset-13 `axes` attribute of ReduceMean and of a folded Squeeze, LeakyRelu's
alpha at fp32 precision."""

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


def _model(nodes, x_shape, inits=(), opset=17):
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TP.FLOAT, list(x_shape))],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _exact(m, atol=1e-6):
    prog = compile(m, CompileOptions(quantization="fp32"))
    rep = validate(prog, m, npusim.runtime.seeded_inputs(prog, 0))
    assert rep.run_result.status == "ok", rep.run_result.report_text()
    assert max(v.max_abs for v in rep.metrics.values()) <= atol, rep.text()
    return prog


SCALES = "s", np.array([1, 1, 2.6, 2.6], np.float32)
CASES = {
    "resize given scales 2.6 (output 10 of 4)": (
        [helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear")], [1, 3, 4, 4], [SCALES], 17),
    "resize antialias": (
        [helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear", antialias=1)], [1, 3, 8, 8],
        [("s", np.array([1, 1, 0.5, 0.5], np.float32))], 18),
    "maxpool 1-D": ([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3], strides=[2])], [1, 3, 16], [], 17),
    "averagepool 1-D": ([helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3], pads=[1, 1])],
                        [1, 3, 16], [], 17),
    "reducemean-11 axes": ([helper.make_node("ReduceMean", ["x"], ["y"], axes=[2, 3])], [1, 3, 4, 4], [], 11),
    "squeeze-11 axes folded": ([helper.make_node("Squeeze", ["c"], ["s"], axes=[0]), helper.make_node("Add", ["x", "s"], ["y"])],
                               [1, 3, 8, 8], [("c", np.linspace(-1, 1, 192, dtype=np.float32).reshape(1, 1, 3, 8, 8))], 11),
    "leakyrelu alpha 0.1": ([helper.make_node("LeakyRelu", ["x"], ["y"], alpha=0.1)], [1, 16, 8, 8], [], 17),
}


@pytest.mark.parametrize("case", list(CASES))
def test_matches_onnx_runtime(case):
    nodes, shape, inits, opset = CASES[case]
    _exact(_model(nodes, shape, inits, opset), atol=0.0 if "leakyrelu" in case else 1e-6)


def test_default_nearest_resize_x2_runs_on_the_npu():
    """half_pixel + round_prefer_floor at x2 picks the same pixels as asymmetric floor."""
    m = _model([helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest")], [1, 16, 6, 6],
               [("s", np.array([1, 1, 2, 2], np.float32))])
    assert not cpu_summary(_exact(m, atol=0.0), load_profile())
