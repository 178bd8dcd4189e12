"""Runtime API: load, version checks, input binding, outputs, reports, determinism."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import npusim
from npusim.errors import DataError, InvalidInputError, NpusimError, UsageError
from npusim.program.blob import encode_blob
from npusim.program.model import Header
from test_engine_build import PROFILE, copy_program

TESTS = Path(__file__).resolve().parent


def x16(seed=0):
    return np.random.default_rng(seed).uniform(-20, 20, (1, 16, 8, 8)).astype(np.float32)


def test_run_from_blob_bytes_and_path(tmp_path):
    prog = copy_program().program()
    blob = encode_blob(prog, PROFILE)
    p = tmp_path / "m.npu"
    p.write_bytes(blob)
    a = npusim.run(blob, {"x": x16()})
    b = npusim.run(str(p), {"x": x16()})
    c = npusim.run(npusim.load(p), {"x": x16()})
    assert a.status == b.status == c.status == "ok"
    assert a.stats.cycles == b.stats.cycles == c.stats.cycles
    np.testing.assert_array_equal(a.outputs["y"], c.outputs["y"])
    assert npusim.load(prog) is prog


def test_int8_inputs_are_quantized_round_half_even():
    b = copy_program()
    b.buffers[0] = dataclasses.replace(b.buffers[0], scale=0.5, zero_point=3)
    b.buffers[1] = dataclasses.replace(b.buffers[1], scale=0.5, zero_point=3)
    x = np.full((1, 16, 8, 8), 0.25, np.float32)  # 0.5 steps: rint(0.5) = 0 -> q = 3 -> 0.0
    x[0, 0, 0, 0] = 0.75  # rint(1.5) = 2 -> q = 5 -> 1.0
    x[0, 1, 0, 0] = 1000.0  # clamps to 127
    res = npusim.run(b.program(), {"x": x})
    assert res.raw_outputs["y"][0, 0, 0, 0] == 5 and res.raw_outputs["y"][0, 0, 0, 1] == 3
    assert res.outputs["y"][0, 0, 0, 0] == 1.0 and res.outputs["y"][0, 0, 1, 1] == 0.0
    assert res.outputs["y"][0, 1, 0, 0] == (127 - 3) * 0.5
    assert res.outputs["y"].dtype == np.float32 and res.raw_outputs["y"].dtype == np.int8


def test_input_errors_name_the_input():
    prog = copy_program().program()
    with pytest.raises(DataError, match=r"input 'x': shape \(1, 16, 4, 4\), expected \(1, 16, 8, 8\)"):
        npusim.run(prog, {"x": np.zeros((1, 16, 4, 4), np.float32)})
    with pytest.raises(DataError, match="missing input 'x'"):
        npusim.run(prog, {})
    with pytest.raises(DataError, match="unknown input 'z'"):
        npusim.run(prog, {"x": x16(), "z": x16()})
    with pytest.raises(DataError, match="not numeric"):
        npusim.run(prog, {"x": np.full((1, 16, 8, 8), "a")})
    with pytest.raises(UsageError, match="mode"):
        npusim.RunOptions(mode="cycle")


def test_version_and_profile_checks():
    prog = copy_program().program()
    for header, msg in ((Header(isa_version=9), "ISA version 9"), (Header(min_runtime="9.0.0"), "runtime >= 9.0.0"),
                        (Header(profile="n999"), "targets profile 'n999'")):
        bad = dataclasses.replace(prog, header=header)
        with pytest.raises(InvalidInputError, match=msg):
            npusim.run(bad, {"x": x16()}, profile=PROFILE)
    with pytest.raises(InvalidInputError, match="n999"):  # no profile given: the header's target is loaded
        npusim.run(dataclasses.replace(prog, header=Header(profile="n999")), {"x": x16()})


def test_random_inputs_are_seeded():
    prog = copy_program().program()
    a = npusim.run(prog, random_inputs=True, seed=5)
    b = npusim.run(prog, random_inputs=True, seed=5)
    c = npusim.run(prog, random_inputs=True, seed=6)
    np.testing.assert_array_equal(a.outputs["y"], b.outputs["y"])
    assert not np.array_equal(a.outputs["y"], c.outputs["y"])


def test_timing_only_random_inputs_draw_nothing_and_time_the_same(monkeypatch):
    """A timing-only run moves no values: random inputs are not drawn, and it times as with bound inputs."""
    prog = copy_program().program()
    bound = npusim.run(prog, npusim.runtime.seeded_inputs(prog, 3), options=npusim.RunOptions(timing_only=True))

    def refuse(*a, **k):
        raise AssertionError("a timing-only run drew random inputs")

    monkeypatch.setattr(npusim.runtime, "seeded_inputs", refuse)
    drawn = npusim.run(prog, random_inputs=True, seed=3, options=npusim.RunOptions(timing_only=True))
    assert drawn.status == bound.status == "ok"
    assert drawn.stats.cycles == bound.stats.cycles
    assert drawn.report_json()["stats"] == bound.report_json()["stats"]


def test_reports_and_summary():
    b = copy_program(4, 13, 16, line_align=16)
    res = npusim.run(b.program(), random_inputs=True)
    rep = res.report_json()
    assert rep["status"] == "fault" and rep["end_reason"] == "fault" and rep["cycles"] == int(res.stats.cycles)
    st = rep["stats"]
    for key in ("bank_conflicts", "cross_bank_splits", "bytes_read", "bytes_written", "stall_cycles", "layers",
                "epochs"):
        assert key in st
    assert st["layers"][0]["name"] == "copy" and "cycles" in st["layers"][0]
    assert rep["faults"][0]["class"] == "buffer-overflow"
    json.dumps(rep)
    text = res.report_text()
    assert "==npusim== ERROR: NPUSanitizer: buffer-overflow" in text and "SUMMARY" in text
    s = res.summary()
    assert "cycles" in s and "ms" in s and "bank conflicts" in s and "1 faults" in s


def test_cycle_limit():
    res = npusim.run(copy_program().program(), random_inputs=True, options=npusim.RunOptions(max_cycles=50))
    assert res.end_reason == "cycle-limit" and res.stats.cycles == 50 and res.status == "ok"


def test_npusim_errors_are_npusim_errors():
    with pytest.raises(NpusimError):
        npusim.load(b"not a blob")
    with pytest.raises(UsageError):
        npusim.load(42)


_DET = """
import sys, json, hashlib
sys.path.insert(0, {tests!r})
import numpy as np, npusim
from test_engine_timing import conv_bound_program, add_program
out = []
for b in (conv_bound_program(), add_program(8, 8, 32, "npuRAM3", "npuRAM3")):
    r = npusim.run(b.program(), random_inputs=True, seed=1)
    out.append([r.stats.cycles, r.stats.bank_conflicts,
                {{k: hashlib.sha256(v.tobytes()).hexdigest() for k, v in sorted(r.raw_outputs.items())}},
                hashlib.sha256(r.trace_json().encode()).hexdigest()])
print(json.dumps(out))
"""


def test_deterministic_across_processes():
    code = _DET.format(tests=str(TESTS))
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    assert runs[0].stdout == runs[1].stdout and runs[0].stdout.strip()
