"""Operators the NPU runs beyond convolutions (issue 11 item 3) and the fixes of item 4: each compiled in
int8, fp16 and fp32, run, and compared with ONNX Runtime; each checked to be NPU epochs, not CPU ones."""

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
from npusim.hw import load_profile
from npusim.reference import validate

PROFILE = load_profile()
QS = ("int8", "fp16", "fp32")


def _model(nodes, x_shape, inits=(), opset=17, outputs=("y",)):
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TP.FLOAT, list(x_shape))],
                          [helper.make_tensor_value_info(o, TP.FLOAT, None) for o in outputs],
                          [numpy_helper.from_array(v, k) for k, v in dict(inits).items()])
    return onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]))


def _check(m, q, on_cpu=(), min_cosine=0.99):
    prog = compile(m, CompileOptions(quantization=q))
    cpu = cpu_summary(prog, PROFILE)
    assert all(any(line.startswith(op + " ") for line in cpu) for op in on_cpu), cpu
    assert len(cpu) == len(on_cpu), cpu
    rep = validate(prog, m, npusim.runtime.seeded_inputs(prog, 0))
    assert rep.run_result.status == "ok", rep.run_result.report_text()
    tol = {"int8": min_cosine, "fp16": 0.9999, "fp32": 0.999999}[q]
    assert min(v.cosine for v in rep.metrics.values()) >= tol, rep.text()
    if q == "fp32":
        assert max(v.max_abs for v in rep.metrics.values()) < 1e-4, rep.text()
    return prog, rep


def _convtranspose(cin, cout, k, s, h, groups=1, **attrs):
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((cin, cout // groups, k, k)) / np.sqrt(cin)).astype(np.float32)
    b = (rng.standard_normal(cout) * 0.1).astype(np.float32)
    n = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], name="ct", kernel_shape=[k, k], strides=[s, s],
                         group=groups, **attrs)
    return _model([n], [1, cin, h, h], {"w": w, "b": b})


@pytest.mark.parametrize("q", QS)
@pytest.mark.parametrize("cfg", [
    dict(cin=16, cout=32, k=2, s=2, h=6),                                        # UNet upsampling
    dict(cin=16, cout=16, k=3, s=2, h=5, pads=[1, 1, 1, 1], output_padding=[1, 1]),
    dict(cin=32, cout=16, k=4, s=2, h=4, pads=[1, 1, 1, 1]),                     # DCGAN-style
    dict(cin=16, cout=16, k=3, s=1, h=7, pads=[1, 1, 1, 1]),
    dict(cin=16, cout=32, k=2, s=2, h=5, groups=4),
    dict(cin=16, cout=16, k=3, s=2, h=5, auto_pad="SAME_UPPER"),
])
def test_convtranspose_on_the_npu(q, cfg):
    prog, _ = _check(_convtranspose(**cfg), q)
    s = cfg["s"]
    assert sum(c.op == "CONV" for c in prog.commands) >= s * s  # one CONV per output phase


@pytest.mark.parametrize("q", QS)
def test_convtranspose_the_npu_cannot_phase_runs_on_the_cpu(q):
    _check(_convtranspose(16, 16, 1, 2, 5), q, on_cpu=("ConvTranspose",))  # k < s: phases without taps
    _check(_convtranspose(8, 3, 3, 3, 4), q, on_cpu=("ConvTranspose",))  # C <= 4: pixels off the word grid


def test_host_convtranspose_matches_onnx_runtime_for_grouped_weights():
    """The host's own ConvTranspose (onnx's reference mixes up groups of more than one channel)."""
    import onnxruntime as ort

    from npusim.cpu.kernels import conv_transpose

    rng = np.random.default_rng(1)
    for attrs in (dict(group=4, strides=[2, 2]), dict(group=2, strides=[3, 1], pads=[1, 0, 1, 2], dilations=[2, 1]),
                  dict(group=1, strides=[2, 2], output_padding=[1, 1]), dict(group=2, strides=[2, 2], auto_pad="SAME_LOWER")):
        x = rng.standard_normal((1, 8, 5, 6)).astype(np.float32)
        w = rng.standard_normal((8, 12 // attrs["group"], 3, 3)).astype(np.float32)
        b = rng.standard_normal(12).astype(np.float32)
        n = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], **attrs)
        g = helper.make_graph([n], "g", [helper.make_tensor_value_info(k, TP.FLOAT, None) for k in "xwb"],
                              [helper.make_tensor_value_info("y", TP.FLOAT, None)])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"x": x, "w": w, "b": b})[0]
        np.testing.assert_allclose(conv_transpose(x, w, b, attrs), want, rtol=1e-5, atol=1e-5)


def _unary(op, c=16, h=6, opset=20, inits=(), **attrs):
    """x -> Conv 1x1 -> op: the activation reads an NPU-produced map (int8: with the conv's scale)."""
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((c, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    ins = ["t"] + [k for k, _ in inits]
    nodes = [helper.make_node("Conv", ["x", "w"], ["t"], name="conv"), helper.make_node(op, ins, ["y"], name="op", **attrs)]
    return _model(nodes, [1, c, h, h], {"w": w, **dict(inits)}, opset=opset)


def _assert_on_npu(prog, unit):
    assert any(c.op == unit for c in prog.commands), unit


@pytest.mark.parametrize("q", QS)
@pytest.mark.parametrize("op, attrs", [
    ("HardSigmoid", dict(alpha=0.3, beta=0.4)), ("Elu", dict(alpha=0.7)), ("Softplus", {}),
    ("Gelu", {}), ("Gelu", dict(approximate="tanh")), ("Mish", {}),
])
def test_activations_on_the_act_unit(q, op, attrs):
    prog, _ = _check(_unary(op, **attrs), q)
    _assert_on_npu(prog, "ACT")


@pytest.mark.parametrize("q", QS)
def test_prelu_scalar_is_act_and_per_channel_is_arith(q):
    prog, _ = _check(_unary("PRelu", inits={"s": np.array([0.2], np.float32)}.items()), q)
    _assert_on_npu(prog, "ACT")
    slopes = np.linspace(-0.5, 0.5, 16, dtype=np.float32).reshape(16, 1, 1)
    prog, _ = _check(_unary("PRelu", inits={"s": slopes}.items()), q)
    assert any(c.op == "ARITH" and c.args["op"] == "prelu" for c in prog.commands)
    per_pixel = np.linspace(0, 0.5, 6, dtype=np.float32)  # broadcast along W: no per-channel unit for it
    _check(_unary("PRelu", inits={"s": per_pixel}.items()), q, on_cpu=("PRelu",))


@pytest.mark.parametrize("q", QS)
def test_global_max_pool_on_the_pool_unit(q):
    prog, _ = _check(_unary("GlobalMaxPool"), q)
    assert any(c.op == "POOL" and c.args["mode"] == "global_max" for c in prog.commands)


def _binary(op, sa, sb, opset=17):
    """Two computed maps (convs of one input) combined by op."""
    rng = np.random.default_rng(4)
    c = 16
    wa = (rng.standard_normal((sa[1], c, 1, 1)) / 4).astype(np.float32)
    wb = (rng.standard_normal((sb[1], c, 1, 1)) / 4).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], name="ca"),
             helper.make_node("Conv", ["x", "wb"], ["b"], name="cb"),
             helper.make_node(op, ["a", "b"], ["y"], name="op")]
    return _model(nodes, [1, c, sa[2], sa[3]], {"wa": wa, "wb": wb}, opset=opset)


@pytest.mark.parametrize("q", QS)
@pytest.mark.parametrize("op", ["Max", "Min", "Sub"])
def test_two_map_arith_ops(q, op):
    prog, _ = _check(_binary(op, (1, 16, 5, 5), (1, 16, 5, 5)), q)
    assert any(c.op == "ARITH" and c.args["op"] == op.lower() for c in prog.commands)


def test_ops_the_npu_cannot_do_stay_on_the_cpu_with_a_reason():
    prog = compile(_binary("Div", (1, 16, 5, 5), (1, 16, 5, 5)), CompileOptions(quantization="int8"))
    assert "holding 0 (no int8 scale for 1 / y)" in " ".join(cpu_summary(prog, PROFILE))
    growing = helper.make_node("Max", ["t", "k"], ["y"], name="op")  # the constant makes the result larger
    m = _model([helper.make_node("Relu", ["x"], ["t"]), growing], [1, 16, 1, 4], {"k": np.ones((16, 4, 1), np.float32)})
    prog, _ = _check(m, "fp32", on_cpu=("Max",))
    assert "broadcast larger" in " ".join(cpu_summary(prog, PROFILE))


@pytest.mark.parametrize("q", QS)
def test_max_min_of_many_inputs_and_of_a_scalar(q):
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"]), helper.make_node("Relu", ["x"], ["b"]),
             helper.make_node("Sigmoid", ["x"], ["c"]), helper.make_node("Max", ["a", "b", "c"], ["m"]),
             helper.make_node("Min", ["m", "six"], ["n"]), helper.make_node("Max", ["lo", "n"], ["y"])]
    w = (np.random.default_rng(5).standard_normal((16, 16, 1, 1)) / 4).astype(np.float32)
    prog, _ = _check(_model(nodes, [1, 16, 4, 4], {"w": w, "six": np.float32(0.6), "lo": np.float32(-0.2)}), q)
    assert [c.args["op"] for c in prog.commands if c.op == "ARITH"] == ["max", "max"]


def test_new_npu_ops_are_deterministic():
    m = _unary("Gelu")
    prog = compile(m, CompileOptions(quantization="int8"))
    ins = npusim.runtime.seeded_inputs(prog, 1)
    r1, r2 = npusim.runtime.run(prog, ins), npusim.runtime.run(prog, ins)
    assert r1.stats.cycles == r2.stats.cycles > 0
    assert all(np.array_equal(r1.raw_outputs[k], r2.raw_outputs[k]) for k in r1.raw_outputs)


def _two_inputs(op, sa, sb):
    """op(Relu(a), Relu(b)) of two model inputs, numpy-broadcast."""
    nodes = [helper.make_node("Relu", ["a"], ["ra"]), helper.make_node("Relu", ["b"], ["rb"]),
             helper.make_node(op, ["ra", "rb"], ["y"], name="op")]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("a", TP.FLOAT, list(sa)),
                                       helper.make_tensor_value_info("b", TP.FLOAT, list(sb))],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)])
    return onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


@pytest.mark.parametrize("q", QS)
@pytest.mark.parametrize("op, sa, sb", [
    ("Add", (1, 32, 5, 6), (1, 32, 1, 6)),   # rows repeated (blocked16)
    ("Sub", (1, 32, 5, 6), (1, 32, 5, 1)),   # columns repeated
    ("Sub", (1, 16, 1, 1), (1, 16, 5, 6)),   # a linear vector on port 0
    ("Max", (1, 3, 5, 6), (1, 3, 1, 1)),     # image map, vector
    ("Min", (1, 20, 1, 6), (1, 20, 5, 1)),   # both operands broadcast
    ("Mul", (1, 2, 7), (1, 2, 1)),           # a [1, C, L] map
])
def test_broadcasting_by_zero_strides(q, op, sa, sb):
    prog, _ = _check(_two_inputs(op, sa, sb), q)
    arith = next(c for c in prog.commands if c.op == "ARITH")
    assert arith.args["op"] == op.lower()
    assert any(c.op == "SE" and c.args["dir"] == "read" and 0 in (c.args["s1"], c.args["s2"]) and
               max(c.args["n1"], c.args["n2"]) > 1 for c in prog.commands)


@pytest.mark.parametrize("sa, sb, why", [
    ((1, 20, 5, 6), (1, 20, 1, 1), "read past its end"),   # a vector of 20 channels under blocked16 planes
    # [1, 5, 6] is a map of 5 channels: copied into a [1, 1, 5, 6] map it could broadcast, but on 480 elements the
    # copy, expansion and ARITH epochs cost more than the host's Add
    ((1, 16, 5, 6), (1, 5, 6), "NPU cycles for copying a lower-rank operand into a map"),
])
def test_broadcasting_the_streams_cannot_do_stays_on_the_cpu(sa, sb, why):
    prog, _ = _check(_two_inputs("Add", sa, sb), "fp32", on_cpu=("Add",))
    assert why in " ".join(cpu_summary(prog, PROFILE))


def _divide(sa, sb):
    """Relu(a) / (Relu(b) + 0.5): a divisor away from 0 (int8 needs its range to exclude 0)."""
    nodes = [helper.make_node("Relu", ["a"], ["ra"]), helper.make_node("Relu", ["b"], ["rb"]),
             helper.make_node("Add", ["rb", "half"], ["d"]), helper.make_node("Div", ["ra", "d"], ["y"], name="op")]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("a", TP.FLOAT, list(sa)),
                                       helper.make_tensor_value_info("b", TP.FLOAT, list(sb))],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)],
                          [numpy_helper.from_array(np.float32(0.5), "half")])
    return onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


@pytest.mark.parametrize("q", QS)
@pytest.mark.parametrize("sa, sb", [((1, 16, 5, 6), (1, 16, 5, 6)), ((1, 32, 5, 6), (1, 32, 1, 1))])
def test_div_of_two_maps_is_a_reciprocal_into_mul(q, sa, sb):
    prog, _ = _check(_divide(sa, sb), q)
    assert any(c.op == "ACT" and c.args["func"] in ("reciprocal", "lut") for c in prog.commands)
    assert sum(c.op == "EPOCH" for c in prog.commands) == 4  # relu, relu, add, div: one epoch for the Div


@pytest.mark.parametrize("q", QS)
def test_reciprocal_on_the_act_unit(q):
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "half"], ["d"]),
             helper.make_node("Reciprocal", ["d"], ["y"])]
    prog, _ = _check(_model(nodes, [1, 16, 5, 5], {"half": np.float32(0.5)}), q)
    _assert_on_npu(prog, "ACT")


@pytest.mark.parametrize("q", QS)
@pytest.mark.parametrize("form", ["div", "mul_half_first", "half_last"])
def test_the_erf_form_of_gelu_is_one_act_epoch(q, form):
    """x * 0.5 * (1 + Erf(x / sqrt 2)) as exporters write it before opset 20."""
    k = {"r2": np.float32(np.sqrt(2)), "ir2": np.float32(1 / np.sqrt(2)), "one": np.float32(1), "half": np.float32(0.5)}
    pre = helper.make_node("Div", ["t", "r2"], ["d"]) if form == "div" else helper.make_node("Mul", ["ir2", "t"], ["d"])
    nodes = [helper.make_node("Conv", ["x", "w"], ["t"]), pre, helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["one", "e"], ["s"])]
    if form == "mul_half_first":
        nodes += [helper.make_node("Mul", ["t", "half"], ["h"]), helper.make_node("Mul", ["h", "s"], ["y"])]
    else:
        nodes += [helper.make_node("Mul", ["t", "s"], ["m"]), helper.make_node("Mul", ["m", "half"], ["y"])]
    k["w"] = (np.random.default_rng(6).standard_normal((16, 16, 1, 1)) / 4).astype(np.float32)
    prog, _ = _check(_model(nodes, [1, 16, 5, 5], k, opset=17), q)
    assert sum(c.op == "EPOCH" for c in prog.commands) == 1 and any(c.op == "ACT" for c in prog.commands)


@pytest.mark.parametrize("q", QS)
@pytest.mark.parametrize("op, k_shape", [("Add", (6,)), ("Mul", (1, 16, 5, 6)), ("Sub", (5, 1)), ("Div", (6,)),
                                         ("Max", (16, 1, 1))])
def test_a_constant_map_operand_streams_into_arith(q, op, k_shape):
    """x op K with K broadcasting to the map (a bias along W, a positional table, a per-channel Max):
    K is stored expanded in the map's layout."""
    k = (np.random.default_rng(7).uniform(0.5, 1.5, k_shape)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["t"]), helper.make_node(op, ["t", "k"], ["y"])]
    w = (np.random.default_rng(8).standard_normal((16, 16, 1, 1)) / 4).astype(np.float32)
    prog, _ = _check(_model(nodes, [1, 16, 5, 6], {"w": w, "k": k}), q)
    assert any(c.op == "ARITH" for c in prog.commands)
