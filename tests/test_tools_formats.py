"""`bisect` and `doctor` on every input `compile` accepts: ONNX float, QDQ, QOperator and TFLite (issue 38 A)."""

from __future__ import annotations

import functools

import onnx
import pytest

from npusim import zoo
from npusim.compiler import CompileOptions
from npusim.tools.bisect import bisect
from npusim.tools.variants import conv_params, operator_node, single_op_models
from npusim.zoo.quantized import quantize_onnx

FLOAT = zoo.conv_model(16, 16, 52, 52, 3)  # faults alone at --mem-align 16, clean from 128 (test_doctor)


@functools.lru_cache(maxsize=None)
def _model(fmt: str) -> bytes:
    if fmt == "float":
        return FLOAT.SerializeToString()
    return quantize_onnx(FLOAT, fmt).SerializeToString()


def test_qdq_single_operator_models_keep_their_quantize_dequantize_context():
    m = onnx.load_model_from_string(_model("qdq"))
    ((node, sub),) = single_op_models(m)
    assert [n.op_type for n in sub.graph.node] == ["QuantizeLinear", "DequantizeLinear", "DequantizeLinear",
                                                  "DequantizeLinear", "Conv", "QuantizeLinear", "DequantizeLinear"]
    assert operator_node(sub).name == node.name == "conv"
    assert [i.name for i in sub.graph.input] == ["input"]  # the float input its QuantizeLinear takes
    _, w, dims = conv_params(node, sub)  # the weights behind their DequantizeLinear
    assert w.shape == (16, 16, 3, 3) and dims == [1, 16, 52, 52]


@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
def test_bisect_gives_a_quantized_onnx_model_the_verdict_of_its_float_model(fmt, tmp_path):
    want = bisect(FLOAT, CompileOptions(mem_align=16))
    rep = bisect(onnx.load_model_from_string(_model(fmt)), CompileOptions(mem_align=16), out_dir=tmp_path)
    assert not rep.errors
    assert rep.verdict == want.verdict and "compiler layout: 1 operator(s)" in rep.verdict
    (f,) = rep.faulting
    assert f.op_type == "Conv" and f.clean_alignments == [128, 256]
    assert f.minimal.startswith("Conv 3x3") and "buffer-overflow" in f.minimal_fault  # shrunk as QDQ convs
    repro = onnx.load(f.reproducer["onnx"])
    assert "QuantizeLinear" in [n.op_type for n in repro.graph.node]
