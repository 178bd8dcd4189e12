"""Timing properties of the fast model, timing-only equivalence, burst-level tolerance, trace."""

from __future__ import annotations

import json

import numpy as np
import pytest

import npusim
from npusim.hw import load_profile
from test_engine_build import PROFILE, Builder, arith_cmd, conv_cmd, copy_program

RNG = np.random.default_rng(3)
TOLERANCE = 0.15  # fast model vs burst-level reference, on epoch bodies (cycles without setup)


def inputs_for(b):
    return {buf.name: RNG.integers(-50, 50, size=buf.shape).astype(np.float32)
            for buf in b.buffers if buf.kind == "input"}


def run(b, profile=None, **opts):
    res = npusim.run(b.program(), inputs_for(b), options=npusim.RunOptions(**opts), profile=profile)
    assert res.status == "ok", res.report_text()
    return res


def add_program(h, w, c, pool_a, pool_b, se_b=5, out_se=6, offset_b=None):
    b = Builder()
    xa = b.fm("a", "input", h, w, c, pool=pool_a)
    xb = b.fm("b", "input", h, w, c, pool=pool_b, offset=offset_b)
    y = b.fm("y", "output", h, w, c, pool="npuRAM4")
    params = b.const("p", np.asarray([[1, 1, 0, 0]], "<i4").tobytes(), pool="npuRAM6")
    b.epoch(0, "add")
    b.se_buf(0, "read", xa)
    b.se_buf(se_b, "read", xb)
    arith_cmd(b, 0, "add", h, w, c, params=params)
    b.se_buf(out_se, "write", y)
    b.link("SE0", "ARITH0", 0)
    b.link(f"SE{se_b}", "ARITH0", 1)
    b.link("ARITH0", f"SE{out_se}")
    b.run_wait()
    return b


def conv_bound_program(h=16, w=16, c=16, oc=64):
    b = Builder()
    x = b.fm("x", "input", h, w, c)
    waddr = b.const("w", RNG.integers(-5, 5, oc * 9 * c).astype(np.int8).tobytes(), pool="npuRAM5")
    qaddr = b.const("q", np.tile(np.asarray([0, 1 << 30, 36], "<i4"), oc).tobytes(), pool="npuRAM5")
    y = b.fm("y", "output", h, w, oc, pool="npuRAM4")
    b.epoch(0, "conv")
    b.se_buf(0, "read", x)
    b.se_const(1, waddr, oc * 9 * c)
    conv_cmd(b, 0, x, oc, 3, 3, pad=1, qparams=qaddr)
    b.se_buf(5, "write", y)
    for s, d, p in (("SE0", "CA0", 0), ("SE1", "CA0", 1), ("CA0", "SE5", 0)):
        b.link(s, d, p)
    b.run_wait()
    return b


def body(res):
    return res.stats.cycles - sum(e.setup_cycles for e in res.stats.epochs if e.kind == "npu")


def test_more_bytes_more_cycles():
    small, big = run(copy_program(8, 8, 16)), run(copy_program(16, 16, 16))
    assert big.stats.cycles > small.stats.cycles
    assert big.stats.bytes_read == 4 * small.stats.bytes_read


def test_aligned_is_not_slower_than_misaligned():
    aligned = run(copy_program(16, 8, 16, in_offset=0))
    mis = run(copy_program(16, 8, 16, in_offset=16))
    assert aligned.stats.cross_bank_splits == 0 < mis.stats.cross_bank_splits
    assert aligned.stats.cycles < mis.stats.cycles


def test_two_engines_on_one_pool_cost_more_than_on_two_pools():
    same = run(add_program(16, 16, 16, "npuRAM3", "npuRAM3"))
    apart = run(add_program(16, 16, 16, "npuRAM3", "npuRAM5"))
    assert same.stats.bank_conflicts > 0 and apart.stats.bank_conflicts == 0
    assert same.stats.cycles >= apart.stats.cycles
    assert same.stats.stall_cycles["bank_conflict"] > 0


def test_port_sharing_costs_cycles():
    shared = run(add_program(16, 16, 16, "npuRAM3", "npuRAM5", se_b=1, out_se=2))  # SE0, SE1, SE2 on port 0
    split = run(add_program(16, 16, 16, "npuRAM3", "npuRAM5", se_b=5, out_se=1))  # SE5 on port 1
    assert shared.stats.cycles > split.stats.cycles


def test_bigger_mac_rate_means_fewer_cycles_for_a_compute_bound_conv():
    base = run(conv_bound_program())
    e = base.stats.epochs[0]
    assert e.critical == "CA0" and e.stall_cycles["compute"] > 0
    fast = run(conv_bound_program(), profile=load_profile(overrides=["compute.mac_per_cycle.int8=144"]))
    assert fast.stats.cycles < base.stats.cycles
    assert 0.9 < base.stats.epochs[0].mac_utilisation <= 1.0


def test_partial_channel_block_leaves_lanes_idle():
    lanes = PROFILE.compute.lanes
    full = run(conv_bound_program(c=2 * lanes)).stats.epochs[0]
    part = run(conv_bound_program(c=2 * lanes + 1)).stats.epochs[0]  # one channel more: a third, nearly idle pass
    assert part.stages["CA0"] / full.stages["CA0"] == pytest.approx(1.5, rel=0.05)


def _conv_unit(in_c, out_c, k, groups=1):
    from npusim.engine.config import UnitConfig

    args = dict(dtype="int8", in_h=14, in_w=14, in_c=in_c, out_c=out_c, kh=k, kw=k, sh=1, sw=1, dh=1, dw=1, pad_t=k // 2,
                pad_l=k // 2, pad_b=k // 2, pad_r=k // 2, groups=groups, in_layout="blocked16",
                out_layout="blocked16")
    return UnitConfig("CA", 0, "CONV", args, 0, 16)


@pytest.mark.parametrize("fill", [1.0, 3.0, 9.0])
def test_a_1x1_kernel_uses_tap_fill_of_the_3x3_window(fill):
    from npusim.engine.timing import unit_cycles

    prof = load_profile(overrides=[f"compute.tap_fill={fill}"])
    per_mac_3x3 = unit_cycles(_conv_unit(64, 64, 3), prof) / _conv_unit(64, 64, 3).work()
    per_mac_1x1 = unit_cycles(_conv_unit(128, 64, 1), prof) / _conv_unit(128, 64, 1).work()
    assert per_mac_1x1 / per_mac_3x3 == pytest.approx(prof.compute.kernel_taps / fill)
    # the fill is capped by the channel passes a thin conv has (8 channels = one pass of 8 lanes)
    thin = unit_cycles(_conv_unit(8, 64, 1), prof) / _conv_unit(8, 64, 1).work()
    assert thin / per_mac_3x3 == pytest.approx(prof.compute.kernel_taps)


def test_depthwise_conv_runs_at_its_efficiency_of_one_lane():
    from npusim.engine.timing import unit_cycles

    for eff in (1.0, 0.25):
        prof = load_profile(overrides=[f"compute.depthwise_efficiency={eff}"])
        dw, dense = _conv_unit(64, 64, 3, groups=64), _conv_unit(64, 64, 3)
        ratio = (unit_cycles(dw, prof) / dw.work()) / (unit_cycles(dense, prof) / dense.work())
        assert ratio == pytest.approx(prof.compute.lanes / eff)


def test_streams_sharing_external_flash_stall_on_its_bandwidth_not_on_bank_conflicts():
    b = Builder()
    a = b.const("a", bytes(2048))
    c = b.const("c", bytes(2048))
    params = b.const("p", np.asarray([[1, 1, 0, 0]], "<i4").tobytes(), pool="npuRAM6")
    y = b.fm("y", "output", 1, 1, 2048, pool="npuRAM4")
    b.epoch(0, "add")
    b.se_const(0, a, 2048)
    b.se_const(1, c, 2048)
    arith_cmd(b, 0, "add", 1, 1, 2048, params=params)
    b.se_buf(5, "write", y)
    b.link("SE0", "ARITH0", 0)
    b.link("SE1", "ARITH0", 1)
    b.link("ARITH0", "SE5")
    b.run_wait()
    e = run(b).stats.epochs[0]
    assert e.bank_conflicts == 0 and e.stall_cycles["bank_conflict"] == 0
    assert e.stall_cycles["external_bandwidth"] > 0
    flash = PROFILE.pool_named("octoFlash")
    assert e.cycles - e.setup_cycles >= 2 * 2048 / flash.bytes_per_cycle  # the two streams take turns


def test_epoch_setup_grows_with_the_registers_it_programs():
    small = run(copy_program(8, 8, 16)).stats.epochs[0]
    conv = run(conv_bound_program()).stats.epochs[0]
    ep = PROFILE.epoch
    assert small.setup_cycles > ep.setup_cycles and conv.setup_cycles > small.setup_cycles
    assert (conv.setup_cycles - ep.setup_cycles) % ep.register_cycles == 0


def test_memory_bound_copy_stalls_on_memory():
    res = run(copy_program(16, 16, 16))
    e = res.stats.epochs[0]
    assert e.critical.startswith("SE") and e.stall_cycles["memory"] > 0
    assert e.stall_cycles["setup"] == e.setup_cycles >= PROFILE.epoch.setup_cycles


def test_npu_cache_hits_on_second_read_of_flash_weights():
    b = Builder()
    waddr = b.const("w", bytes(range(256)) * 8)
    for i, out in enumerate(("y0", "y1")):
        y = b.fm(out, "output", 1, 1, 2048, pool="npuRAM4")
        b.epoch(i, f"load{i}")
        b.se_const(0, waddr, 2048)
        arith_cmd(b, 0, "copy", 1, 1, 2048)
        b.se_buf(5, "write", y)
        b.link("SE0", "ARITH0")
        b.link("ARITH0", "SE5")
        b.run_wait()
    res = run(b)
    e0, e1 = res.stats.epochs
    assert e0.cache_misses > 0 and e1.cache_hits > 0 and e1.cache_misses == 0
    assert e1.cycles < e0.cycles
    assert res.outputs["y1"].reshape(-1)[:256].tolist() == list(np.arange(256).astype(np.int8))


@pytest.mark.parametrize("make", [lambda: conv_bound_program(), lambda: copy_program(16, 13, 16, line_align=16),
                                  lambda: add_program(8, 8, 32, "npuRAM3", "npuRAM3")])
def test_timing_only_gives_the_same_cycles(make):
    full = npusim.run(make().program(), inputs_for(make()), options=npusim.RunOptions(keep_going=True))
    fast = npusim.run(make().program(), inputs_for(make()),
                      options=npusim.RunOptions(keep_going=True, timing_only=True))
    assert fast.stats.cycles == full.stats.cycles
    assert [f.cls for f in fast.faults] == [f.cls for f in full.faults]
    assert fast.outputs == {}


MICRO = {
    "aligned": lambda: copy_program(32, 8, 16),
    "misaligned": lambda: copy_program(32, 8, 16, in_offset=16),
    "uncontended": lambda: add_program(16, 16, 16, "npuRAM3", "npuRAM5"),
    "contended": lambda: add_program(16, 16, 16, "npuRAM3", "npuRAM3"),
    "port-shared": lambda: add_program(16, 16, 16, "npuRAM3", "npuRAM5", se_b=1, out_se=2),
    "misaligned-contended": lambda: add_program(16, 16, 16, "npuRAM3", "npuRAM3", offset_b=16 * 1024 + 48),
    "flash": lambda: copy_program(8, 8, 16, in_pool="npuRAM3", out_pool="hyperRAM"),
}


@pytest.mark.parametrize("name", sorted(MICRO))
def test_fast_model_within_tolerance_of_burst_mode(name):
    fast = run(MICRO[name]())
    burst = run(MICRO[name](), mode="burst")
    assert burst.stats.mode == "burst"
    rel = abs(body(fast) - body(burst)) / body(burst)
    assert rel <= TOLERANCE, f"{name}: fast {body(fast):.0f} vs burst {body(burst):.0f} ({rel:.1%})"


def test_perfetto_trace_has_one_track_per_unit():
    res = run(add_program(8, 8, 16, "npuRAM3", "npuRAM5"), trace=True)
    data = json.loads(res.trace_json())
    events = data["traceEvents"]
    names = {e["args"]["name"]: e["tid"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
    assert {"EC", "SE0", "SE5", "SE6", "ARITH0"} <= set(names)
    xs = [e for e in events if e["ph"] == "X"]
    assert all(e["dur"] >= 0 and isinstance(e["ts"], float) for e in xs)
    by_tid = {e["tid"] for e in xs}
    assert names["SE0"] in by_tid and names["ARITH0"] in by_tid
    assert any(e["ph"] == "i" and e["name"].startswith("epoch 0") for e in events)
    last = max(e["ts"] + e["dur"] for e in xs)
    assert last == pytest.approx(res.stats.cycles * 1e6 / PROFILE.clock, rel=1e-6)
    assert npusim.run(add_program(8, 8, 16, "npuRAM3", "npuRAM5").program(), random_inputs=True,
                      options=npusim.RunOptions(trace=False)).trace is None


def test_layers_aggregate_their_epochs():
    b = copy_program(8, 8, 16)
    b.epoch(1, "copy")  # the same layer again, as a second epoch (a tiled layer)
    for c in list(b.commands[1:6]):
        b.commands.append(c)
    b.run_wait()
    res = run(b)
    assert len(res.stats.epochs) == 2 and len(res.stats.layers) == 1
    ly = res.stats.layers[0]
    assert ly.epochs == 2 and ly.cycles == pytest.approx(sum(e.cycles for e in res.stats.epochs))
    assert ly.bytes_read == 2 * 1024 and res.stats.cycles == pytest.approx(ly.cycles)


def test_burst_mode_refuses_big_programs():
    from npusim.errors import UsageError

    with pytest.raises(UsageError, match="small programs"):
        npusim.run(copy_program(1000, 250, 16, in_pool="hyperRAM", out_pool="hyperRAM").program(),
                   random_inputs=True, options=npusim.RunOptions(mode="burst", timing_only=True))
