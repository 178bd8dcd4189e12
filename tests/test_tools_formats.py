"""`bisect` and `doctor` on every input `compile` accepts: ONNX float, QDQ, QOperator and TFLite (issue 38 A)."""

from __future__ import annotations

import functools

import onnx
import pytest

from npusim import zoo
from npusim.compiler import CompileOptions
from npusim.tools.bisect import bisect
from npusim.tools.variants import conv_params, operator_node, single_op_models
from npusim.tools.doctor import doctor
from npusim.zoo.quantized import quantize_onnx
from npusim.zoo.tflite_export import to_tflite

FLOAT = zoo.conv_model(16, 16, 52, 52, 3)  # faults alone at --mem-align 16, clean from 128 (test_doctor)


@functools.lru_cache(maxsize=None)
def _model(fmt: str) -> bytes:
    if fmt == "float":
        return FLOAT.SerializeToString()
    if fmt == "tflite":
        return bytes(to_tflite(FLOAT))
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


def _load(fmt: str):
    data = _model(fmt)
    return data if fmt == "tflite" else onnx.load_model_from_string(data)


def test_bisect_cuts_a_tflite_model_into_single_operator_tflite_models(tmp_path):
    want = bisect(FLOAT, CompileOptions(mem_align=16))
    path = tmp_path / "conv.tflite"
    path.write_bytes(_model("tflite"))
    rep = bisect(str(path), CompileOptions(mem_align=16), out_dir=tmp_path / "out")
    assert not rep.errors and rep.verdict == want.verdict
    (f,) = rep.findings
    assert (f.node, f.op_type, f.shape) == ("conv", "CONV_2D", "1x52x52x16")
    assert f.outcome.faulted and f.clean_alignments == [128, 256]
    repro = open(f.reproducer["tflite"], "rb").read()
    assert repro[4:8] == b"TFL3" and f.reproducer["blob"].endswith(".npu")
    assert bisect(str(path), CompileOptions(mem_align=128)).verdict == "no fault: the model runs clean"


def test_bisect_names_reproducers_of_long_tflite_layer_names_within_the_file_system_limit(tmp_path):
    from npusim.tools.bisect import OpFinding, Outcome, _write_reproducer

    f = OpFinding("model/conv_dw_10_relu/Relu6;" * 20 + "model/conv_dw_10/depthwise", "DEPTHWISE_CONV_2D", "",
                  Outcome("fault"))
    _write_reproducer(f, {"tflite": b"x", "blob": b"y"}, tmp_path)
    name = f.reproducer["tflite"].rsplit("/", 1)[1]
    assert len(name) < 120 and name.startswith("repro_model_conv_dw_10") and name.endswith("conv_dw_10_depthwise.tflite")


@pytest.mark.parametrize("fmt", ["qdq", "qoperator", "tflite"])
def test_doctor_gives_every_format_the_steps_of_its_float_model(fmt):
    def steps(rep):
        return [(s.name, s.status) for s in rep.steps]

    want = doctor(FLOAT, options=CompileOptions(mem_align=16))
    rep = doctor(_load(fmt), options=CompileOptions(mem_align=16))
    assert steps(rep) == steps(want) and rep.exit_code == want.exit_code == 139, rep.text()
    assert rep.failed.name == "layout" and rep.failed.fix == "compile with --mem-align 128"


def test_doctor_runs_every_step_on_a_tflite_model_against_the_tflite_interpreter(tmp_path):
    path = tmp_path / "conv.tflite"
    path.write_bytes(_model("tflite"))
    rep = doctor(str(path), options=CompileOptions(mem_align=128), all_steps=True, stress_runs=5)
    assert rep.exit_code == 0 and rep.failed is None, rep.text()
    assert "vs the TFLite interpreter" in next(s for s in rep.steps if s.name == "accuracy").measured
    assert next(s for s in rep.steps if s.name == "stability").details["reference"] == "the TFLite interpreter"


def test_stress_takes_a_tflite_reference_as_validate_does(tmp_path, capsys):
    from npusim.cli import main

    model, blob = tmp_path / "conv.tflite", tmp_path / "conv.npu"
    model.write_bytes(_model("tflite"))
    assert main(["compile", str(model), "-o", str(blob)]) == 0
    capsys.readouterr()
    code = main(["stress", str(blob), "-n", "4", "--check-every", "2", "--reference", str(model)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "reference   the TFLite interpreter: worst cosine 1.000000" in out
    code = main(["stress", str(blob), "-n", "2", "--seeds", "1-2", "--reference", str(model), "--no-parallel"])
    assert code == 0, capsys.readouterr().err


def _gap_fc():
    """A conv-free classifier head: a channel scale, global average pool, flatten, fully connected."""
    import numpy as np

    b = zoo.Builder(0)
    y = b.node("Mul", ["input", b.const(np.linspace(0.5, 1.5, 16).reshape(1, 16, 1, 1).astype(np.float32), "s")],
               name="scale")
    y = b.fc(b.node("Flatten", [b.node("GlobalAveragePool", [y], name="gap")], name="flat"), 16, 10)
    return b.model([1, 16, 8, 8], [y], "gap_fc")


def _with_float_tail(m):
    """`m` with a float Sigmoid after its (dequantized) output: an operator outside any QDQ context."""
    from onnx import helper

    out = m.graph.output[0]
    m.graph.node.append(helper.make_node("Sigmoid", [out.name], ["probs"], name="tail"))
    del m.graph.output[:]
    m.graph.output.append(helper.make_tensor_value_info("probs", onnx.TensorProto.FLOAT, [1, 10]))
    return m


def test_doctor_passes_the_operators_of_a_quantized_model_with_custom_domain_imports():
    """ONNX Runtime's quantizer imports com.microsoft and ai.onnx.ml; a single-operator model carries only
    the domains its nodes use (the compiler refuses others), QDQ or not."""
    m = _with_float_tail(quantize_onnx(_gap_fc(), "qdq"))
    assert {o.domain for o in m.opset_import} >= {"com.microsoft", "ai.onnx.ml"}
    subs = single_op_models(m)
    assert [n.name for n, _ in subs][-1] == "tail" and all(
        {o.domain for o in s.opset_import} == {""} for _, s in subs)
    rep = doctor(m, options=CompileOptions(mem_align=128))
    ops = next(s for s in rep.steps if s.name == "operators")
    assert ops.status == "pass" and ops.measured.startswith("4 operator(s) compiled alone: 3 on the NPU, 1 CPU fallback"), rep.text()
    assert rep.exit_code == 0, rep.text()


def test_doctor_and_bisect_run_a_qdq_model_with_a_com_microsoft_operator():
    """A QDQ model with a com.microsoft QLinearSigmoid (it compiles through its QDQ form): every operator,
    the custom one too, compiled alone; the model validates."""
    from onnx import helper

    m = quantize_onnx(_gap_fc(), "qdq")
    (mul,) = [n for n in m.graph.node if n.op_type == "Mul"]
    prod = {o: n for n in m.graph.node for o in n.output}
    dq = prod[mul.input[0]]  # DequantizeLinear(QuantizeLinear(input)) feeding the Mul: a sigmoid before it
    sig = helper.make_node("QLinearSigmoid", [dq.input[0], dq.input[1], dq.input[2], dq.input[1], dq.input[2]],
                           ["sig_q"], name="sig", domain="com.microsoft")
    dq2 = helper.make_node("DequantizeLinear", ["sig_q", dq.input[1], dq.input[2]], ["sig"], name="sig_dq")
    mul.input[0] = "sig"
    nodes = list(m.graph.node)
    nodes.insert(nodes.index(mul), dq2)
    nodes.insert(nodes.index(dq2), sig)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    rep = doctor(m, options=CompileOptions(mem_align=128))
    ops = next(s for s in rep.steps if s.name == "operators")
    assert ops.status == "pass" and ops.measured.startswith("4 operator(s)"), rep.text()  # Sigmoid, Mul, GAP, Gemm
    assert rep.exit_code == 0, rep.text()
    assert "Sigmoid" in [f.op_type for f in bisect(m, CompileOptions(mem_align=128)).findings]
