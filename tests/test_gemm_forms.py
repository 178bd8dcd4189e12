"""Matrix products rewritten into the NPU's constant-B MatMul (compiler/rewrites/matmul_forms.py): a Gemm of a matrix A
(bias, alpha, beta, transB), a MatMul + bias Add, and Reshape - MatMul/Gemm - Reshape around flattened
leading axes. Each compiled int8/fp16/fp32 (and pre-quantized QDQ), run with the checker and compared
with ONNX Runtime; forms outside the rewrites keep the model's node on the CPU."""

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

PROFILE = load_profile()
TOL = {"int8": 0.999, "fp16": 0.99999, "fp32": 0.999999}
R = np.random.default_rng(0)
B = (R.standard_normal((32, 48)) / 6).astype(np.float32)
C = (0.1 * R.standard_normal(48)).astype(np.float32)
CONSTS = {"B": B, "Bt": np.ascontiguousarray(B.T), "C": C, "C2": C.reshape(1, 48), "c0": np.float32(0.3),
          "Ccol": (0.1 * R.standard_normal((20, 1))).astype(np.float32),
          "s2": np.array([64, 32], np.int64), "s4": np.array([1, 8, 8, 48], np.int64)}


def _model(nodes, shape):
    used = {i for n in nodes for i in n.input}
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TP.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in CONSTS.items() if k in used])
    return onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def _check(m, q, on_cpu=()):
    prog = compile(m, CompileOptions(quantization=q), profile=PROFILE)
    cpu = cpu_summary(prog, PROFILE)
    assert sorted(line.split(" (")[0] for line in cpu) == sorted(on_cpu), cpu
    rep = validate(prog, m, npusim.runtime.seeded_inputs(prog, 0), profile=PROFILE)
    assert rep.run_result.status == "ok" and not rep.run_result.faults, rep.run_result.report_text()
    assert min(v.cosine for v in rep.metrics.values()) >= TOL.get(q, 0.999), rep.text()
    if q == "fp32":
        assert max(v.max_abs for v in rep.metrics.values()) < 1e-5, rep.text()
    return prog


GEMMS = {
    "bias [N]": (helper.make_node("Gemm", ["x", "B", "C"], ["y"]), [20, 32]),
    "transB, bias [1, N], alpha, beta": (helper.make_node("Gemm", ["x", "Bt", "C2"], ["y"], transB=1, alpha=0.5,
                                                          beta=2.0), [20, 32]),
    "scalar bias": (helper.make_node("Gemm", ["x", "B", "c0"], ["y"]), [7, 32]),
    "no bias": (helper.make_node("Gemm", ["x", "Bt"], ["y"], transB=1), [50, 32]),
}


@pytest.mark.parametrize("q", ["int8", "fp16", "fp32"])
@pytest.mark.parametrize("case", list(GEMMS))
def test_a_gemm_of_a_matrix_runs_as_the_constant_b_matmul(case, q):
    node, shape = GEMMS[case]
    prog = _check(_model([node], shape), q)
    assert [c.op for c in prog.commands if c.op in ("CONV", "ARITH", "HOST")] == ["CONV"]  # the bias in the CONV


@pytest.mark.parametrize("q", ["int8", "fp32"])
def test_a_matmul_plus_bias_row_is_one_conv(q):
    nodes = [helper.make_node("MatMul", ["x", "B"], ["m"]), helper.make_node("Add", ["C2", "m"], ["y"])]
    prog = _check(_model(nodes, [1, 8, 8, 32]), q)
    assert {c.args["op"] for c in prog.commands if c.op == "ARITH"} <= {"copy"}  # ONNX-order copies, no add


@pytest.mark.parametrize("q", ["int8", "fp16", "fp32"])
@pytest.mark.parametrize("op", ["Gemm", "MatMul"])
def test_flatten_product_unflatten_is_one_matmul_on_the_map(op, q):
    nodes = [helper.make_node("Reshape", ["x", "s2"], ["r"]), helper.make_node(op, ["r", "B"], ["g"]),
             helper.make_node("Reshape", ["g", "s4"], ["y"])]
    _check(_model(nodes, [1, 8, 8, 32]), q)


def test_a_gemm_with_a_bias_per_row_keeps_the_models_node():
    _check(_model([helper.make_node("Gemm", ["x", "B", "Ccol"], ["y"])], [20, 32]), "fp32", on_cpu=["Gemm x1 -> CPU"])


@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
def test_a_prequantized_token_linear_layer_runs_on_the_npu(fmt):
    from npusim.zoo.quantized import quantize_onnx

    nodes = [helper.make_node("MatMul", ["x", "B"], ["m"]), helper.make_node("Add", ["m", "C"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    m = quantize_onnx(_model(nodes, [1, 20, 32]), format=fmt)
    prog = compile(m, CompileOptions(), profile=PROFILE)
    assert not any(line.startswith(("Gemm", "MatMul", "QLinearMatMul")) for line in cpu_summary(prog, PROFILE)), \
        cpu_summary(prog, PROFILE)
    rep = validate(prog, m, npusim.runtime.seeded_inputs(prog, 0), profile=PROFILE)
    assert rep.run_result.status == "ok" and min(v.cosine for v in rep.metrics.values()) >= 0.999, rep.text()
