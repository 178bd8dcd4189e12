"""Calibration derives the ranges of Relu and of value-moving ops (Reshape, Transpose, ...) from their
input's instead of probing them in ONNX Runtime; the ranges are those a probe of every tensor gives."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from npusim.compiler import CompileOptions, prepare
from npusim.compiler import quantize


def _model(huge: bool = False) -> onnx.ModelProto:
    """x -> Conv -> Relu -> Transpose -> Reshape -> Relu -> Flatten -> Identity (which the front end
    drops), x -> Transpose -> Relu (derived from the model input's samples), plus x * m -> Relu
    (m holds 3e38 when `huge`: inf in the product, so that Relu's source has no finite extreme)."""
    rng = np.random.default_rng(0)
    k = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)
    m = np.ones((1, 4, 1, 1), np.float32)
    if huge:
        m[0, 1] = 3e38
    inits = [numpy_helper.from_array(k, "k"), numpy_helper.from_array(m, "m"),
             numpy_helper.from_array(np.array([1, 8, 8, 4], np.int64), "shape")]
    nodes = [helper.make_node("Conv", ["x", "k"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("Reshape", ["t", "shape"], ["s"]),
             helper.make_node("Relu", ["s"], ["r2"]),
             helper.make_node("Flatten", ["r2"], ["f"]),
             helper.make_node("Identity", ["f"], ["out"]),
             helper.make_node("Mul", ["x", "m"], ["p"]),
             helper.make_node("Relu", ["p"], ["rp"]),
             helper.make_node("Transpose", ["x"], ["tx"], perm=[0, 1, 3, 2]),
             helper.make_node("Relu", ["tx"], ["out2"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 256]),
                           helper.make_tensor_value_info("rp", TensorProto.FLOAT, [1, 4, 8, 8]),
                           helper.make_tensor_value_info("out2", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _probed_everywhere(model: onnx.ModelProto, cal: np.ndarray, names) -> dict:
    """round_range of the finite min/max of every tensor, read whole from ONNX Runtime per sample."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.output[:]
    m.graph.output.extend(helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in names)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    vals = {t: [] for t in names}
    for sample in cal:
        for t, v in zip(names, sess.run(list(names), {"x": sample})):
            vals[t].append(v[np.isfinite(v)])
    return {t: quantize.round_range(np.concatenate(v).min(), np.concatenate(v).max()) for t, v in vals.items()}


NAMES = ("c", "r", "t", "s", "r2", "out", "p", "rp", "tx", "out2")  # the cleaned model's float tensors


def test_relu_and_value_moving_ops_are_derived_not_probed(monkeypatch):
    model = _model()
    assert quantize.derived_ranges(model, NAMES + ("f",)) == {
        "r": ("c", "Relu"), "t": ("r", "Transpose"), "s": ("t", "Reshape"), "r2": ("s", "Relu"),
        "f": ("r2", "Flatten"), "out": ("f", "Identity"), "rp": ("p", "Relu"),
        "tx": ("x", "Transpose"), "out2": ("tx", "Relu")}
    reduced = []
    real = quantize._reduced
    monkeypatch.setattr(quantize, "_reduced", lambda clean, tensors, extra=(): reduced.extend(tensors) or
                        real(clean, tensors, extra))
    cal = np.random.default_rng(1).standard_normal((3, 1, 4, 8, 8)).astype(np.float32)
    prep = prepare(model, CompileOptions(calibration={"x": cal}))
    assert sorted(t for t, _ in reduced) == ["c", "p"]  # only the tensors no range is derived for
    assert sorted(prep.ranges) == sorted(NAMES + ("x",))
    assert {t: prep.ranges[t] for t in NAMES} == _probed_everywhere(model, cal, NAMES)


def test_a_derived_range_whose_source_is_not_finite_reads_the_tensor_back():
    """p = x * m holds inf: rp = Relu(p) cannot be derived from p's extremes and is read back whole;
    both ranges cover only finite values, as a probe of every tensor gives."""
    model = _model(huge=True)
    cal = np.random.default_rng(2).standard_normal((2, 1, 4, 8, 8)).astype(np.float32) * 10
    prep = prepare(model, CompileOptions(calibration={"x": cal}))
    want = _probed_everywhere(model, cal, NAMES)
    assert {t: prep.ranges[t] for t in NAMES} == want
    assert want["rp"][1] > 1e38 and want["rp"][0] == 0.0



def test_a_model_whose_every_range_is_derived_needs_no_runtime_run():
    """y = Relu(Transpose(x)): both ranges follow from the samples themselves (no reduction to run)."""
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
                           helper.make_node("Relu", ["t"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    cal = np.random.default_rng(3).standard_normal((2, 1, 4, 8, 8)).astype(np.float32)
    ranges = prepare(model, CompileOptions(calibration={"x": cal})).ranges
    lo, hi = float(cal.min()), float(cal.max())
    assert ranges["t"] == quantize.round_range(lo, hi) and ranges["y"] == quantize.round_range(0.0, hi)
