"""Self-contained HTML report pages (no network: styles and scripts inline) from plain data.

`render_run(doc)` turns a run's JSON report (`RunResult.report_json()`, or the
`{"contexts": {...}}` report of `npusim run --context`) into a page; `run_problems(doc)` says
why a loaded JSON document is not such a report. `render_sweep` and `render_bisect` make the
pages of `npusim sweep --html` and `npusim bisect --html` from their results as plain data.
Charts are matplotlib SVG inline; the memory map is an SVG diagram drawn here.
"""

from .run_page import problems as run_problems
from .run_page import render_run
from .workflow_pages import render_bisect, render_sweep

__all__ = ["render_bisect", "render_run", "render_sweep", "run_problems"]
