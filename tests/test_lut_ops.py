"""Unary elementwise operators as int8 lookup tables of the ACT unit (compiler/recipes/lut_ops.py): on the NPU
in int8, validated against ONNX Runtime on inputs in each operator's domain; on the CPU in fp16 with
the reason."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

from npusim.compiler import CompileOptions, compile
from npusim.compiler.driver import cpu_summary
from npusim.compiler.recipes.lut_ops import LUT_OPS
from npusim.hw import load_profile
from npusim.reference import validate

DOMAIN = {"Log": (0.1, 4), "Sqrt": (0, 4), "Acosh": (1, 4), "Asin": (-1, 1), "Acos": (-1, 1),
          "Atanh": (-0.9, 0.9), "Tan": (-1.2, 1.2)}
SHAPE = [1, 16, 8, 8]


def _model(op: str, **attrs):
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], "m",
                          [helper.make_tensor_value_info("x", TP.FLOAT, SHAPE)],
                          [helper.make_tensor_value_info("y", TP.FLOAT, SHAPE)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _samples(op: str, tmp_path, n: int = 8):
    lo, hi = DOMAIN.get(op, (-3, 3))
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "cal.npz", x=rng.uniform(lo, hi, (n, *SHAPE)).astype(np.float32))
    return tmp_path / "cal.npz", {"x": rng.uniform(lo, hi, SHAPE).astype(np.float32)}


@pytest.mark.parametrize("op", LUT_OPS)
def test_int8_unary_operator_is_an_act_table(op, tmp_path):
    attrs = {"Celu": dict(alpha=0.7), "Shrink": dict(lambd=0.4, bias=0.1), "ThresholdedRelu": dict(alpha=0.5)}
    m = _model(op, **attrs.get(op, {}))
    cal, x = _samples(op, tmp_path)
    prog = compile(m, CompileOptions(quantization="int8", calibration=str(cal)))
    assert not cpu_summary(prog, load_profile())
    assert any(c.op == "ACT" for c in prog.commands)
    rep = validate(prog, m, x)
    assert rep.run_result.status == "ok", rep.run_result.report_text()
    assert min(v.cosine for v in rep.metrics.values()) >= 0.99, rep.text()


def test_float_unary_operator_stays_on_the_cpu_with_the_reason():
    prog = compile(_model("Exp"), CompileOptions(quantization="fp16"))
    assert cpu_summary(prog, load_profile()) == [
        "Exp x1 -> CPU (fp16: the ACT unit has no Exp function (int8 runs it as a lookup table))"]
