"""Model files as the front end reads them: an ONNX file that is the whole model is shared as its own
bytes (not serialized again); one whose weights live in an external data file, or one in onnx's text
format, is read whole and shared as the parsed model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from npusim import zoo
from npusim.compiler import CompileOptions, compile
from npusim.compiler.frontends.sources import load_source
from npusim.errors import ModelError
from npusim.hw import load_profile
from npusim.program.blob import encode_blob
from npusim.tools.points import compile_point, parsed, share_model


def _blob(program) -> bytes:
    return encode_blob(program, load_profile())


def test_an_onnx_file_is_shared_as_its_own_bytes(tmp_path):
    model = zoo.resnet_style(size=32)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    shared = share_model(path)
    assert shared.data == path.read_bytes()
    assert load_source(path).onnx_bytes == shared.data
    assert parsed(shared) == model
    assert _blob(compile_point(shared, CompileOptions(), load_profile())) == _blob(compile(model, CompileOptions()))


def test_a_model_with_external_data_is_shared_with_its_weights(tmp_path):
    model = zoo.resnet_style(size=32)
    path = tmp_path / "ext.onnx"
    copy = onnx.ModelProto.FromString(model.SerializeToString())  # save converts the proto it writes
    onnx.save(copy, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="ext.bin",
              size_threshold=0)
    assert (tmp_path / "ext.bin").stat().st_size > 1000
    assert load_source(path).onnx_bytes == b""  # the file alone is not the model
    shared = share_model(path)
    restored = onnx.load_model_from_string(shared.data)
    assert all(t.data_location != onnx.TensorProto.EXTERNAL for t in restored.graph.initializer)
    for a, b in zip(restored.graph.initializer, model.graph.initializer):
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(a), onnx.numpy_helper.to_array(b))
    assert _blob(compile_point(shared, CompileOptions(), load_profile())) == _blob(compile(model, CompileOptions()))


def test_a_text_format_model_loads_and_a_broken_file_is_named(tmp_path):
    model = zoo.conv_model(4, 8, 8, 8)
    text = tmp_path / "m.onnxtxt"
    onnx.save(model, text, format="onnxtxt")
    with pytest.warns(UserWarning, match="experimental"):  # onnx's own note on its text format
        src = load_source(text)
    assert src.onnx_bytes == b"" and src.proto.graph.node[0].op_type == model.graph.node[0].op_type
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage")
    with pytest.raises(ModelError, match="bad.onnx: not an ONNX model"):
        load_source(bad)
