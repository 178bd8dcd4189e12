"""MatMul between two computed maps on the CONV unit (issue 11 item 3; compiler/matmul.py): compiled in int8,
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


@pytest.mark.parametrize("sa, sb, why", [
    ((1, 4, 16, 8), (1, 4, 8, 16), "between two activations: only [1, M, K] @ [1, K, N]"),  # per-head attention
    ((6, 8), (8, 5), "between two activations: only [1, M, K] @ [1, K, N]"),
    ((1, 5, 8), (1, 8, 8), "A's 5 rows are channels of a blocked16 map that fill no whole 16-channel planes"),
])
def test_matmul_the_conv_unit_cannot_take_runs_on_the_cpu_with_a_reason(sa, sb, why):
    prog, rep = _run(_model(sa, sb), "fp16")
    cpu = [line for line in cpu_summary(prog, PROFILE) if line.startswith("MatMul")]
    assert len(cpu) == 1 and cpu[0].startswith("MatMul x1 -> CPU (") and why in cpu[0], cpu
    assert rep.passed, rep.text()
