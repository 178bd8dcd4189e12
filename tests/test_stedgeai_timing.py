"""Timing of ST's own programs (importers.stedgeai.timing): each mechanism from its register fields,
the parts of an epoch's cycles (`--stalls` rows sum to the cycles), the per-block table beside ST's
estimates (`run --timing-only`, `--json`), on the shared compiles read in place."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from npusim.hw import load_profile
from npusim.importers.stedgeai import load
from npusim.importers.stedgeai.model import HwEpoch, Link, Streng, Unit
from npusim.importers.stedgeai.replay import ReplayOptions, replay
from npusim.importers.stedgeai.timing import (BOUND_CAUSES, EpochTime, epoch_time, fetched, program_timing,
                                              timing_profile)
from npusim.memory.pattern import AccessPattern
from npusim.tools.st_run import run_st

ST = Path(__file__).resolve().parents[2] / "shared" / "stedgeai"
YAM, REID = "st_audio_yamnet1024_v111", "st_reid_osnet_dk_v113"
PROF = load_profile("n657")


def _conv(**fields) -> Unit:
    base = {"fWidth": 32, "fHeight": 32, "kernelWidth": 1, "kernelHeight": 1, "nKernels": 16, "batchDepth": 64,
            "hstride": 1, "vstride": 1, "simd": 1, "inbytes_f": 1, "deepmode": 0}
    base.update(fields)
    return Unit("CONVACC", 0, tuple(base.items()))


def _ca_cycles(u: Unit, profile=PROF) -> float:
    return epoch_time(HwEpoch(1, units=(u,), enabled=(("CONVACC", 0),)), {}, profile).stages["CONVACC0"]


def test_simd_16x8_runs_at_half_the_8x8_rate():
    k3 = {"kernelWidth": 3, "kernelHeight": 3}
    assert _ca_cycles(_conv(simd=2, inbytes_f=2, **k3)) == pytest.approx(2 * _ca_cycles(_conv(simd=1, **k3)))
    # the input width alone does not set the rate: Deep1x1 packs 3 bytes per element in 8x8 mode
    assert _ca_cycles(_conv(deepmode=1, inbytes_f=3)) < _ca_cycles(_conv(simd=2, inbytes_f=2))


def test_deep1x1_packs_input_bytes_into_the_window():
    c = PROF.compute
    plain, deep = _ca_cycles(_conv()), _ca_cycles(_conv(deepmode=1, inbytes_f=3))
    want = min(c.kernel_taps, 3 * c.tap_fill) / min(c.kernel_taps, c.tap_fill)
    assert plain / deep == pytest.approx(want)
    # a 3x3 kernel fills the window in either mode: packing adds nothing
    k3 = {"kernelWidth": 3, "kernelHeight": 3}
    assert _ca_cycles(_conv(deepmode=1, inbytes_f=3, **k3)) == pytest.approx(_ca_cycles(_conv(**k3)))


def test_chained_convaccs_are_as_slow_as_the_slowest():
    a, b = _conv(), Unit("CONVACC", 1, _conv(nKernels=48).fields)
    ep = HwEpoch(1, units=(a, b), enabled=(("CONVACC", 0), ("CONVACC", 1)),
                 links=(Link("CONVACC", 1, 2, "CONVACC", 0, 0),))
    t = epoch_time(ep, {}, PROF)
    assert t.critical == "CONVACC1" and t.body == pytest.approx(3 * t.stages["CONVACC0"])
    # each CONVACC's output link (to the next one's accumulator port) carries one word per output value
    assert t.stages["CONVACC0 out"] == 32 * 32 * 16 / PROF.stream_engine.words_per_cycle
    assert t.stages["CONVACC1 out"] == 32 * 32 * 48 / PROF.stream_engine.words_per_cycle


def test_pixels_closer_than_a_beat_are_fetched_as_their_line():
    p = AccessPattern(0x34200000, 1, 128, 3, 256, 384)
    f = fetched(p, 8)
    assert (f.run, f.n1, f.s1, f.n2) == (127 * 3 + 1, 256, 384, 1)  # each line one run of its span
    wide = AccessPattern(0x34200000, 1, 128, 16, 256, 2048)
    assert fetched(wide, 8) == wide  # 16 B apart: separate beats, as walked
    dense = AccessPattern(0x34200000, 384, 256, 384)
    assert fetched(dense, 8) == dense


def test_epoch_controller_time_is_per_program_word():
    ep = HwEpoch(1, ec_instructions=10, ec_words=17, ec_polls=1)
    base = epoch_time(ep, {}, PROF)
    faster = epoch_time(ep, {}, load_profile("n657", ["epoch.ec_word_cycles=5"]))
    assert base.program == 17 * PROF.epoch.ec_word_cycles and faster.program == 17 * 5
    # an explicit-struct epoch: the registers the Cortex-M55 writes
    s = Streng(engine=0, dir=0, addr=0x34200000, raw=True, frame_count=64)
    assert epoch_time(HwEpoch(1, strengs=(s,)), {}, PROF).program == 14 * PROF.epoch.register_cycles


def test_bound_rows_sum_to_the_cycles():
    t = EpochTime(setup=120, program=30, stages={"SE1": 500.0, "conflicts npuRAM5": 700.0, "CONVACC0": 400.0})
    b = t.bound()
    assert sum(b.values()) == pytest.approx(t.cycles) and b["convacc"] == 400 and b["conflict"] == 300
    assert t.critical == "conflicts npuRAM5"


@pytest.fixture(scope="module")
def reid():
    return run_st(ST / REID)


def test_every_epoch_of_real_programs_splits_exactly(reid):
    yam = run_st(ST / YAM)
    for res in (reid, yam):
        for t in res.times.values():
            assert sum(t.bound().values()) == pytest.approx(t.cycles)
            assert set(t.bound()) == set(BOUND_CAUSES)


def test_hybrid_blocks_are_stream_engine_copies_the_host_waits_on():
    out = load(ST / YAM)
    rep = replay(out, ReplayOptions())
    times = program_timing(out, rep, PROF)
    hybrid = [blk.index for blk in out.blocks if blk.kind == "hybrid"]
    assert hybrid
    for (b, _, sw), t in times.items():
        if b in hybrid and sw:
            assert {"SE in", "SE out"} <= set(t.stages) and t.setup > 0
    # a slower pool makes the copy slower
    slow = load_profile("n657", ["pool.npuRAM6.clock_ratio=10"])
    slow_times = program_timing(out, rep, slow)
    assert sum(slow_times[k].cycles for k in slow_times if k[0] in hybrid) > \
        sum(times[k].cycles for k in times if k[0] in hybrid)


def test_block_table_beside_st_estimates(reid):
    rows = reid.block_rows()
    assert len(rows) == 31 and sum(r["cycles"] for r in rows) == pytest.approx(reid.cycles, abs=len(rows))
    hw = [r for r in rows if r["kind"] == "hw"]
    assert len(hw) == 15 and all(r["st_npu_cycles"] > 0 for r in hw)
    # the shape across hardware blocks: heavy blocks are heavy in both (Spearman's rank correlation)
    def ranks(x):
        return np.argsort(np.argsort(x))
    rho = np.corrcoef(ranks([r["st_npu_cycles"] for r in hw]), ranks([r["cycles"] for r in hw]))[0, 1]
    assert rho > 0.9
    text = reid.blocks_text()
    assert "ST npu est" in text and any(line.startswith("total") for line in text.splitlines())


def test_cli_timing_only_and_stalls(tmp_path):
    js = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "npusim", "run", str(ST / REID), "--timing-only", "--stalls",
                        "--json", str(js)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    d = json.loads(js.read_text())
    assert {"block", "kind", "epochs", "cycles", "st_npu_cycles", "st_total_cycles"} <= set(d["blocks"][0])
    assert d["blocks"][1]["st_npu_cycles"] == 475  # a software block's fixed estimate
    assert all(sum(e["bound"].values()) == pytest.approx(e["cycles"]) for e in d["epochs"])
    lines = p.stdout.splitlines()
    assert any(line.startswith("block kind") for line in lines)
    start = next(i for i, line in enumerate(lines) if line.startswith("block/epoch"))
    for line in lines[start + 1:]:
        if not line.strip():
            break
        nums = [int(x.replace(",", "")) for x in line.split()[1:len(BOUND_CAUSES) + 2]]
        assert nums[0] == sum(nums[1:]), line
    assert lines[-1].startswith("total")


def test_timing_profile_keeps_st_pool_addresses():
    out = load(ST / REID)
    prof = timing_profile(out, PROF)
    flash = prof.pool_named("octoFlash")
    assert flash.base == out.pool_named("octoFlash").address
    assert flash.bytes_per_cycle == PROF.pool_named("octoFlash").bytes_per_cycle  # the datasheet's speed


def test_stream_side_passes_one_element_per_word():
    s = Streng(engine=0, dir=0, addr=0x34200000, raw=True, frame_count=4096, frame_offset=4096, frame_tot_cnt=2)
    t = epoch_time(HwEpoch(1, strengs=(s,)), {}, PROF)
    assert t.stages["SE0 stream"] == 8192 / PROF.stream_engine.words_per_cycle
    wide = Streng(engine=0, dir=0, addr=0x34200000, raw=True, frame_count=4096, nbits_in=24, nbits_out=24)
    assert epoch_time(HwEpoch(1, strengs=(wide,)), {}, PROF).stages["SE0 stream"] == 4096  # 24-bit words
    off = load_profile("n657", ["stream_engine.words_per_cycle=0"])
    assert "SE0 stream" not in epoch_time(HwEpoch(1, strengs=(s,)), {}, off).stages


def test_cacheable_engines_rereading_external_weights_hit_the_npu_cache():
    from npusim.memory.cache import NpuCache

    # one 1 KiB frame of weights in flash read 16 times by a repetition loop (frame offset 0)
    base = PROF.pool_named("octoFlash").base
    kw = dict(engine=2, dir=0, addr=base, raw=True, frame_count=1024, frame_loop_cnt=16, frame_tot_cnt=16)
    cached, plain = Streng(cacheable=True, **kw), Streng(**kw)
    t_cached = epoch_time(HwEpoch(1, strengs=(cached,)), {}, PROF, NpuCache(PROF)).stages["SE2"]
    t_plain = epoch_time(HwEpoch(1, strengs=(plain,)), {}, PROF, NpuCache(PROF)).stages["SE2"]
    assert t_cached < t_plain / 4


def test_pool_views_say_which_speed_timing_uses(reid):
    v = reid.pool_views()
    flash = next(p for p in v["pools"] if p["pool"] == "octoFlash")
    assert flash["compile_bytes_per_cycle"] == pytest.approx(1 / 6) and flash["timing_uses"] == "profile"
    assert flash["profile_bytes_per_cycle"] == pytest.approx(PROF.pool_named("octoFlash").bytes_per_cycle)
    assert v["ms_compile"] > v["ms_profile"] == reid.ms  # ST's slower flash model makes it slower
