"""The timing's per-profile memo of an ST epoch (importers.stedgeai.timing._EpochWork.time): the figures it keeps
are those a fresh computation gives, an engine reading through the NPU cache keeps a bounded number of them as
the cache's answers vary, and the walks timed are the ones the replay checks (streng.placed_walks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from npusim.hw import load_profile
from npusim.importers.stedgeai import load, streng
from npusim.importers.stedgeai.model import HwEpoch, Streng
from npusim.importers.stedgeai.timing import CACHE_ANSWERS_KEPT, _EpochWork, _ViaCache, epoch_time
from npusim.memory.cache import NpuCache
from npusim.memory.pattern import AccessPattern

ST = Path(__file__).resolve().parents[2] / "shared" / "stedgeai"
PROF = load_profile("n657")


def _epoch():
    """Two engines on flash: one cacheable re-reading a 1 KiB frame 4 times, one plain; and one on an NPU RAM."""
    flash = PROF.pool_named("octoFlash").base
    ram = PROF.pool_named("npuRAM3").base
    return HwEpoch(1, strengs=(
        Streng(engine=2, dir=0, addr=flash, raw=True, frame_count=1024, frame_loop_cnt=4, frame_tot_cnt=4,
               cacheable=True),
        Streng(engine=3, dir=0, addr=flash + (1 << 20), raw=True, frame_count=4096, frame_tot_cnt=1),
        Streng(engine=4, dir=1, addr=ram, raw=True, frame_count=2048, frame_tot_cnt=1)))


def _warmed(k: int) -> NpuCache:
    """A cache that has already read the first k lines of flash: the cacheable engine's first pass over its
    frame (16 lines) hits k of them."""
    cache = NpuCache(PROF)
    if k:
        cache.access(AccessPattern.linear(PROF.pool_named("octoFlash").base, k * PROF.cache.line), "read")
    return cache


def test_kept_figures_equal_fresh_ones_and_stay_bounded_per_cached_engine():
    ep = _epoch()
    work = _EpochWork(ep, streng.epoch_walks(ep, {}))
    mine: dict = {}
    states = list(range(2 * CACHE_ANSWERS_KEPT + 1)) * 2  # more distinct answers than are kept, each met twice
    answers = set()
    for k in states:
        answers.add(_warmed(k).access(work._fetched(PROF.bus.beat_bytes)[0][0], "read"))
        kept = work.time(PROF, _warmed(k), mine)
        fresh = _EpochWork(ep, streng.epoch_walks(ep, {})).time(PROF, _warmed(k))
        assert kept == fresh
    assert len(answers) > CACHE_ANSWERS_KEPT
    via = mine[0]
    assert isinstance(via, _ViaCache) and 1 < len(via.figures) <= CACHE_ANSWERS_KEPT
    assert not isinstance(mine[1], _ViaCache) and not isinstance(mine[2], _ViaCache)  # looked up once, kept
    for key, per in mine.items():
        if isinstance(key, tuple) and key[0] == "conflicts":
            assert len(per) <= CACHE_ANSWERS_KEPT


def test_cached_engine_figures_follow_the_cache_not_the_memo():
    ep = _epoch()
    work, mine = _EpochWork(ep, streng.epoch_walks(ep, {})), {}
    cold = work.time(PROF, _warmed(0), mine).stages["SE2"]
    warm = work.time(PROF, _warmed(16), mine).stages["SE2"]
    assert warm < cold
    assert work.time(PROF, _warmed(0), mine).stages["SE2"] == cold


@pytest.mark.skipif(not (ST / "st_ic_mnv1_nucleo").is_dir(), reason="shared ST compiles not present")
def test_epoch_time_times_the_walks_the_replay_checks():
    out = load(ST / "st_ic_mnv1_nucleo")
    ep = next(e for b in out.blocks for e in b.epochs if e.enabled_strengs())
    assert streng.placed_walks(out, {}, ep) == streng.epoch_walks(ep, {})
    assert streng.placed_walks(out, {}, ep) is streng.placed_walks(out, {}, ep)  # walked once per output
    assert epoch_time(ep, {}, PROF) == _EpochWork(ep, streng.placed_walks(out, {}, ep)).time(PROF)


def test_an_epoch_without_cached_engines_is_timed_once_per_profile():
    ram = PROF.pool_named("npuRAM3").base
    plain = HwEpoch(1, strengs=(Streng(engine=0, dir=0, addr=ram, raw=True, frame_count=4096, frame_tot_cnt=1),
                                Streng(engine=1, dir=1, addr=ram + 8192, raw=True, frame_count=4096, frame_tot_cnt=1)))
    work, mine = _EpochWork(plain, streng.epoch_walks(plain, {})), {}
    first = work.time(PROF, NpuCache(PROF), mine)
    assert work.time(PROF, NpuCache(PROF), mine) is first
    assert first == _EpochWork(plain, streng.epoch_walks(plain, {})).time(PROF, NpuCache(PROF))
    cached = _epoch()  # an engine reads through the cache: its look-ups are made every run
    work, mine = _EpochWork(cached, streng.epoch_walks(cached, {})), {}
    assert work.time(PROF, _warmed(0), mine) is not work.time(PROF, _warmed(0), mine)
    assert "time" not in mine


@pytest.mark.skipif(not (ST / "st_reid_osnet_dk_v113").is_dir(), reason="shared ST compiles not present")
def test_user_io_placement_is_kept_per_output_and_handed_out_as_a_copy():
    from npusim.importers.stedgeai.board import ReplayOptions, _place_user_io, place_user_io
    from npusim.importers.stedgeai.reader import read

    out = load(ST / "st_reid_osnet_dk_v113")  # its input comes from the application (a relocation symbol)
    first = place_user_io(out, ReplayOptions())
    first.clear()
    again = place_user_io(out, ReplayOptions())
    assert again and again == _place_user_io(read(ST / "st_reid_osnet_dk_v113"), None)  # a fresh parse, worked out anew
    assert place_user_io(out, ReplayOptions(user_io=("AXISRAM1", None))) != again  # keyed by the option


def test_a_time_without_the_cache_is_not_kept_for_a_time_with_it():
    ep = _epoch()
    work, mine = _EpochWork(ep, streng.epoch_walks(ep, {})), {}
    work.time(PROF, None, mine)
    fresh = _EpochWork(ep, streng.epoch_walks(ep, {})).time(PROF, _warmed(16))
    assert work.time(PROF, _warmed(16), mine) == fresh != _EpochWork(ep, streng.epoch_walks(ep, {})).time(PROF)
