"""Convolutions strided past the CA's 7 (a ViT's patch embedding) run as SpaceToDepth + a stride-1 CONV
(compiler/strided_conv.py): values match ONNX Runtime in int8/fp16/fp32 at --mem-align 128 and 16, the
Conv itself is an NPU epoch, and shapes the rewrite does not cover keep the CPU Conv with its reason."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import npusim
import npusim.runtime
from npusim.compiler import CompileOptions, compile
from npusim.compiler.driver import cpu_summary
from npusim.cpu.cost import host_cycles
from npusim.hw import load_profile
from npusim.reference import validate

PROFILE = load_profile()
TOL = {"int8": 0.999, "fp16": 0.99999, "fp32": 0.999999}


def _conv_model(c, o, h, w, k, s, pads=(0, 0, 0, 0), group=1, dilation=1, seed=0):
    r = np.random.default_rng(seed)
    W = (r.standard_normal((o, c // group, k, k)) / np.sqrt(c // group * k * k)).astype(np.float32)
    B = (0.1 * r.standard_normal(o)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[s, s], pads=list(pads), kernel_shape=[k, k],
                            group=group, dilations=[dilation, dilation])
    g = helper.make_graph([node], "m", [helper.make_tensor_value_info("x", TP.FLOAT, [1, c, h, w])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)],
                          [numpy_helper.from_array(W, "w"), numpy_helper.from_array(B, "b")])
    return onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def _run(m, q, align=128):
    prog = compile(m, CompileOptions(quantization=q, mem_align=align), profile=PROFILE)
    rep = validate(prog, m, npusim.runtime.seeded_inputs(prog, 0), profile=PROFILE)
    return prog, rep


# (cin, cout, h, w, k, stride, pads): patch embeddings (k = s), k > s with a cropped or padded tail,
# top/left pads that are multiples of s, a stride 14 whose SpaceToDepth maps by addressing (C = 32)
SHAPES = [(3, 64, 32, 32, 8, 8, (0, 0, 0, 0)), (3, 48, 64, 48, 16, 16, (0, 0, 0, 0)), (3, 32, 30, 30, 8, 8, (0, 0, 0, 0)),
          (3, 32, 33, 33, 9, 8, (0, 0, 0, 0)), (16, 32, 32, 32, 10, 8, (8, 8, 3, 3)), (32, 48, 28, 28, 14, 14, (0, 0, 0, 0)),
          (3, 16, 35, 35, 12, 9, (0, 0, 5, 5))]


@pytest.mark.parametrize("q", ["int8", "fp16", "fp32"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s[:6])))
def test_a_conv_strided_past_the_ca_runs_on_the_npu(shape, q):
    c, o, h, w, k, s, pads = shape
    m = _conv_model(c, o, h, w, k, s, pads)
    prog, rep = _run(m, q)
    assert not any(line.startswith("Conv ") for line in cpu_summary(prog, PROFILE)), cpu_summary(prog, PROFILE)
    assert any(cmd.op == "CONV" for cmd in prog.commands)
    assert rep.run_result.status == "ok" and not rep.run_result.faults, rep.run_result.report_text()
    assert min(v.cosine for v in rep.metrics.values()) >= TOL[q], rep.text()
    if q == "fp32":
        assert max(v.max_abs for v in rep.metrics.values()) < 1e-5, rep.text()


@pytest.mark.parametrize("q", ["int8", "fp16"])
def test_a_vit_patch_embedding_costs_a_fraction_of_the_cpu_conv(q):
    m = _conv_model(3, 96, 224, 224, 16, 16)
    prog = compile(m, CompileOptions(quantization=q), profile=PROFILE)
    cycles = npusim.run(prog, random_inputs=True, options=npusim.RunOptions(timing_only=True, trace=False)).stats.cycles
    cpu_conv = host_cycles("Conv", [(1, 3, 224, 224), (96, 3, 16, 16), (96,)], [(1, 96, 14, 14)], PROFILE,
                           dict(kernel_shape=[16, 16], strides=[16, 16]))
    assert cycles < cpu_conv / 10, (cycles, cpu_conv)


@pytest.mark.parametrize("kwargs, reason", [
    (dict(c=8, o=8, h=32, w=32, k=8, s=8, group=8), "strides [8, 8] exceed the CA's 7"),
    (dict(c=3, o=8, h=64, w=64, k=3, s=8, dilation=2), "strides [8, 8] exceed the CA's 7"),
    (dict(c=3, o=8, h=32, w=32, k=8, s=8, pads=(3, 3, 0, 0)), "strides [8, 8] exceed the CA's 7"),
])
def test_shapes_outside_the_rewrite_keep_the_cpu_conv_with_its_reason(kwargs, reason):
    m = _conv_model(**kwargs)
    prog, rep = _run(m, "fp32")
    assert any(line.startswith("Conv x1 -> CPU") and reason in line for line in cpu_summary(prog, PROFILE))
    assert rep.run_result.status == "ok" and max(v.max_abs for v in rep.metrics.values()) < 1e-5


@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
def test_a_prequantized_patch_embedding_moves_its_stored_integers(fmt):
    from npusim.zoo.quantized import quantize_onnx

    m = quantize_onnx(_conv_model(3, 32, 32, 32, 8, 8, seed=1), format=fmt)
    prog = compile(m, CompileOptions(), profile=PROFILE)
    assert not any(line.startswith(("Conv ", "QLinearConv ")) for line in cpu_summary(prog, PROFILE)), \
        cpu_summary(prog, PROFILE)
    rep = validate(prog, m, npusim.runtime.seeded_inputs(prog, 0), profile=PROFILE)
    assert rep.run_result.status == "ok" and not rep.run_result.faults
    assert min(v.cosine for v in rep.metrics.values()) >= 0.999, rep.text()
