"""What the report pages and tables show on real models (issue 38 C): charts with their own SVG ids,
layer names whole, stall columns that say what they are, faulted sweep points marked."""

import re
from collections import Counter

import pytest

import npusim
from npusim import zoo
from npusim.compiler import CompileOptions
from npusim.tools.html_report import run_html


@pytest.fixture(scope="module")
def faulting():
    prog = npusim.compile(zoo.conv_model(16, 16, 52, 52, 3), CompileOptions(mem_align=16))
    return prog, npusim.run(prog, random_inputs=True, seed=0, options=npusim.RunOptions(trace=False))


def test_every_id_of_a_run_page_is_its_own(faulting):
    """Charts used to name their clip paths alike (`p0`): the page clipped every chart to the first one's axes."""
    html = run_html(faulting[1].report_json(), "ids")
    ids = Counter(re.findall(r'\bid="([^"]+)"', html))
    assert ids and [i for i, n in ids.items() if n > 1] == []
    clips = re.findall(r'clip-path="url\(#([^)]+)\)"', html)
    assert len(set(clips)) >= 2 and set(clips) <= set(ids)  # of each chart its own, defined in the page


# TFLite names a layer by its tensors: every layer shares the start, the end tells them apart; the last two
# share their end too (as conv_dw_13 and conv_pw_13 of ST's mobilenet_v1_alpha_0.25 do)
_STEM = "mobilenet_v1_alpha_0.25"


def _tflite_like(i: int, n: int) -> str:
    kind = "dw" if i < n - 1 else "pw"
    tail = f"{_STEM}/conv_pw_{n}/Conv2D" if i >= n - 2 else f"{_STEM}/conv_dw_{i}/depthwise"
    return f"{_STEM}/conv_{kind}_{i}_relu/Relu6;{_STEM}/conv_{kind}_{i}_bn/FusedBatchNormV3;{tail}"


@pytest.fixture(scope="module")
def long_names():
    """A chain of convs whose nodes carry TFLite-style names, run timing-only."""
    b = zoo.Builder(0)
    x = "input"
    for _ in range(4):
        x = b.cbr(x, 8, 8)
    model = b.model([1, 8, 8, 8], [x], "long")
    convs = [nd for nd in model.graph.node if nd.op_type == "Conv"]
    for i, nd in enumerate(convs):
        nd.name = _tflite_like(i, len(convs))
    res = npusim.run(npusim.compile(model), random_inputs=True, seed=0, options=npusim.RunOptions(timing_only=True))
    return [nd.name for nd in convs], res


def _shows(name: str, s: str) -> bool:
    """`s` is `name` cut: its pieces between ellipses appear in `name` in order, the last one ends it."""
    pieces, at = s.split("…"), 0
    for piece in pieces:
        at = name.find(piece, at)
        if at < 0:
            return False
        at += len(piece)
    return name.endswith(pieces[-1]) and (s.startswith("…") or name.startswith(pieces[0]))


def _rows(text: str, names) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith(("…", _STEM))]


def test_long_layer_names_keep_their_distinguishing_end_in_the_run_and_stall_tables(long_names):
    names, res = long_names
    assert {ly.name for ly in res.stats.layers} >= set(names)
    for text in (res.report_text().split("stall cycles:")[0], res.stalls_text()):
        rows = _rows(text, names)
        assert len(rows) == len(names)
        shown = [r.split(" ")[0] for r in rows]
        assert len(set(shown)) == len(names), shown  # no two rows read alike
        for name, s in zip(names, shown):
            assert _shows(name, s), (name, s)
        assert any(s.endswith("conv_dw_1/depthwise") for s in shown)


def test_the_stall_table_says_what_its_columns_are_and_they_sum_to_the_cycles(long_names):
    _, res = long_names
    text = res.stalls_text()
    head = next(ln for ln in text.splitlines() if ln.startswith("layer"))
    assert head.split()[-1] == "overlapped" and "overlapped: compute and transfers both busy" in text
    rows = [ln for ln in text.splitlines()[2:] if ln.strip()]
    assert rows[-1].startswith("total")
    for ln in rows:
        cycles, *parts = [int(v.replace(",", "")) for v in ln.split()[-(len(head.split()) - 1):]]
        assert sum(parts) == cycles > 0, ln


def test_bisect_table_keeps_the_end_of_long_node_names():
    from npusim.tools.bisect import BisectReport, OpFinding, Outcome

    names = [_tflite_like(i, 6) for i in range(6)]
    rep = BisectReport(model_outcome=Outcome("ok"),
                       findings=[OpFinding(n, "CONV_2D", "1x8x8x8", Outcome("ok")) for n in names])
    rows = [ln for ln in rep.table().splitlines() if ln.startswith(("…", _STEM))]
    shown = [r.split(" ")[0] for r in rows]
    assert len(rows) == 6 and len(set(shown)) == 6, shown
    assert all(_shows(n, t) for n, t in zip(names, shown)) and shown[1].endswith("conv_dw_1/depthwise")


def test_a_tflite_programs_fault_names_a_tflite_operator_in_memory_and_from_its_blob(tmp_path):
    from npusim.analysis import check
    from npusim.faults import render_text
    from npusim.program.blob import encode_blob, load_blob, read_header
    from npusim.zoo.tflite import tflite_model

    prog = npusim.compile(bytes(tflite_model(name="yolo_style", size=64)), CompileOptions(mem_align=16))
    assert prog.header.source == "tflite"
    blob = encode_blob(prog, npusim.load_profile())
    assert read_header(blob).source == "tflite" and load_blob(blob).header == prog.header
    for p in (prog, load_blob(blob)):
        res = npusim.run(p, random_inputs=True, seed=0)
        text = render_text(res.faults, "m")
        assert res.faults and "(TFLite operator)" in text and "ONNX node" not in text
    predicted = check(prog).faults
    assert predicted and "(TFLite operator)" in render_text(predicted, "m")
    onnx_prog = npusim.compile(zoo.conv_model(4, 4, 8, 8))
    onnx_blob = encode_blob(onnx_prog, npusim.load_profile())
    assert read_header(onnx_blob).section(2).length == 16  # an ONNX program's blob: the 16-byte META of old
    assert load_blob(onnx_blob).header.source == "" and "ONNX node" in render_text(
        npusim.run(npusim.compile(zoo.conv_model(16, 16, 52, 52, 3), CompileOptions(mem_align=16)),
                   random_inputs=True, seed=0).faults, "m")


def test_a_runtime_host_copy_fault_names_the_runtime_library():
    """Two processes whose runtimes each believe they own the whole pool: the library's own copies of the
    user's I/O land in the other's buffers. Those faults are the runtime library's, not a model node's."""
    from npusim.faults import render_text
    from npusim.processes import Job, NpuSystem, RuntimeConfig

    b = zoo.Builder(0)
    prog = npusim.compile(b.model([1, 8, 8, 8], [b.cbr("input", 8, 8)], "one"))
    system = NpuSystem(npusim.load_profile(), RuntimeConfig(timing_only=True, strategy="misconfigured"))
    for i, name in enumerate("ab"):
        system.add_process(name, [prog], priority=2 - i)
    left = {p.name: 2 for p in system.processes}
    results = []

    def next_job(proc):
        if not left[proc.name]:
            return None
        left[proc.name] -= 1
        return Job(0, None)

    system.run(next_job, results.append)
    host = [f for r in results for f in r.faults if f.layer.startswith("runtime ")]
    assert host
    text = render_text(host, "m")
    assert "' (runtime library)" in text and "ONNX node" not in text


def _sweep_with_faults():
    from npusim.tools.sweep import SweepPoint, SweepResult

    names = [_tflite_like(i, 6) for i in range(6)]
    layers = {n: 1000 + 10 * i for i, n in enumerate(names)}
    pts = []
    for value, status in ((16, "fault"), (32, "ok"), (64, "fault"), (128, "ok"), (256, "ok")):
        done = names[:3] if status == "fault" else names
        pts.append(SweepPoint(value=value, mem_align=value, status=status, end_reason="done" if status == "ok" else
                              "fault", cycles=sum(layers[n] for n in done) + value, bank_conflicts=value,
                              cross_bank_splits=value // 2, footprint_bytes=4096 + value,
                              faults=int(status == "fault"), first_fault="buffer-overflow" if status == "fault" else "",
                              fault_layer=names[2] if status == "fault" else "", layers={n: layers[n] for n in done}))
    return names, SweepResult("mem_align", pts)


def test_sweep_plot_marks_faulted_points_and_joins_clean_ones_only():
    import matplotlib.pyplot as plt
    import numpy as np

    from npusim.tools.plots import LABEL_CHARS, sweep_figure

    names, res = _sweep_with_faults()
    fig = sweep_figure(res)
    try:
        ax, bx, hm = fig.axes[:3]
        line = next(ln for ln in ax.get_lines() if ln.get_label().startswith("cycles"))
        y = np.asarray(line.get_ydata(), dtype=float)
        assert np.isnan(y[[0, 2]]).all() and not np.isnan(y[[1, 3, 4]]).any()  # no segment touches a faulted point
        bars = [p for p in bx.patches if p.get_height() > 0]
        hatched = sorted({round(p.get_x() + p.get_width() / 2) for p in bars if p.get_hatch()})
        assert hatched == [0, 2]  # both bars of both faulted points
        assert any("faulted" in t.get_text() for t in bx.get_legend().get_texts())
        labels = [t.get_text() for t in hm.get_yticklabels()]
        assert len(set(labels)) == len(names) and all(_shows(n, t) for n, t in zip(names, labels))
        assert max(map(len, labels)) <= LABEL_CHARS + 12 < max(map(len, names))
    finally:
        plt.close(fig)


def test_run_page_charts_label_long_layers_by_their_end():
    from npusim.report import charts

    names = [_tflite_like(i, 6) for i in range(6)]
    rows = [{"name": n, "cycles": 100 + i, "stall_cycles": {"setup": 50}} for i, n in enumerate(names)]
    svg = charts.layer_chart(rows)
    assert names[1] not in svg and "conv_dw_1/depthwise" in svg
