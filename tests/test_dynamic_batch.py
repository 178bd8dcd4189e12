"""An ONNX input whose only dynamic dimension is the first (batch) one compiles with batch 1 and says so in
one note; any other dynamic dimension still needs --input-shape (issue 37 C)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from npusim import cli
from npusim.compiler import CompileOptions, compile
from npusim.errors import ModelError, ModelNote
from npusim.reference import validate
from npusim.runtime import seeded_inputs


def _conv(dims) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.2, "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dims[0], 8, 8, 8])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("batch", ["batch_size", None])  # a named and an unnamed ("?") dimension
def test_dynamic_batch_defaults_to_one_and_validates(batch):
    m = _conv([batch, 3, 8, 8])
    with pytest.warns(ModelNote, match=r"input 'x': dynamic batch dimension .* set to 1") as notes:
        prog = compile(m, CompileOptions(quantization="fp16"))
    assert len(notes) == 1
    assert prog.buffer("x").shape == (1, 3, 8, 8)
    rep = validate(prog, m, seeded_inputs(prog, 0))
    assert rep.passed, rep.text()


def test_an_explicit_batch_still_wins():
    prog = compile(_conv(["N", 3, 8, 8]), CompileOptions(input_shapes=(2, 3, 8, 8), quantization="fp16"))
    assert prog.buffer("x").shape == (2, 3, 8, 8)


@pytest.mark.parametrize("dims, named", [(["N", 3, "H", "W"], "dimensions 2, 3 need a size"),
                                         ([1, 3, "H", 8], "dimension 2 needs a size")])
def test_other_dynamic_dimensions_are_refused_naming_them(dims, named):
    with pytest.raises(ModelError) as e:
        compile(_conv(dims))
    msg = str(e.value)
    assert "\n" not in msg and named in msg and "--input-shape x=" in msg


def test_cli_prints_the_default_on_one_line(tmp_path, capfd):
    path = tmp_path / "m.onnx"
    onnx.save(_conv(["batch_size", 3, 8, 8]), str(path))
    assert cli.main(["compile", str(path), "-o", str(tmp_path / "m.npu"), "--quantization", "fp16"]) == 0
    err = capfd.readouterr().err
    notes = [ln for ln in err.splitlines() if ln.strip()]
    assert notes == ["npusim: note: input 'x': dynamic batch dimension 'batch_size' set to 1 "
                     "(--input-shape x=N,... for another)"], err
    onnx.save(_conv(["N", 3, "H", "W"]), str(path))
    assert cli.main(["compile", str(path), "-o", str(tmp_path / "m.npu")]) == 65
    lines = [ln for ln in capfd.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("npusim: error: input 'x' has a dynamic shape"), lines
