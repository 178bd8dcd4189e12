"""Compiler review fixes: computed operands, folding size guard, calibration data, option checks,
ISA-driven block size, profile-derived pools."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper

from npusim import zoo
from npusim.compiler import CompileOptions, compile
from npusim.errors import DataError, ModelError, UsageError


def _model(nodes, inputs, outputs, inits) -> onnx.ModelProto:
    g = oh.make_graph(nodes, "m", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])


def _x(shape):
    return oh.make_tensor_value_info("x", TP.FLOAT, shape)


def _y():
    return oh.make_tensor_value_info("y", TP.FLOAT, None)


def _msg(e) -> str:
    msg = str(e.value)
    assert msg and "\n" not in msg
    return msg


FP32 = CompileOptions(quantization="fp32")
STRICT = CompileOptions(quantization="fp32", no_cpu_fallback=True)


def _runs_on_the_cpu(m, node: str, inputs: dict) -> None:
    """Without --no-cpu-fallback the node is a software epoch and the model matches ONNX Runtime."""
    from npusim.reference import validate

    prog = compile(m, FP32)
    assert node in prog.host_layers
    rep = validate(prog, m, inputs)
    assert rep.run_result.status == "ok" and rep.passed, rep.text()


def test_gemm_computed_bias_is_refused():
    nodes = [oh.make_node("Flatten", ["x"], ["f"], name="flat"),
             oh.make_node("Gemm", ["f", "W", "f"], ["y"], name="fc", transB=1)]
    m = _model(nodes, [_x([1, 4, 1, 1])], [_y()], {"W": np.eye(4, dtype=np.float32)})
    with pytest.raises(ModelError) as e:
        compile(m, STRICT)
    assert "'fc'" in _msg(e) and "bias C is computed" in str(e.value)
    _runs_on_the_cpu(m, "fc", {"x": np.arange(4, dtype=np.float32).reshape(1, 4, 1, 1)})


def test_clip_computed_bound_is_refused():
    nodes = [oh.make_node("ReduceMean", ["x"], ["m"], name="mean", keepdims=0),
             oh.make_node("Clip", ["x", "m", "hi"], ["y"], name="clip")]
    m = _model(nodes, [_x([1, 1, 4, 4])], [_y()], {"hi": np.array(1.0, np.float32)})
    from npusim.compiler.driver import cpu_summary
    from npusim.hw import load_profile

    with pytest.raises(ModelError) as e:
        compile(m, STRICT)
    assert "cannot run on the NPU" in _msg(e)
    _runs_on_the_cpu(m, "clip", {"x": np.linspace(-2, 2, 16, dtype=np.float32).reshape(1, 1, 4, 4)})
    assert "Clip x1 -> CPU (bound 'm' is computed)" in cpu_summary(compile(m, FP32), load_profile())


def test_conv_computed_bias_is_refused():
    nodes = [oh.make_node("GlobalAveragePool", ["x"], ["g"], name="gap"),
             oh.make_node("Reshape", ["g", "shp"], ["m"], name="rs"),
             oh.make_node("Conv", ["x", "W", "m"], ["y"], name="conv", kernel_shape=[1, 1])]
    m = _model(nodes, [_x([1, 8, 4, 4])], [_y()], {"W": np.ones((8, 8, 1, 1), np.float32),
                                                   "shp": np.array([8], np.int64)})
    with pytest.raises(ModelError) as e:
        compile(m, STRICT)
    assert "'conv'" in _msg(e) and "input 'm' is computed" in str(e.value)
    _runs_on_the_cpu(m, "conv", {"x": np.random.default_rng(0).standard_normal((1, 8, 4, 4)).astype(np.float32)})


def test_constant_clip_and_gemm_bias_still_apply():
    prog = compile(zoo.op_model("Clip"), FP32)
    assert prog.commands


def _huge_constant_model(shape_known: bool):
    """x + ConstantOfShape([1, 3, 30000, 30000]) sliced back: folding would allocate ~10 GiB."""
    nodes = [oh.make_node("ConstantOfShape", ["shp"], ["big"], name="cos",
                          value=numpy_helper.from_array(np.array([1.0], np.float32))),
             oh.make_node("Add", ["x", "big"], ["y"], name="add")]
    return _model(nodes, [_x([1, 3, 30000, 30000] if shape_known else [1, 3, 1, 1])], [_y()],
                  {"shp": np.array([1, 3, 30000, 30000], np.int64)})


def test_constant_folding_refuses_huge_constant_before_evaluating():
    m = _huge_constant_model(shape_known=False)
    with pytest.raises(ModelError) as e:
        compile(m, FP32)
    msg = _msg(e)
    assert "model too big" in msg and "'big'" in msg and "cos" in msg



def test_activation_pools_derived_from_profile():
    import dataclasses

    from npusim.compiler.memplan import activation_pools, arenas
    from npusim.hw import load_profile
    p = load_profile()
    assert activation_pools(p) == ["npuRAM3", "npuRAM4", "npuRAM5", "npuRAM6", "cpuRAM2", "hyperRAM"]
    assert [a[0] for a in arenas(p)] == ["npuRAM3", "cpuRAM2", "hyperRAM"]
    # a profile whose cpuRAM2 is made read-only no longer places activations there
    pools = tuple(dataclasses.replace(q, perms="r") if q.name == "cpuRAM2" else q for q in p.pools)
    assert "cpuRAM2" not in activation_pools(dataclasses.replace(p, pool=pools))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_calibration_is_refused(tmp_path, bad):
    m = zoo.op_model("Relu", c=16, h=4, w=4)
    name = m.graph.input[0].name
    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    x = np.zeros([2] + shape, np.float32)
    x[1, 0, 0, 0, 0] = bad
    with pytest.raises(DataError) as e:
        compile(m, calibration={name: x})
    assert name in _msg(e) and "non-finite" in str(e.value)
    np.savez(tmp_path / "cal.npz", **{name: x})
    with pytest.raises(DataError) as e:
        compile(m, CompileOptions(calibration=str(tmp_path / "cal.npz")))
    assert name in _msg(e) and "cal.npz" in str(e.value)
    x[1, 0, 0, 0, 0] = 1.0
    assert compile(m, calibration={name: x}).commands  # finite data still compiles


def test_calibration_samples_must_be_positive():
    with pytest.raises(UsageError) as e:
        CompileOptions(calibration_samples=0)
    assert "calibration_samples" in _msg(e)
    assert CompileOptions(calibration_samples=1).calibration_samples == 1


def test_conv_units_above_profile_count_is_refused():
    from npusim.hw import load_profile
    have = load_profile().units.conv_accelerators
    m = zoo.conv_model(16, 64, 8, 8)
    with pytest.raises(UsageError) as e:
        compile(m, CompileOptions(conv_units=have + 1, quantization="fp16"))
    assert f"only {have} conv accelerators" in _msg(e)
    assert compile(m, CompileOptions(conv_units=have, quantization="fp16")).commands


def test_weights_pool_help_names_no_fixed_pools():
    from npusim.compiler.options import option_fields
    help_text = next(f for f in option_fields() if f.name == "weights_pool").metadata["help"]
    assert "npuRAM" not in help_text and "target profile" in help_text


def test_a_kernel_beyond_the_ca_fields_runs_on_the_cpu():
    m = zoo.conv_model(4, 16, 20, 20, k=17)
    with pytest.raises(ModelError) as e:
        compile(m, STRICT)
    msg = _msg(e)
    assert "'conv'" in msg and "kernel 17x17 exceeds the CA's 15" in msg
    _runs_on_the_cpu(m, "conv", {"input": np.random.default_rng(1).standard_normal((1, 4, 20, 20)).astype(np.float32)})


def test_encode_error_names_the_layer():
    """A value only the encoder catches (a 2**24 B run of an SE) names the layer."""
    from npusim.compiler.driver import _encode_verify
    from npusim.hw import load_profile
    from npusim.program.codec import Command
    from npusim.program.model import Program

    prog = Program([Command("EPOCH", dict(id=0)), Command("SE", dict(
        engine=0, dir="read", port=0, layout="linear", dtype="int8", base=0x34200000, limit=0, run=1 << 24,
        n1=1, s1=0, n2=1, s2=0, n3=1, s3=0)), Command("END")], debug={0: "big"})
    with pytest.raises(ModelError) as e:
        _encode_verify(prog, load_profile())
    msg = _msg(e)
    assert "layer 'big'" in msg and "run" in msg and "exceeds what the hardware can encode" in msg


def test_each_command_is_encoded_once(monkeypatch):
    import npusim.program.codec as codec
    calls = []
    real = codec._encoded

    def counting(cmd, *rest):
        calls.append(cmd)
        return real(cmd, *rest)

    monkeypatch.setattr(codec, "_encoded", counting)  # every encode, encode_all and hardware_view goes through it
    prog = compile(zoo.conv_model(16, 32, 8, 8), FP32)
    assert len(calls) == len(prog.commands)


def test_block_size_comes_from_the_isa(tmp_path):
    from npusim.program.layouts import block_size, geometry
    from npusim.program.spec import isa_path, load_isa
    assert block_size() == int(load_isa().layouts["blocked16"]["block"]) == geometry(4, 4, 40, 1).block
    text = isa_path().read_text()
    assert "block = 16" in text
    alt = tmp_path / "isa.toml"
    alt.write_text(text.replace("block = 16", "block = 8", 1))
    isa8 = load_isa(str(alt))
    assert block_size(isa8) == 8
    g = geometry(4, 4, 40, 1, isa=isa8)
    assert (g.block, g.planes) == (8, 5)


def test_concat_parts_are_placed_on_their_planes():
    from npusim.program.layouts import block_size
    nodes = [oh.make_node("Conv", ["x", "W1"], ["a"], name="ca", kernel_shape=[1, 1]),
             oh.make_node("Conv", ["x", "W2"], ["b"], name="cb", kernel_shape=[1, 1]),
             oh.make_node("Concat", ["a", "b"], ["y"], name="cat", axis=1)]
    m = _model(nodes, [_x([1, 8, 4, 4])], [_y()], {"W1": np.ones((32, 8, 1, 1), np.float32),
                                                   "W2": np.ones((16, 8, 1, 1), np.float32)})
    prog = compile(m, FP32)
    a, b, y = prog.buffer("a"), prog.buffer("b"), prog.buffer("y")
    assert a.offset == y.offset and b.offset == y.offset + (32 // block_size()) * y.plane_stride


def test_sparse_constant_expansion_is_bounded():
    sparse = oh.make_sparse_tensor(numpy_helper.from_array(np.array([1.0], np.float32), "v"),
                                   numpy_helper.from_array(np.array([0], np.int64), "i"), [1, 3, 30000, 30000])
    nodes = [oh.make_node("Constant", [], ["big"], name="sp", sparse_value=sparse),
             oh.make_node("Add", ["x", "big"], ["y"], name="add")]
    with pytest.raises(ModelError, match="model too big: constant 'big' .* node 'sp'"):
        compile(_model(nodes, [_x([1, 3, 1, 1])], [_y()], {}), FP32)
