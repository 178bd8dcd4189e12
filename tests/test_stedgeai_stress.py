"""`stress` on ST Edge AI Core outputs: programs (or instances of one) interleaved on one NPU, and the
writes that land in a buffer another process still needs. ST compiles fixed addresses, so two
instances of one compile clobber each other; two compiles whose activations use distinct RAM do not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from npusim.errors import UsageError
from npusim.tools.st_run import run_st
from npusim.tools.st_stress import _holds, _Live, st_stress

ST = Path(__file__).resolve().parents[2] / "shared" / "stedgeai"
MNV1, YAM = ST / "st_ic_mnv1_nucleo", ST / "st_audio_yamnet1024_v111"


def test_two_instances_of_one_compile_clobber_each_others_activations():
    rep = st_stress([MNV1], runs=5, processes=2)
    assert rep.exit_code == 139 and rep.inferences == 10
    f = rep.faults[0]
    assert f.cls == "pool-overlap" and f.access == "write" and f.context == "st_ic_mnv1_nucleo#1"
    assert f.details["victim_process"] == "st_ic_mnv1_nucleo#0"
    victim = f.details["victim_buffer"]
    out = run_st(MNV1).out
    b = next(b for b in out.buffers if b.name == victim)
    assert b.start <= f.address and f.address + f.size <= b.end  # the bytes lie in the victim buffer
    assert not b.is_param and not b.base_symbol  # an activation, not the application's own I/O
    assert "while it holds data" in f.rule


def test_compiles_with_apart_activations_share_the_npu_cleanly():
    rep = st_stress([MNV1, YAM], runs=4, schedule="random", seed=1)
    assert rep.exit_code == 0 and rep.faults == []
    alone = {t: run_st(ST / t).cycles for t in rep.targets}
    for p, lat in rep.latencies.items():
        assert len(lat) == 4 and min(lat) >= alone[p] * 0.999  # waiting for the other's blocks, never faster
    assert rep.npu_cycles == pytest.approx(4 * sum(alone.values()), rel=1e-6)


def test_one_process_has_nothing_to_judge_and_the_schedule_is_seeded():
    rep = st_stress([MNV1], runs=3)
    assert rep.exit_code == 0 and any("one process" in n for n in rep.notes)
    a = st_stress([MNV1, YAM], runs=3, schedule="random", seed=5).to_json()
    b = st_stress([MNV1, YAM], runs=3, schedule="random", seed=5).to_json()
    assert a == b


def test_liveness_of_a_victim_buffer():
    mid = _Live("x", 0, 16, 2, 5, "intermediate", 1, 4)
    assert [_holds(mid, k, 0, 3) for k in range(7)] == [False, False, True, True, True, False, False]
    out = _Live("y", 0, 16, 3, 7, "output", 2, None)
    assert not _holds(out, 0, 0, 3) and _holds(out, 0, 1, 3) and _holds(out, 4, 0, 3)  # until the next inference
    inp = _Live("z", 0, 16, 0, 2, "input", None, 1)
    assert _holds(inp, 0, 0, 3) and not _holds(inp, 0, 3, 3) and not _holds(inp, 2, 0, 3)
    assert _holds(_Live("w", 0, 16, 0, float("inf"), "parameter", None, None), 0, 3, 3)


def test_bad_counts_are_refused():
    with pytest.raises(UsageError):
        st_stress([MNV1], runs=0)
    with pytest.raises(UsageError):
        st_stress([MNV1], processes=17)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "npusim", "stress", *map(str, args)], capture_output=True, text=True)


def test_cli_stress_of_st_outputs(tmp_path):
    p = _cli(MNV1, "--processes", "2", "-n", "3", "--json", tmp_path / "r" / "st.json")
    assert p.returncode == 139, p.stderr
    assert "overwrites" in p.stdout and "st_ic_mnv1_nucleo#0" in p.stdout
    js = json.loads((tmp_path / "r" / "st.json").read_text())
    assert js["exit_code"] == 139 and js["faults"][0]["class"] == "pool-overlap"
    for bad in (["--reference", "m.tflite"], ["--mem-align", "64"], ["--plant", "leak-output=2"]):
        p = _cli(MNV1, *bad)
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and "ST Edge AI" in p.stderr, p.stderr
