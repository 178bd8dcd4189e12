"""Invalid models are refused with one clear line naming the node and attribute, before any work and
in every precision (issue 10 F1-F4, F7, B); no RuntimeWarning on stderr of clean runs."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import npusim
from npusim import zoo
from npusim.cli import main
from npusim.compiler import CompileOptions, compile
from npusim.errors import ModelError

QS = ("int8", "fp16", "fp32")


def _conv(w_shape=(16, 16, 3, 3), wdtype=np.float32, cin=16, out_shape=True, **attrs) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal(w_shape).astype(wdtype), "w")
    n = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **attrs)
    g = helper.make_graph([n], "g", [helper.make_tensor_value_info("x", TP.FLOAT, [1, cin, 8, 8])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _refused(m, q, *words):
    with pytest.raises(ModelError) as e:
        compile(m, CompileOptions(quantization=q))
    msg = str(e.value)
    assert msg and "\n" not in msg
    for w in words:
        assert w in msg, msg
    return msg


@pytest.mark.parametrize("q", QS)
@pytest.mark.parametrize("case,words", [
    (dict(w_shape=(16, 5, 3, 3), group=3), ("'conv'", "group")),            # group 3 of 16 channels (F1, F2)
    (dict(w_shape=(3, 1, 3, 3), cin=3, group=2), ("'conv'", "group")),       # group 2 of 3
    (dict(group=0), ("'conv'", "group", "at least 1")),
    (dict(kernel_shape=[2, 2]), ("'conv'", "kernel_shape", "[2, 2]", "[3, 3]")),  # vs 3x3 weights
    (dict(group=[1]), ("'conv'", "group", "INT")),                           # a list (F3: was a TypeError)
    (dict(strides=[0, 0]), ("'conv'", "strides", "positive")),               # F4
    (dict(pads=[-1, -1, -1, -1]), ("'conv'", "pads", "negative")),
    (dict(dilations=[0, 0]), ("'conv'", "dilations", "positive")),
    (dict(auto_pad="SAME_MIDDLE"), ("'conv'", "auto_pad")),
    (dict(auto_pad="SAME_UPPER", pads=[1, 1, 1, 1]), ("'conv'", "auto_pad", "pads")),
])
def test_bad_conv_attributes_are_refused_in_every_precision(q, case, words):
    _refused(_conv(**case), q, *words)


@pytest.mark.parametrize("q", QS)
@pytest.mark.parametrize("wdtype", [np.int8, np.float64])
def test_weights_of_another_type_are_refused(q, wdtype):
    _refused(_conv(wdtype=wdtype), q)


@pytest.mark.parametrize("q", QS)
def test_unknown_attributes_opset_and_orphan_outputs(q):
    relu = helper.make_node("Relu", ["x"], ["y"], name="relu", foo=1)
    g = helper.make_graph([relu], "g", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)])
    _refused(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), q, "'relu'", "'foo'")
    pool = helper.make_node("AveragePool", ["x"], ["y"], name="pool", kernel_shape=[2, 2], bar=[1])
    g = helper.make_graph([pool], "g", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 4, 4, 4])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)])
    _refused(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), q, "'pool'", "'bar'")
    m = _conv()
    m.opset_import[0].version = 1000
    _refused(m, q, "opset 1000")
    m = _conv()
    m.graph.output.append(helper.make_tensor_value_info("nobody", TP.FLOAT, [1]))  # F3: was a KeyError in memplan
    _refused(m, q, "nobody")


@pytest.mark.parametrize("q", QS)
def test_initializer_whose_dims_disagree_with_its_data(q):
    m = _conv()
    m.graph.initializer[0].dims[0] = 17  # F3: was a ValueError in frontend._fold
    _refused(m, q, "'w'")


def test_non_finite_weights_are_refused_in_int8_and_kept_in_float():
    m = _conv()
    a = numpy_helper.to_array(m.graph.initializer[0]).copy()
    a[0, 0, 0, 0] = np.nan
    m.graph.initializer[0].CopyFrom(numpy_helper.from_array(a, "w"))
    _refused(m, "int8", "'conv'", "'w'", "NaN or infinite")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for q in ("fp16", "fp32"):
            assert npusim.run(compile(m, CompileOptions(quantization=q)), random_inputs=True).status == "ok"


def test_batchnorm_with_a_negative_variance_is_refused():
    from npusim import zoo

    b = zoo.Builder(0)
    y = b.bn(b.conv("input", 3, 8), 8)
    m = b.model([1, 3, 8, 8], [y])
    var = next(i for i in m.graph.initializer if i.name.startswith("var"))
    var.CopyFrom(numpy_helper.from_array(-np.ones(8, np.float32), var.name))
    for q in QS:
        _refused(m, q, "BatchNormalization", "var + epsilon > 0")


def test_onnx_runtime_errors_are_model_errors_and_stay_off_stderr(capfd):
    """A model ONNX Runtime cannot run (an index out of range, met in int8 calibration): one ModelError
    naming the node, no coloured ORT log line on stderr."""
    n = helper.make_node("Gather", ["x", "i"], ["y"], name="gather", axis=1)
    g = helper.make_graph([n], "g", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)],
                          [numpy_helper.from_array(np.array([100], np.int64), "i")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelError) as e:
        compile(m, CompileOptions(quantization="int8"))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("int8 calibration: ONNX Runtime cannot run the model (")
    assert "'gather'" in msg and "out of data bounds" in msg and "ONNXRuntimeError" not in msg
    err = capfd.readouterr().err
    assert "onnxruntime" not in err and "\x1b[" not in err, err


def test_cli_refusals_are_exit_65_with_one_line(tmp_path, capsys):
    for i, case in enumerate([dict(group=3, w_shape=(16, 5, 3, 3)), dict(strides=[0, 0]), dict(group=[1])]):
        p = tmp_path / f"bad{i}.onnx"
        onnx.save(_conv(**case), p)
        for q in QS:
            assert main(["compile", str(p), "--quantization", q, "-o", str(tmp_path / "x.npu")]) == 65
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and err[0].startswith("npusim: error: ") and "'conv'" in err[0], err


def test_too_big_for_octoflash_is_said_before_any_work(monkeypatch):
    """The weights' size is checked from the initializers' dims before folding or calibrating (B)."""
    from npusim.compiler.frontends import onnx_front

    def never(*a, **k):
        raise AssertionError("the front end ran before the size check")

    monkeypatch.setattr(onnx_front, "build_graph", never)
    small = npusim.hw.load_profile(overrides=["pool.octoFlash.size=64KiB"])
    m = zoo.resnet_style(width=32)
    for q in QS:
        with pytest.raises(ModelError, match=r"model too big for octoFlash: its weights need [\d,]+ B"):
            compile(m, CompileOptions(quantization=q), profile=small)


@pytest.mark.slow
def test_vgg19_is_too_big_for_octoflash_before_calibrating(tmp_path, capsys, zoo_file):
    p = zoo_file("vgg19")  # the zoo's VGG-19 (defaults), built once per run
    with pytest.MonkeyPatch.context() as mp:  # refused before calibrating: no ONNX Runtime session
        mp.setattr(onnxruntime.InferenceSession, "__init__", _calibrated)
        assert main(["compile", str(p), "-o", str(tmp_path / "vgg.npu")]) == 65
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "too big for octoFlash" in err[0] and "143,667,240 B" in err[0]


def _calibrated(*_args, **_kwargs):
    raise AssertionError("calibration started before the size check")


@pytest.mark.parametrize("q", QS)
def test_clean_compile_and_run_emit_no_runtime_warning(q):
    """F7: values the fp16 CA cannot hold saturate instead of overflowing in a cast; no warning anywhere."""
    m = _conv()
    a = numpy_helper.to_array(m.graph.initializer[0]).copy()
    a[0, 0, 0, 0] = 1e6  # beyond fp16
    m.graph.initializer[0].CopyFrom(numpy_helper.from_array(a, "w"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for model in (m, zoo.mobilenet_v3_style(size=16), zoo.yolo_style(size=64)):
            prog = compile(model, CompileOptions(quantization=q))
            res = npusim.run(prog, random_inputs=True)
            assert res.status == "ok"
