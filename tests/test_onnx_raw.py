"""Initializers read in place (`onnx_raw`): the same arrays as onnx's own `to_array`, views of the model's
bytes, and a plain copy whenever the bytes hold something the reader does not follow."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from npusim.compiler.frontends import onnx_raw
from npusim.compiler.frontends.onnx_front import build_graph
from npusim import zoo


def _model(inits):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y], initializer=inits)
    return helper.make_model(g)


def test_every_plain_type_reads_as_to_array():
    rng = np.random.default_rng(1)
    arrays = {f"t{i}": a for i, a in enumerate([
        rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal(7), rng.integers(-9, 9, (2, 3, 4), np.int8),
        rng.integers(0, 200, 11, np.uint8), rng.integers(-1 << 40, 1 << 40, 5), np.float16([1.5, -2]),
        np.array([True, False]), np.zeros((0, 3), np.float32)])}
    inits = [numpy_helper.from_array(a, n) for n, a in arrays.items()]
    inits.append(helper.make_tensor("listed", TensorProto.FLOAT, [2], [1.0, 2.0]))  # float_data, no raw_data
    data = _model(inits).SerializeToString()
    spans = onnx_raw.raw_spans(data)
    assert set(spans) == set(arrays)
    for init in onnx.load_model_from_string(data).graph.initializer:
        view = onnx_raw.view_of(init, data, spans)
        if init.name == "listed":
            assert view is None
            continue
        want = numpy_helper.to_array(init)
        assert view.dtype == want.dtype and view.shape == want.shape and np.array_equal(view, want)
        assert not view.flags.writeable and (view.size == 0 or np.shares_memory(view, np.frombuffer(data, np.uint8)))


def test_what_is_not_followed_is_copied():
    a = numpy_helper.from_array(np.arange(6, dtype=np.float32), "a")
    twice = _model([a, numpy_helper.from_array(np.ones(6, np.float32), "a")]).SerializeToString()
    assert onnx_raw.raw_spans(twice) == {}  # a name given twice: neither is read in place
    data = _model([a]).SerializeToString()
    assert onnx_raw.raw_spans(data[:-3]) in ({}, onnx_raw.raw_spans(data))  # truncated bytes never raise
    graph = data.index(b"\x3a")  # a second graph field (tag 7, length-delimited): protobuf merges, not followed
    assert onnx_raw.raw_spans(data + data[graph:]) == {}
    wrong = onnx.load_model_from_string(data).graph.initializer[0]
    del wrong.dims[:]
    wrong.dims.extend([5])  # dims disagree with the bytes: to_array's error, not a view
    assert onnx_raw.view_of(wrong, data, onnx_raw.raw_spans(data)) is None
    assert onnx_raw.raw_spans(b"\x0b\x00") == {}  # a group (wire type 3)


@pytest.mark.parametrize("build", [lambda: zoo.resnet_style(size=32), lambda: zoo.mobilenet_style()])
def test_graph_constants_are_the_same_read_in_place(build):
    data = build().SerializeToString()
    proto = onnx.load_model_from_string(data)
    g0, _ = build_graph(proto)
    g1, _ = build_graph(proto, serialized=data)
    assert g0.consts.keys() == g1.consts.keys()
    for k, v in g0.consts.items():
        assert v.dtype == g1.consts[k].dtype and np.array_equal(v, g1.consts[k]), k
    big = [k for k, v in g1.consts.items() if v.size > 64 and np.shares_memory(v, np.frombuffer(data, np.uint8))]
    assert big  # the weights are views of the model's bytes
