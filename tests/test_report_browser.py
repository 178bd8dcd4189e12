"""The report pages in a real browser: Debian's headless Chromium driven by Playwright, offline.

The page of the demo's fault (YOLO-style detector, --mem-align 16) must render with no console
error and no request outside the file, and show the fault marker, the faulting buffer's block
and the runs that overrun it into the neighbouring buffer, at the right place. A screenshot is
kept in the test's temporary folder (its path is printed). `.ci/run` installs Chromium; the test
is skipped, with the reason, only where no Chromium or Playwright can be had.
"""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from npusim import zoo
from npusim.compiler import CompileOptions, compile
from npusim.report.charts import timeline_bars
from npusim.runtime import RunOptions, run
from npusim.tools.demo import DEMO_SIZE
from npusim.tools.html_report import run_html, sweep_html
from npusim.tools.sweep import sweep

CHROMIUM = os.environ.get("NPUSIM_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
# as root in a closed network: no sandbox, and nothing that phones home at start
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser_page():
    """A function that opens a file in a fresh offline Chromium page and returns (page, problems)."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install '.[test]')")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM}: install Debian's chromium package (.ci/run does)")
    with sync_api.sync_playwright() as pw, tempfile.TemporaryDirectory(prefix="npusim-chromium-") as profile_dir:
        ctx = pw.chromium.launch_persistent_context(profile_dir, executable_path=CHROMIUM, headless=True, args=FLAGS,
                                                    viewport={"width": 1400, "height": 1000}, offline=True)

        def open_page(path: Path):
            page = ctx.new_page()
            problems = []
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on("request", lambda r: None if r.url.startswith(("file:", "data:")) else
                    problems.append(f"request: {r.url}"))
            page.goto(path.resolve().as_uri(), wait_until="load")
            return page, problems

        yield open_page
        ctx.close()


@pytest.fixture(scope="module")
def demo_fault():
    """The demo's faulting run: the YOLO-style detector compiled with a 16 B alignment."""
    prog = compile(zoo.yolo_style(size=DEMO_SIZE), CompileOptions(mem_align=16))
    res = run(prog, random_inputs=True, seed=0, options=RunOptions(trace=False))
    assert res.faults and res.faults[0].cls == "buffer-overflow"
    return res


# whether the browser draws a point of a bar: hit testing honours the clip path its chart gives it
_DRAWN = """([id, k]) => {
    const bar = document.getElementById(id).querySelectorAll('path')[k];
    bar.scrollIntoView({block: 'center'});
    const b = bar.getBoundingClientRect();
    const hit = document.elementFromPoint(b.x + b.width / 2, b.y + b.height / 2);
    return [b.width, hit === bar || bar.contains(hit)];
}"""


def assert_last_bars_drawn(page, doc, rows=("CA", "ACT")):
    """The last bar of every timeline row is drawn (where it is wide enough to hit), the run's last bar always:
    charts used to share clip-path ids, so the timeline was clipped to the first chart's axes (its end and
    its lower rows were not drawn). `rows`: kinds of units of which some row must be checked."""
    bars = timeline_bars(doc["stats"]["epochs"])
    last = max(bars, key=lambda t: bars[t][-1][0] + bars[t][-1][1])
    checked = []
    for track, items in bars.items():
        gid = page.eval_on_selector(f'#timeline svg g[id$="track-{track}"]', "g => g.id")
        width, drawn = page.evaluate(_DRAWN, [gid, len(items) - 1])
        if width >= 2 or track == last:
            assert drawn, f"the timeline's last {track} bar (ends at cycle {items[-1][0] + items[-1][1]:,.0f}) is not drawn"
            checked.append(track)
    assert last in checked and all(any(t.startswith(kind) for t in checked) for kind in rows), checked


def test_the_demo_fault_shows_the_overrun_on_the_memory_map(browser_page, demo_fault, tmp_path):
    doc = demo_fault.report_json()
    fault = doc["faults"][0]
    html_path = tmp_path / "report.html"
    html_path.write_text(run_html(doc, "npusim run: the demo's fault"), encoding="utf-8")
    page, problems = browser_page(html_path)
    for sel in ("#fault-marker", "#faulting-block", "#memmap-zoom", "#faulting-block-zoom", "#fault-marker-zoom",
                "#faulting-run", "pre.sanitizer", "#layers-table", "#banks-table"):
        page.locator(sel).scroll_into_view_if_needed()
        assert page.locator(sel).is_visible(), sel
    assert page.get_attribute("#faulting-block", "data-name") == fault["region"]["name"]
    assert f"0x{fault['address']:08x}" in page.inner_text("#fault")
    # at scale: the first bad byte lies 0 B after the buffer, so the marker sits on the block's right edge
    if fault["relation"] == {"where": "after", "offset": 0}:
        block = page.locator("#faulting-block-zoom rect").bounding_box()
        marker = page.locator("#fault-marker-zoom line").bounding_box()
        assert abs(marker["x"] + marker["width"] / 2 - (block["x"] + block["width"])) < 3
    # the faulting run crosses the buffer's end: part of it is drawn outside (red), into the neighbour
    out = page.locator('#faulting-run rect[fill="#d62728"]')
    assert out.count() >= 1 and out.first.is_visible()
    neighbour = page.locator('#memmap-zoom g.region:not(.faulting)')
    assert neighbour.count() >= 1 and neighbour.first.is_visible()
    # the tables sort on a click; the overview zooms
    cycles_col = page.locator("#layers-table thead th", has_text="cycles").first
    cycles_col.click()
    col = [h.inner_text() for h in page.locator("#layers-table thead th").all()].index(cycles_col.inner_text().strip())
    keys = [float(v) for v in page.eval_on_selector_all(
        f"#layers-table tbody tr td:nth-child({col + 1})", "tds => tds.map(td => td.getAttribute('data-v'))")]
    assert keys == sorted(keys)
    before = page.locator("#memmap-overview svg").first.bounding_box()["width"]
    page.locator("input.zoom").fill("8")
    assert page.locator("#memmap-overview svg").first.bounding_box()["width"] > 4 * before
    page.locator("input.zoom").fill("1")
    assert_last_bars_drawn(page, doc)
    assert_fits(page)
    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    page.locator("#memory").screenshot(path=str(tmp_path / "memory_map.png"))
    print(f"screenshots: {shot} and {tmp_path / 'memory_map.png'}")
    assert shot.stat().st_size > 10_000
    assert problems == []


_WIDTHS = """() => [[document.documentElement.scrollWidth, document.documentElement.clientWidth, 'the page']].concat(
    Array.from(document.querySelectorAll('.scroll')).map(s => [s.scrollWidth, s.clientWidth, s.firstElementChild.id]))"""


def assert_fits(page):
    """Neither the page nor a table scrolls sideways (in the test's 1400 px window)."""
    wide = [w for w in page.evaluate(_WIDTHS) if w[0] > w[1]]
    assert not wide, f"wider than the window (scroll width, width, what): {wide}"


def test_a_run_page_with_every_per_layer_column_fits_1400_px(browser_page, tmp_path):
    """TFLite layer names, every stall cause, a CPU epoch and weights in hyperRAM (a pool column more): the
    per-layer table ran 1,100 px past the window (21 columns); time and memory traffic are now two tables."""
    import npusim
    from npusim.zoo.tflite import tflite_model

    prog = npusim.compile(bytes(tflite_model(name="mobilenet_style", size=64)),
                          CompileOptions(mem_align=16, weights_pool="hyperRAM"))
    doc = run(prog, random_inputs=True, seed=0, options=RunOptions(trace=False, keep_going=True)).report_json()
    layers = doc["stats"]["layers"]
    assert {"host", "compute", "external_bandwidth"} <= {c for ly in layers for c in ly["stall_cycles"]}
    assert {"hyperRAM", "npuRAM3"} <= {p for ly in layers for p in ly["pools"]}
    path = tmp_path / "report.html"
    path.write_text(run_html(doc, "npusim run: every column"), encoding="utf-8")
    page, problems = browser_page(path)
    assert page.locator("#layers-table tbody tr").count() == len(layers)
    assert page.locator("#layers-memory-table tbody tr").count() == len(layers)
    assert_fits(page)
    assert problems == []


def test_a_clean_runs_timeline_is_drawn_to_its_end(browser_page, tmp_path):
    prog = compile(zoo.yolo_style(size=DEMO_SIZE), CompileOptions(mem_align=128))
    doc = run(prog, random_inputs=True, seed=0, options=RunOptions(trace=False, timing_only=True)).report_json()
    assert doc["status"] == "ok"
    path = tmp_path / "report.html"
    path.write_text(run_html(doc, "npusim run: the demo's fix"), encoding="utf-8")
    page, problems = browser_page(path)
    assert_last_bars_drawn(page, doc, rows=("CA",))  # its ACT bars are a pixel wide
    assert problems == []


def test_the_sweep_page_renders(browser_page, tmp_path):
    res = sweep(zoo.conv_model(cin=16, cout=16, h=52, w=52), "mem_align", [16, 128], progress=False)
    path = tmp_path / "sweep.html"
    path.write_text(sweep_html([("conv 52x52", res)]), encoding="utf-8")
    page, problems = browser_page(path)
    assert page.locator("#sweep-0 svg").first.is_visible()
    assert page.locator("#sweep-0-points tbody tr").count() == 2
    assert page.locator("#sweep-0-points tr.fault").count() == 1
    page.screenshot(path=str(tmp_path / "sweep.png"), full_page=True)
    assert problems == []


def test_the_bisect_page_of_a_tflite_model_fits_1400_px(browser_page, tmp_path):
    """TFLite operators are named by their tensors (over a hundred characters, no spaces): the page used to
    run 1,100 px past the window's edge."""
    from npusim.report.workflow_pages import render_bisect

    stem = "mobilenet_v1_alpha_0.25"

    def name(i):
        return f"{stem}/conv_dw_{i}_relu/Relu6;{stem}/conv_dw_{i}_bn/FusedBatchNormV3;{stem}/conv_dw_{i}/depthwise"

    fault = {"status": "fault", "fault": f"buffer-overflow 0 B after '{name(0)}' (SE0, read)", "why": "strides"}
    findings = [{"node": name(i), "op_type": "DEPTHWISE_CONV_2D", "shape": "1x12x12x64",
                 "outcome": fault if i % 2 else {"status": "ok", "fault": ""}, "minimal": "",
                 "clean_alignments": [128, 256] if i % 2 else [], "reproducer_links": {}} for i in range(8)]
    report = {"verdict": "compiler layout", "model_outcome": fault, "findings": findings}
    path = tmp_path / "bisect.html"
    path.write_text(render_bisect(report), encoding="utf-8")
    page, problems = browser_page(path)
    widths = page.evaluate("""() => { const s = document.querySelector('#bisect-table').parentElement;
        return [document.documentElement.scrollWidth, document.documentElement.clientWidth, s.scrollWidth, s.clientWidth]; }""")
    assert widths[0] <= widths[1] and widths[2] <= widths[3], widths  # neither the page nor the table scrolls
    assert problems == []
