"""npusim.testing.Sim and the assertion helpers, in process (no pytester)."""

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from npusim.compiler import CompileOptions
from npusim.errors import UsageError
from npusim.hw.profile import load_profile
from npusim.testing import (CompileCache, NpusimCheckFailed, Sim, assert_cycles, assert_golden,
                            assert_matches_reference, assert_no_faults, random_inputs)
from npusim.testing.sim import model_bytes


def _relu_model(name="g"):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 2, 2])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], name, [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_cache_key_depends_on_model_options_and_profile(tmp_path):
    c = CompileCache(tmp_path)
    p = load_profile()
    m = model_bytes(_relu_model())
    k = c.key(m, CompileOptions(), p)
    assert k == CompileCache(None).key(m, CompileOptions(), p)  # stable across instances
    assert k != c.key(model_bytes(_relu_model("other")), CompileOptions(), p)
    assert k != c.key(m, CompileOptions(mem_align=16), p)
    assert k != c.key(m, CompileOptions(), load_profile(None, ["bus.max_burst_beats=8"]))
    calib = tmp_path / "c.npz"
    np.savez(calib, x=np.zeros((2, 1, 4, 2, 2), np.float32))
    assert k != c.key(m, CompileOptions(), p, calib)


def test_model_bytes_and_blob_detection(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_relu_model(), path)
    assert model_bytes(path) == path.read_bytes()
    with pytest.raises(UsageError, match="cannot read model"):
        model_bytes(tmp_path / "missing.onnx")
    with pytest.raises(UsageError, match="expected an ONNX model"):
        model_bytes(42)
    assert Sim._is_blob(b"NPUS") and Sim._is_blob(tmp_path / "a.npu") and not Sim._is_blob(path)
    with pytest.raises(UsageError, match="cannot read blob"):
        Sim(golden_dir=tmp_path).load(tmp_path / "none.npu")


def test_assert_cycles_needs_one_limit():
    with pytest.raises(UsageError, match="exactly one of budget= or golden="):
        assert_cycles(object())
    with pytest.raises(UsageError, match="exactly one"):
        assert_cycles(object(), budget=1, golden=1)


def test_check_failure_is_an_assertion_and_an_npusim_error():
    from npusim.errors import NpusimError

    assert issubclass(NpusimCheckFailed, AssertionError) and issubclass(NpusimCheckFailed, NpusimError)
