"""A TFLite model's declared shapes are checked against ONNX shape inference of the lowered graph, with its
weights entering as typed inputs of their shape (no weight values copied or serialized)."""

import re

import pytest

from npusim.compiler.frontends import tflite_front
from npusim.compiler.frontends.tflite_reader import read_tflite
from npusim.errors import ModelError
from npusim.zoo.tflite import tflite_op


def _lowered(monkeypatch, kind):
    seen = {}
    real = tflite_front._check_shapes
    monkeypatch.setattr(tflite_front, "_check_shapes", lambda L, inputs, where: seen.update(L=L, inputs=inputs))
    tflite_front.build_graph(read_tflite(bytes(tflite_op(kind, c=16)), "m"), "m")
    return real, seen["L"], seen["inputs"]


@pytest.mark.parametrize("kind", ["conv", "fully_connected", "depthwise"])
def test_a_shape_its_operator_does_not_compute_is_refused(monkeypatch, kind):
    check, L, inputs = _lowered(monkeypatch, kind)
    weighted = [n for n in L.nodes if any(i in L.consts and L.consts[i].size > 64 for i in n.inputs)]
    assert weighted  # the check runs with a large constant among the operator's inputs
    check(L, inputs, "m")  # as declared: fits
    out = weighted[0].outputs[0]
    good = L.shapes[out]
    L.shapes[out] = tuple(good[:-1]) + (good[-1] + 1,)
    want = rf"tensor {re.escape(repr(out))} is declared .* computes {re.escape(str(list(good)))}"
    with pytest.raises(ModelError, match=want):
        check(L, inputs, "m")
