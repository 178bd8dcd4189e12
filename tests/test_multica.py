"""Multi-CA conv epochs: structure, bit-exactness against one CA, timing, and the weights pool option."""

import numpy as np
import pytest

import npusim
from npusim import zoo
from npusim.compiler import CompileOptions, compile
from npusim.errors import ModelError, UsageError
from npusim.hw import load_profile

PROFILE = load_profile()
TIMING = npusim.RunOptions(timing_only=True, trace=False)


def _epochs(prog):
    """[(commands of one epoch)] of a program."""
    out, cur = [], None
    for c in prog.commands:
        if c.op == "EPOCH":
            cur = []
        if cur is not None:
            cur.append(c)
        if c.op == "RUN":
            out.append(cur)
            cur = None
    return out


def _inputs(m, seed=0):
    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    return {"input": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


def _cycles(m, **kw):
    r = npusim.run(compile(m, CompileOptions(**kw)), random_inputs=True, options=TIMING)
    assert r.status == "ok"
    return r.stats.cycles


def _body(m, **kw):
    """Cycles without the epochs' setup (the part the data path and the units take)."""
    r = npusim.run(compile(m, CompileOptions(**kw)), random_inputs=True, options=TIMING)
    assert r.status == "ok"
    return r.stats.cycles - sum(e.setup_cycles for e in r.stats.epochs)


def test_dense_conv_uses_four_cas_with_one_broadcast_input():
    m = zoo.conv_model(16, 64, 20, 20)
    ep = _epochs(compile(m))[0]
    convs = [c for c in ep if c.op == "CONV"]
    assert sorted(c["unit"] for c in convs) == [0, 1, 2, 3]
    assert [c["out_c"] for c in convs] == [16, 16, 16, 16] and all(c["in_c"] == 16 for c in convs)
    links = [c for c in ep if c.op == "LINK"]
    fm = [ln for ln in links if ln["dst_kind"] == "CA" and ln["dst_port"] == 0]
    assert {(ln["src_kind"], ln["src"]) for ln in fm} == {("SE", 0)}  # one read SE feeds all four CAs
    ses = [c for c in ep if c.op == "SE"]
    reads = [c for c in ses if c["dir"] == "read"]
    writes = [c for c in ses if c["dir"] == "write"]
    assert len(reads) == 5 and len(writes) == 4
    assert all(c["port"] == PROFILE.bus.stream_engine_port[c["engine"]] for c in ses)
    assert {c["engine"] for c in reads} <= {0, 1, 2, 3, 4} and {c["engine"] for c in writes} <= {5, 6, 7, 8, 9}
    w = sorted((c["base"], c["run"]) for c in reads[1:])  # weight slices tile the weight constant
    assert all(a[0] + a[1] == b[0] for a, b in zip(w, w[1:])) and sum(r for _, r in w) == 64 * 9 * 16
    q = sorted(c["qparams"] for c in convs)
    assert [b - a for a, b in zip(q, q[1:])] == [16 * 12] * 3


def test_split_rules_fall_back_to_one_ca():
    one = [c for c in compile(zoo.conv_model(16, 64, 12, 12), CompileOptions(conv_units=1)).commands
           if c.op == "CONV"]
    assert len(one) == 1
    stem = [c for c in compile(zoo.conv_model(3, 64, 24, 24)).commands if c.op == "CONV"]
    assert len(stem) == 4 and all(c["in_layout"] == "image" for c in stem)  # broadcast of an image map
    assert [c["out_c"] for c in stem] == [16] * 4  # 4 channel slices: the channel rule wins a tie
    tail = [c["out_c"] for c in compile(zoo.conv_model(16, 36, 1, 12)).commands if c.op == "CONV"]
    assert tail == [16, 20]  # one row (no bands); a 4-channel tail would be image layout: it joins the slice before
    tiny = [c for c in compile(zoo.conv_model(16, 16, 1, 1)).commands if c.op == "CONV"]
    assert len(tiny) == 1  # a 1 x 1 map: neither channel slices nor row bands


@pytest.mark.parametrize("cin,cout,groups", [(16, 16, 1), (32, 16, 1), (64, 64, 64)])
def test_row_bands_when_channels_give_fewer_cas(cin, cout, groups):
    """< 2 blocks of output channels, or a depthwise conv whose channel slices need
    their own input and weight reads: 4 CAs on bands of output rows, one weight SE broadcast to all."""
    ep = _epochs(compile(zoo.conv_model(cin, cout, 40, 40, groups=groups)))[0]
    convs = [c for c in ep if c.op == "CONV"]
    assert [(c["in_c"], c["out_c"], c["groups"]) for c in convs] == [(cin, cout, groups)] * 4
    # 40 output rows in bands of 10; a 3x3 window with padding 1 reaches one row above and below
    assert [(c["in_h"], c["pad_t"], c["pad_b"]) for c in convs] == [(11, 1, 0), (12, 0, 0), (12, 0, 0), (11, 0, 1)]
    links = [c for c in ep if c.op == "LINK" and c["dst_kind"] == "CA"]
    weights = {(ln["src_kind"], ln["src"]) for ln in links if ln["dst_port"] == 1}
    maps = {(ln["src_kind"], ln["src"]) for ln in links if ln["dst_port"] == 0}
    assert len(weights) == 1 and len(maps) == 4  # one weight stream, a read SE per band
    ses = {c["engine"]: c for c in ep if c.op == "SE"}
    reads = [ses[e] for _, e in sorted(maps)]
    line = reads[0]["s1"]
    assert [r["base"] - reads[0]["base"] for r in reads] == [0, 9 * line, 19 * line, 29 * line]
    writes = sorted((c for c in ses.values() if c["dir"] == "write"), key=lambda c: c["base"])
    assert [w["n1"] for w in writes] == [10, 10, 10, 10]


def test_row_bands_only_where_they_pay_for_their_registers():
    """A tiny conv keeps one CA: three more chains' configuration registers (~50 cycles each) cost
    more than the compute the bands would share out."""
    small = [c for c in compile(zoo.conv_model(8, 8, 8, 8)).commands if c.op == "CONV"]
    assert len(small) == 1
    m = zoo.conv_model(16, 16, 40, 40)
    big = [c for c in compile(m).commands if c.op == "CONV"]
    assert len(big) == 4
    assert _cycles(m) < 0.6 * _cycles(m, conv_units=1)


def test_fused_chains_are_split_within_unit_and_engine_limits():
    prog = compile(zoo.resnet_style(size=16, width=32))
    for ep in _epochs(prog):
        n_ca = sum(c.op == "CONV" for c in ep)
        n_arith = sum(c.op == "ARITH" for c in ep)
        reads = sum(c.op == "SE" and c["dir"] == "read" for c in ep)
        assert reads <= 5 and n_ca <= 4 and n_arith <= 4
        if n_arith and n_ca > 1:  # conv + residual add: 2 slices (input + 2 x (weights + operand) = 5 reads)
            assert n_ca == n_arith == 2 and reads == 5
    dw = _epochs(compile(zoo.conv_model(64, 64, 20, 20, groups=64), CompileOptions(conv_units=2)))[0]
    convs = [c for c in dw if c.op == "CONV"]  # 2 CAs: channel slices (each reads its own input planes)
    assert [(c["in_c"], c["out_c"], c["groups"]) for c in convs] == [(32, 32, 32), (32, 32, 32)]


CASES = {"dense": lambda: zoo.conv_model(16, 64, 20, 20),
         "depthwise": lambda: zoo.conv_model(64, 64, 20, 20, groups=64),
         "stem": lambda: zoo.conv_model(3, 64, 24, 24, stride=2),
         "grouped": lambda: zoo.conv_model(64, 64, 10, 10, groups=4), "tail40": lambda: zoo.conv_model(16, 40, 12, 12),
         "resnet": lambda: zoo.resnet_style(size=16, width=32), "yolo": lambda: zoo.yolo_style(64),
         "mobilenet": lambda: zoo.mobilenet_style(16),
         "rows_dw_stride2": lambda: zoo.conv_model(32, 32, 23, 17, stride=2, groups=32),
         "rows_5x5": lambda: zoo.conv_model(8, 8, 41, 37, k=5, act="Relu")}


@pytest.mark.parametrize("quant", ["int8", "fp16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_multi_ca_is_bit_exact(case, quant):
    m = CASES[case]()
    one = compile(m, CompileOptions(quantization=quant, conv_units=1))
    many = compile(m, CompileOptions(quantization=quant))
    assert sum(c.op == "CONV" for c in many.commands) > sum(c.op == "CONV" for c in one.commands)
    x = _inputs(m)
    a, b = npusim.run(one, x), npusim.run(many, x)
    assert a.status == b.status == "ok"
    for k in a.raw_outputs:
        assert np.array_equal(a.raw_outputs[k], b.raw_outputs[k]), k


def test_compute_bound_conv_is_close_to_4x_faster():
    m = zoo.conv_model(64, 64, 64, 64)  # 151 M MACs, 36 KiB of weights
    one, four = _cycles(m, conv_units=1), _cycles(m)
    assert 3.6 < one / four <= 4.0
    two = _cycles(m, conv_units=2)
    assert 1.9 < one / two <= 2.0


def test_weight_bound_conv_does_not_speed_up():
    # 576 KiB of weights from octoFlash: the four weight streams share the flash and its bus port
    m = zoo.conv_model(256, 256, 8, 8)
    one, four = _cycles(m, conv_units=1), _cycles(m)
    assert 0.98 < one / four < 1.02
    r = npusim.run(compile(m), random_inputs=True, options=TIMING)
    e = [e for e in r.stats.epochs if e.id >= 0][0]
    assert e.critical.startswith("SE") and e.pools["octoFlash"] >= 256 * 256 * 9


def test_shared_input_is_read_once():
    m = zoo.conv_model(64, 64, 32, 32)
    one = npusim.run(compile(m, CompileOptions(conv_units=1)), random_inputs=True, options=TIMING)
    four = npusim.run(compile(m), random_inputs=True, options=TIMING)
    act = lambda r: sum(v for k, v in r.stats.epochs[0].pools.items() if k.startswith("npuRAM"))
    assert act(one) == act(four)  # same activation bytes: the input map is not read four times
    assert one.stats.epochs[0].bytes_read == four.stats.epochs[0].bytes_read


def test_burst_mode_runs_multi_ca():
    m = zoo.conv_model(16, 32, 8, 8)
    p = compile(m)
    fast = npusim.run(p, random_inputs=True, options=npusim.RunOptions(trace=False))
    burst = npusim.run(p, random_inputs=True, options=npusim.RunOptions(trace=False, mode="burst"))
    assert fast.status == burst.status == "ok"
    assert sum(c.op == "CONV" for c in p.commands) == 2
    for k in fast.raw_outputs:
        assert np.array_equal(fast.raw_outputs[k], burst.raw_outputs[k])
    assert 0.5 < burst.stats.cycles / fast.stats.cycles < 2.0


@pytest.mark.parametrize("pool", ["hyperRAM", "cpuRAM2", "npuRAM6"])
def test_weights_pool_places_constants_and_keeps_values(pool):
    m = zoo.resnet_style(size=16, width=32)
    ref = compile(m)
    prog = compile(m, CompileOptions(weights_pool=pool))
    consts = [b for b in prog.buffers if b.kind == "weight"]
    assert consts and all(b.pool == pool for b in consts) and {c.pool for c in prog.constants} == {pool}
    acts = [b for b in prog.buffers if b.kind != "weight"]
    for w in consts:  # constants never overlap activations
        for a in acts:
            lo, hi = a.address(PROFILE), a.address(PROFILE) + a.size
            assert w.address(PROFILE) >= hi or w.address(PROFILE) + w.size <= lo, (w.name, a.name)
    x = _inputs(m)
    a, b = npusim.run(ref, x), npusim.run(prog, x)
    assert b.status == "ok"
    for k in a.raw_outputs:
        assert np.array_equal(a.raw_outputs[k], b.raw_outputs[k])


def test_faster_weight_pool_speeds_up_weight_bound_convs():
    m = zoo.conv_model(64, 128, 8, 8)  # 72 KiB of weights for 4.7 M MACs: weight-bound from external memory
    flash, hyper, npu = (_body(m, weights_pool=p) for p in ("octoFlash", "hyperRAM", "npuRAM6"))
    assert flash > 1.5 * hyper and hyper > 1.5 * npu
    assert _body(m, weights_pool="npuRAM6", conv_units=1) / npu > 3.5  # then compute-bound: 4 CAs pay off


def test_weights_pool_errors():
    with pytest.raises(UsageError, match="no such pool"):
        compile(zoo.conv_model(16, 16, 8, 8), CompileOptions(weights_pool="sramX"))
    with pytest.raises(UsageError, match="weights_pool"):
        CompileOptions(weights_pool="")
    with pytest.raises(UsageError, match="conv_units"):
        CompileOptions(conv_units=0)
    with pytest.raises(ModelError, match="model too big"):
        compile(zoo.conv_model(256, 256, 8, 8), CompileOptions(weights_pool="npuRAM6"))


def test_cli_flags_reach_the_options():
    import argparse

    from npusim.compiler.cli_args import add_compile_arguments, options_from_args

    ap = argparse.ArgumentParser()
    add_compile_arguments(ap)
    o = options_from_args(ap.parse_args(["--weights-pool", "hyperRAM", "--conv-units", "2"]))
    assert o.weights_pool == "hyperRAM" and o.conv_units == 2
    assert options_from_args(ap.parse_args([])).weights_pool == "octoFlash"
