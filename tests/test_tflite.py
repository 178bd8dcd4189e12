"""TFLite int8 in: the front end (NHWC -> NCHW, the model's scales), the reader's refusals, and
bit-exactness of every supported builtin against the TFLite interpreter (ai-edge-litert), on
models the zoo writes offline (npusim.zoo.tflite)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from npusim.compiler import CompileOptions, compile
from npusim.errors import ModelError, UsageError
from npusim.reference import validate
from npusim.runtime import run, seeded_inputs
from npusim.zoo.tflite import (TFLITE_OPS, tflite_mobilenet_v2_block, tflite_model, tflite_op, tflite_tiny_yolo_v2)
from npusim.zoo.tflite_writer import TFLiteWriter

pytest.importorskip("ai_edge_litert")

# the builtin each test model exercises (besides QUANTIZE/DEQUANTIZE at its boundary where io says so)
BUILTIN = {"conv": "CONV_2D", "conv_valid": "CONV_2D", "conv_stride2": "CONV_2D (stride 2, fused RELU)",
           "depthwise": "DEPTHWISE_CONV_2D (fused RELU6)", "fully_connected": "FULLY_CONNECTED (on an 8x8 map)",
           "add": "ADD", "sub": "SUB", "mul": "MUL", "mul_const": "MUL (per-channel constant)",
           "average_pool": "AVERAGE_POOL_2D (after PAD)", "max_pool": "MAX_POOL_2D", "mean": "MEAN",
           "reshape": "RESHAPE (with TRANSPOSE)", "softmax": "SOFTMAX", "logistic": "LOGISTIC",
           "hard_swish": "HARD_SWISH", "relu": "RELU", "relu6": "RELU6", "leaky_relu": "LEAKY_RELU", "tanh": "TANH",
           "concat": "CONCATENATION", "concat_rescale": "CONCATENATION (QUANTIZE of one input)", "pad": "PAD",
           "resize_nearest": "RESIZE_NEAREST_NEIGHBOR", "resize_bilinear": "RESIZE_BILINEAR (half-pixel)",
           "transpose": "TRANSPOSE", "strided_slice": "STRIDED_SLICE", "split": "SPLIT",
           "quantize": "QUANTIZE (int8 -> int8)", "dequantize": "DEQUANTIZE (float output)"}


def _exact(model: bytes, prog, seeds=(0, 1)) -> list:
    out = []
    for s in seeds:
        rep = validate(prog, model, seeded_inputs(prog, s))
        assert rep.run_result.status == "ok", rep.run_result.report_text()
        out.extend(rep.metrics.values())
    return out


def test_every_builtin_has_a_model():
    assert set(BUILTIN) == set(TFLITE_OPS)


@pytest.mark.parametrize("kind", TFLITE_OPS)
def test_builtin_is_bit_exact_against_the_interpreter(kind):
    """One small model per builtin: int8 outputs equal to the default interpreter's on every element."""
    m = tflite_op(kind)
    prog = compile(bytes(m), CompileOptions(mem_align=128))
    for met in _exact(bytes(m), prog):
        assert met.exact == 1.0 and met.max_steps == 0, (kind, met.text())


@pytest.mark.parametrize("io", ["uint8", "float"])
def test_uint8_and_float_io(io):
    """uint8 I/O: int8 inside with the zero point shifted by 128 (the converter's QUANTIZE pair folds away);
    float I/O: QUANTIZE/DEQUANTIZE at the boundary are the runtime's quantize/dequantize."""
    m = tflite_mobilenet_v2_block(size=16, cin=8, expand=2, io=io)
    prog = compile(bytes(m), CompileOptions(mem_align=128))
    assert not prog.host_layers
    assert all(b.dtype == "int8" for b in prog.buffers if b.kind in ("input", "output"))
    for met in _exact(bytes(m), prog):
        assert met.exact == 1.0


def test_nhwc_becomes_nchw_once():
    m = tflite_op("conv", c=8, h=6, w=10)
    prog = compile(bytes(m), CompileOptions())
    assert prog.buffer("input").shape == (1, 8, 6, 10)
    res = run(prog, seeded_inputs(prog, 0))
    assert res.outputs["conv1"].shape == (1, 8, 6, 10)


def test_model_scales_are_kept_and_not_calibrated(monkeypatch):
    from npusim.compiler import quantize
    from npusim.compiler.frontends.tflite_reader import read_tflite

    monkeypatch.setattr(quantize, "calibrate", lambda *a, **k: pytest.fail("a TFLite model must not be calibrated"))
    m = tflite_op("add", seed=3)
    tm = read_tflite(bytes(m))
    prog = compile(bytes(m), CompileOptions())
    for i in list(tm.inputs) + list(tm.outputs):
        t = tm.tensors[i]
        b = prog.buffer(t.name)
        assert b.scale == pytest.approx(float(t.scale[0]), rel=1e-7) and b.zero_point == int(t.zero_point[0])


def test_quantization_options_that_contradict_the_model_are_refused(tmp_path):
    m = bytes(tflite_op("relu"))
    with pytest.raises(UsageError, match="--quantization fp16: the model is TFLite int8"):
        compile(m, CompileOptions(quantization="fp16"))
    np.savez(tmp_path / "cal.npz", input=np.zeros((1, 1, 16, 8, 8), np.float32))
    with pytest.raises(UsageError, match="needs no calibration"):
        compile(m, CompileOptions(calibration=str(tmp_path / "cal.npz")))


def _custom_model() -> bytes:
    t = TFLiteWriter()
    x = t.tensor("x", [1, 4, 4, 8], "int8", scale=0.1, zero_point=0)
    y = t.tensor("y", [1, 4, 4, 8], "int8", scale=0.1, zero_point=0)
    t.op("CUSTOM", [x], [y], custom="MyPostProcess")
    return t.finish([x], [y])


def _cli(*args, cwd, capfd):
    """The CLI in this process (in `cwd`): (exit code, stdout, stderr)."""
    import os

    from npusim import cli

    old = os.getcwd()
    os.chdir(cwd)
    try:
        code = cli.main([str(a) for a in args])
    finally:
        os.chdir(old)
    out, err = capfd.readouterr()
    return code, out, err


def test_refusals_are_one_line_exit_65(tmp_path, capfd):
    good = bytes(tflite_op("conv", c=4, h=4, w=4))
    files = {
        "truncated.tflite": (good[:len(good) // 2], "malformed TFLite flatbuffer"),
        "garbage.tflite": (b"\x10\x00\x00\x00TFL3" + bytes(range(200)), "malformed TFLite flatbuffer"),
        "text.tflite": (b"not a model at all\n", "not a TFLite model"),
        "float.tflite": (bytes(tflite_model("tiny_yolo_v2", size=32, quantize=False)), "a float TFLite model"),
        "custom.tflite": (_custom_model(), "custom operator 'MyPostProcess'"),
    }
    for name, (data, why) in files.items():
        (tmp_path / name).write_bytes(data)
        code, _, err = _cli("compile", name, "-o", "out.npu", cwd=tmp_path, capfd=capfd)
        assert code == 65, (name, err)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("npusim: error: ") and why in lines[0], (name, err)


def test_unsupported_builtin_names_the_operator():
    t = TFLiteWriter()
    x = t.tensor("x", [1, 4, 4, 8], "int8", scale=0.1, zero_point=0)
    y = t.tensor("y", [1, 4, 4, 8], "int8", scale=0.1, zero_point=0)
    t.op("SQUARED_DIFFERENCE", [x, x], [y])
    with pytest.raises(ModelError, match=r"operator 0 \(SQUARED_DIFFERENCE\) is not supported"):
        compile(t.finish([x], [y]))


def test_corrupted_files_never_crash_the_reader():
    """Random byte flips give a ModelError line or a model that compiles: never another exception."""
    from npusim.compiler.frontends.sources import front_end, load_source

    good = bytes(tflite_op("add", c=4, h=4, w=4))
    rng = random.Random(7)
    for _ in range(40):
        b = bytearray(good)
        for _ in range(rng.randrange(1, 12)):
            b[rng.randrange(8, len(b))] = rng.randrange(256)
        try:
            front_end(load_source(bytes(b)), CompileOptions(), 1 << 24)
        except ModelError:
            pass


def test_content_not_suffix_picks_the_front_end(tmp_path):
    from npusim import zoo

    (tmp_path / "model.onnx").write_bytes(bytes(tflite_op("relu")))  # a TFLite file under an ONNX name
    assert compile(str(tmp_path / "model.onnx")).buffers
    import onnx

    onnx.save(zoo.conv_model(3, 4, 4, 4), str(tmp_path / "model.tflite"))  # and the other way round
    with pytest.raises(ModelError, match="not a TFLite model"):
        compile(str(tmp_path / "model.tflite"))


def test_inspect_shows_scales(tmp_path, capfd):
    (tmp_path / "m.tflite").write_bytes(bytes(tflite_op("logistic")))
    assert _cli("compile", "m.tflite", "-o", "m.npu", cwd=tmp_path, capfd=capfd)[0] == 0
    code, out, _ = _cli("inspect", "m.npu", cwd=tmp_path, capfd=capfd)
    assert code == 0 and "scale=0.00390625 zp=-128" in out  # LOGISTIC's fixed 1/256 output


def test_validate_cli_against_the_interpreter(tmp_path, capfd):
    (tmp_path / "m.tflite").write_bytes(bytes(tflite_op("depthwise")))
    assert _cli("compile", "m.tflite", "-o", "m.npu", "--mem-align", "128", cwd=tmp_path, capfd=capfd)[0] == 0
    code, out, err = _cli("validate", "m.npu", "--reference", "m.tflite", "--min-exact", "1", cwd=tmp_path,
                          capfd=capfd)
    assert code == 0, err
    assert "exact=100.00% max_steps=0" in out and "against the TFLite interpreter" in out
    assert "XNNPACK" not in err  # the interpreter's log lines are held back


@pytest.mark.slow
def test_done_when_tflite_models():
    """The issue's TFLite models: a MobileNet-v2 block and tiny YOLO v2 (224), --mem-align 128."""
    block = bytes(tflite_mobilenet_v2_block())
    prog = compile(block, CompileOptions(mem_align=128))
    # seeded inputs span every int8 code: XNNPACK's float32 near-ties (below) meet a few of the block's
    # 451,584 first-conv outputs (3 for seed 0), which reach the output by one step
    assert all(m.exact > 0.9995 and m.max_steps <= 1 for m in _exact(block, prog, seeds=(0, 1, 2)))
    yolo = bytes(tflite_tiny_yolo_v2(224))
    prog = compile(yolo, CompileOptions(mem_align=128))
    for m in _exact(yolo, prog, seeds=(0,)):
        # XNNPACK requantizes in float32: a product within 2^-24 of a tie rounds the other way (module doc of
        # npusim.reference_tflite); a handful of the 21,125 head outputs differ by one step
        assert m.exact > 0.995 and m.max_steps <= 2 and m.cosine > 0.9999
