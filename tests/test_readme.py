"""The README replays: every ```sh and ```python block runs as shown, in document order, in one
fresh folder, with the installed `npusim` on PATH (the files a block needs come from the blocks
before it, e.g. `npusim zoo`).

A shell line may end in `# exits N` (the exit code it documents); otherwise it must exit 0.
An HTML comment right before a block changes how it is replayed:
    <!-- replay: skip REASON -->     not run (the reason is required, e.g. it is the CI itself)
    <!-- replay: pytest -->          a test file: written out and run with pytest
Output blocks (``` without a language) are not run.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
_BLOCK = re.compile(r"(?:<!--\s*replay:\s*(?P<directive>[^>]*?)\s*-->\s*\n)?```(?P<lang>[a-z]*)\n(?P<body>.*?)```",
                    re.S)
_EXITS = re.compile(r"#\s*exits\s+(\d+)\s*$")
TIMEOUT = 600  # per command


def blocks(text: str) -> list[dict]:
    """[{lang, body, directive, line}] of the README's code blocks, in order."""
    out = []
    for m in _BLOCK.finditer(text):
        out.append({"lang": m.group("lang"), "body": m.group("body"), "directive": (m.group("directive") or "").strip(),
                    "line": text.count("\n", 0, m.start("body")) + 1})
    return out


def shell_commands(body: str) -> list[tuple[str, int]]:
    """(command, expected exit code) per logical line (backslash continuations joined)."""
    cmds, cur = [], ""
    for raw in body.splitlines():
        line = raw.rstrip()
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        cur += line
        text = cur.strip()
        cur = ""
        if not text or text.startswith("#"):
            continue
        m = _EXITS.search(text)
        code = int(m.group(1)) if m else 0
        cmds.append((text, code))
    return cmds


def test_parser_reads_directives_and_exit_codes():
    text = "a\n<!-- replay: skip it is CI -->\n```sh\nx\n```\n```sh\nnpusim run a \\\n  b   # exits 139\n```\n"
    bl = blocks(text)
    assert [b["directive"] for b in bl] == ["skip it is CI", ""]
    assert shell_commands(bl[1]["body"]) == [("npusim run a    b   # exits 139", 139)]


def _env(tmp: Path) -> dict:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["MPLBACKEND"] = "Agg"
    # the folder of ST Edge AI Core outputs the README's examples use: the shared public compiles
    env["STEDGEAI"] = str(Path(__file__).resolve().parents[2] / "shared" / "stedgeai")
    env.pop("NPUSIM_DEBUG", None)
    return env


@pytest.mark.slow
def test_readme_replays(tmp_path):
    env = _env(tmp_path)
    ran = 0
    for i, b in enumerate(blocks(README.read_text(encoding="utf-8"))):
        where = f"README.md line {b['line']}"
        directive = b["directive"]
        if directive.startswith("skip"):
            assert directive[4:].strip(), f"{where}: a skipped block needs a reason"
            continue
        if b["lang"] == "sh":
            for cmd, code in shell_commands(b["body"]):
                p = subprocess.run(cmd, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True,
                                   timeout=TIMEOUT)
                assert p.returncode == code, (f"{where}: `{cmd}` exited {p.returncode}, README says {code}\n"
                                              f"{p.stderr[-2000:]}")
                assert "Traceback" not in p.stderr, f"{where}: `{cmd}` printed a traceback\n{p.stderr[-2000:]}"
                ran += 1
        elif b["lang"] == "python":
            if directive == "pytest":
                f = tmp_path / f"test_readme_block{i}.py"
                f.write_text(b["body"], encoding="utf-8")
                cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f.name]
                if not (tmp_path / "golden").exists():
                    cmd.append("--npusim-update-golden")  # the block's first run writes its snapshot
            else:
                f = tmp_path / f"readme_block{i}.py"
                f.write_text(b["body"], encoding="utf-8")
                cmd = [sys.executable, f.name]
            p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT)
            assert p.returncode == 0, f"{where}: {shlex.join(cmd)} failed\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
            ran += 1
    assert ran >= 5


@pytest.mark.slow
def test_readme_shows_the_outputs_a_run_gives():
    """The shown outputs of "Check a blob before you flash it" and "The cost of alignment" are what the
    commands print now (scripts/readme_outputs.py writes them)."""
    script = README.parent / "scripts" / "readme_outputs.py"
    p = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=TIMEOUT,
                       env=_env(README.parent))
    assert p.returncode == 0, p.stdout + p.stderr[-2000:]
