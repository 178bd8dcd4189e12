"""The README's shown outputs, from a replay of the README itself: every ```sh and ```python block runs as
shown, in document order, in one fresh folder, and each output block the README marks with

    <!-- output: SOURCE[; SOURCE ...] -->

(right before a ``` block without a language, or before a Markdown table) is what those commands print.
A SOURCE is a command of an earlier ```sh block, by the start of its text (the last such command before
the block), then optionally `| stderr` (what it printed there; stdout by default) and `| lines SELECTION`,
or the name of a table built here (`table:NAME`).
A SELECTION is a comma list of line numbers (1-based, negative from the end), ranges `A..B` (either end
a number or a /regex/: the first matching line, the end's at or after the start), /regex/ (every
matching line) and /regex/:N (the first N); `...` stands where lines are left out.

    python scripts/readme_outputs.py            # rewrites the stale blocks, and the pictures (PICTURES)
    python scripts/readme_outputs.py --check    # exit 1, naming each stale block, if the README shows other output

Host-dependent numbers (wall time, throughput, host memory: VOLATILE) are compared as placeholders, so a
block is stale only where a number of the simulation differs; a rewritten block shows the new run's.
tests/test_readme.py replays the README with this module and compares every marked block.
Produced elsewhere: the ST Edge AI table (scripts/st_replay_table.py), the Speed table (scripts/bench.py),
the board tables (scripts/calibrate.py), the bit-exactness table (scripts/quantized_exactness.py) and
docs/report.png (scripts/report_screenshot.py).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TIMEOUT = 600  # per command: a guard against a hang

_BLOCK = re.compile(r"(?:<!--\s*(?P<kind>replay|output):\s*(?P<directive>[^>]*?)\s*-->\s*\n)?"
                    r"(?:```(?P<lang>[a-z]*)\n(?P<body>.*?)```|(?P<table>(?:\|[^\n]*\n)+))", re.S)
_EXITS = re.compile(r"#\s*exits\s+(\d+)\s*$")

# what a run prints that depends on the host, not on the simulation: wall time, throughput, host memory,
# the per-interval lines of --monitor
VOLATILE = [re.compile(p, re.M) for p in (
    r"[\d.,]+ s \([\d.,]+ inferences/s\)",
    r"^  host        RSS .*$",
    r"^\[ *[\d.]+ s\] .*$",
)]

# pictures the README shows, from files its commands write (or from a command of their own, with its exit
# code as in the README: `# exits N`), run in the replay's folder: {README path: (file in the folder, command)}
PICTURES = {
    "docs/sweep_yolo256.png": ("cost.png", None),
    "docs/sweep_yolo224.png": ("sweep224.png", "npusim sweep detector.onnx --mem-align 16,32,64,128,256 --no-progress "
                                               "--plot sweep224.png"),
    "docs/soak_leak.png": ("soak_leak.png", "npusim stress detector128.npu -n 200 --timing-only --plant leak-output=10 "
                                            "--plot soak_leak.png   # exits 4"),
}


@dataclass
class Block:
    lang: str           # sh, python, '' (output), 'table' (a Markdown table)
    body: str
    kind: str           # '' or the directive's kind: replay, output
    directive: str
    line: int           # README line of the body's first line
    span: tuple[int, int]  # [start, end) of the body in the text


@dataclass
class Ran:
    cmd: str
    code: int
    stdout: str
    stderr: str


@dataclass
class Replay:
    folder: Path
    commands: list[Ran] = field(default_factory=list)  # every shell command run, in order
    at: dict[int, int] = field(default_factory=dict)  # README line of a block -> commands run before it


def blocks(text: str) -> list[Block]:
    """The README's code blocks and Markdown tables, in order."""
    out = []
    for m in _BLOCK.finditer(text):
        if m.group("table") is not None:
            lang, name = "table", "table"
        else:
            lang, name = m.group("lang"), "body"
        out.append(Block(lang, m.group(name), m.group("kind") or "", (m.group("directive") or "").strip(),
                         text.count("\n", 0, m.start(name)) + 1, (m.start(name), m.end(name))))
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
        cmds.append((text, int(m.group(1)) if m else 0))
    return cmds


def environment() -> dict:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["MPLBACKEND"] = "Agg"
    # the folder of ST Edge AI Core outputs the README's examples use: the shared public compiles
    env["STEDGEAI"] = str(ROOT.parent / "shared" / "stedgeai")
    env.pop("NPUSIM_DEBUG", None)
    return env


def run_shell(cmd: str, folder: Path, env: dict) -> Ran:
    p = subprocess.run(cmd, shell=True, cwd=folder, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    return Ran(cmd, p.returncode, p.stdout, p.stderr)


def replay(text: str, folder: Path, env: dict | None = None, check=None) -> Replay:
    """Run the README's blocks in `folder`; `check(block, ran_or_None, expected_code, what)` is called after
    each command or python block (it may raise; by default a wrong exit code raises SystemExit)."""
    env = env or environment()
    rep = Replay(folder)

    def default_check(block, ran, expected, what):
        if ran.code != expected:
            raise SystemExit(f"README.md line {block.line}: `{what}` exited {ran.code}, README says {expected}\n"
                             f"{ran.stderr[-2000:]}")

    check = check or default_check
    for i, b in enumerate(blocks(text)):
        rep.at[b.line] = len(rep.commands)
        if b.kind == "replay" and b.directive.startswith("skip"):
            continue
        if b.lang == "sh":
            for cmd, code in shell_commands(b.body):
                ran = run_shell(cmd, folder, env)
                rep.commands.append(ran)
                check(b, ran, code, cmd)
        elif b.lang == "python":
            name = f"test_readme_block{i}.py" if b.directive == "pytest" else f"readme_block{i}.py"
            (folder / name).write_text(b.body, encoding="utf-8")
            if b.directive == "pytest":
                cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", name]
                if not (folder / "golden").exists():
                    cmd.append("--npusim-update-golden")  # the block's first run writes its snapshot
            else:
                cmd = [sys.executable, name]
            p = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=TIMEOUT)
            check(b, Ran(" ".join(cmd), p.returncode, p.stdout, p.stderr), 0, " ".join(cmd))
    return rep


# -- selections -------------------------------------------------------------------------------------

_ITEM = re.compile(r"\s*(?:(?P<a>-?\d+|/(?:[^/\\]|\\.)*/)?\s*(?P<range>\.\.)\s*(?P<b>-?\d+|/(?:[^/\\]|\\.)*/)?"
                   r"|(?P<one>-?\d+|/(?:[^/\\]|\\.)*/)(?::(?P<first>\d+))?)\s*(?:,|$)")


def _line_at(token: str | None, lines: list[str], start: int, default: int) -> int:
    if token is None:
        return default
    if token.startswith("/"):
        rx = re.compile(token[1:-1])
        for k in range(start, len(lines)):
            if rx.search(lines[k]):
                return k
        raise ValueError(f"no line matches {token} (from line {start + 1})")
    n = int(token)
    return n - 1 if n > 0 else len(lines) + n


def select(lines: list[str], selection: str) -> list[str]:
    """The lines `selection` keeps, in order, with `...` where lines are left out (not before the first)."""
    keep: set[int] = set()
    pos = 0
    while pos < len(selection):
        m = _ITEM.match(selection, pos)
        if not m or m.end() == pos:
            raise ValueError(f"bad selection at {selection[pos:]!r}")
        pos = m.end()
        if m.group("range"):
            a = _line_at(m.group("a"), lines, 0, 0)
            b = _line_at(m.group("b"), lines, a, len(lines) - 1)
            keep.update(range(a, b + 1))
        elif m.group("one").startswith("/"):
            rx = re.compile(m.group("one")[1:-1])
            hits = [k for k, line in enumerate(lines) if rx.search(line)]
            if not hits:
                raise ValueError(f"no line matches {m.group('one')}")
            keep.update(hits[:int(m.group("first"))] if m.group("first") else hits)
        else:
            keep.add(_line_at(m.group("one"), lines, 0, 0))
    out, last = [], None
    for k in sorted(k for k in keep if 0 <= k < len(lines)):
        if last is not None and k != last + 1:
            out.append("...")
        out.append(lines[k])
        last = k
    if last is not None and last != len(lines) - 1:
        out.append("...")
    return out


# -- tables built from several outputs ----------------------------------------------------------------

_POOL = re.compile(r"high-water ([\d,]+) B.*fragmentation [\d.]+% \(max ([\d.]+)%\), (\d+) allocs / (\d+) frees")
_TREND = re.compile(r"leak trend  [^:]+: ([+-][\d,.]+) B/run .*: (\w+)")


def _stress_row(label: str, out: str) -> str:
    pool, trend = _POOL.search(out), _TREND.search(out)
    if not pool or not trend:
        raise ValueError(f"no pool or leak trend line in the stress output for {label}")
    slope = re.sub(r"\.0$", "", trend.group(1)) if trend.group(2) != "flat" else ""
    verdict = f"{slope} B/run: {trend.group(2)}" if slope else trend.group(2)
    return (f"| {label} | {pool.group(3)} / {pool.group(4)} | {pool.group(1)} B | {float(pool.group(2)):.1f} % "
            f"| {verdict} |")


def table_stress_buffers(find) -> str:
    """The UNet loop's buffer strategies: one row per `stress --steps` run of the section."""
    rows = [("`per-run` (allocate/free every step)", "npusim stress unet.npu -n 6 --steps 8 --timing-only --buffers per-run"),
            ("`fixed` (allocated once, reused)", "npusim stress unet.npu -n 6 --steps 8 --timing-only --buffers fixed"),
            ("`per-run` + recycling bug (`leak-output=4`)",
             "npusim stress unet.npu -n 6 --steps 8 --timing-only --plant leak-output=4")]
    head = ["| buffers | allocs / frees | pool high-water | fragmentation (max) | leak trend |",
            "|---|---|---|---|---|"]
    return "\n".join(head + [_stress_row(label, find(cmd).stdout) for label, cmd in rows]) + "\n"


TABLES = {"stress-buffers": table_stress_buffers}


# -- shown blocks -------------------------------------------------------------------------------------

def _finder(rep: Replay, block: Block):
    def find(prefix: str) -> Ran:
        for ran in reversed(rep.commands[:rep.at[block.line]]):
            if _EXITS.sub("", ran.cmd).strip().startswith(prefix.strip()):
                return ran
        raise ValueError(f"README.md line {block.line}: no command before it starts with {prefix!r}")
    return find


def render(block: Block, rep: Replay) -> str:
    """The text an `output:` block shows, from the replay."""
    find = _finder(rep, block)
    parts = []
    for source in block.directive.split(";"):
        source = source.strip()
        if source.startswith("table:"):
            parts.append(TABLES[source[6:].strip()](find).rstrip("\n").split("\n"))
            continue
        cmd, _, selection = source.partition("| lines ")
        cmd, bar, _ = cmd.partition("| stderr")
        ran = find(cmd)
        lines = [line.rstrip() for line in (ran.stderr if bar else ran.stdout).rstrip("\n").split("\n")]
        parts.append(select(lines, selection) if selection.strip() else lines)
    return "\n".join(line for part in parts for line in part) + "\n"


def masked(text: str) -> str:
    """`text` with its host-dependent numbers as placeholders (a run of wholly volatile lines as one line:
    how many --monitor intervals a run spans depends on the host too)."""
    for rx in VOLATILE:
        text = rx.sub("\u2026", text)
    return re.sub(r"(?m)^\u2026\n(?:\u2026\n)+", "\u2026\n", text)


def stale(text: str, rep: Replay) -> list[tuple[Block, str]]:
    """(block, what a run shows) of every `output:` block whose simulated numbers differ from the run's."""
    out = []
    for b in blocks(text):
        if b.kind == "output":
            shown = render(b, rep)
            if masked(shown) != masked(b.body):
                out.append((b, shown))
    return out


def unmarked(text: str) -> list[Block]:
    """Output blocks (``` without a language) that name no source."""
    return [b for b in blocks(text) if b.lang == "" and b.kind != "output"]


def diff(block: Block, shown: str) -> str:
    return "".join(difflib.unified_diff(block.body.splitlines(True), shown.splitlines(True),
                                        f"README.md line {block.line}", "a run"))


def write_pictures(rep: Replay, env: dict) -> list[str]:
    written = []
    for target, (name, cmd) in PICTURES.items():
        for line, code in shell_commands(cmd or ""):
            ran = run_shell(line, rep.folder, env)
            if ran.code != code:
                raise SystemExit(f"{line} exited {ran.code}, expected {code}:\n{ran.stderr[-2000:]}")
        shutil.copyfile(rep.folder / name, ROOT / target)
        written.append(target)
    return written


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare only: exit 1 if the README shows other output")
    args = ap.parse_args()
    text = README.read_text(encoding="utf-8")
    env = environment()
    with tempfile.TemporaryDirectory(prefix="npusim-readme-") as tmp:
        rep = replay(text, Path(tmp), env)
        old = stale(text, rep)
        if args.check:
            for b, shown in old:
                print(diff(b, shown))
            return 1 if old else 0
        for b, shown in sorted(old, key=lambda t: -t[0].span[0]):
            text = text[:b.span[0]] + shown + text[b.span[1]:]
        README.write_text(text, encoding="utf-8")
        print(f"README.md: {len(old)} block(s) rewritten", flush=True)
        print(f"written: {', '.join(write_pictures(rep, env))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
