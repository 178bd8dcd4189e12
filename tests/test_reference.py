"""ONNX Runtime reference runs, comparison metrics, thresholds and validate()."""

from __future__ import annotations

import numpy as np
import pytest

from npusim import zoo
from npusim.compiler import CompileOptions, compile
from npusim.errors import DataError, ModelError
from npusim.reference import (DEFAULT_THRESHOLDS, Metrics, Thresholds, compare, default_thresholds, metrics,
                              ort_run, validate)


def test_ort_run_matches_numpy_conv():
    m = zoo.conv_model(2, 1, 3, 3, k=1, bias=False, seed=0)
    w = next(i for i in m.graph.initializer)
    from onnx import numpy_helper
    wv = numpy_helper.to_array(w).reshape(1, 2)
    x = np.arange(18, dtype=np.float32).reshape(1, 2, 3, 3)
    out = ort_run(m, {"input": x})["conv"]
    np.testing.assert_allclose(out[0, 0], np.tensordot(wv[0], x[0], axes=1), rtol=1e-5)


def test_ort_run_errors(tmp_path):
    with pytest.raises(ModelError):
        ort_run(tmp_path / "missing.onnx", {})
    with pytest.raises(DataError):
        ort_run(zoo.conv_model(3, 16, 8, 8), {})


def _typed_model(x_type, w_dtype):
    import onnx
    from onnx import TensorProto as TP
    from onnx import helper, numpy_helper

    w = np.arange(1, 17, dtype=w_dtype).reshape(2, 8)
    nodes = [helper.make_node("Gather", ["w", "x"], ["g"], axis=0)] if x_type == TP.INT64 else \
        [helper.make_node("Relu", ["x"], ["g"])]
    out_type = TP.FLOAT16 if w_dtype == np.float16 else TP.FLOAT
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", x_type, [1, 4] if x_type == TP.INT64 else [2, 8])],
                          [helper.make_tensor_value_info("g", out_type, None)], [numpy_helper.from_array(w, "w")])
    return onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_ort_run_feeds_each_input_as_the_type_the_model_declares():
    from onnx import TensorProto as TP

    out = ort_run(_typed_model(TP.INT64, np.float32), {"x": np.array([[1.0, 0.0, 1.0, 1.0]], np.float32)})["g"]
    np.testing.assert_array_equal(out[0, 0], np.arange(9, 17))
    out = ort_run(_typed_model(TP.FLOAT16, np.float16), {"x": np.full((2, 8), -1.5, np.float32)})["g"]
    assert out.dtype == np.float16 and not out.any()
    with pytest.raises(DataError, match="not whole numbers"):
        ort_run(_typed_model(TP.INT64, np.float32), {"x": np.full((1, 4), 0.5, np.float32)})


def test_a_float16_model_validates_against_its_own_runtime():
    from onnx import TensorProto as TP

    m = _typed_model(TP.FLOAT16, np.float16)
    prog = compile(m, CompileOptions(quantization="fp16"))
    rep = validate(prog, m, {"x": np.linspace(-2, 2, 16, dtype=np.float32).reshape(2, 8)})
    assert rep.run_result.status == "ok" and all(v.max_abs == 0 for v in rep.metrics.values()), rep.text()


def test_metrics_values():
    ref = np.array([1.0, -2.0, 4.0])
    m = metrics(ref + np.array([0.0, 0.5, -1.0]), ref)
    assert m.max_abs == 1.0 and m.max_rel == 0.25 and m.top1
    assert m.cosine == pytest.approx(np.dot(ref + [0, 0.5, -1], ref) / np.linalg.norm(ref + [0, .5, -1]) / np.linalg.norm(ref))
    assert metrics(ref, ref).cosine == pytest.approx(1.0) and metrics(ref, ref).max_abs == 0
    flipped = metrics(-ref, ref)
    assert flipped.cosine == pytest.approx(-1.0) and not flipped.top1
    assert metrics(np.zeros(3), np.zeros(3)).cosine == 1.0
    assert metrics(np.full(3, np.nan), ref).cosine == 0.0
    with pytest.raises(DataError):
        metrics(np.zeros(4), ref)


def test_compare_and_thresholds():
    ref = {"y": np.linspace(-1, 1, 50)}
    got = compare({"y": ref["y"] + 0.01, "extra": np.zeros(1)}, ref)
    assert set(got) == {"y"}
    assert not default_thresholds("int8").check(got["y"])
    assert Thresholds(max_rel=1e-4, min_cosine=0.9).check(got["y"])
    assert Thresholds(1, 0, require_top1=True).check(Metrics(0, 0, 1, False)) == ["top-1 disagrees"]
    with pytest.raises(DataError):
        compare({}, ref)
    t = DEFAULT_THRESHOLDS
    assert t["fp32"].max_rel < t["fp16"].max_rel < t["int8"].max_rel


def test_validate_pass_fail_and_fault():
    m = zoo.conv_model(16, 16, 52, 52)
    x = {"input": np.random.default_rng(0).standard_normal((1, 16, 52, 52)).astype(np.float32)}
    good = validate(compile(m, CompileOptions(mem_align=128)), m, x)
    assert good.passed and good.run_result.status == "ok" and good.metrics["conv"].cosine > 0.999
    assert "PASS" in good.text()
    strict = validate(compile(m, CompileOptions(mem_align=128)), m, x, Thresholds(max_rel=1e-6, min_cosine=1.0))
    assert not strict.passed and strict.failures["conv"] and "FAIL" in strict.text()
    faulty = validate(compile(m, CompileOptions(mem_align=16)), m, x)
    assert not faulty.passed and faulty.run_result.status == "fault"


def test_validate_accepts_a_blob(tmp_path):
    from npusim.program.blob import encode_blob
    m = zoo.conv_model(3, 16, 8, 8)
    prog = compile(m, CompileOptions(quantization="fp16"))
    path = tmp_path / "m.npu"
    from npusim.hw import load_profile
    path.write_bytes(encode_blob(prog, load_profile()))
    x = {"input": np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    assert validate(str(path), m, x).passed
