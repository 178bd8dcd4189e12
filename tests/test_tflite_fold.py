"""TFLite shape computations folded at compile time (issue 37 C: SHAPE in SSD detectors)."""

from __future__ import annotations

import numpy as np
import pytest

from npusim.compiler import CompileOptions, compile
from npusim.compiler.frontends.tflite_fold import fold_constants
from npusim.compiler.frontends.tflite_reader import read_tflite
from npusim.errors import ModelError
from npusim.zoo.tflite_writer import TFLiteWriter


def _shape_model(declared=(2,), hw=(4, 4), c=8) -> bytes:
    """x -> SHAPE -> STRIDED_SLICE (the batch, shrunk to a scalar) -> PACK [batch, H*W*C] -> RESHAPE x -> SOFTMAX."""
    t = TFLiteWriter()
    n = hw[0] * hw[1] * c
    x = t.tensor("x", [1, *hw, c], "int8", scale=0.05, zero_point=3)
    shp = t.tensor("shape", [4], "int32")
    t.op("SHAPE", [x], [shp], "ShapeOptions", out_type=2)
    begin, end, step = (t.tensor(k, [1], "int32", data=[v]) for k, v in (("begin", 0), ("end", 1), ("step", 1)))
    batch = t.tensor("batch", [], "int32")
    t.op("STRIDED_SLICE", [shp, begin, end, step], [batch], "StridedSliceOptions", shrink_axis_mask=1)
    rest = t.tensor("rest", [], "int32", data=n)
    target = t.tensor("target", list(declared), "int32")
    t.op("PACK", [batch, rest], [target], "PackOptions", values_count=2, axis=0)
    flat = t.tensor("flat", [1, n], "int8", scale=0.05, zero_point=3)
    t.op("RESHAPE", [x, target], [flat])
    y = t.tensor("y", [1, n], "int8", scale=1 / 256, zero_point=-128)
    t.op("SOFTMAX", [flat], [y], "SoftmaxOptions", beta=1.0)
    return t.finish([x], [y])


def test_shape_chain_folds_to_the_reshape_target():
    m = fold_constants(read_tflite(_shape_model()), "m")
    assert [op.opcode for op in m.ops] == ["RESHAPE", "SOFTMAX"]
    target = next(t for t in m.tensors if t.name == "target")
    assert target.data.dtype == np.int32 and target.data.tolist() == [1, 128]
    batch = next(t for t in m.tensors if t.name == "batch")
    assert batch.data.shape == () and int(batch.data) == 1


@pytest.mark.parametrize("hw, c", [((4, 4), 8), ((3, 5), 16)])
def test_shape_model_compiles_and_matches_the_interpreter(hw, c):
    pytest.importorskip("ai_edge_litert")
    from npusim.reference import validate
    from npusim.runtime import seeded_inputs

    model = _shape_model(hw=hw, c=c)
    prog = compile(model, CompileOptions(mem_align=128))
    for seed in (0, 1):
        rep = validate(prog, model, seeded_inputs(prog, seed))
        assert rep.run_result.status == "ok", rep.run_result.report_text()
        for met in rep.metrics.values():
            assert met.exact == 1.0 and met.max_steps == 0, met.text()


def test_a_folded_value_that_contradicts_the_declared_shape_is_one_line():
    with pytest.raises(ModelError) as e:
        compile(_shape_model(declared=(3,)))
    msg = str(e.value)
    assert "\n" not in msg and "operator 2 (PACK) computes [2]" in msg and "'target'" in msg


def test_quantized_arithmetic_is_not_folded():
    """ADD of two quantized constants is the model's computation (rounding included): it stays an operator."""
    t = TFLiteWriter()
    a = t.tensor("a", [1, 2, 2, 4], "int8", data=np.arange(16) - 8, scale=0.1, zero_point=0)
    b = t.tensor("b", [1, 2, 2, 4], "int8", data=np.ones(16), scale=0.1, zero_point=0)
    y = t.tensor("y", [1, 2, 2, 4], "int8", scale=0.2, zero_point=0)
    t.op("ADD", [a, b], [y], "AddOptions")
    z = t.tensor("z", [1, 2, 2, 4], "int8", scale=0.2, zero_point=0)
    t.op("RELU", [y], [z])
    m = fold_constants(read_tflite(t.finish([], [z])), "m")
    assert [op.opcode for op in m.ops] == ["ADD", "RELU"]
