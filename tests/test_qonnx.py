"""Quantized ONNX in (QDQ and QOperator, from onnxruntime.quantization.quantize_static on zoo models):
the model's own scales and zero points, no calibration, float islands on the CPU, validation against
ONNX Runtime running the quantized model itself."""

from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest

from npusim import zoo
from npusim.compiler import CompileOptions, compile
from npusim.compiler.driver import cpu_summary
from npusim.compiler.frontends.qonnx import is_qoperator, to_qdq
from npusim.errors import UsageError
from npusim.hw import load_profile
from npusim.reference import ort_run, validate
from npusim.runtime import seeded_inputs
from npusim.zoo.quantized import quantize_onnx, quantized

PROFILE = load_profile()


@functools.lru_cache(maxsize=None)
def _model(fmt: str = "qdq", activations: str = "int8", per_channel: bool = True) -> bytes:
    return quantize_onnx(zoo.mobilenet_style(size=32), fmt, activations, per_channel).SerializeToString()


def _check(data: bytes, min_cosine=0.99):
    m = onnx.load_model_from_string(data)
    prog = compile(m, CompileOptions(mem_align=128))
    rep = validate(prog, m, seeded_inputs(prog, 0))
    assert rep.run_result.status == "ok", rep.run_result.report_text()
    assert rep.passed and "quantized model" in rep.reference, rep.text()
    for met in rep.metrics.values():
        assert met.exact is not None and met.cosine >= min_cosine, met.text()
    return prog, rep


@pytest.mark.parametrize("fmt,act,pc", [("qdq", "int8", True), ("qdq", "uint8", True), ("qoperator", "int8", True),
                                        ("qoperator", "uint8", False)])
def test_quantized_onnx_keeps_its_scales(fmt, act, pc, monkeypatch):
    from npusim.compiler import quantize

    monkeypatch.setattr(quantize, "calibrate", lambda *a, **k: pytest.fail("a quantized model must not be calibrated"))
    data = _model(fmt, act, pc)
    m = onnx.load_model_from_string(data)
    assert is_qoperator(m) == (fmt == "qoperator")
    prog, rep = _check(data)
    assert not any("float" in line for line in cpu_summary(prog, PROFILE))  # every operator quantized
    # the input buffer has the model's QuantizeLinear scale (uint8: zero point - 128)
    q = next(n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "input")
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in m.graph.initializer}
    zp = int(inits[q.input[2]]) - (128 if act == "uint8" else 0)
    assert prog.buffer("input").scale == pytest.approx(float(inits[q.input[1]]), rel=1e-7)
    assert prog.buffer("input").zero_point == zp


def test_qoperator_rewrite_means_the_same():
    """QOperator -> QDQ keeps the model's meaning: ONNX Runtime gives the same outputs for both forms."""
    m = onnx.load_model_from_string(_model("qoperator"))
    qdq = to_qdq(m)
    assert not any(n.domain for n in qdq.graph.node) and not is_qoperator(qdq)
    x = {"input": np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    a, b = ort_run(m, x), ort_run(qdq, x)
    for k in a:
        step = float(np.abs(np.diff(np.unique(a[k]))).min())
        assert np.abs(a[k] - b[k]).max() <= step * 1.01  # at most one quantization step apart


def test_options_that_contradict_the_model_are_refused():
    m = onnx.load_model_from_string(_model())
    with pytest.raises(UsageError, match="quantized ONNX"):
        compile(m, CompileOptions(quantization="fp32"))


def test_float_islands_run_on_the_cpu():
    """A node the quantizer left float (nodes_to_exclude) keeps float weights: it runs on the CPU in fp32."""
    import tempfile
    from pathlib import Path

    from onnxruntime.quantization import QuantFormat, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from npusim.zoo.quantized import _reader

    f = zoo.mobilenet_style(size=32)
    with tempfile.TemporaryDirectory() as tmp:
        src, pre, out = (str(Path(tmp) / n) for n in ("f.onnx", "p.onnx", "q.onnx"))
        onnx.save(f, src)
        quant_pre_process(src, pre, skip_symbolic_shape=True)
        p = onnx.load(pre)
        excluded = [n.name for n in p.graph.node if n.op_type == "Conv"][2]
        quantize_static(pre, out, _reader(f, 2, 0), quant_format=QuantFormat.QDQ, per_channel=True,
                        nodes_to_exclude=[excluded])
        data = Path(out).read_bytes()
    prog, _ = _check(data)
    lines = [ln for ln in cpu_summary(prog, PROFILE) if "float in the quantized model" in ln]
    assert len(lines) == 1 and lines[0].startswith("Conv x1 -> CPU"), cpu_summary(prog, PROFILE)


def test_asymmetric_weights_run_on_the_cpu():
    """uint8 asymmetric weights (their integers minus the zero point leave int8) are not the CA's int8:
    those operators run on the CPU as the model defines them, the rest stays on the NPU."""
    import tempfile
    from pathlib import Path

    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    from npusim.zoo.quantized import _reader

    f = zoo.resnet_style(size=16, width=8)
    with tempfile.TemporaryDirectory() as tmp:
        src, out = str(Path(tmp) / "f.onnx"), str(Path(tmp) / "q.onnx")
        onnx.save(f, src)
        quantize_static(src, out, _reader(f, 2, 0), quant_format=QuantFormat.QDQ, per_channel=False,
                        weight_type=QuantType.QUInt8, activation_type=QuantType.QUInt8)
        data = Path(out).read_bytes()
    prog, _ = _check(data, min_cosine=0.98)
    lines = cpu_summary(prog, PROFILE)
    assert any(ln.startswith("Conv x") and "asymmetric weights" in ln for ln in lines), lines
    assert sum(c.op == "EPOCH" for c in prog.commands) > 0


def test_detector_head_and_resnet_block():
    """The yolo-style detector (resize + concat + sigmoid heads) and a residual block, QDQ and TFLite."""
    pytest.importorskip("ai_edge_litert")
    from npusim.zoo.tflite import to_tflite

    for f in (zoo.yolo_style(size=64, width=8), zoo.resnet_style(size=16, width=8, blocks=2)):
        _check(quantize_onnx(f).SerializeToString(), min_cosine=0.98)
        t = bytes(to_tflite(f))
        prog = compile(t, CompileOptions(mem_align=128))
        rep = validate(prog, t, seeded_inputs(prog, 0))
        assert rep.passed, rep.text()
        assert all(m.exact == 1.0 for m in rep.metrics.values()), rep.text()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet50", "mobilenet_v2"])
def test_done_when_qdq_models(name):
    """The issue's QDQ models at 224 x 224, --mem-align 128, against ONNX Runtime on the QDQ model."""
    prog, rep = _check(quantized(name, size=224).SerializeToString(), min_cosine=0.999)
    assert not prog.host_layers
