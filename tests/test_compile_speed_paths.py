"""The compile's fast paths give the blob of the plain ones: calibration samples run concurrently
(one single-threaded ONNX Runtime run each) or one after the other, the cleaned model without weight
bytes, a model whose calibration meets non-finite values."""

from __future__ import annotations

import threading

import numpy as np
import onnx
from onnx import TensorProto, helper

from npusim import zoo
from npusim.compiler import CompileOptions, compile, prepare
from npusim.compiler import quantize
from npusim.hw import load_profile
from npusim.program.blob import encode_blob


def _blob(model, options=None, calibration=None):
    return encode_blob(compile(model, options or CompileOptions(), calibration=calibration), load_profile())


def test_concurrent_calibration_gives_the_serial_blob(monkeypatch):
    model = zoo.resnet_style(size=32)
    cal = {"input": np.random.default_rng(3).standard_normal((6, 1, 3, 32, 32)).astype(np.float32)}
    monkeypatch.setattr(quantize, "_cores", lambda: 1)
    serial = [_blob(model, CompileOptions(calibration_samples=5)), _blob(model, calibration=cal)]
    monkeypatch.setattr(quantize, "_cores", lambda: 4)
    monkeypatch.setattr(quantize, "POOL_MIN_ELEMENTS", 0)  # this small model's samples in the pool too
    assert [_blob(model, CompileOptions(calibration_samples=5)), _blob(model, calibration=cal)] == serial


def test_calibration_pools_only_samples_that_compute_enough_values(monkeypatch):
    """A small model's samples run in the calling thread (a pool costs more than it saves there), one
    computing at least POOL_MIN_ELEMENTS values one per core."""
    model = zoo.resnet_style(size=32)
    clean = prepare(model, CompileOptions()).clean.model
    elements = quantize._elements(clean, quantize._float_tensors(clean))
    assert 0 < elements < quantize.POOL_MIN_ELEMENTS
    threads: list[str] = []
    real = quantize._session

    class Spy:
        def __init__(self, sess):
            self.sess = sess

        def run(self, *args):
            threads.append(threading.current_thread().name)
            return self.sess.run(*args)

    monkeypatch.setattr(quantize, "_session", lambda m: Spy(real(m)))
    monkeypatch.setattr(quantize, "_cores", lambda: 2)
    here = threading.current_thread().name
    for bound, pooled in ((elements + 1, False), (elements, True)):
        threads.clear()
        monkeypatch.setattr(quantize, "POOL_MIN_ELEMENTS", bound)
        prepare(model, CompileOptions(calibration_samples=4))
        assert len(threads) == 4
        assert (set(threads) != {here}) == pooled


def test_the_cleaned_model_carries_no_weight_bytes_and_calibration_feeds_them():
    model = zoo.resnet_style(size=32)
    prep = prepare(model, CompileOptions())
    big = [i for i in prep.clean.model.graph.initializer if i.name in prep.clean.weights]
    assert big and all(not i.raw_data and i.dims for i in big)
    for i in big:
        assert list(i.dims) == list(prep.clean.weights[i.name].shape)
    assert prep.ranges and all(np.isfinite(v).all() for v in prep.ranges.values())


def test_a_tensor_with_infinite_values_is_calibrated_on_its_finite_ones():
    """x * W (W with a huge entry) overflows to inf in some positions: that tensor is read back
    whole (weights fed to the full-model session too) and its range covers only finite values."""
    w = np.full((1, 4, 1, 1), 1.0, np.float32)
    w[0, 0] = 3e38
    big = np.ones((4, 4, 3, 3), np.float32)  # > SMALL_INIT elements: fed as an input, not stored
    nodes = [helper.make_node("Mul", ["x", "w"], ["y"]), helper.make_node("Conv", ["y", "k"], ["z"], pads=[1, 1, 1, 1])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 8, 8])],
                          [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(big, "k")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    cal = np.random.default_rng(0).standard_normal((2, 1, 4, 8, 8)).astype(np.float32) * 10
    prep = prepare(m, CompileOptions(calibration={"x": cal}))
    assert "k" in prep.clean.weights
    lo, hi = prep.ranges["y"]
    assert np.isfinite(lo) and np.isfinite(hi) and hi > 1e38
