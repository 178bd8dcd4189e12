"""Review fixes of the engine and memory model: bounded work, bus clipping, cache and MAC stats."""

from __future__ import annotations

import numpy as np
import pytest

import npusim
from npusim.errors import UsageError
from npusim.hw import load_profile
from npusim.memory import AccessPattern, NpuCache, pattern_cost, runs, unmapped_cost
from npusim.memory.pattern import MAX_RUNS
from npusim.program.blob import encode_blob, load_blob
from test_engine_build import PROFILE, Builder, arith_cmd, conv_cmd, copy_program

RNG = np.random.default_rng(3)


def _huge_stream_program():
    """A read SE of 65535 x 65535 runs feeding a small copy: far more than any epoch can move."""
    b = copy_program()
    i = next(k for k, c in enumerate(b.commands) if c.op == "SE" and c.args["dir"] == "read")
    a = dict(b.commands[i].args, n1=65535, s1=0, n2=65535, s2=0)
    b.commands[i] = type(b.commands[i])("SE", a)
    return b


@pytest.mark.parametrize("timing_only", [False, True])
def test_stream_beyond_the_watchdog_is_a_computed_hang(timing_only):
    b = _huge_stream_program()
    x = RNG.standard_normal(b.buffers[0].shape).astype(np.float32)
    res = npusim.run(b.program(), {"x": x}, options=npusim.RunOptions(timing_only=timing_only))
    assert res.end_reason == "hang" and [f.cls for f in res.faults] == ["hang"]
    f = res.faults[0]
    assert f.unit == "SE0" and "past the watchdog" in f.message
    e = res.stats.epochs[0]
    assert e.cycles == e.setup_cycles + PROFILE.epoch.timeout_cycles and e.setup_cycles >= PROFILE.epoch.setup_cycles


def test_huge_stream_from_a_tiny_blob_runs_to_a_hang():
    blob = encode_blob(_huge_stream_program().program(), PROFILE)
    assert len(blob) < 4096
    prog = load_blob(blob, verify=False)
    res = npusim.run(prog, random_inputs=True)
    assert res.end_reason == "hang"


def test_runs_refuses_to_materialise_without_bound():
    with pytest.raises(UsageError, match="runs"):
        runs(AccessPattern(0, 1, 65535, 1, 65535, 1, 65535, 1))
    assert runs(AccessPattern(0, 1, 4, 2)).tolist() == [0, 2, 4, 6]
    assert MAX_RUNS >= 1 << 20


def _overflow_into_flash():
    """Epoch 0 writes 2 x 129 runs of 16 B: run 1 overflows y (sanitizer), runs of i2 = 1..127 hit
    unmapped memory, i2 = 128 lands on a read-only octoFlash constant; epoch 1 copies it to z."""
    b = Builder()
    x = b.fm("x", "input", 1, 258, 16)  # one 4128 B blocked16 line
    y = b.fm("y", "output", 1, 1, 512, pool="npuRAM4")
    kdata = bytes(range(256)) * 4
    kaddr = b.const("k", kdata)
    z = b.fm("z", "output", 1, 64, 16, pool="npuRAM5")
    ya = b.addr(y)
    assert (kaddr - ya) % 128 == 0
    b.epoch(0, "bad")
    b.se_buf(0, "read", x)
    arith_cmd(b, 0, "copy", 1, 258, 16)
    b.se(5, "write", ya, 16, n1=2, s1=768, n2=129, s2=(kaddr - ya) // 128, limit=0)
    b.link("SE0", "ARITH0")
    b.link("ARITH0", "SE5")
    b.run_wait()
    b.epoch(1, "readback")
    b.se(0, "read", kaddr, 1024)
    arith_cmd(b, 0, "copy", 1, 64, 16)
    b.se_buf(5, "write", z)
    b.link("SE0", "ARITH0")
    b.link("ARITH0", "SE5")
    b.run_wait()
    return b, kdata, kaddr


def test_keep_going_never_writes_a_readonly_pool_and_reports_the_bus_faults():
    b, kdata, kaddr = _overflow_into_flash()
    x = RNG.integers(-100, 100, (1, 16, 1, 258)).astype(np.float32)
    res = npusim.run(b.program(), {"x": x}, options=npusim.RunOptions(keep_going=True))
    classes = [f.cls for f in res.faults]
    assert classes[:3] == ["buffer-overflow", "out-of-pool", "write-to-readonly"], classes
    assert res.faults[2].unit == "SE5" and res.faults[2].address == kaddr
    z = res.raw_outputs["z"][0].transpose(1, 2, 0)  # NCHW -> the HWC bytes of the linear-dense stream
    assert z.reshape(-1).view(np.uint8).tobytes() == kdata  # flash unchanged
    stop = npusim.run(b.program(), {"x": x})
    assert [f.cls for f in stop.faults] == ["buffer-overflow", "out-of-pool", "write-to-readonly"]
    assert stop.end_reason == "fault"


def test_cache_hits_cost_hit_cycles_and_writes_are_not_misses():
    hyper = PROFILE.pool_named("hyperRAM")
    p = AccessPattern(hyper.base, 4096)
    cycles = {}
    for hc in (0, 50):
        prof = load_profile(overrides=[f"cache.hit_cycles={hc}"])
        cache = NpuCache(prof)
        pattern_cost(hyper.name, p, prof, cache=cache)
        warm = pattern_cost(hyper.name, p, prof, cache=cache)
        assert warm.cache_hits == 64 and warm.mem_bytes == 0
        over = warm.bursts * prof.bus.burst_overhead_cycles + \
            warm.cross_bank_splits * prof.timing.cross_bank_penalty_cycles
        cycles[hc] = warm.cycles - over
    assert cycles[0] == 512  # bus beats only
    assert cycles[50] == 64 * 50  # 64 line hits x hit_cycles
    cache = NpuCache(PROFILE)
    w = pattern_cost(hyper, p, PROFILE, cache=cache, access="write")
    assert (w.cache_hits, w.cache_misses, w.mem_bytes) == (0, 0, 4096)
    assert (cache.hits, cache.misses, cache.writes) == (0, 0, 64)


def test_unmapped_cost_is_bus_only():
    c = unmapped_cost(AccessPattern(0x10, 300), PROFILE)
    bus = PROFILE.bus
    beats = -(-300 // bus.beat_bytes)
    bursts = -(-beats // bus.max_burst_beats)
    assert (c.bytes, c.beats, c.bursts, c.cross_bank_splits) == (300, beats, bursts, 0)
    assert c.cycles == beats + bursts * bus.burst_overhead_cycles and c.bank_passes.size == 0


def test_mac_utilisation_uses_the_layers_dtype():
    b = Builder()
    x = b.fm("x", "input", 8, 8, 16, "fp16")
    wts = RNG.standard_normal((16, 3, 3, 16)).astype(np.float16)
    waddr = b.const("w", wts.tobytes(), pool="npuRAM5")  # on-chip: the conv is compute-bound
    qaddr = b.const("q", np.zeros(16, "<f4").tobytes(), pool="npuRAM5")
    y = b.fm("y", "output", 8, 8, 16, "fp16", pool="npuRAM4")
    b.epoch(0, "conv")
    b.se_buf(0, "read", x)
    b.se_const(1, waddr, wts.nbytes, dtype="fp16")
    conv_cmd(b, 0, x, 16, 3, 3, pad=1, dtype="fp16", qparams=qaddr)
    b.se_buf(5, "write", y)
    b.link("SE0", "CA0", 0)
    b.link("SE1", "CA0", 1)
    b.link("CA0", "SE5")
    b.run_wait()
    res = npusim.run(b.program(), random_inputs=True, options=npusim.RunOptions(timing_only=True))
    e = res.stats.epochs[0]
    rate = PROFILE.compute.macs("fp16")
    body = e.cycles - e.setup_cycles
    assert e.macs == 8 * 8 * 16 * 9 * 16
    assert e.mac_utilisation == pytest.approx(e.macs / (body * rate))
    assert res.stats.layers[0].mac_utilisation == pytest.approx(
        e.macs / (e.cycles * rate * PROFILE.units.conv_accelerators))
    assert e.mac_utilisation > 0.5  # compute-bound at the fp16 rate, not a quarter of the int8 one


def test_unit_whose_work_exceeds_the_watchdog_hangs_without_computing():
    """RESIZE 4x4x4095 -> 4095x4095x4095 (68 G elements): the watchdog fires before any value."""
    b = Builder()
    x = b.fm("x", "input", 4, 4, 4095)
    y = b.fm("y", "output", 4, 4, 16, pool="npuRAM4")
    b.epoch(0, "resize")
    b.se_buf(0, "read", x)
    b.cmd("RESIZE", unit=0, dtype="int8", layout="blocked16", mode="nearest", coord="asymmetric", in_h=4,
          in_w=4, c=4095, out_h=4095, out_w=4095)
    b.se_buf(5, "write", y)
    b.link("SE0", "POOL0")
    b.link("POOL0", "SE5")
    b.run_wait()
    res = npusim.run(b.program(), random_inputs=True)
    assert res.end_reason == "hang" and res.faults[0].unit == "POOL0"
    assert "past the watchdog" in res.faults[0].message
