"""MatMul between two computed maps on the CONV unit (issue 11 item 3; compiler/recipes/matmul.py): compiled in int8,
fp16 and fp32 at --mem-align 128 and 16, run through the checker, compared with ONNX Runtime; the forms the
CA cannot take stay on the CPU with their reason."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import npusim.runtime
from npusim.compiler import CompileOptions, compile
from npusim.compiler.driver import cpu_summary
from npusim.hw import load_profile
from npusim.reference import validate
from npusim.testing import assert_check_clean

PROFILE = load_profile()
TOL = {"int8": 0.995, "fp16": 0.99999, "fp32": 0.9999999}  # int8: the product of three 8-bit roundings


def _model(sa, sb):
    """A = a * 0.5 and B = b * 0.5 (computed maps, ARITH) -> MatMul(A, B)."""
    nodes = [helper.make_node("Mul", ["a", "k"], ["A"]), helper.make_node("Mul", ["b", "k"], ["B"]),
             helper.make_node("MatMul", ["A", "B"], ["y"], name="matmul")]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("a", TP.FLOAT, list(sa)),
                                       helper.make_tensor_value_info("b", TP.FLOAT, list(sb))],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)], [numpy_helper.from_array(np.float32(0.5), "k")])
    return onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def _inputs_model(sa, sb):
    """MatMul(a, b) of the graph's inputs (their buffers the NPU's)."""
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"], name="matmul")], "m",
                          [helper.make_tensor_value_info("a", TP.FLOAT, list(sa)),
                           helper.make_tensor_value_info("b", TP.FLOAT, list(sb))],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)])
    return onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def _run(m, q, align=128):
    prog = compile(m, CompileOptions(quantization=q, mem_align=align))
    rep = validate(prog, m, npusim.runtime.seeded_inputs(prog, 0))
    assert rep.run_result.status == "ok", rep.run_result.report_text()
    return prog, rep


@pytest.mark.parametrize("align", [128, 16])
@pytest.mark.parametrize("q", ["int8", "fp16", "fp32"])
@pytest.mark.parametrize("m, k, n", [(16, 24, 8), (3, 8, 5), (32, 16, 8), (4, 1, 9)])
def test_matmul_of_two_maps_runs_on_the_conv_unit(q, align, m, k, n):
    """A's rows as channels of an image map (M <= 4) or of whole blocked16 planes, any K and N (shapes whose
    planes fill whole 128 B granules, so --mem-align 16 is no misalignment)."""
    prog, rep = _run(_model((1, m, k), (1, k, n)), q, align)
    assert cpu_summary(prog, PROFILE) == [] and not any(c.op == "HOST" for c in prog.commands)
    conv = [c for c in prog.commands if c.op == "CONV"]
    assert len(conv) == 1 and (conv[0].args["in_c"], conv[0].args["out_c"], conv[0].args["in_w"]) == (k, m, n)
    assert min(v.cosine for v in rep.metrics.values()) >= TOL[q], rep.text()
    if q == "fp32":
        assert max(v.max_abs for v in rep.metrics.values()) < 1e-5, rep.text()
    assert_check_clean(prog)


@pytest.mark.parametrize("q", ["int8", "fp16"])
def test_matmul_with_other_widths(q):
    prog, rep = _run(_model((1, 16, 24), (1, 24, 20)), q)
    assert cpu_summary(prog, PROFILE) == [] and min(v.cosine for v in rep.metrics.values()) >= TOL[q], rep.text()


def test_int8_kernel_map_is_quantized_with_zero_point_0():
    prog = compile(_model((1, 16, 8), (1, 8, 6)), CompileOptions(quantization="int8"))
    kernel = next(b for b in prog.buffers if b.name == "A")
    assert kernel.zero_point == 0


def _matmul_epochs(prog, layer="matmul"):
    """(CONV commands, HOST commands) of `layer` (program.debug names each command's layer)."""
    marks = sorted(prog.debug.items()) + [(len(prog.commands), None)]
    cmds = [c for (i, name), (j, _) in zip(marks, marks[1:]) if name == layer for c in prog.commands[i:j]]
    return [c for c in cmds if c.op == "CONV"], [c for c in cmds if c.op == "HOST"]


@pytest.mark.parametrize("align", [128, 16])
@pytest.mark.parametrize("q", ["int8", "fp16", "fp32"])
@pytest.mark.parametrize("sa, sb, epochs", [
    ((1, 4, 16, 16), (1, 4, 16, 16), 1),  # per-head attention: the heads are the groups of one grouped CONV
    ((1, 4, 16, 8), (1, 4, 8, 16), 1),  # K = 8 per head: 4 groups fill two 16-channel planes
    ((1, 4, 16, 16), (1, 1, 16, 16), 1),  # B broadcast over the heads: one input, the heads' kernels stacked
    ((2, 16, 32), (2, 32, 16), 1),  # batched (a linear tensor)
    ((16, 16), (16, 16), 1),  # rank 2
    ((3, 16, 16), (16, 16), 1),  # rank 3 @ rank 2
    ((1, 16, 32), (32, 16), 1),
    ((1, 2, 32, 16), (1, 2, 16, 32), 1),
])
def test_matmul_per_batch_slice_runs_on_the_conv_unit(q, align, sa, sb, epochs):
    """CONV epochs over the slices of the broadcast batch, writing every element of Y once; no HOST step."""
    prog, rep = _run(_model(sa, sb), q, align)
    conv, host = _matmul_epochs(prog)
    assert not host and len(conv) == epochs, (len(conv), host)
    out = np.broadcast_shapes(sa[:-2], sb[:-2]) + (sa[-2], sb[-1])
    assert sum(c.args["out_c"] * c.args["in_w"] for c in conv) == int(np.prod(out))
    assert not any(line.startswith("MatMul") for line in cpu_summary(prog, PROFILE))
    assert min(v.cosine for v in rep.metrics.values()) >= TOL[q], rep.text()
    if q == "fp32":
        assert max(v.max_abs for v in rep.metrics.values()) < 1e-4, rep.text()
    assert_check_clean(prog)


@pytest.mark.parametrize("align", [128, 16])
@pytest.mark.parametrize("q", ["int8", "fp16", "fp32"])
@pytest.mark.parametrize("sa, sb", [
    ((1, 3, 49, 8), (1, 3, 8, 49)),  # 3 heads (an image map), T = 49: Y's 49 channels padded to 64
    ((1, 3, 49, 49), (1, 3, 49, 8)),  # (Softmax) V: K = 49 input channels padded
    ((1, 8, 50, 8), (1, 8, 8, 50)),  # 8 heads: Y's one partial plane, its padding lanes zeroed
    ((1, 12, 50, 50), (1, 12, 50, 8)),  # 12 heads
    ((1, 12, 65, 8), (1, 12, 8, 65)),
    ((1, 3, 197, 8), (1, 3, 8, 197)),  # 197 tokens: Y's rows span 13 planes, the last partial
    ((1, 4, 33, 10), (1, 4, 10, 33)),  # slices of 330 elements: the copies' slices start on the bus word
    ((1, 20, 40), (1, 40, 24)),  # A's 20 rows: more than one plane, the last partial
])
def test_matmul_per_head_of_any_head_count_and_length_runs_on_the_npu(q, align, sa, sb):
    """Per-head products of real transformers (heads 3, 8, 12; T 49, 50, 65, 197): CONV epochs walking
    the slices of ONNX-order copies whose CA channel axis is padded to whole planes; no HOST step, every
    element of Y written once, the checker clean. (The operands are the graph's inputs: an ARITH Mul
    producing them overflows its input at --mem-align 16 for some of these shapes, on main as well.)"""
    prog, rep = _run(_inputs_model(sa, sb), q, align)
    conv, host = _matmul_epochs(prog)
    assert conv and not host, (len(conv), host)
    out = np.broadcast_shapes(sa[:-2], sb[:-2]) + (sa[-2], sb[-1])
    assert sum(c.args["out_c"] * c.args["in_w"] for c in conv) == int(np.prod(out))
    assert not any(line.startswith("MatMul") for line in cpu_summary(prog, PROFILE))
    assert min(v.cosine for v in rep.metrics.values()) >= {"int8": 0.99, "fp16": 0.9999, "fp32": 0.0}[q], rep.text()
    if q == "fp32":
        assert max(v.max_abs for v in rep.metrics.values()) < 1e-5, rep.text()
    assert_check_clean(prog)


@pytest.mark.parametrize("q", ["int8", "fp16"])
@pytest.mark.parametrize("tokens, dim, heads", [(16, 64, 4), (50, 64, 8), (49, 48, 3), (65, 96, 12)])
def test_transformer_attention_matmuls_run_on_the_npu(q, tokens, dim, heads):
    """The encoder family's Q K^T and (Softmax) V products: CONV epochs, no HOST step; validated."""
    from npusim.zoo import families

    m = families.transformer_block_style(tokens=tokens, dim=dim, heads=heads)
    consts = {i.name for i in m.graph.initializer}
    names = [n.name for n in m.graph.node if n.op_type == "MatMul" and not set(n.input) & consts]
    assert len(names) == 2
    prog, rep = _run(m, q)
    for name in names:
        conv, host = _matmul_epochs(prog, name)
        assert conv and not host, name
    assert rep.passed and min(v.cosine for v in rep.metrics.values()) >= (0.99 if q == "int8" else 0.9999), rep.text()


@pytest.mark.parametrize("q", ["int8", "fp16"])
def test_matmul_kernel_with_a_partial_plane_skips_its_padding_lanes(q):
    """A's 5 rows are 5 lanes of one blocked16 plane: the weight SE reads those lanes only."""
    prog, rep = _run(_model((1, 5, 8), (1, 8, 8)), q, 16)
    conv, host = _matmul_epochs(prog)
    assert not host and len(conv) == 1 and conv[0].args["out_c"] == 5
    assert min(v.cosine for v in rep.metrics.values()) >= TOL[q], rep.text()
    assert_check_clean(prog)


def test_matmul_kernels_of_slices_are_quantized_with_zero_point_0():
    prog = compile(_model((2, 16, 32), (2, 32, 16)), CompileOptions(quantization="int8"))
    kernels = [b for b in prog.buffers if b.name in ("A", "B")]
    assert any(b.zero_point == 0 for b in kernels), [(b.name, b.zero_point) for b in kernels]


def _qdq_model(zp_a: int, zp_b: int):
    """A pre-quantized MatMul of two activations: a and b through QuantizeLinear/DequantizeLinear with the
    given zero points, the product quantized too."""
    inits = [numpy_helper.from_array(np.float32(v), n) for v, n in ((0.02, "sa"), (0.03, "sb"), (0.05, "sy"))]
    inits += [numpy_helper.from_array(np.int8(v), n) for v, n in ((zp_a, "za"), (zp_b, "zb"), (3, "zy"))]
    nodes = []
    for x, s, z in (("a", "sa", "za"), ("b", "sb", "zb")):
        nodes += [helper.make_node("QuantizeLinear", [x, s, z], [x + "_q"]),
                  helper.make_node("DequantizeLinear", [x + "_q", s, z], [x.upper()])]
    nodes += [helper.make_node("MatMul", ["A", "B"], ["yf"], name="matmul"),
              helper.make_node("QuantizeLinear", ["yf", "sy", "zy"], ["y_q"]),
              helper.make_node("DequantizeLinear", ["y_q", "sy", "zy"], ["y"])]
    g = helper.make_graph(nodes, "q", [helper.make_tensor_value_info("a", TP.FLOAT, [2, 16, 32]),
                                       helper.make_tensor_value_info("b", TP.FLOAT, [2, 32, 16])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)], inits)
    return onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_prequantized_matmul_maps_when_a_kernel_operand_has_zero_point_0():
    """The model's zero point of B is 0: B is the kernel, bit-exact with ONNX Runtime's quantized model."""
    m = _qdq_model(5, 0)
    prog, rep = _run(m, "int8")
    conv, host = _matmul_epochs(prog)
    assert not host and len(conv) == 2
    assert rep.passed and min(v.cosine for v in rep.metrics.values()) >= 0.99, rep.text()


def test_prequantized_matmul_with_both_zero_points_nonzero_runs_on_the_cpu():
    prog, rep = _run(_qdq_model(5, -7), "int8")
    cpu = [line for line in cpu_summary(prog, PROFILE) if line.startswith("MatMul")]
    assert len(cpu) == 1 and "zero point 5" in cpu[0] and "zero point -7" in cpu[0], cpu
    assert rep.passed, rep.text()


@pytest.mark.parametrize("sa, sb, why", [
    ((1, 3, 16, 8), (1, 3, 8, 16), "slower than the host's MatMul"),  # the cost gate: walked through padded copies
    ((1, 20, 16), (1, 16, 16), "slower than the host's MatMul"),  # Y's padding lanes zeroed by a copy of its shape
    ((6, 16), (16, 4), "slower than the host's MatMul"),
    ((5,), (5, 3), "a rank-1 operand"),
])
def test_matmul_the_conv_unit_cannot_take_runs_on_the_cpu_with_a_reason(sa, sb, why):
    prog, rep = _run(_model(sa, sb), "fp16")
    cpu = [line for line in cpu_summary(prog, PROFILE) if line.startswith("MatMul")]
    assert len(cpu) == 1 and cpu[0].startswith("MatMul x1 -> CPU (") and why in cpu[0], cpu
    assert rep.passed, rep.text()


def _const_model(sa, kn):
    """A = a * 0.5 (computed) -> MatMul(A, W) with a constant W [K, N]."""
    w = (np.random.default_rng(1).standard_normal(kn) / np.sqrt(kn[0])).astype(np.float32)
    nodes = [helper.make_node("Mul", ["a", "k"], ["A"]), helper.make_node("MatMul", ["A", "w"], ["y"], name="matmul")]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("a", TP.FLOAT, list(sa))],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)],
                          [numpy_helper.from_array(np.float32(0.5), "k"), numpy_helper.from_array(w, "w")])
    return onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


@pytest.mark.parametrize("align", [128, 16])
@pytest.mark.parametrize("q", ["int8", "fp16", "fp32"])
@pytest.mark.parametrize("sa, kn", [((1, 16, 64), (64, 64)), ((2, 16, 32), (32, 16)), ((16, 32), (32, 16)),
                                    ((1, 4, 16, 16), (16, 32)),
                                    ((16, 32), (32, 8)),  # Y's rows of 8: 8-channel pixels, padded copy of Y
                                    ((1, 49, 48), (48, 48))])  # ViT-style tokens: 49 channels of Y padded
def test_matmul_of_rows_by_a_constant_runs_on_the_conv_unit(q, align, sa, kn):
    """A's rows (a token sequence [1, T, D] is D pixels of T channels) walked as pixels of a 1 x 1 CONV
    whose weights are W^T: no HOST step, every element of Y written once."""
    prog, rep = _run(_const_model(sa, kn), q, align)
    conv, host = _matmul_epochs(prog)
    assert conv and not host
    out = tuple(sa[:-1]) + (kn[1],)
    assert sum(c.args["out_c"] * c.args["in_w"] for c in conv) == int(np.prod(out))
    assert min(v.cosine for v in rep.metrics.values()) >= TOL[q], rep.text()
    if q == "fp32":
        assert max(v.max_abs for v in rep.metrics.values()) < 1e-4, rep.text()
    assert_check_clean(prog)


def test_matmul_by_a_constant_the_conv_unit_cannot_take_runs_on_the_cpu_with_a_reason():
    """A constant B of rank 3 is no CONV's weight matrix."""
    prog, rep = _run(_const_model((2, 16, 32), (2, 32, 16)), "fp16")
    cpu = [line for line in cpu_summary(prog, PROFILE) if line.startswith("MatMul")]
    assert len(cpu) == 1 and "B has rank 3" in cpu[0], cpu
    assert rep.passed, rep.text()
