"""What an epoch plan keeps for the values of later runs (`EpochPlan.values`): the kernels' set-ups of
constant weights and tables (`kernels.Int8Conv`, `kernels.eltwise.Int8PlanesEltwise`), the units' verdicts
on constant tables, the split groups' candidates, the streams' windows and, for replays, constants' streams. A run that finds them must give exactly the values of a run without them, for
other inputs, and a table that is not a constant is never kept."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import npusim
from npusim import zoo
from npusim.compiler import CompileOptions, compile as compile_model
from npusim.kernels import Int8Conv, conv2d_int8_parts, layout as L, quantize_multiplier
from npusim.runtime import RunOptions, seeded_inputs

MODELS = [("mobilenet_style", lambda: zoo.mobilenet_style()), ("squeezenet_style", lambda: zoo.squeezenet_style(size=64)),
          ("conv_split", lambda: zoo.conv_model(32, 96, 20, 20))]


@pytest.mark.parametrize("name,make", MODELS, ids=[m[0] for m in MODELS])
def test_a_run_with_the_plans_kept_equals_a_run_without(name, make, monkeypatch):
    from npusim.engine import epoch_values
    from npusim.engine.epoch_values import EpochValues

    # the replay's shortcuts must be exercised, not only harmless: convs from their kept set-ups, streams
    # read in place, and the bound steps of later replays (`_run_steps`)
    taken = {"bound conv": 0, "in place": 0, "steps": 0, "direct stores": 0}
    kept_conv, in_place, run_steps = epoch_values.run_kept_conv, EpochValues._in_place_reads, EpochValues._run_steps
    kept_conv_stream = epoch_values.run_kept_conv_stream

    def spy_kept_conv(*a):
        taken["bound conv"] += 1
        return kept_conv(*a)

    def spy_kept_conv_stream(*a):  # a bound step's conv
        taken["bound conv"] += 1
        return kept_conv_stream(*a)

    def spy_steps(self, cfg, steps, memo):
        taken["steps"] += 1
        # parts requantized straight into their write SE's bytes (`epoch_values._direct_stores`)
        taken["direct stores"] += sum(t is not None for s in steps if s[0] == "conv" and s[6] for t in s[6])
        return run_steps(self, cfg, steps, memo)

    def spy_in_place(*a):
        got = in_place(*a)
        taken["in place"] += len(got)
        return got

    monkeypatch.setattr(epoch_values, "run_kept_conv", spy_kept_conv)
    monkeypatch.setattr(epoch_values, "run_kept_conv_stream", spy_kept_conv_stream)
    monkeypatch.setattr(EpochValues, "_run_steps", spy_steps)
    monkeypatch.setattr(EpochValues, "_in_place_reads", staticmethod(spy_in_place))
    prog = compile_model(make(), CompileOptions(quantization="int8"))
    opts = RunOptions(trace=False)
    first = npusim.run(prog, seeded_inputs(prog, 0), opts)
    for seed in (1, 2):
        other = seeded_inputs(prog, seed)
        fresh = npusim.run(copy.deepcopy(prog), other, opts)
        again = npusim.run(prog, other, opts)  # a replay: the plans of `first` serve it
        full = npusim.run(prog, other, RunOptions(trace=True))  # a full run with them
        for k in fresh.raw_outputs:
            np.testing.assert_array_equal(again.raw_outputs[k], fresh.raw_outputs[k])
            np.testing.assert_array_equal(full.raw_outputs[k], fresh.raw_outputs[k])
        assert any(not np.array_equal(first.raw_outputs[k], again.raw_outputs[k]) for k in first.raw_outputs)
    assert taken["bound conv"] > 0 and taken["steps"] > 0 and (name == "conv_split" or taken["in place"] > 0), taken
    assert taken["direct stores"] > 0, taken


@pytest.mark.slow
def test_replays_of_streams_across_pools_equal_fresh_runs(monkeypatch):
    """MobileNet v2 224's large maps span npuRAM3..6: their streams are `memory.Split`s, read and written
    piece by piece by a replay's bound steps ("gather", "scatter") beside its stores into one pool and its
    reads in place; the outputs of later replays equal those of fresh runs, for other inputs."""
    from collections import Counter

    from npusim.engine.epoch_values import EpochValues
    from npusim.zoo.st import mobilenet_v2

    kinds: Counter = Counter()
    run_steps = EpochValues._run_steps

    def spy_steps(self, cfg, steps, memo):
        kinds.update(s[0] for s in steps)
        return run_steps(self, cfg, steps, memo)

    monkeypatch.setattr(EpochValues, "_run_steps", spy_steps)
    prog = compile_model(mobilenet_v2(size=224), CompileOptions(quantization="int8"))
    opts = RunOptions(trace=False)
    for seed in (0, 1, 2):  # a full run, a replay binding the steps, a replay from them
        npusim.run(prog, seeded_inputs(prog, seed), opts)
    for seed in (3, 4):
        other = seeded_inputs(prog, seed)
        again = npusim.run(prog, other, opts)
        fresh = npusim.run(copy.deepcopy(prog), other, opts)
        for k in fresh.raw_outputs:
            np.testing.assert_array_equal(again.raw_outputs[k], fresh.raw_outputs[k])
    assert all(kinds[k] > 0 for k in ("gather", "scatter", "store", "in place", "conv")), kinds


def _part(rng, oc, taps, w_shape):
    w = rng.integers(-128, 128, w_shape, dtype=np.int8)
    mults = [quantize_multiplier(s) for s in rng.uniform(20, 80, oc) / np.sqrt(taps * 5476.0**2)]
    return (w, rng.integers(-20000, 20000, oc), np.array([m for m, _ in mults]), np.array([s for _, s in mults]),
            int(rng.integers(-10, 10)), -128, 127)


@pytest.mark.parametrize("kind", ["dense_split", "depthwise", "grouped"])
def test_an_int8_conv_set_up_once_serves_any_input(kind):
    """`Int8Conv.run` on several inputs equals `conv2d_int8_parts` on each (the set-up keeps no input)."""
    rng = np.random.default_rng(7)
    h, w, c = 9, 11, 32
    if kind == "dense_split":
        parts, groups = [_part(rng, 32, 9 * c, (32, 3, 3, c)), _part(rng, 16, 9 * c, (16, 3, 3, c))], 1
    elif kind == "depthwise":
        parts, groups = [_part(rng, c, 9, (c, 3, 3, 1))], c
    else:
        parts, groups = [_part(rng, c, 18, (c, 3, 3, 2))], c // 2
    kw = dict(in_zp=-3, stride=(1, 2), pads=(1, 1, 1, 0), groups=groups)
    lays = ["blocked16"] * len(parts)
    conv = Int8Conv((h, w, c), np.dtype(np.int8), parts, out_layouts=lays, **kw)
    for _ in range(3):
        x = rng.integers(-128, 128, (h, w, c), dtype=np.int8)
        planes = L.planes_view(L.pack(x, "blocked16"), "blocked16", h, w, c, "int8")
        want = conv2d_int8_parts(planes, parts, out_layouts=lays, **kw)
        got = conv.run(planes)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)


def test_an_int8_conv_refuses_an_input_of_another_shape():
    rng = np.random.default_rng(1)
    conv = Int8Conv((4, 4, 16), np.dtype(np.int8), [_part(rng, 16, 16, (16, 1, 1, 16))], in_zp=0)
    with pytest.raises(npusim.errors.UsageError):
        conv.run(np.zeros((4, 5, 16), np.int8))


def _kept(prog) -> list:
    """The epoch plans' memos (`EpochPlan.values`) of the Program."""
    memo = prog.__dict__["_memo"][5]
    plans = [v[1] for k, v in memo.items() if k[0] == "epoch plans"]
    return [plan.values for p in plans for _, plan in p.values()]


def _kept_convs(prog) -> list:
    """The `Int8Conv`s the Program's epoch plans keep."""
    return [got[1] for values in _kept(prog) for got in values.values()
            if isinstance(got, tuple) and len(got) == 2 and isinstance(got[1], Int8Conv)]


def _kept_constants(prog) -> int:
    """How many constant streams the Program's epoch plans keep for replays."""
    return sum(1 for values in _kept(prog) for k in values if isinstance(k, tuple) and k[0] == "constant")


def test_weights_in_a_writable_pool_are_never_kept():
    """Bytes in a writable pool may change: their kernels are set up at every run."""
    model = zoo.mobilenet_style()
    prog = compile_model(model, CompileOptions(quantization="int8", weights_pool="cpuRAM2"))
    flash = compile_model(model, CompileOptions(quantization="int8"))
    for seed in (0, 1):
        got = npusim.run(prog, seeded_inputs(prog, seed), RunOptions(trace=False))
        want = npusim.run(copy.deepcopy(prog), seeded_inputs(prog, seed), RunOptions(trace=False))
        for k in want.raw_outputs:
            np.testing.assert_array_equal(got.raw_outputs[k], want.raw_outputs[k])
    assert _kept_convs(prog) == [] and _kept_constants(prog) == 0
    npusim.run(flash, seeded_inputs(flash, 0), RunOptions(trace=False))
    assert _kept_convs(flash) and _kept_constants(flash) == 0  # a full run keeps no constant stream
    seen = []
    npusim.run(flash, seeded_inputs(flash, 0), RunOptions(trace=False), observe=lambda *a: seen.append(a[0]))
    assert seen and _kept_constants(flash) == 0  # nor does a replay with hooks
    npusim.run(flash, seeded_inputs(flash, 0), RunOptions(trace=False))
    assert _kept_convs(flash) and _kept_constants(flash)  # a replay does: weights and tables in flash


@pytest.mark.parametrize("op", ["add", "sub", "mul", "max", "min"])
@pytest.mark.parametrize("per_channel", [False, True])
def test_an_eltwise_set_up_once_serves_any_operands(per_channel, op):
    """`Int8PlanesEltwise.run` on several operand pairs (blocked16 planes, a partial last plane) equals
    `eltwise_int8` on the [H][W][C] maps, packed to blocked16: an independent path (no planes)."""
    from npusim.kernels.eltwise import TWO_MAPS, Int8PlanesEltwise, eltwise_int8

    assert op in TWO_MAPS
    rng = np.random.default_rng(5)
    h, w, c = 5, 6, 37
    n = c if per_channel else 1
    ma, mb, sh = rng.integers(2**29, 2**30, n), rng.integers(2**29, 2**30, n), rng.integers(30, 33, n)
    if op == "mul":  # (a - a_zp) * (b - b_zp) * ma: a smaller multiplier and a longer shift keep the result in range
        ma, sh = rng.integers(2**20, 2**21, n), rng.integers(28, 30, n)
    kw = dict(a_zp=2, b_zp=-3, out_zp=1, lo=-100, hi=120)
    planes = (-(-c // 16), h, w, 16)
    elt = Int8PlanesEltwise(op, planes, c, ma, mb, sh, **kw)
    for _ in range(3):
        maps = [rng.integers(-128, 128, (h, w, c), dtype=np.int8) for _ in range(2)]
        a, b = (L.planes_view(L.pack(m, "blocked16"), "blocked16", h, w, c, "int8") for m in maps)
        want = L.pack(eltwise_int8(op, maps[0], maps[1], ma, mb, sh, **kw), "blocked16")
        assert len(np.unique(want)) > 8  # the results spread over the int8 range, not clamped to a few values
        np.testing.assert_array_equal(elt.run(a, b), want)
