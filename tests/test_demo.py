"""`npusim demo`: the whole field story, from simulated addresses, with its artefacts."""

import json
import subprocess
import sys

import pytest


@pytest.mark.slow  # the whole demo in a fresh process: 8 s of CPU
def test_demo_tells_the_story_and_writes_artefacts(tmp_path):
    out = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "npusim", "demo", "--out", str(out)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "ERROR: NPUSanitizer: buffer-overflow" in text          # step 2: the crash
    assert "why: the hardware walked" in text                      # ... and its cause
    assert "runs clean" in text and "faults:" in text              # step 3: bisect
    assert "validate: PASS" in text                                # step 5
    numbers = json.loads((out / "numbers.json").read_text())
    assert numbers["a16_status"] == "fault" and numbers["a128_status"] == "ok"
    assert numbers["validation_passed"] is True
    assert numbers["fastest_mem_align"] >= 128                    # step 6: the granule or more is fastest
    assert numbers["speedup_best_vs_worst_clean"] >= 1.0
    for name in ("run_a16_report.txt", "run_a16_report.json", "bisect.txt", "trace_a128.json",
                 "sweep_224.csv", "sweep_224.png", "sweep_256.csv", "sweep_256.png", "detector_a16.npu",
                 "report.html", "sweep.html"):
        assert (out / name).stat().st_size > 0, name
    report = json.loads((out / "run_a16_report.json").read_text())
    page = (out / "report.html").read_text()  # the faulting run's page, the fault drawn on the memory map
    assert 'id="fault-marker"' in page
    assert f'data-name="{report["faults"][0]["region"]["name"]}" id="faulting-block"' in page
    assert "224x224" in (out / "sweep.html").read_text() and "256x256" in (out / "sweep.html").read_text()
    assert report["faults"][0]["class"] == "buffer-overflow" and report["faults"][0]["layer"]
    assert json.loads((out / "trace_a128.json").read_text())["traceEvents"]
    assert str(out.resolve()) in text                              # it names its folder at the end
