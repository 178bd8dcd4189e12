"""Every bad input to the compiler raises ModelError/DataError with one clear line."""

from __future__ import annotations

import numpy as np
import pytest

import npusim
import npusim.runtime

from npusim import zoo
from npusim.compiler import CompileOptions, compile
from npusim.errors import DataError, InvalidInputError, ModelError, UsageError


def _one_line(e) -> str:
    msg = str(e.value)
    assert "\n" not in msg and msg
    return msg


def test_missing_file(tmp_path):
    with pytest.raises(ModelError) as e:
        compile(tmp_path / "nope.onnx")
    assert "no such model file" in _one_line(e)


def test_not_onnx(tmp_path):
    p = tmp_path / "bad.onnx"
    p.write_bytes(b"this is not a protobuf \xff\xfe garbage" * 10)
    with pytest.raises(ModelError) as e:
        compile(p)
    assert "not an ONNX model" in _one_line(e)


def test_strict_refusal_names_op_node_and_reason():
    with pytest.raises(ModelError) as e:
        compile(zoo.unsupported_model(), CompileOptions(no_cpu_fallback=True))
    msg = _one_line(e)
    assert "Pow" in msg and "my_pow" in msg and "no NPU unit" in msg and "--no-cpu-fallback" in msg


def test_an_op_without_an_npu_unit_runs_on_the_cpu():
    from npusim.reference import validate
    m = zoo.unsupported_model()
    prog = compile(m)
    assert prog.host_layers == ["my_pow"]
    rep = validate(prog, m, npusim.runtime.seeded_inputs(prog, 0))
    assert rep.passed, rep.text()


def test_dynamic_shape_needs_input_shape():
    with pytest.raises(ModelError) as e:
        compile(zoo.dynamic_model())
    assert "input" in _one_line(e) and "--input-shape" in str(e.value)
    prog = compile(zoo.dynamic_model(), CompileOptions(input_shapes=(1, 3, 8, 8), quantization="fp16"))
    assert prog.buffer("input").shape == (1, 3, 8, 8)
    prog = compile(zoo.dynamic_model(), CompileOptions(input_shapes={"input": (1, 3, 6, 10)}, quantization="fp16"))
    assert prog.buffer("input").shape == (1, 3, 6, 10)


def test_batch_two_runs_and_strict_mode_names_the_batch():
    from npusim.reference import validate
    with pytest.raises(ModelError) as e:
        compile(zoo.dynamic_model(), CompileOptions(input_shapes=(2, 3, 8, 8), no_cpu_fallback=True))
    assert "batch 2" in _one_line(e)
    m = zoo.dynamic_model()
    prog = compile(m, CompileOptions(input_shapes=(2, 3, 8, 8), quantization="fp16"))
    assert prog.buffer("input").shape == (2, 3, 8, 8) and prog.buffer("input").layout == "linear"
    rep = validate(prog, m, npusim.runtime.seeded_inputs(prog, 0))
    assert rep.passed, rep.text()


def test_input_shape_for_unknown_input():
    with pytest.raises(ModelError) as e:
        compile(zoo.dynamic_model(), CompileOptions(input_shapes={"x": (1, 3, 8, 8)}))
    assert "'x'" in _one_line(e) or " x:" in str(e.value)


def test_calibration_file_lacking_input(tmp_path):
    p = tmp_path / "cal.npz"
    np.savez(p, other=np.zeros((2, 1, 3, 8, 8), np.float32))
    with pytest.raises(DataError) as e:
        compile(zoo.conv_model(3, 16, 8, 8), CompileOptions(calibration=str(p)))
    assert "input" in _one_line(e) and "other" in str(e.value)


def test_calibration_file_wrong_shape_and_missing(tmp_path):
    p = tmp_path / "cal.npz"
    np.savez(p, input=np.zeros((2, 3, 9, 9), np.float32))
    with pytest.raises(DataError) as e:
        compile(zoo.conv_model(3, 16, 8, 8), CompileOptions(calibration=str(p)))
    assert "shape" in _one_line(e)
    with pytest.raises(DataError):
        compile(zoo.conv_model(3, 16, 8, 8), CompileOptions(calibration=str(tmp_path / "none.npz")))


def test_calibration_stack_along_batch_axis_accepted(tmp_path):
    p = tmp_path / "cal.npz"
    rng = np.random.default_rng(0)
    np.savez(p, input=rng.standard_normal((4, 3, 8, 8)).astype(np.float32))  # (N*1, 3, 8, 8)
    a = compile(zoo.conv_model(3, 16, 8, 8), CompileOptions(calibration=str(p)))
    np.savez(p, input=rng.standard_normal((4, 1, 3, 8, 8)).astype(np.float32) * 10)
    b = compile(zoo.conv_model(3, 16, 8, 8), CompileOptions(calibration=str(p)))
    assert b.buffer("input").scale > a.buffer("input").scale  # ranges come from the file


def test_model_too_big():
    with pytest.raises(ModelError) as e:  # 1024 x 128 x 128 fp32 = 64 MiB > every activation pool
        compile(zoo.conv_model(3, 1024, 128, 128, k=1), CompileOptions(quantization="fp32"))
    assert "too big" in _one_line(e)


def test_a_kernel_the_ca_cannot_encode_names_the_layer_when_strict():
    with pytest.raises(ModelError) as e:  # a 17x17 kernel does not fit the 4-bit kh field
        compile(zoo.conv_model(16, 16, 20, 20, k=17, pad=0), CompileOptions(quantization="fp16", no_cpu_fallback=True))
    assert "'conv'" in _one_line(e) and "17x17" in str(e.value)


@pytest.mark.parametrize("kw", [dict(quantization="int4"), dict(mem_plan="arena"), dict(fuse="conv-softmax"),
                                dict(mem_align=0), dict(io_pad=-1)])
def test_bad_options(kw):
    with pytest.raises(UsageError):
        CompileOptions(**kw)


def test_errors_are_invalid_input():
    assert issubclass(ModelError, InvalidInputError) and issubclass(DataError, InvalidInputError)


def test_unfoldable_pad_runs_on_the_cpu_or_is_a_clear_error():
    b = zoo.Builder(seed=1)
    p = b.node("Pad", ["input", b.const(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads")], name="pad_r",
               mode="reflect")
    m = b.model([1, 3, 8, 8], [b.conv(p, 3, 16, pad=0)])
    with pytest.raises(ModelError) as e:
        compile(m, CompileOptions(no_cpu_fallback=True))
    assert "pad_r" in _one_line(e)
    assert compile(m).host_layers == ["pad_r"]


def test_broadcast_mul_is_a_clear_error_when_strict():
    b = zoo.Builder(seed=1)
    x = b.conv("input", 3, 16)
    y = b.node("Mul", [x, b.conv(x, 16, 1, k=1)], name="se_mul")  # [1,1,H,W] (a [1,C,1,1] vector is supported)
    with pytest.raises(ModelError) as e:
        compile(b.model([1, 3, 8, 8], [y]), CompileOptions(no_cpu_fallback=True))
    assert "se_mul" in _one_line(e) and "broadcast" in str(e.value)


def test_weights_too_big_for_flash():
    from npusim.hw import load_profile
    small = load_profile(overrides=["pool.octoFlash.size=4KiB"])
    with pytest.raises(ModelError) as e:  # 16*16*3*3 fp32 weights = 9 KiB
        compile(zoo.conv_model(16, 16, 8, 8), CompileOptions(quantization="fp32"), profile=small)
    assert "too big" in _one_line(e) and "octoFlash" in str(e.value)


def test_non_finite_weights_are_refused_for_int8_naming_the_tensor(tmp_path):
    import numpy as np
    from onnx import numpy_helper

    from npusim import compile as npu_compile
    from npusim import zoo
    from npusim.compiler import CompileOptions
    from npusim.errors import ModelError

    m = zoo.conv_model(8, 8, 8, 8, 3)
    w = m.graph.initializer[0]
    a = numpy_helper.to_array(w).copy()
    a.reshape(-1)[3] = np.nan
    w.CopyFrom(numpy_helper.from_array(a, w.name))
    with pytest.raises(ModelError, match=rf"Conv .*constant '{w.name}' has 1 NaN or infinite value"):
        npu_compile(m, CompileOptions())
    npu_compile(m, CompileOptions(quantization="fp16"))  # fp16 keeps them


@pytest.mark.parametrize("quantization", ["int8", "fp16"])
@pytest.mark.parametrize("attrs,needle", [({"auto_pad": "BOGUS"}, "must be one of NOTSET"),
                                          ({"auto_pad": "SAME_UPPER"}, "forbids 'pads' together")])
def test_bad_auto_pad_is_refused_in_every_precision(quantization, attrs, needle):
    from onnx import helper

    from npusim.errors import ModelError

    m = zoo.conv_model(8, 8, 8, 8, 3)  # has explicit pads
    for k, v in attrs.items():
        m.graph.node[0].attribute.append(helper.make_attribute(k, v))
    with pytest.raises(ModelError, match=needle):
        compile(m, CompileOptions(quantization=quantization))
