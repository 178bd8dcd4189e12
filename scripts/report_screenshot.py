"""Screenshot of the demo's report page for the README: `npusim demo`'s report.html (the run that
faults at --mem-align 16), from its top to the end of the memory map, in headless Chromium.

    python scripts/report_screenshot.py                 # writes docs/report.png
    python scripts/report_screenshot.py -o /tmp/r.png

Needs Debian's chromium (/usr/bin/chromium, or NPUSIM_CHROMIUM) and the `playwright` package.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", default=str(ROOT / "docs" / "report.png"))
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    from npusim.tools.demo import run_demo

    chromium = os.environ.get("NPUSIM_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        run_demo(Path(tmp) / "demo", out=io.StringIO(), quick=True)
        ctx = pw.chromium.launch_persistent_context(str(Path(tmp) / "profile"), executable_path=chromium,
                                                    headless=True, args=FLAGS, offline=True,
                                                    viewport={"width": 1400, "height": 1000})
        page = ctx.new_page()
        page.goto((Path(tmp) / "demo" / "report.html").as_uri(), wait_until="load")
        box = page.locator("#memory").bounding_box()
        page.screenshot(path=args.output, full_page=True,
                        clip={"x": 0, "y": 0, "width": 1400, "height": box["y"] + box["height"] + 12})
        ctx.close()
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
