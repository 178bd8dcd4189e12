"""Convolutions in forms the CONV fields cannot hold as given (compiler/rewrites/conv_forms.py): 1-D convolutions
over [1, C, L] (as 1 x k 2-D ones) and strides past the CA's 7 (a ViT's patch embedding, as SpaceToDepth +
a stride-1 CONV); and mean / max reductions over a map's spatial axes (POOL). Values match ONNX Runtime in
int8/fp16/fp32, the op is an NPU epoch, and shapes the rewrites do not cover keep the CPU with a reason."""

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


# ------------------------------------------------------------------ 1-D convolutions and spatial reductions

def _seq_model(nodes, shape, inits=(), seed=0):
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TP.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    return onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def _conv1d(c, o, length, k, group=1, act=None, seed=0, **attrs):
    r = np.random.default_rng(seed)
    w = (r.standard_normal((o, c // group, k)) / np.sqrt(c // group * k)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if act else "y"], kernel_shape=[k], group=group, **attrs)]
    if act:
        nodes.append(helper.make_node(act, ["c"], ["y"]))
    return _seq_model(nodes, [1, c, length], [("w", w), ("b", (0.1 * r.standard_normal(o)).astype(np.float32))])


CONV1D = {"stem 1->32 k9 s2": dict(c=1, o=32, length=400, k=9, strides=[2], pads=[4, 4]),
          "32->48 k5 dilation 2 + Relu": dict(c=32, o=48, length=120, k=5, dilations=[2], pads=[4, 4], act="Relu"),
          "depthwise 24 k3": dict(c=24, o=24, length=77, k=3, group=24, pads=[1, 1]),
          "20->40 k3 VALID": dict(c=20, o=40, length=50, k=3, auto_pad="VALID")}


@pytest.mark.parametrize("q", ["int8", "fp16", "fp32"])
@pytest.mark.parametrize("case", list(CONV1D))
def test_a_1d_convolution_runs_as_a_1_x_k_conv_on_the_npu(case, q):
    m = _conv1d(**CONV1D[case])
    prog, rep = _run(m, q)
    assert cpu_summary(prog, PROFILE) == [] and any(cmd.op == "CONV" for cmd in prog.commands)
    assert rep.run_result.status == "ok" and not rep.run_result.faults, rep.run_result.report_text()
    assert min(v.cosine for v in rep.metrics.values()) >= TOL[q], rep.text()
    if q == "fp32":
        assert max(v.max_abs for v in rep.metrics.values()) < 1e-5, rep.text()


REDUCE = {"mean over L": ("ReduceMean", [1, 32, 50], [2], 0), "max over H, W": ("ReduceMax", [1, 32, 8, 8], [-2, -1], 1),
          "max over L kept": ("ReduceMax", [1, 20, 33], [2], 1), "mean over H, W": ("ReduceMean", [1, 40, 7, 9], [2, 3], 0)}


@pytest.mark.parametrize("q", ["int8", "fp32"])
@pytest.mark.parametrize("case", list(REDUCE))
def test_a_reduction_over_the_spatial_axes_is_a_global_pool(case, q):
    op, shape, axes, keepdims = REDUCE[case]
    m = _seq_model([helper.make_node(op, ["x"], ["y"], axes=axes, keepdims=keepdims)], shape)
    prog, rep = _run(m, q)
    assert cpu_summary(prog, PROFILE) == [] and any(cmd.op == "POOL" for cmd in prog.commands)
    assert rep.run_result.status == "ok" and min(v.cosine for v in rep.metrics.values()) >= TOL[q], rep.text()
    if q == "fp32":
        assert max(v.max_abs for v in rep.metrics.values()) < 1e-5, rep.text()


@pytest.mark.parametrize("q", ["int8", "fp16", "fp32"])
@pytest.mark.parametrize("op, c", [("ReduceMean", 32), ("ReduceSum", 24), ("ReduceMean", 3)])
def test_a_mean_or_sum_over_channels_is_a_1x1_conv(op, c, q):
    node = helper.make_node(op, ["x", "ax"], ["y"], keepdims=1) if op == "ReduceSum" else \
        helper.make_node(op, ["x"], ["y"], axes=[1], keepdims=1)  # opset 17: ReduceMean's axes are an attribute
    m = _seq_model([node], [1, c, 9, 7], [("ax", np.array([1], np.int64))] if op == "ReduceSum" else [])
    prog, rep = _run(m, q)
    assert cpu_summary(prog, PROFILE) == [] and any(cmd.op == "CONV" for cmd in prog.commands)
    assert rep.run_result.status == "ok" and min(v.cosine for v in rep.metrics.values()) >= TOL[q], rep.text()
    if q == "fp32":
        assert max(v.max_rel for v in rep.metrics.values()) < 1e-5, rep.text()


def test_a_reduction_over_channels_stays_on_the_cpu_with_its_reason():
    m = _seq_model([helper.make_node("ReduceMax", ["x"], ["y"], axes=[1], keepdims=1)], [1, 32, 8, 8])
    prog, rep = _run(m, "fp32")
    assert cpu_summary(prog, PROFILE) == ["ReduceMax x1 -> CPU (axes [1] (the POOL unit reduces H and W))"]
    assert max(v.max_abs for v in rep.metrics.values()) == 0
