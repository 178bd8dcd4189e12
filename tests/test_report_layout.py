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
            assert s == name or (s.startswith("…") and name.endswith(s[1:])) or \
                ("…" in s and name.startswith(s.split("…")[0]) and name.endswith(s.split("…")[1])), (name, s)
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
    assert shown[1].endswith("conv_dw_1/depthwise")


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
