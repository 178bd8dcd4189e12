"""The README replays (scripts/readme_outputs.py): every ```sh and ```python block runs as shown, in
document order, in one fresh folder, with the installed `npusim` on PATH (the files a block needs come from
the blocks before it, e.g. `npusim zoo`), and every output block shows what its commands print now.

A shell line may end in `# exits N` (the exit code it documents); otherwise it must exit 0.
An HTML comment right before a block changes how it is replayed:
    <!-- replay: skip REASON -->     not run (the reason is required, e.g. it is the CI itself)
    <!-- replay: pytest -->          a test file: written out and run with pytest
    <!-- output: SOURCE -->          the output block (or table) a command printed: compared with the replay
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# shown outputs that are not marked yet: that section's owner produces them (the ST compiles are replayed)
NOT_MARKED: dict[str, int] = {}


def _module():
    spec = importlib.util.spec_from_file_location("readme_outputs", ROOT / "scripts" / "readme_outputs.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses resolve their module
    spec.loader.exec_module(mod)
    return mod


ro = _module()


def test_parser_reads_directives_and_exit_codes():
    text = ("a\n<!-- replay: skip it is CI -->\n```sh\nx\n```\n```sh\nnpusim run a \\\n  b   # exits 139\n```\n"
            "<!-- output: npusim run a | lines 1..2, /^S/ -->\n```\nout\n```\n<!-- output: table:t -->\n| a |\n|---|\n")
    bl = ro.blocks(text)
    assert [(b.kind, b.directive, b.lang) for b in bl] == [
        ("replay", "skip it is CI", "sh"), ("", "", "sh"), ("output", "npusim run a | lines 1..2, /^S/", ""),
        ("output", "table:t", "table")]
    assert ro.shell_commands(bl[1].body) == [("npusim run a    b   # exits 139", 139)]
    assert text[slice(*bl[3].span)] == "| a |\n|---|\n"


def test_a_selection_keeps_its_lines_and_marks_what_it_leaves_out():
    lines = ["head", "a1", "a2", "x", "b", "tail1", "tail2"]
    assert ro.select(lines, "1..2, -2..") == ["head", "a1", "...", "tail1", "tail2"]
    assert ro.select(lines, "/^a/../x/, /^b/") == ["a1", "a2", "x", "b", "..."]
    assert ro.select(lines, "/^a/:1, 5") == ["a1", "...", "b", "..."]
    with pytest.raises(ValueError, match="no line matches"):
        ro.select(lines, "/^nothing/")


def test_only_host_dependent_numbers_are_masked():
    shown = "x; 4.9 s (4.1 inferences/s)\n[     0.5 s] runs 12\n[     1.0 s] runs 49\n  cycles 2,916,613\n"
    run = "x; 23.3 s (0.9 inferences/s)\n[     0.5 s] runs 0\n  cycles 2,916,613\n"
    assert ro.masked(shown) == ro.masked(run)
    assert ro.masked(shown) != ro.masked(run.replace("2,916,613", "2,798,025"))


def test_every_shown_output_names_its_source():
    text = README.read_text(encoding="utf-8")
    missing: dict[str, int] = {}
    for b in ro.unmarked(text):
        heading = [h for h in text[:b.span[0]].splitlines() if h.startswith("## ")][-1]
        missing[heading] = missing.get(heading, 0) + 1
    assert missing == NOT_MARKED, f"output blocks without <!-- output: SOURCE --> per section: {missing}"


@pytest.mark.slow(cpu_s=125)  # from the suite's per-test CPU seconds: it starts first in CI's slow step
def test_readme_replays_and_shows_what_a_run_prints(tmp_path):
    def check(block, ran, expected, what):
        where = f"README.md line {block.line}"
        assert ran.code == expected, f"{where}: `{what}` exited {ran.code}, README says {expected}\n{ran.stderr[-2000:]}"
        assert "Traceback" not in ran.stderr, f"{where}: `{what}` printed a traceback\n{ran.stderr[-2000:]}"

    text = README.read_text(encoding="utf-8")
    rep = ro.replay(text, tmp_path, ro.environment(), check)
    assert len(rep.commands) >= 5
    stale = ro.stale(text, rep)
    assert not stale, ("the README shows other numbers than a run (python scripts/readme_outputs.py rewrites them):\n"
                       + "\n".join(ro.diff(b, shown) for b, shown in stale))
