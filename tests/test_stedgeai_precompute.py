"""What the replay and the timing of an imported ST program derive once per loaded output (`StOutput.memo`:
the replay's plan per placement and power state, the epochs' work per placement, pattern costs and the NPU
cache's transcript per profile) gives, run after run with other options, the results of a fresh import."""

from __future__ import annotations

from pathlib import Path

import pytest

from npusim.faults import faults_to_json
from npusim.hw import load_profile
from npusim.importers.stedgeai import load
from npusim.importers.stedgeai.reader import read
from npusim.importers.stedgeai.replay import ReplayOptions, replay
from npusim.importers.stedgeai.timing import program_timing
from test_stedgeai_ecblob import needs_shared

pytestmark = needs_shared

ST = Path(__file__).resolve().parents[2] / "shared" / "stedgeai"
MNV1, REID = "st_ic_mnv1_nucleo", "st_reid_osnet_dk_v113"

PROFILES = {"n657": load_profile("n657"),
            # the NPU cache, the bursts and the bank conflicts differ: every memo keyed by the profile must miss
            "other": load_profile("n657", ["cache.size=16KiB", "bus.max_burst_beats=8",
                                           "timing.bank_conflict_cycles=3"])}
OPTIONS = {"default": ReplayOptions(), "ram off": ReplayOptions(npu_ram_off=True),
           "user io": ReplayOptions(user_io=("AXISRAM1", None)),
           "reserved": ReplayOptions(reserve=(("AXISRAM2", 0x34100000, 0x20000),)),
           "first fault": ReplayOptions(npu_ram_off=True, keep_going=False)}


def _result(out, opts, profile) -> dict:
    """Everything a run reports, as plain data."""
    rep = replay(out, opts)
    times = program_timing(out, rep, profile)
    return {"faults": faults_to_json(rep.faults), "placements": rep.placements, "undecided": rep.undecided,
            "traffic": [(t.block, t.epoch, t.sw, t.read_bytes, t.write_bytes, sorted(t.buffers), sorted(t.reads),
                         t.own_writes, t.written, t.in_mask, t.out_mask, t.outputs_per_pool) for t in rep.epochs],
            "times": {k: (t.setup, t.program, t.stages) for k, t in times.items()}}


def _runs_equal_fresh_imports(name: str, sequence) -> None:
    folder = ST / name
    loaded = load(folder)
    fresh = {}
    for opt, prof in sequence:
        got = _result(loaded, OPTIONS[opt], PROFILES[prof])
        if (opt, prof) not in fresh:
            fresh[(opt, prof)] = _result(read(folder), OPTIONS[opt], PROFILES[prof])
        assert got == fresh[(opt, prof)], (name, opt, prof)
    # the options and profiles change what a run reports: a memo that ignored one of them would fail above
    assert fresh[("default", "n657")]["times"] != fresh[("default", "other")]["times"]
    assert fresh[("default", "n657")]["faults"] != fresh[("ram off", "n657")]["faults"]


def test_runs_of_one_loaded_output_under_other_options_equal_fresh_imports():
    _runs_equal_fresh_imports(MNV1, [("default", "n657"), ("default", "other"), ("ram off", "n657"),
                                     ("default", "n657"), ("first fault", "other"), ("reserved", "n657"),
                                     ("default", "other"), ("ram off", "n657")])


@pytest.mark.slow
def test_a_moved_user_io_buffer_is_walked_where_it_is_placed():
    """ReID's output buffer is the application's: its placement moves the walks and the checks."""
    _runs_equal_fresh_imports(REID, [("default", "n657"), ("user io", "n657"), ("default", "other"),
                                     ("ram off", "n657"), ("user io", "other"), ("default", "n657")])
    out = load(ST / REID)
    a, b = replay(out), replay(out, OPTIONS["user io"])
    assert a.placements != b.placements
    assert [t.written for t in a.epochs] != [t.written for t in b.epochs]


def test_the_npu_cache_transcript_is_followed_only_while_the_look_ups_agree():
    """A kept transcript of one profile's cache answers a later run of that profile; a cache of another
    geometry makes its own look-ups (its cycles differ), and the first profile's answers are unchanged."""
    out = load(ST / MNV1)
    rep = replay(out)
    base = {k: t.cycles for k, t in program_timing(out, rep, PROFILES["n657"]).items()}
    small = load_profile("n657", ["cache.size=4KiB", "cache.ways=2"])
    other = {k: t.cycles for k, t in program_timing(out, rep, small).items()}
    assert other != base
    assert {k: t.cycles for k, t in program_timing(out, rep, PROFILES["n657"]).items()} == base
    fresh = read(ST / MNV1)
    assert {k: t.cycles for k, t in program_timing(fresh, replay(fresh), small).items()} == other


@pytest.mark.parametrize("enabled", [True, False])
def test_replay_and_timing_pause_the_cyclic_collector_and_leave_it_as_found(monkeypatch, enabled):
    """A replay and its timing walk with the collector off (a full collection landing in some walks and not
    others made their cost vary by 30-50 ms); afterwards the collector is as the caller had it."""
    import gc

    from npusim.importers.stedgeai import replay as replay_mod
    from npusim.importers.stedgeai import timing as timing_mod

    seen = []
    walk, timed = replay_mod._Replayer.run, timing_mod._program_timing
    monkeypatch.setattr(replay_mod._Replayer, "run", lambda self: (seen.append(gc.isenabled()), walk(self))[1])
    monkeypatch.setattr(timing_mod, "_program_timing", lambda *a: (seen.append(gc.isenabled()), timed(*a))[1])
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        out = load(ST / MNV1)
        rep = replay(out)
        times = program_timing(out, rep, PROFILES["n657"])
        assert (seen, gc.isenabled()) == ([False, False], enabled)
    finally:
        (gc.enable if was else gc.disable)()
    assert rep.faults == [] and times
