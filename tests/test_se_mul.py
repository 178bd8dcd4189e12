"""Channel-broadcast Mul (squeeze-and-excite, ARITH mul_channel) and Sum of more than two inputs:
kernel vs reference, compile + run + validate against ONNX Runtime, and a stream-size hang."""

from __future__ import annotations

import numpy as np
import pytest

import npusim
from npusim import zoo
from npusim.compiler import CompileOptions, compile
from npusim.errors import ModelError, UsageError
from npusim.hw import load_profile
from npusim.kernels import eltwise_float, eltwise_int8
from npusim.kernels import reference as R
from npusim.program.blob import encode_blob
from npusim.program.codec import Command
from npusim.reference import validate

PROFILE = load_profile()


def _input(m, seed=0):
    shape = tuple(d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim)
    return {"input": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


def _arith_ops(prog):
    return [c["op"] for c in prog.commands if c.op == "ARITH"]


# ---------------------------------------------------------------- kernel


def test_mul_channel_int8_matches_reference():
    rng = np.random.default_rng(5)
    for c in (3, 20):
        a = rng.integers(-128, 128, (4, 5, c), dtype=np.int8)
        b = rng.integers(-128, 128, (1, 1, c), dtype=np.int8)
        kw = dict(a_zp=int(rng.integers(-5, 5)), b_zp=int(rng.integers(-5, 5)), out_zp=2, lo=-110, hi=125)
        args = (a, b, int(rng.integers(2**29, 2**30)), 0, 36, 0)
        got = eltwise_int8("mul_channel", *args, **kw)
        np.testing.assert_array_equal(got, R.eltwise_int8_ref("mul_channel", *args, **kw))
        # the vector really is broadcast: same as a full-size mul with b tiled over H x W
        full = eltwise_int8("mul", a, np.ascontiguousarray(np.broadcast_to(b, a.shape)), *args[2:], **kw)
        np.testing.assert_array_equal(got, full)
        assert len(np.unique(got)) > 10


def test_mul_channel_float_matches_reference():
    rng = np.random.default_rng(6)
    for dt in (np.float16, np.float32):
        a = rng.standard_normal((3, 4, 6)).astype(dt)
        b = rng.standard_normal((1, 1, 6)).astype(dt)
        got = eltwise_float("mul_channel", a, b)
        np.testing.assert_array_equal(got, R.eltwise_float_ref("mul_channel", a, b))
        np.testing.assert_array_equal(got, (a.astype(np.float64) * b).astype(dt))


def test_mul_channel_refuses_a_wrong_vector():
    a = np.zeros((2, 2, 4), np.int8)
    with pytest.raises(UsageError, match=r"shape \(1, 1, 4\)"):
        eltwise_int8("mul_channel", a, np.zeros((2, 2, 4), np.int8))
    with pytest.raises(UsageError, match=r"shape \(1, 1, 4\)"):
        eltwise_float("mul_channel", a.astype(np.float16), np.zeros((1, 1, 3), np.float16))


# ---------------------------------------------------------------- compile + run + validate


@pytest.mark.parametrize("q", ["int8", "fp16"])
def test_se_block_validates(q):
    m = zoo.op_model("se_mul")
    prog = compile(m, CompileOptions(quantization=q))
    assert _arith_ops(prog) == ["mul_channel"]
    arith = next(c for c in prog.commands if c.op == "ARITH")
    assert arith["c"] == 16 and arith["layout"] == "blocked16"
    rep = validate(encode_blob(prog, PROFILE), m, _input(m))
    assert rep.run_result.status == "ok", rep.run_result.report_text()
    assert rep.passed, rep.text()
    assert min(v.cosine for v in rep.metrics.values()) > (0.999 if q == "int8" else 0.99999)


@pytest.mark.parametrize("q", ["int8", "fp16"])
def test_mobilenet_v3_style_validates(q):
    m = zoo.mobilenet_v3_style()
    prog = compile(m, CompileOptions(quantization=q))
    assert _arith_ops(prog).count("mul_channel") == 2
    rep = validate(prog, m, _input(m, seed=1))
    assert rep.run_result.status == "ok", rep.run_result.report_text()
    assert rep.passed, rep.text()


def test_vector_on_the_left_is_swapped():
    b = zoo.Builder(seed=4)
    x = b.conv("input", 3, 16, k=3)
    s = b.node("Sigmoid", [b.conv(b.node("GlobalAveragePool", [x]), 16, 16, k=1)])
    m = b.model([1, 3, 8, 8], [b.node("Mul", [s, x])], "se_left")
    prog = compile(m, CompileOptions(quantization="int8"))
    assert _arith_ops(prog) == ["mul_channel"]
    assert validate(prog, m, _input(m)).passed


def test_other_broadcasts_run_on_the_cpu_or_are_refused_when_strict():
    b = zoo.Builder(seed=4)
    x = b.conv("input", 3, 16, k=3)
    att = b.conv(x, 16, 1, k=1)  # [1, 1, 8, 8] spatial map: not a channel vector
    m = b.model([1, 3, 8, 8], [b.node("Mul", [x, att])], "bad_bcast")
    with pytest.raises(ModelError, match="broadcasting"):
        compile(m, CompileOptions(quantization="fp16", no_cpu_fallback=True))
    prog = compile(m, CompileOptions(quantization="fp16"))  # the host CPU runs the Mul
    assert "mul_channel" not in _arith_ops(prog) and sum(c.op == "HOST" for c in prog.commands) == 1
    assert validate(prog, m, _input(m)).passed


def test_a_vector_times_a_lower_rank_map_runs_on_the_cpu_not_hung():
    """[1,16] * [1,16,1,1] broadcasts to [1,16,1,16]: not a channel scaling of the map."""
    b = zoo.Builder(seed=5)
    x = b.conv("input", 3, 16, k=3)
    pooled = b.node("GlobalAveragePool", [x])
    flat = b.node("Flatten", [pooled])
    gate = b.node("Sigmoid", [b.conv(pooled, 16, 16, k=1)])
    m = b.model([1, 3, 8, 8], [b.node("Mul", [flat, gate])], "rank_growth")
    with pytest.raises(ModelError, match="broadcast"):
        compile(m, CompileOptions(quantization="fp16", no_cpu_fallback=True))
    prog = compile(m, CompileOptions(quantization="fp16"))
    rep = validate(prog, m, _input(m))
    assert rep.run_result.status == "ok" and rep.passed, rep.text()


@pytest.mark.parametrize("kind,n", [("sum3", 3), ("sum4", 4)])
@pytest.mark.parametrize("q", ["int8", "fp16"])
def test_sum_of_many_inputs_validates(kind, n, q):
    m = zoo.op_model(kind)
    prog = compile(m, CompileOptions(quantization=q))
    assert _arith_ops(prog).count("add") == n - 1
    rep = validate(prog, m, _input(m))
    assert rep.run_result.status == "ok", rep.run_result.report_text()
    assert rep.passed, rep.text()


# ---------------------------------------------------------------- hardware contract


def test_vector_stream_size_mismatch_hangs():
    """The unit expects C elements on port 1 of mul_channel; a vector SE delivering fewer hangs."""
    m = zoo.op_model("se_mul")
    prog = compile(m, CompileOptions(quantization="fp16"))
    cmds = prog.commands
    ai = next(i for i, c in enumerate(cmds) if c.op == "ARITH" and c["op"] == "mul_channel")
    start = max(i for i in range(ai) if cmds[i].op == "EPOCH")
    end = next(i for i in range(ai, len(cmds)) if cmds[i].op == "RUN")
    link = next(cmds[i] for i in range(start, end) if cmds[i].op == "LINK" and cmds[i]["dst_kind"] == "ARITH"
                and cmds[i]["dst_port"] == 1)
    se = next(i for i in range(start, end) if cmds[i].op == "SE" and cmds[i]["engine"] == link["src"])
    assert cmds[se]["layout"] == "linear" and cmds[se]["run"] == 16 * 2  # C fp16 elements
    cmds[se] = Command("SE", {**cmds[se].args, "run": 8 * 2})
    prof = load_profile(overrides=["epoch.timeout_cycles=200000"])
    res = npusim.run(prog, _input(m), profile=prof)
    assert res.status == "fault" and res.faults[0].cls == "hang", res.report_text()
    f = res.faults[0]
    assert "ARITH0" in f.unit and "expects 32 B" in f.message and "delivers 16 B" in f.message


@pytest.mark.parametrize("q", ["int8", "fp16"])
def test_sum_with_leading_constants_validates(q):

    b = zoo.Builder(seed=6)
    x = b.conv("input", 3, 16, k=3)
    rng = np.random.default_rng(6)
    k1, k2 = (b.const(rng.standard_normal((1, 16, 1, 1)).astype(np.float32), f"k{i}") for i in (1, 2))
    m = b.model([1, 3, 8, 8], [b.node("Sum", [k1, k2, x])], "sum_consts")
    prog = compile(m, CompileOptions(quantization=q))
    rep = validate(prog, m, _input(m))
    assert rep.run_result.status == "ok" and rep.passed, rep.text()
