"""HTML report pages of runs, sweeps and bisects: from results to `npusim.report` pages.

    html = run_html(result)                      # a RunResult, or its report_json() dict
    doc = load_run_report("report.json")         # a saved `npusim run --json` report, checked
    html = saved_report_html("report.json")      # its page
    html = sweep_html([("224x224", sweep_result)])
    html = bisect_html(bisect_report, page_dir)  # also writes a report page per reproducer blob

Every page is one self-contained file: no network, styles and scripts inline.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path

from ..errors import InvalidInputError
from ..report import render_bisect, render_run, render_sweep, run_problems
from ..report.charts import page_svg

MAX_REPORT_BYTES = 256 << 20  # a saved run report larger than this is refused


def run_html(result, title: str | None = None, charts: bool = True) -> str:
    """The page of a run: `result` is a RunResult (or a list of them for contexts: pass the dict
    `{"contexts": {name: report}}` instead) or a report dict."""
    doc = result if isinstance(result, dict) else result.report_json()
    return render_run(doc, title or "npusim run report", charts=charts)


def load_run_report(path: str | Path) -> dict:
    """A saved run report (`npusim run --json`), checked; InvalidInputError names the problem."""
    p = Path(path)
    try:
        size = p.stat().st_size
    except FileNotFoundError:
        raise InvalidInputError(f"{path}: no such file") from None
    except OSError as e:
        raise InvalidInputError(f"{path}: cannot read ({e.strerror or e})") from None
    if p.is_dir():
        raise InvalidInputError(f"{path}: is a directory, not a run report")
    if size > MAX_REPORT_BYTES:
        raise InvalidInputError(f"{path}: {size:,} bytes, more than the {MAX_REPORT_BYTES >> 20} MiB a run report may have")
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidInputError(f"{path}: cannot read ({e})") from None
    except json.JSONDecodeError as e:
        raise InvalidInputError(f"{path}: not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    if isinstance(doc, dict) and doc.get("source") == "stedgeai":  # the replay of an ST output
        need = {"status": str, "cycles": int, "ms": (int, float), "epochs_table": list, "fault_text": str}
        bad = [k for k, t in need.items() if not isinstance(doc.get(k), t)]
        if bad:
            raise InvalidInputError(f"{path}: not an ST replay report (missing or malformed: {', '.join(bad)})")
        return doc
    probs = run_problems(doc)
    if probs:
        raise InvalidInputError(f"{path}: {probs[0]}")
    return doc


def saved_report_html(path: str | Path, title: str | None = None) -> str:
    """The page of a saved run report (`npusim report`). A report that passes the checks of
    `load_run_report` but still holds values the page cannot show (a hand-edited file, say) is an
    InvalidInputError naming the file, not a crash."""
    doc = load_run_report(path)
    try:
        if doc.get("source") == "stedgeai":
            from ..report.st_page import st_run_page
            return st_run_page(doc, title or f"npusim run report: {Path(path).name}")
        return run_html(doc, title or f"npusim run report: {Path(path).name}")
    except (AttributeError, KeyError, IndexError, TypeError, ValueError, OverflowError) as e:
        raise InvalidInputError(f"{path}: malformed run report ({type(e).__name__}: {e})") from None


def sweep_plot_svg(result, title: str | None = None, heatmap: bool = True) -> str:
    """`plot_sweep`'s figure of a SweepResult as an inline <svg> element."""
    import matplotlib

    from .plots import plot_sweep

    with tempfile.TemporaryDirectory(prefix="npusim-plot-") as tmp:
        path = Path(tmp) / "sweep.svg"
        with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "npusim"}):
            plot_sweep(result, path, heatmap=heatmap, title=title)
        text = path.read_text(encoding="utf-8")
    return page_svg(text)


def sweep_html(sweeps, title: str = "npusim sweep report", heatmap: bool = True) -> str:
    """The page of one or more sweeps: `sweeps` = [(title or None, SweepResult)]."""
    sections = []
    for name, res in sweeps:
        sections.append({"title": name or f"cost vs {res.param}", "param": res.param,
                         "points": [dataclasses.asdict(p) for p in res.points],
                         "plot_svg": sweep_plot_svg(res, title=name, heatmap=heatmap)})
    return render_sweep(sections, title)


def _rel(target: str | Path, page_dir: Path) -> str:
    return Path(os.path.relpath(Path(target).resolve(), page_dir.resolve())).as_posix()


def bisect_html(report, page_dir: str | Path, profile=None, title: str = "npusim bisect report") -> str:
    """The page of a BisectReport, to be written in `page_dir`. Each faulting operator's reproducer
    blob is run (timing-only, seeded random inputs) and its report page written beside it
    (`repro_X.html`); the page links to both and to the reproducer's ONNX file."""
    from ..runtime import RunOptions, run

    page_dir = Path(page_dir)
    doc = dataclasses.asdict(report)
    pages = {}
    for f, fd in zip(report.findings, doc["findings"]):
        fd["reproducer_links"] = {kind: _rel(path, page_dir) for kind, path in f.reproducer.items()}
        blob = f.reproducer.get("blob")
        if not blob:
            continue
        res = run(blob, options=RunOptions(timing_only=True, trace=False), profile=profile, random_inputs=True, seed=0)
        out = Path(blob).with_suffix(".html")
        out.write_text(run_html(res, f"npusim reproducer of {f.op_type} {f.node}: {Path(blob).name}", charts=False),
                       encoding="utf-8")
        pages[f.node] = _rel(out, page_dir)
    return render_bisect(doc, pages, title)
