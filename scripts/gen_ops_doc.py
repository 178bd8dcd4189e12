#!/usr/bin/env python3
"""Run ONNX's operator conformance cases through npusim and write the tables of docs/ops.md.

    python scripts/gen_ops_doc.py           # rewrite the generated part of docs/ops.md
    python scripts/gen_ops_doc.py --check   # exit 1 if docs/ops.md is out of date

Only the text between the BEGIN/END markers is replaced. tests/test_conformance.py runs the same
cases and fails when the table differs from this file.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "ops.md"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/ops.md is out of date")
    ap.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from npusim.tools import conformance as C

    cases, out = C.collect()
    with tempfile.TemporaryDirectory() as cache:
        results = C.run_cases(cases, workers=args.workers, cache_dir=cache)
    text = C.splice(DOC.read_text(), C.render(results, out))
    if args.check:
        if text != DOC.read_text():
            print(f"{DOC} is out of date: run python scripts/gen_ops_doc.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
