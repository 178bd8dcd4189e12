"""The compile's fast paths keep its results: the element-permutation planner's keys, floors, bounds and
memo (compiler/recipes/permute.py), the plans it returns walking exactly the permutation, and the stage
timings of `compile` (its summary line). No timing asserts: scripts/bench_compile.py measures speed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from npusim import zoo
from npusim.compiler import CompileOptions, compile
from npusim.compiler.driver import STAGES
from npusim.compiler.recipes import permute
from npusim.hw import load_profile


def test_keys_differ_alike_exactly_when_vectors_do():
    grid = np.array([(e, line, plane) for plane in range(3) for line in range(5) for e in range(0, 48, 3)])
    keys = permute._Keys(grid)
    assert all(keys.vector(k) == tuple(v) for k, v in zip(keys.key, grid))
    at = {tuple(v): i for i, v in enumerate(grid)}
    rng = np.random.default_rng(0)
    a, b, c = (rng.integers(0, len(grid), 3000) for _ in range(3))
    d = rng.integers(0, len(grid), 3000)
    for i in range(3000):  # half the draws: the pair (c, d) steps by the same vector as (a, b) where one exists
        same = at.get(tuple(grid[c[i]] + grid[b[i]] - grid[a[i]]))
        if i % 2 and same is not None:
            d[i] = same
    same_vec = ((grid[b] - grid[a]) == (grid[d] - grid[c])).all(axis=1)
    k = keys.key.astype(np.int64)
    assert (same_vec == (k[b] - k[a] == k[d] - k[c])).all()
    assert 300 < same_vec.sum() < 3000


def _walk(side: permute.Side) -> list[tuple[int, int, int]]:
    """The vectors a Side visits, in stream order (run innermost, then its loops innermost first)."""
    out = [tuple(side.start[k] + (i if k == 0 else 0) for k in range(3)) for i in range(side.run)]
    for n, step in side.loops:
        out = [tuple(v[k] + j * step[k] for k in range(3)) for j in range(n) for v in out]
    return out


def _copies(pieces, sx, lx, sy, ly) -> dict[int, int]:
    """{written element: read element} (flat ONNX indices) of the pieces, each written once."""
    rx = {tuple(v): i for i, v in enumerate(permute._vectors(sx, lx))}
    wy = {tuple(v): i for i, v in enumerate(permute._vectors(sy, ly))}
    got: dict[int, int] = {}
    for p in pieces:
        reads, writes = _walk(p.read), _walk(p.write)
        assert len(reads) == len(writes) == p.count
        for r, w in zip(reads, writes):
            assert wy[w] not in got
            got[wy[w]] = rx[r]
    return got


@pytest.mark.parametrize("shape, perm, lx, ly", [
    ((1, 20, 3, 5), (0, 2, 3, 1), "blocked16", "blocked16"),
    ((1, 32, 4, 6), (0, 3, 1, 2), "blocked16", "blocked16"),
    ((1, 3, 8, 16), (0, 3, 1, 2), "image", "blocked16"),
    ((1, 16, 6, 4), (0, 2, 1, 3), "blocked16", "blocked16"),
])
def test_a_plan_copies_every_element_from_where_the_permutation_says(shape, perm, lx, ly):
    out_shape = tuple(shape[p] for p in perm)
    src = np.ascontiguousarray(np.arange(math.prod(shape)).reshape(shape).transpose(perm)).reshape(-1)
    plan, why = permute._plan_shapes(shape, lx, out_shape, ly, 1, src, load_profile())
    assert plan is not None, why
    if plan.via_linear:
        flat = (math.prod(shape),)
        mid = _copies(plan.passes[0], shape, lx, flat, "linear")
        last = _copies(plan.passes[1], flat, "linear", out_shape, ly)
        got = {w: mid[r] for w, r in last.items()}
    else:
        got = _copies(plan.passes[0], shape, lx, out_shape, ly)
    assert got == dict(enumerate(src.tolist()))


def test_a_search_bounded_below_the_best_plan_finds_nothing_and_above_it_the_same_plan():
    shape, perm = (1, 20, 3, 5), (0, 2, 3, 1)
    out_shape = tuple(shape[p] for p in perm)
    src = np.ascontiguousarray(np.arange(math.prod(shape)).reshape(shape).transpose(perm)).reshape(-1)
    cost = permute._Estimator(load_profile(), 1)
    free = permute._best_pass(src, shape, "blocked16", out_shape, "blocked16", 1, cost)
    assert free is not None
    assert permute._best_pass(src, shape, "blocked16", out_shape, "blocked16", 1, cost, free[1] + 1) == free
    assert permute._best_pass(src, shape, "blocked16", out_shape, "blocked16", 1, cost, free[1]) is None


def test_a_piece_floor_never_exceeds_its_cost():
    """The closed-form floor that stops plan searches is below the cost model's cycles for any stream."""
    profile = load_profile()
    cost = permute._Estimator(profile, 1)
    rng = np.random.default_rng(1)
    for _ in range(300):
        loops = tuple((int(rng.integers(2, 9)), (int(rng.integers(0, 40)), int(rng.integers(0, 3)), int(rng.integers(0, 2))))
                      for _ in range(int(rng.integers(0, 4))))
        side = permute.Side((int(rng.integers(0, 64)) * 8, int(rng.integers(0, 4)), 0), int(rng.integers(1, 300)), loops)
        unit = (1, int(rng.choice([128, 256, 640])), 4096)
        for access in ("read", "write"):
            assert cost._side_floor(side) <= cost.side_cycles(side, unit, access) + 1e-9


def test_plan_searches_are_memoized_on_their_arguments(monkeypatch):
    shape, perm = (1, 20, 3, 5), (0, 2, 3, 1)
    out_shape = tuple(shape[p] for p in perm)
    src = np.ascontiguousarray(np.arange(math.prod(shape)).reshape(shape).transpose(perm)).reshape(-1)
    profile = load_profile()
    first = permute.plan_shapes(shape, "blocked16", out_shape, "blocked16", 1, src, profile)
    calls = []
    real = permute._plan_shapes
    monkeypatch.setattr(permute, "_plan_shapes", lambda *a: calls.append(a) or real(*a))
    assert permute.plan_shapes(shape, "blocked16", out_shape, "blocked16", 1, src.copy(), profile) == first
    assert not calls
    other = src.copy()
    other[[0, 1]] = other[[1, 0]]
    permute.plan_shapes(shape, "blocked16", out_shape, "blocked16", 1, other, profile)
    assert len(calls) == 1


def test_compile_reports_the_seconds_of_each_stage():
    model = zoo.resnet_style(size=32)
    stages: dict = {}
    compile(model, CompileOptions(), timings=stages)
    assert set(stages) == set(STAGES) and all(v >= 0 for v in stages.values())
    assert stages["calibration"] > 0
    fp32: dict = {}
    compile(model, CompileOptions(quantization="fp32"), timings=fp32)
    assert fp32["calibration"] < stages["calibration"]


def test_the_compile_summary_line_gives_the_calibration_seconds_apart(tmp_path, capsys):
    from npusim.cli import main

    model = tmp_path / "m.onnx"
    model.write_bytes(zoo.resnet_style(size=32).SerializeToString())
    assert main(["compile", str(model), "-o", str(tmp_path / "m.npu")]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert "; compiled in " in line and " s (calibration " in line


def _probed(model, cal: np.ndarray, names) -> dict:
    """round_range of the finite min/max of each tensor, read whole from ONNX Runtime per sample."""
    import onnx
    from onnx import TensorProto, helper

    from npusim.compiler import quantize
    from npusim.ort_session import session

    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.output[:]
    m.graph.output.extend(helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in names)
    sess = session(m, threads=1, optimize=False)
    vals = {t: [] for t in names}
    for sample in cal:
        for t, v in zip(names, sess.run(list(names), {"x": sample})):
            vals[t].append(v[np.isfinite(v)])
    return {t: quantize.round_range(np.concatenate(v).min(), np.concatenate(v).max()) for t, v in vals.items()}


@pytest.mark.parametrize("opset", [17, 9])
def test_clip_and_leaky_relu_ranges_are_derived_as_a_probe_gives_them(monkeypatch, opset):
    """Monotone ops with constant parameters (Clip bounds as inputs from opset 11, as attributes before;
    LeakyRelu alpha > 0) take their range from their input's; a Clip whose bound is computed, and a
    LeakyRelu with a negative alpha (not monotone), are probed."""
    from onnx import TensorProto, helper, numpy_helper

    from npusim.compiler import prepare, quantize

    rng = np.random.default_rng(4)
    k = numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "k")
    lo, hi = numpy_helper.from_array(np.array(-0.7, np.float32), "lo"), numpy_helper.from_array(np.array(1.3, np.float32), "hi")
    if opset >= 11:
        clip = helper.make_node("Clip", ["c", "lo", "hi"], ["clip"])
        computed = helper.make_node("Clip", ["c", "", "m"], ["clip_m"])
    else:
        clip = helper.make_node("Clip", ["c"], ["clip"], min=-0.7, max=1.3)
        computed = helper.make_node("Clip", ["c"], ["clip_m"], min=0.1)  # (an attribute: derived too)
    nodes = [helper.make_node("Conv", ["x", "k"], ["c"], pads=[1, 1, 1, 1]), clip,
             helper.make_node("ReduceMax", ["c"], ["m"], keepdims=0), computed,
             helper.make_node("LeakyRelu", ["c"], ["leaky"], alpha=0.1),
             helper.make_node("LeakyRelu", ["c"], ["odd"], alpha=-0.5)]
    outs = ["clip", "clip_m", "leaky", "odd"]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                          [helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in outs],
                          [k] + ([lo, hi] if opset >= 11 else []))
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    probed = []
    real = quantize._reduced
    monkeypatch.setattr(quantize, "_reduced", lambda clean, tensors, extra=(): probed.extend(t for t, _ in tensors) or
                        real(clean, tensors, extra))
    cal = rng.standard_normal((3, 1, 4, 8, 8)).astype(np.float32) * 3
    ranges = prepare(model, CompileOptions(calibration={"x": cal})).ranges
    assert sorted(probed) == sorted(["c", "m", "odd"] + (["clip_m"] if opset >= 11 else []))
    names = ["c", "clip", "clip_m", "leaky", "odd"]
    assert {t: ranges[t] for t in names} == _probed(model, cal, names)
