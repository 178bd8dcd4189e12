"""HTML reports: what the saved JSON holds for them, the pages of run / report / sweep / bisect,
self-containment, determinism, and the error paths of the commands that write them."""

import json
import re
from pathlib import Path

import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npusim import zoo
from npusim.cli import main
from npusim.compiler import CompileOptions, compile
from npusim.errors import InvalidInputError
from npusim.faults import RUNS_WINDOW, render_text, validate_fault_json
from npusim.hw import load_profile
from npusim.program.blob import encode_blob
from npusim.report.memmap_svg import overrun_targets
from npusim.runtime import RunOptions, run
from npusim.tools.bisect import bisect
from npusim.tools.html_report import bisect_html, run_html, saved_report_html, sweep_html
from npusim.tools.sweep import sweep

PROF = load_profile()


@pytest.fixture(scope="module")
def faulting(tmp_path_factory):
    """A 16-channel 52x52 conv compiled with 16 B alignment: its 832 B lines are walked at 896 B."""
    d = tmp_path_factory.mktemp("report")
    model = zoo.conv_model(cin=16, cout=16, h=52, w=52)
    onnx.save(model, d / "conv.onnx")
    prog = compile(model, CompileOptions(mem_align=16))
    (d / "a16.npu").write_bytes(encode_blob(prog, PROF))
    res = run(prog, random_inputs=True, seed=0)
    assert res.faults
    return {"dir": d, "program": prog, "result": res, "doc": res.report_json()}


def _items(doc):
    return [it for pool in doc["memory_map"] for it in pool["items"]]


def test_report_json_holds_the_memory_map_the_access_and_the_banks(faulting):
    prog, res, doc = faulting["program"], faulting["result"], faulting["doc"]
    f = doc["faults"][0]
    assert validate_fault_json(f) == []
    # the access as the hardware walked it, and a bounded window of its runs around the faulting run
    p, runs = f["pattern"], f["runs"]
    assert runs["total"] == p["n1"] * p["n2"] * p["n3"] and 0 < len(runs["starts"]) <= RUNS_WINDOW
    k = f["details"]["run"]
    assert runs["first"] <= k < runs["first"] + len(runs["starts"])
    start = runs["starts"][k - runs["first"]]
    assert start == f["details"]["run_start"] and start <= f["address"] < start + p["run"]
    assert runs["starts"][1] - runs["starts"][0] == p["s1"] != f["region"]["size"] // (p["n1"] * p["n2"])
    # the memory map: every buffer of the plan at its address, with the buffer table's fields
    by_name = {it["name"]: it for it in _items(doc)}
    for b in prog.buffers:
        it = by_name[b.name]
        assert it["start"] == b.address(PROF) and it["size"] == b.size and it["line_stride"] == b.line_stride
    region = by_name[f["region"]["name"]]
    assert region["live"][0] <= f["command"] <= region["live"][1]
    assert any(it["kind"] == "guard" for it in by_name.values())
    assert doc["blob"]["isa_version"] == prog.header.isa_version and doc["blob"]["compiler"] == prog.header.compiler
    assert doc["fault_text"] == render_text(res.faults)
    json.dumps(doc)  # plain JSON throughout


@pytest.mark.parametrize("weights_pool", ["octoFlash", "hyperRAM"])
def test_bytes_per_bank_add_up_to_the_bytes_per_pool(weights_pool):
    prog = compile(zoo.yolo_style(size=64), CompileOptions(mem_align=128, weights_pool=weights_pool))
    stats = run(prog, random_inputs=True, options=RunOptions(timing_only=True, trace=False)).report_json()["stats"]
    assert set(stats["bank_bytes"]) == {"npuRAM3", weights_pool}
    for pool, per_bank in stats["bank_bytes"].items():
        assert len(per_bank) == PROF.pool_named(pool).banks and sum(per_bank) == stats["pools"][pool]
    for ly in stats["layers"]:
        assert all(sum(v) == ly["pools"][k] for k, v in ly["bank_bytes"].items())
        for e in (e for e in stats["epochs"] if e["layer"] == ly["name"]):
            assert all(sum(v) <= ly["pools"][k] for k, v in e["bank_bytes"].items())


def test_run_page_draws_the_overrun_on_the_memory_map(faulting):
    doc = faulting["doc"]
    f = doc["faults"][0]
    html = run_html(faulting["result"])
    for ident in ("fault-marker", "faulting-block", "faulting-block-zoom", "fault-marker-zoom", "faulting-run",
                  "layers-table"):
        assert f'id="{ident}"' in html, ident
    block = re.search(r'<g class="region faulting[^"]*" data-name="([^"]+)" id="faulting-block"', html)
    assert block and block.group(1) == f["region"]["name"]
    assert f"first bad byte 0x{f['address']:08x}" in html
    assert "ERROR: NPUSanitizer: buffer-overflow" in html and "<svg" in html
    # the runs outside the region are drawn in red; the neighbour it runs into is named with its bytes
    assert 'fill="#d62728"' in html
    hits = overrun_targets(doc["memory_map"], f)
    assert hits and all(h["item"]["name"] != f["region"]["name"] or h["item"]["kind"] == "guard" for h in hits)
    assert "into:</p>" in html and hits[0]["item"]["name"] in html


def _external_refs(html: str) -> list[str]:
    """Every reference of the page that a browser would fetch from outside the page itself."""
    refs = re.findall(r'(?:href|src)\s*=\s*"([^"]*)"', html) + re.findall(r"url\(([^)]*)\)", html)
    bad = [r for r in refs if not r.strip("'\"").startswith(("#", "data:"))]
    return bad + [u for u in re.findall(r"https?://[^\s\"'<>]+", html) if not u.startswith("http://www.w3.org/")]


def test_pages_are_self_contained_and_deterministic(faulting):
    a = run_html(faulting["result"])
    b = run_html(json.loads(json.dumps(faulting["doc"])))  # the page of the saved report is the same page
    assert a == b
    assert "Content-Security-Policy" in a and "default-src 'none'" in a
    assert _external_refs(a) == []
    assert not re.search(r"<(link|iframe|img|object|embed)\b", a) and not re.search(r"<script[^>]*\ssrc=", a)


def test_clean_run_page_has_no_fault(faulting):
    prog = compile(zoo.conv_model(cin=16, cout=16, h=52, w=52), CompileOptions(mem_align=128))
    res = run(prog, random_inputs=True, options=RunOptions(timing_only=True, trace=False))
    html = run_html(res)
    assert res.status == "ok" and 'id="fault"' not in html and "fault-marker" not in html
    assert 'id="memmap-overview"' in html and "OK</span>" in html and 'id="banks-table"' in html


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_run_html_and_report_from_the_saved_json(faulting, tmp_path, capsys):
    blob = faulting["dir"] / "a16.npu"
    code, _, _ = cli(capsys, "run", blob, "--random-input", "--json", tmp_path / "r.json", "--html", tmp_path / "r.html")
    assert code == 139
    page = (tmp_path / "r.html").read_text()
    assert 'id="faulting-block"' in page
    code, out, _ = cli(capsys, "report", tmp_path / "r.json", "-o", tmp_path / "from_json.html")
    strip = re.compile(r"<title>.*?</title>|<h1>.*?</h1>")
    assert code == 0 and strip.sub("", (tmp_path / "from_json.html").read_text()) == strip.sub("", page)
    (tmp_path / "r.html").unlink()
    code, out, _ = cli(capsys, "report", tmp_path / "r.json")  # default: REPORT.html beside the report
    assert code == 0 and "r.html" in out and (tmp_path / "r.html").is_file()


def test_cli_report_errors(faulting, tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(faulting["doc"]))
    (tmp_path / "notjson.json").write_text("{not json")
    (tmp_path / "other.json").write_text(json.dumps({"hello": 1}))
    bad_stats = dict(faulting["doc"], stats={**faulting["doc"]["stats"], "layers": "x"})
    (tmp_path / "badstats.json").write_text(json.dumps(bad_stats))
    cases = [(("report", tmp_path / "missing.json"), 65, "no such file"),
             (("report", tmp_path / "notjson.json"), 65, "not JSON"),
             (("report", tmp_path / "other.json"), 65, "missing status"),
             (("report", tmp_path / "badstats.json"), 65, "stats.layers"),
             (("report", good, "-o", tmp_path), 2, "is a folder"),
             (("report", good, "-o", good / "x.html"), 2, "is a file, not a folder"),
             (("report", good, "-o", good), 2, "overwrite")]
    for argv, want, words in cases:
        code, _, err = cli(capsys, *argv)
        assert code == want and words in err and len(err.strip().splitlines()) == 1, (argv, err)
    # an unwritable --html is refused before the run: no JSON is written either
    code, _, err = cli(capsys, "run", faulting["dir"] / "a16.npu", "--random-input", "--json", tmp_path / "n.json",
                       "--html", good / "r.html")
    assert code == 2 and "--html" in err and not (tmp_path / "n.json").exists()


@settings(max_examples=15)
@given(path=st.lists(st.sampled_from(["stats", "layers", "epochs", "memory_map", "items", "faults", "runs",
                                      "pattern", "region", "stall_cycles", "bank_bytes", 0, 1]), min_size=1, max_size=4),
       value=st.one_of(st.none(), st.integers(-3, 3), st.text(max_size=3), st.lists(st.integers(), max_size=2),
                       st.dictionaries(st.text(max_size=2), st.integers(), max_size=2)))
def test_hand_edited_reports_are_refused_or_rendered_never_crash(faulting, tmp_path_factory, path, value):
    doc = json.loads(json.dumps(faulting["doc"]))
    node = doc
    for key in path[:-1]:
        nxt = node.get(key) if isinstance(node, dict) else node[key] if isinstance(node, list) and \
            isinstance(key, int) and key < len(node) else None
        if not isinstance(nxt, (dict, list)):
            break
        node = nxt
    last = path[-1]
    if isinstance(node, dict) and isinstance(last, str):
        node[last] = value
    elif isinstance(node, list) and isinstance(last, int) and last < len(node):
        node[last] = value
    f = tmp_path_factory.mktemp("edited") / "r.json"
    f.write_text(json.dumps(doc))
    try:
        html = saved_report_html(f)
    except InvalidInputError as e:
        assert str(f) in str(e)
    else:
        assert html.startswith("<!DOCTYPE html>")


def test_contexts_report_has_one_part_per_context(faulting, tmp_path, capsys):
    soft = compile(zoo.op_model("softmax"), CompileOptions())
    (tmp_path / "s.npu").write_bytes(encode_blob(soft, PROF))
    s = tmp_path / "s.npu"
    code, _, _ = cli(capsys, "run", s, s, "--context", "a:npuRAM3=0x0+0x10000,octoFlash=0x0+0x10000",
                     "--context", "b:npuRAM3=0x10000+0x10000,octoFlash=0x10000+0x10000", "--html", tmp_path / "c.html",
                     "--json", tmp_path / "c.json")
    assert code == 0
    page = (tmp_path / "c.html").read_text()
    assert 'id="ctx-a-memory"' in page and 'id="ctx-b-memory"' in page and "context b: Memory map" in page
    assert cli(capsys, "report", tmp_path / "c.json", "-o", tmp_path / "c2.html")[0] == 0


def test_sweep_page_has_the_plot_and_the_points(faulting, tmp_path, capsys):
    model = faulting["dir"] / "conv.onnx"
    res = sweep(str(model), "mem_align", [16, 128], progress=False)
    html = sweep_html([("two points", res)])
    assert html.count("<svg") >= 1 and 'id="sweep-0-points"' in html and 'id="sweep-0-layers"' in html
    assert '<tr class="fault">' in html and "fastest clean point: mem_align=128" in html
    assert _external_refs(html) == []
    code, _, _ = cli(capsys, "sweep", model, "--mem-align", "16,128", "--no-progress", "--html", tmp_path / "s.html")
    assert code == 0 and "fastest clean point" in (tmp_path / "s.html").read_text()
    assert cli(capsys, "sweep", model, "--mem-align", "16,128", "--html", tmp_path / "s.html" / "x.html")[0] == 2
    assert cli(capsys, "sweep", model, "--mem-align", "16,128", "--no-progress", "--html",
               tmp_path / "new" / "s.html")[0] == 0 and (tmp_path / "new" / "s.html").is_file()


def test_bisect_page_links_every_reproducer_and_its_memory_map(tmp_path, capsys):
    b = zoo.Builder(1)
    y = b.conv("input", 3, 16, 3, 1, 1, name="stem")
    y = b.conv(y, 16, 16, 5, 1, 1, pad=0, name="body")
    model = b.model([1, 3, 56, 56], [y], "bisect_me")
    rep = bisect(model, CompileOptions(mem_align=16), out_dir=tmp_path / "repro", shrink=False)
    html = bisect_html(rep, tmp_path)
    assert rep.faulting and rep.verdict in html
    hrefs = re.findall(r'href="([^"#]+)(?:#[^"]*)?"', html)
    assert hrefs and all((tmp_path / h).is_file() for h in hrefs)
    for f in rep.faulting:
        page = Path(f.reproducer["blob"]).with_suffix(".html")
        assert page.name in html and 'id="faulting-block"' in page.read_text()
    onnx.save(model, tmp_path / "m.onnx")
    code, _, _ = cli(capsys, "bisect", tmp_path / "m.onnx", "--mem-align", 16, "--no-shrink", "--out", tmp_path / "r2",
                     "--html", tmp_path / "b.html")
    assert code == 0 and "repro_body.html" in (tmp_path / "b.html").read_text()


def _fault_runs():
    """(name, RunResult) of one run per kind of fault, from the engine tests' hand-built programs."""
    from test_engine_faults import _copy_with, _hang_run, _replace, _tail_buffer_program, x_for

    b, _ = _tail_buffer_program("npuRAM6", 64, 128, limit=0)
    yield "out-of-pool", run(b.program(), {"x": x_for(b)})
    yield "bad-descriptor", _copy_with(lambda b: _replace(b, 2, layout="image"))
    yield "hang", _hang_run(lambda b: b.commands.pop(4))[0]
    keep = RunOptions(keep_going=True)
    prog = compile(zoo.yolo_style(size=64), CompileOptions(mem_align=16))
    yield "keep-going", run(prog, random_inputs=True, options=keep)


def test_every_kind_of_fault_has_a_page():
    for name, res in _fault_runs():
        doc = res.report_json()
        f = doc["faults"][0]
        html = run_html(res)
        assert html == run_html(json.loads(json.dumps(doc))), name
        assert '<section id="fault">' in html and f["class"] in html, name
        pooled = f["address"] is not None and any(p["base"] <= f["address"] < p["end"] for p in doc["memory_map"])
        assert ('id="fault-marker"' in html) == pooled, name
        assert ('id="fault-marker-zoom"' in html) == (f["address"] is not None), name
        if name == "keep-going":
            assert doc["faults"] and len(doc["faults"]) > 1 and html.count("<tr class=\"fault\">") >= 1
