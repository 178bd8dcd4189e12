"""The outputs the README shows in "Check a blob before you flash it" and "The cost of alignment", and the
sweep pictures, from fresh runs of the commands those sections give (the other shown outputs are not
generated here yet).

    python scripts/readme_outputs.py            # rewrites those README blocks and docs/sweep_yolo{224,256}.png
    python scripts/readme_outputs.py --check    # exit 1, naming the block, if the README shows other output

A shown block is the first output block (``` without a language) of its section; `check` shows the first
lines of its report, then `...`. docs/report.png comes from scripts/report_screenshot.py.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CHECK_LINES = 4  # the summary, a blank line, the first fault's two first lines


def npusim(args: list[str], cwd: Path, expect: int = 0) -> str:
    p = subprocess.run([sys.executable, "-m", "npusim", *args], cwd=cwd, capture_output=True, text=True)
    if p.returncode != expect:
        raise SystemExit(f"npusim {' '.join(args)} exited {p.returncode}, expected {expect}:\n{p.stderr}")
    return p.stdout


def shown_outputs(work: Path, pictures: bool) -> dict[str, str]:
    """{section heading: the text its output block shows}, from the README's own commands."""
    npusim(["zoo", "yolo_style", "size=224", "-o", "detector.onnx"], work)
    npusim(["compile", "detector.onnx", "--mem-align", "16", "-o", "detector.npu"], work)
    check = npusim(["check", "detector.npu", "--json", "check.json"], work, expect=139).splitlines()
    npusim(["zoo", "yolo_style", "size=256", "-o", "detector256.onnx"], work)
    plot = ["--plot", str(ROOT / "docs" / "sweep_yolo256.png")] if pictures else []
    sweep = npusim(["sweep", "detector256.onnx", "--mem-align", "16,32,64,128,256", "--csv", "cost.csv",
                    "--no-progress", *plot], work)
    if pictures:  # the 224 x 224 sweep the section links to, where 16/32/64 fault
        npusim(["sweep", "detector.onnx", "--mem-align", "16,32,64,128,256", "--no-progress",
                "--plot", str(ROOT / "docs" / "sweep_yolo224.png")], work)
    return {"## Check a blob before you flash it": "\n".join(check[:CHECK_LINES] + ["..."]) + "\n",
            "## The cost of alignment": "\n".join(line.rstrip() for line in sweep.splitlines()) + "\n"}


_FENCE = re.compile(r"^```([a-z]*)\n(.*?)^```$", re.S | re.M)


def output_block(text: str, heading: str) -> tuple[int, int]:
    """[start, end) of the body of the first output block (``` without a language) of the section `heading`."""
    at = text.index("\n" + heading + "\n")
    end_of_section = text.find("\n## ", at + 1)
    for m in _FENCE.finditer(text, at):
        if end_of_section != -1 and m.start() > end_of_section:
            break
        if not m.group(1):
            return m.start(2), m.end(2)
    raise SystemExit(f"README: no output block in {heading!r}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare only: exit 1 if the README differs")
    args = ap.parse_args()
    text = README.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="npusim-readme-") as tmp:
        outputs = shown_outputs(Path(tmp), pictures=not args.check)
    stale = []
    for heading, body in outputs.items():
        start, end = output_block(text, heading)
        if text[start:end] != body:
            stale.append(heading)
            text = text[:start] + body + text[end:]
    if args.check:
        for heading in stale:
            print(f"README.md {heading!r}: the shown output differs from a run (python scripts/readme_outputs.py)")
        return 1 if stale else 0
    README.write_text(text, encoding="utf-8")
    print(f"README.md: {len(stale)} block(s) rewritten; docs/sweep_yolo224.png and docs/sweep_yolo256.png written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
