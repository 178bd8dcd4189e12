"""`npusim doctor`: the troubleshooting steps in order, stopping at the first failing layer."""

from __future__ import annotations

import json

import pytest

from npusim import zoo
from npusim.compiler import CompileOptions, compile as compile_model
from npusim.hw import load_profile
from npusim.memory import Context
from npusim.program.blob import encode_blob
from npusim.tools.doctor import STEPS, doctor

PROFILE = load_profile()
MODEL = zoo.conv_model(16, 16, 52, 52, 3)  # 52 px blocked16 lines: 832 B, 896 B in the hardware's granules


def _status(rep):
    return {s.name: s.status for s in rep.steps}


def test_a_layout_bug_stops_at_the_layout_step_with_the_operator_and_the_fix():
    rep = doctor(MODEL, options=CompileOptions(mem_align=16))
    assert [s.name for s in rep.steps] == [n for n, _ in STEPS]
    assert _status(rep) == {"versions": "pass", "memory": "pass", "conversion": "warn", "operators": "pass",
                            "layout": "fail", "accuracy": "skipped", "fusion": "skipped", "stability": "skipped"}
    layout = rep.failed
    assert layout.name == "layout" and rep.exit_code == 139
    assert "Conv conv" in layout.measured and "at --mem-align 16" in layout.measured
    assert layout.fix == "compile with --mem-align 128"
    conv = next(s for s in rep.steps if s.name == "conversion")
    assert "predicted at --mem-align 16" in conv.measured and "none at --mem-align" in conv.measured
    lines = rep.text().splitlines()
    assert lines[2].startswith("! conversion 5 fault(s) predicted")  # not a pass: the layout step owns them
    assert lines[4].startswith("✗ layout") and lines[5].startswith("- accuracy") and "skipped" in lines[5]
    assert lines[-1] == "doctor: first failing step: layout (exit 139)"


def test_the_granule_alignment_passes_every_step():
    rep = doctor(MODEL, options=CompileOptions(mem_align=128), all_steps=True)
    st = _status(rep)
    assert rep.exit_code == 0 and rep.failed is None
    assert all(v == "pass" for v in st.values()), rep.text()
    assert "2 processes sharing the NPU" in next(s for s in rep.steps if s.name == "stability").measured
    assert "cosine" in next(s for s in rep.steps if s.name == "accuracy").measured
    md = rep.markdown()
    assert md.startswith("# npusim doctor") and md.count("| ✓ |") == 8
    doc = rep.to_json()
    assert doc["exit_code"] == 0 and [s["name"] for s in doc["steps"]] == [n for n, _ in STEPS]


def test_a_blob_for_a_newer_runtime_fails_the_version_matrix(tmp_path):
    from dataclasses import replace

    prog = compile_model(MODEL, CompileOptions(mem_align=128), profile=PROFILE)
    prog.header = replace(prog.header, min_runtime="99.0")
    blob = tmp_path / "new.npu"
    blob.write_bytes(encode_blob(prog, PROFILE))
    rep = doctor(MODEL, blob=str(blob))
    assert rep.failed.name == "versions" and rep.exit_code == 65 and "99.0" in rep.failed.measured
    assert _status(rep)["memory"] == "skipped"


def test_a_context_too_small_fails_the_memory_step():
    rep = doctor(MODEL, options=CompileOptions(mem_align=128), context=Context("a", {"npuRAM3": (0, 0x1000)}))
    assert rep.failed.name == "memory" and rep.exit_code == 65 and "context 'a'" in rep.failed.measured


def test_cli_doctor_writes_its_reports(tmp_path, capsys, monkeypatch):
    import onnx

    from npusim.cli import main

    monkeypatch.chdir(tmp_path)
    onnx.save(MODEL, tmp_path / "m.onnx")
    code = main(["doctor", "m.onnx", "--mem-align", "16", "--json", "r.json", "--markdown", "r.md", "--no-parallel"])
    out = capsys.readouterr().out
    assert code == 139 and "✗ layout" in out and "fix: compile with --mem-align 128" in out
    assert json.loads((tmp_path / "r.json").read_text())["first_failing"] == "layout"
    assert "| ✗ | layout" in (tmp_path / "r.md").read_text()
    assert main(["doctor", "missing.onnx"]) == 65
    assert main(["doctor", "m.onnx", "--stress-runs", "0"]) == 2


@pytest.mark.slow
def test_demo_detector_stops_at_layout_at_16():
    rep = doctor(zoo.yolo_style(size=224), options=CompileOptions(mem_align=16))
    assert rep.failed.name == "layout" and "conv7" in rep.failed.measured
    assert rep.failed.fix == "compile with --mem-align 128"


def test_a_model_calibrated_on_its_own_inputs_is_checked_on_them(tmp_path):
    """Calibrated on [0, 1) images, the model is validated on those samples (not on standard-normal inputs,
    which it was never calibrated for); inputs the user gives come first; advice never repeats what the user did."""
    import numpy as np

    cal = tmp_path / "cal.npz"
    np.savez(cal, input=np.random.default_rng(0).random((8, 1, 16, 52, 52)).astype(np.float32))
    rep = doctor(MODEL, options=CompileOptions(mem_align=128, calibration=str(cal)), all_steps=True, stress_runs=5)
    acc = next(s for s in rep.steps if s.name == "accuracy")
    assert acc.status == "pass" and "(4 calibration sample(s))" in acc.measured, rep.text()
    assert rep.exit_code == 0 and "on 4 calibration sample(s)" in rep.steps[-1].measured, rep.text()
    normal = {"input": np.random.default_rng(1).standard_normal((1, 16, 52, 52)).astype(np.float32)}
    rep = doctor(MODEL, options=CompileOptions(mem_align=128, calibration=str(cal)), inputs=normal)
    acc = rep.failed
    assert acc.name == "accuracy" and rep.exit_code == 3 and "(the --input arrays)" in acc.measured
    assert "--calibration FILE" not in acc.fix and "--quantization fp16" in acc.fix


def test_cli_doctor_takes_input_files(tmp_path, capsys, monkeypatch):
    import numpy as np
    import onnx

    from npusim.cli import main

    monkeypatch.chdir(tmp_path)
    onnx.save(MODEL, tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.random.default_rng(2).standard_normal((1, 16, 52, 52)).astype(np.float32))
    code = main(["doctor", "m.onnx", "--mem-align", "128", "--input", "input=x.npy", "--no-parallel",
                 "--stress-runs", "2"])
    out = capsys.readouterr().out
    assert code == 0 and "(the --input arrays)" in out, out


def test_a_buffer_spanning_npuram3_into_npuram4_counts_in_both_pools():
    """The planner lets a buffer span the contiguous npuRAM3..6 (it names the pool it starts in): the memory
    step measures each pool by address, so no pool reads over 100 % beside a pass mark."""
    import re

    m = zoo.conv_model(3, 16, 160, 160, k=1)  # 400 KiB output, the 80 KiB input after it: into npuRAM4
    rep = doctor(m, options=CompileOptions(mem_align=128))
    mem = next(s for s in rep.steps if s.name == "memory")
    assert mem.status == "pass" and "npuRAM4 " in mem.measured, mem.measured
    assert all(int(p) <= 100 for p in re.findall(r"\((\d+)%\)", mem.measured)), mem.measured
    assert mem.details["pools"]["npuRAM3"] == 458_752 and not mem.details["outside"]


def test_every_mark_agrees_with_its_line():
    """No pass mark beside predicted faults or a pool over its size; a stress run that exhausts the pool
    says so."""
    import re

    for rep in (doctor(MODEL, options=CompileOptions(mem_align=16), all_steps=True, stress_runs=2),
                doctor(zoo.conv_model(3, 16, 160, 160, k=1), options=CompileOptions(mem_align=128), all_steps=True,
                       stress_runs=2)):
        for s in rep.steps:
            line = s.line()
            if s.status == "pass":
                assert "fault(s) predicted" not in line and "FAULT" not in line and "LEAK" not in line, line
                assert all(int(p) <= 100 for p in re.findall(r"\((\d+)%\)", line)), line
            if s.name == "stability" and s.details.get("exhausted"):
                assert s.status == "fail" and "the pool is exhausted" in line, line
