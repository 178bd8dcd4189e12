"""LRN across channels on the NPU (compiler/recipes/lrn.py): mapped in int8, values against ONNX Runtime."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from npusim.compiler import CompileOptions, compile
from npusim.compiler.driver import cpu_summary
from npusim.compiler.recipes.lrn import scale_table, window
from npusim.hw import load_profile
from npusim.kernels.quant import quantize
from npusim.reference import validate


def lrn_model(c=16, h=8, size=5, alpha=0.5, beta=0.75, bias=1.0) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, h, h])
    node = helper.make_node("LRN", ["x"], ["y"], name="norm", size=size, alpha=alpha, beta=beta, bias=bias)
    m = helper.make_model(helper.make_graph([node], "lrn", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def units(prog) -> list[str]:
    return [c.op for c in prog.commands if c.op in ("CONV", "ACT", "ARITH", "HOST")]


def test_the_window_is_onnx_s():
    """Output channel c sums input channels c - floor((size - 1) / 2) .. c + ceil((size - 1) / 2)."""
    for channels, size in ((7, 1), (7, 3), (7, 4), (5, 9)):
        below, above = (size - 1) // 2, size - 1 - (size - 1) // 2
        want = np.array([[out - below <= j <= out + above for j in range(channels)] for out in range(channels)],
                        np.float32)
        assert np.array_equal(window(channels, size), want)
    assert window(7, 4)[3].nonzero()[0].tolist() == [2, 3, 4, 5]


def test_the_table_is_the_power_at_each_code():
    q_in, q_out = (0.5, -128), (1 / 255, -128)
    t = scale_table(2.0, 0.1, 0.75, q_in, q_out)
    s = (np.arange(-128, 128) + 128) * 0.5
    assert np.array_equal(t, quantize((2.0 + 0.1 * s) ** -0.75, *q_out))
    assert t[0] >= t[-1]  # d falls as the window sum grows


@pytest.mark.parametrize("c, h, size", [(16, 8, 5), (20, 5, 1), (96, 12, 5), (24, 6, 3)])
def test_int8_runs_on_the_npu_and_matches_onnx_runtime(c, h, size):
    m = lrn_model(c, h, size)
    prog = compile(m.SerializeToString(), CompileOptions())
    assert cpu_summary(prog, load_profile()) == []
    assert units(prog)[:4] == ["ARITH", "CONV", "ACT", "ARITH"]
    x = np.random.default_rng(1).standard_normal((1, c, h, h)).astype(np.float32)
    report = validate(prog, m, {"x": x})
    assert report.passed, report.failures
    assert report.metrics["y"].cosine > 0.999


@pytest.mark.parametrize("quantization", ["fp32", "fp16"])
def test_float_compiles_keep_it_on_the_cpu_with_the_reason(quantization):
    prog = compile(lrn_model().SerializeToString(), CompileOptions(quantization=quantization))
    assert units(prog) == ["HOST"]
    assert "the ACT unit has no power function" in cpu_summary(prog, load_profile())[0]


def test_a_tiny_map_is_cheaper_on_the_host():
    prog = compile(lrn_model(3, 4, 3).SerializeToString(), CompileOptions())
    assert units(prog) == ["HOST"]
    assert "faster on the CPU" in cpu_summary(prog, load_profile())[0]


@pytest.mark.slow
def test_alexnet_runs_its_lrn_on_the_npu(zoo_file):
    before = "LRN x2 -> CPU (no NPU unit)"  # what compile printed before this recipe
    alexnet = zoo_file("alexnet").read_bytes()  # public.alexnet(), built once per run (3 s)
    summary = cpu_summary(compile(alexnet, CompileOptions()), load_profile())
    assert before not in summary and not any(line.startswith("LRN") for line in summary)
