"""The permutation planner's fast primitives agree with their plain numpy definitions, and its bounds only
skip searches that could not have found a plan (compiler/recipes/permute.py). No timing asserts:
scripts/bench_compile.py measures speed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from npusim.compiler.recipes import permute
from npusim.hw import load_profile

SHAPES = [(7,), (5, 9), (3, 1, 4, 6), (2, 3, 4, 5, 16), (4, 1, 2, 3, 2, 16, 8)]


@pytest.mark.parametrize("shape", SHAPES)
def test_lagged_differences_and_step_changes_are_numpys(shape):
    rng = np.random.default_rng(len(shape))
    a = rng.integers(-1000, 1000, shape).astype(np.int64)
    a[a % 3 == 0] = 5  # runs of equal steps, so that changes are sparse somewhere
    for ax in range(a.ndim):
        full = permute._lagged(a, ax, np.subtract, np.int64)
        d = permute._head(full, ax, 1)
        assert full.shape == a.shape and np.array_equal(d, np.diff(a, axis=ax))
        change = permute._head(permute._lagged(full, ax, np.not_equal, bool), ax, 2)
        assert np.array_equal(change, np.diff(a, n=2, axis=ax) != 0)


@pytest.mark.parametrize("shape", SHAPES)
def test_projections_onto_each_axis_are_any_over_the_others(shape):
    rng = np.random.default_rng(7)
    for density in (0.0005, 0.02, 0.5):
        v = rng.random(shape) < density
        box = tuple(slice(n // 3, n) for n in shape)  # a strided view, as the search's boxes are
        w = v[box]
        for ax, got in enumerate(permute._projections(w)):
            want = w.any(axis=tuple(a for a in range(w.ndim) if a != ax))
            assert np.array_equal(got, want)
            assert np.array_equal(permute._sparse_any(w, ax), want)


def test_pair_keys_step_alike_exactly_when_both_sides_do():
    rng = np.random.default_rng(3)
    shape = (1, 20, 3, 5)
    n = math.prod(shape)
    src = rng.permutation(n)
    src[rng.random(n) < 0.1] = -1  # places of the output no input fills
    rkeys = permute._Keys(permute._vectors(shape, "blocked16"))
    wkeys = permute._Keys(permute._vectors((n,), "linear"))
    inv = np.full(n, -1, np.int64)
    inv[src[src >= 0]] = np.flatnonzero(src >= 0)
    ends = permute._Pairs(src, inv, rkeys, wkeys)
    pair, has = ends.by_out
    assert np.array_equal(has, src >= 0)
    rk = rkeys.key[np.maximum(src, 0)].astype(np.int64)
    wk = wkeys.key.astype(np.int64)
    assert all(ends.vectors(int(p)) == (rkeys.vector(int(r)), wkeys.vector(int(w))) for p, r, w in zip(pair, rk, wk))
    a, b, c, d = (rng.integers(0, n, 4000) for _ in range(4))
    d[::2] = c[::2] + b[::2] - a[::2]  # half the draws step alike on the write side
    ok = (d >= 0) & (d < n)
    a, b, c, d = a[ok], b[ok], c[ok], d[ok]
    both = (rk[b] - rk[a] == rk[d] - rk[c]) & (wk[b] - wk[a] == wk[d] - wk[c])
    assert np.array_equal(both, pair[b] - pair[a] == pair[d] - pair[c])
    by_in, has_in = ends.by_in
    assert np.array_equal(has_in, inv >= 0)
    assert np.array_equal(by_in[has_in], pair[inv[has_in]])  # the same pair, from either tensor


def test_beyond_never_exceeds_the_floors_of_pieces_copying_that_many_elements():
    """What lets a pass or a port-balance remainder be skipped is below the floors of any of its plans."""
    cost = permute._Estimator(load_profile(), 1)
    rng = np.random.default_rng(5)
    for _ in range(300):
        pieces = []
        for _ in range(int(rng.integers(1, 6))):
            loops = tuple((int(rng.integers(2, 9)), (int(rng.integers(0, 40)), int(rng.integers(0, 3)), 0))
                          for _ in range(int(rng.integers(0, 4))))
            run = int(rng.integers(1, 300))
            count = run * math.prod(n for n, _ in loops)
            side = permute.Side((0, 0, 0), run, loops)
            other = permute.Side((0, 0, 0), count, ())
            pieces.append(permute.Piece(count, *((side, other) if rng.random() < 0.5 else (other, side))))
        floors = sum(cost.floor(p) for p in pieces)
        total = sum(p.count for p in pieces)
        assert not cost.beyond(total, floors + 1e-6)
        assert cost.beyond(total, 0.5) and not cost.beyond(0, 0.5)


@pytest.mark.parametrize("shape, perm", [((1, 51, 8, 8), (0, 2, 1, 3)), ((1, 17, 3, 64), (0, 3, 1, 2)),
                                         ((1, 64, 4, 5), (0, 3, 1, 2))])
def test_a_bounded_pass_finds_the_unbounded_plan_or_nothing(shape, perm):
    """Skipped searches change nothing: bounded just above its cost a pass finds the same plan, at its cost
    nothing, and a second pass bounded below what its elements cost at least is not searched."""
    out_shape = tuple(shape[p] for p in perm)
    src = np.ascontiguousarray(np.arange(math.prod(shape)).reshape(shape).transpose(perm)).reshape(-1)
    cost = permute._Estimator(load_profile(), 1)
    free = permute._best_pass(src, shape, "blocked16", out_shape, "blocked16", 1, cost)
    assert free is not None
    assert permute._best_pass(src, shape, "blocked16", out_shape, "blocked16", 1, cost, free[1] * (1 + 1e-9)) == free
    assert permute._best_pass(src, shape, "blocked16", out_shape, "blocked16", 1, cost, free[1]) is None
    assert cost.beyond(src.size, cost.setup)
    flat = (src.size,)
    assert permute._best_pass(src, flat, "linear", out_shape, "blocked16", 1, cost, cost.setup) is None


def test_a_source_too_large_for_pair_keys_is_refused_before_any_table_is_built():
    src = np.arange(16, dtype=np.int64)
    plan, why = permute._plan_shapes((permute.MAX_SOURCE + 16,), "linear", (16,), "linear", 1, src, load_profile())
    assert plan is None and "planner reads from up to" in why
