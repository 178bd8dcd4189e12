"""The CLI fuzz campaign (tests/fuzz_cli.py) as a test: every mutant ends in 0, 2, 65 or 139 with
one clear line, within a time bound, and the campaign stays inside a memory limit."""

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

DRIVER = Path(__file__).with_name("fuzz_cli.py")
MEMORY_LIMIT = 6 << 30  # address space of the campaign process (numba/LLVM reserve some of it)


def _limit():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


@pytest.mark.slow
@pytest.mark.parametrize("kind,cases", [("blob", 150), ("asm", 100), ("onnx", 150)])
def test_fuzz_campaign(tmp_path, kind, cases):
    p = subprocess.run([sys.executable, str(DRIVER), str(tmp_path), "2026", str(cases), kind],
                       capture_output=True, text=True, timeout=900, preexec_fn=_limit)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "findings.jsonl").read_text().splitlines()]
    summary = rows[-1]["summary"]
    findings = rows[:-1]
    assert summary["cases"] >= cases
    assert not findings, "\n".join(f"{f['finding']}: {' '.join(f['argv'])}: {f['stderr'][:2]}" for f in findings[:10])


def test_findings_are_classified():
    sys.path.insert(0, str(DRIVER.parent))
    from fuzz_cli import problem

    def case(code, *stderr):
        return {"code": code, "stderr": list(stderr)}

    assert problem(case(0)) is None and problem(case(139)) is None
    assert problem(case(65, "npusim: error: bad blob")) is None
    assert problem(case(0, "npusim: no --input for 'x': seeded random")) is None
    assert problem(case(1, "npusim: internal error: KeyError")) == "exit 1"
    assert problem(case("timeout")) == "exit timeout"
    assert problem(case(65)) and problem(case(65, "npusim: error: a", "npusim: error: b"))
    assert problem(case(65, "npusim: error: a", "[E:onnxruntime:...]")) == "stray stderr output"
