"""The command line: help, exit codes, one-line errors, inspect / asm / disasm."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HANG_GUARD_S, conv_program
from npusim import cli
from npusim.hw import load_profile
from npusim.program.asm import disassemble
from npusim.program.blob import encode_blob

PROFILE = load_profile()


def npusim_exe() -> list[str]:
    exe = Path(sys.executable).parent / "npusim"
    if not exe.exists():
        pytest.skip("the npusim console script is not installed next to this python")
    return [str(exe)]


def run(argv, exe=None):
    cmd = (exe or [sys.executable, "-m", "npusim"]) + [str(a) for a in argv]
    env = {k: v for k, v in os.environ.items() if k != "NPUSIM_DEBUG"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_GUARD_S, env=env)


@pytest.fixture
def blob(tmp_path) -> Path:
    """A blob hand-assembled from text with the assembler."""
    src = tmp_path / "conv.s"
    src.write_text(disassemble(conv_program(), PROFILE))
    out = tmp_path / "conv.npu"
    assert cli.main(["asm", str(src), "-o", str(out)]) == 0
    return out


def test_help_lists_subcommands_and_exit_codes():
    for exe in (npusim_exe(), None):
        r = run(["--help"], exe)
        assert r.returncode == 0, r.stderr
        for word in ("inspect", "asm", "disasm", "demo", "exit codes", "139", "65"):
            assert word in r.stdout


def test_startup_does_not_import_heavy_modules():
    code = "import sys; from npusim import cli; cli.build_parser(); print(sorted(m for m in sys.modules " \
           "if m.split('.')[0] in ('numba', 'onnx', 'onnxruntime', 'simpy', 'matplotlib', 'numpy')))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert r.stdout.strip() == "[]", r.stdout


def test_asm_matches_encoder(blob):
    assert blob.read_bytes() == encode_blob(conv_program(), PROFILE)


def test_inspect_text(blob, capsys):
    assert cli.main(["inspect", str(blob)]) == 0
    out = capsys.readouterr().out
    assert "ISA n657-npu v4" in out and "target profile n657" in out
    assert "npuRAM3 [0x34200000, 0x34270000)" in out
    line = next(s for s in out.splitlines() if s.strip().endswith("[1, 16, 14, 14]") and " y " in s)
    assert line.split()[:5] == ["0x34201000", "0x34201c40", "3136", "4096", "16"]
    assert "epoch 0  [layer conv1]" in out and "CONV unit=0" in out and "s1=2 (granule 128 B)" in out


def test_inspect_json(blob, capsys):
    assert cli.main(["inspect", str(blob), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["header"]["compiler_version"] == "0.1.0"
    ram3 = next(p for p in info["memory_map"] if p["pool"] == "npuRAM3")
    x = next(i for i in ram3["items"] if i["name"] == "x")
    assert (x["start"], x["end"], x["align"], x["align_asked"]) == (0x34200000, 0x34200000 + 3136, 4096, 16)
    flash = next(p for p in info["memory_map"] if p["pool"] == "octoFlash")
    q = next(i for i in flash["items"] if i["name"] == "conv1.q" and i["what"] == "buffer")
    assert q["align"] == 256  # 0x70380900: 2304 = 9 * 256
    assert info["problems"] == []
    assert info["epochs"][0]["layer"] == "conv1" and info["epochs"][0]["epoch"] == 0
    assert [c["index"] for c in info["epochs"][0]["commands"]] == list(range(10))


def test_disasm_round_trip(blob, tmp_path, capsys):
    assert cli.main(["disasm", str(blob)]) == 0
    text = capsys.readouterr().out
    src = tmp_path / "again.s"
    src.write_text(text)
    assert cli.main(["asm", str(src), "-o", str(tmp_path / "again.npu")]) == 0
    assert (tmp_path / "again.npu").read_bytes() == blob.read_bytes()


def test_profile_options(blob, capsys):
    assert cli.main(["inspect", str(blob), "--set", "alignment.granule=64"]) == 0
    out = capsys.readouterr().out  # the blob stores 2 granules; on this profile they are 128 B
    assert "s1=128 " in out and "s1=2 (granule 64 B)" in out
    assert cli.main(["inspect", str(blob), "--set", "alignment.granule=3"]) == 2  # a bad argument, not a bad file
    err = capsys.readouterr().err
    assert err.startswith("npusim: error: --set alignment.granule=3:") and err.count("\n") == 1


def one_line_65(path):
    r = run(["inspect", path])
    assert r.returncode == 65, (r.returncode, r.stderr)
    assert r.stderr.startswith("npusim: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    return r.stderr


def test_bad_blobs_exit_65_with_one_line(blob, tmp_path):
    rnd = tmp_path / "random.npu"
    rnd.write_bytes(random.Random(7).randbytes(2000))
    assert "bad magic" in one_line_65(rnd)
    data = blob.read_bytes()
    trunc = tmp_path / "trunc.npu"
    trunc.write_bytes(data[: len(data) // 2])
    assert "truncated" in one_line_65(trunc)
    flip = tmp_path / "flip.npu"
    b = bytearray(data)
    b[len(b) // 3] ^= 0x10
    flip.write_bytes(bytes(b))
    assert "checksum mismatch" in one_line_65(flip)
    assert "no such file" in one_line_65(tmp_path / "nope.npu")


def test_usage_errors_exit_2(capsys):
    assert cli.main(["inspect"]) == 2
    assert cli.main(["frobnicate"]) == 2
    assert cli.main([]) == 2
    err = capsys.readouterr().err
    assert "npusim: error: inspect: the following arguments are required: blob" in err  # no double prefix


def test_asm_errors(tmp_path, capsys):
    src = tmp_path / "bad.s"
    src.write_text("EPOCH id=0\nSE engine=0\n")
    assert cli.main(["asm", str(src), "-o", str(tmp_path / "o.npu")]) == 65
    assert "line 2: SE: missing field" in capsys.readouterr().err
    src.write_text("EPOCH id=0\nEND\n")  # encodes, but RUN/WAIT are missing
    assert cli.main(["asm", str(src), "-o", str(tmp_path / "o.npu")]) == 65
    assert "fails verification" in capsys.readouterr().err
    assert cli.main(["asm", str(src), "-o", str(tmp_path / "o.npu"), "--no-verify"]) == 0
    assert cli.main(["inspect", str(tmp_path / "o.npu")]) == 65
    assert cli.main(["inspect", str(tmp_path / "o.npu"), "--no-verify"]) == 0
    assert "verifier: command 1 (END): END while an epoch is config" in capsys.readouterr().out


def test_internal_errors_are_one_line(monkeypatch, capsys):
    def boom(args):
        raise RuntimeError("kaput\nsecond line")

    monkeypatch.setitem(cli.SUBCOMMANDS, "boom", cli.Subcommand("boom", "explode", None, boom))
    monkeypatch.delenv("NPUSIM_DEBUG", raising=False)
    assert cli.main(["boom"]) == 1
    err = capsys.readouterr().err
    assert err == "npusim: internal error: RuntimeError: kaput second line\n"
    monkeypatch.setenv("NPUSIM_DEBUG", "1")
    assert cli.main(["boom"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_readme_quick_start_and_ci_agree():
    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = [b.split("\n", 1)[1].strip() for b in quick.split("```")[1::2]]
    assert blocks == ["python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/npusim demo",
                      "python3 -m venv .venv && .venv/bin/pip install '.[test]' && .venv/bin/python -m pytest -q -n auto "
                      "-m 'not slow'"]
    ci = (root / ".ci" / "run").read_text()
    assert "set -euo pipefail" in ci and "grep -m1 -F \"pip install '.[test]'\"" in ci
    # CI runs the README's command (the fast tests), then the rest in the same environment: together, every test
    assert 'slow=".venv/bin/python -m pytest -q -n auto -m slow"' in ci and 'bash -c "$slow"' in ci
    assert ci.index('bash -c "$cmd"') < ci.index('bash -c "$slow"')
    for code, _ in cli.EXIT_CODES:
        assert f"| {code} |" in readme
