"""`grid` on ST Edge AI Core outputs: ST's program replayed at every point of profile axes, with the
planted field fault found at its point, and compile-option axes refused (the program is ST's)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from npusim.errors import UsageError
from npusim.hw import load_profile
from npusim.tools.grid import format_summary, format_table, grid
from npusim.tools.parallel import Executor
from npusim.tools.st_run import run_st

ST = Path(__file__).resolve().parents[2] / "shared" / "stedgeai"
MNV1, YAM = ST / "st_ic_mnv1_nucleo", ST / "st_audio_yamnet1024_v111"
MAC = "compute.mac_per_cycle.int8"


def test_grid_replays_each_st_output_at_each_profile_point():
    res = grid([MNV1, YAM], axes=[(f"set:{MAC}", [36, 72])], executor=Executor(False))
    assert [(r.model, r.params[f"set:{MAC}"], r.status) for r in res.rows] == [
        ("st_ic_mnv1_nucleo", 36, "ok"), ("st_ic_mnv1_nucleo", 72, "ok"),
        ("st_audio_yamnet1024_v111", 36, "ok"), ("st_audio_yamnet1024_v111", 72, "ok")]
    for r in res.rows:  # each point is the replay on that profile
        want = run_st(ST / r.model, profile=load_profile("n657", [f"{MAC}={r.params[f'set:{MAC}']}"]))
        assert r.cycles == want.cycles and r.faults == 0 and r.footprint_bytes > 0
        assert r.bank_conflicts is None and r.options == {}  # not counted; no compile options
    slow, fast = res.rows[0], res.rows[1]
    assert slow.cycles > fast.cycles  # half the MAC rate on convolutions
    assert "4 ok, 0 fault, 0 error" in format_summary(res)
    assert " - " in format_table(res)


def test_grid_point_of_a_planted_fault(tmp_path):
    d = tmp_path / "yam_bad"
    shutil.copytree(YAM, d)
    for p in d.rglob("*"):
        p.chmod(0o644 if p.is_file() else 0o755)
    net = d / "network.c"
    s = net.read_text()
    i = s.index("static const LL_Streng_TensorInitTypeDef Conv2D_7_suboff_15_dma_init_out_0_2")
    j = s.index(".batch_offset = 32,", i)
    net.write_text(s[:j] + ".batch_offset = 40," + s[j + len(".batch_offset = 32,"):])
    res = grid([YAM, d], executor=Executor(False))
    ok, bad = res.rows
    assert ok.status == "ok" and bad.status == "fault"
    assert bad.first_fault == "buffer-overflow" and bad.fault_layer and bad.faults >= 1
    assert [r.model for r in res.faulting()] == ["yam_bad"]


def test_compile_options_and_values_are_refused_for_st_outputs():
    with pytest.raises(UsageError, match="do not apply to the ST Edge AI output"):
        grid([MNV1], axes=[("mem_align", [16, 128])], executor=Executor(False))
    with pytest.raises(UsageError, match="timing and memory only"):
        grid([MNV1], validate=True, executor=Executor(False))
    p = subprocess.run([sys.executable, "-m", "npusim", "grid", str(MNV1), "--mem-align", "16,128", "--no-progress"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "ST Edge AI output" in p.stderr


def test_cli_grid_of_st_outputs_writes_rows(tmp_path):
    out = tmp_path / "g" / "grid.csv"
    p = subprocess.run([sys.executable, "-m", "npusim", "grid", str(MNV1), "--sweep-set", f"{MAC}=36,72",
                        "--no-progress", "--no-parallel", "--csv", str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    lines = out.read_text().splitlines()
    assert len(lines) == 3 and lines[1].startswith("st_ic_mnv1_nucleo,,36,ok,")
