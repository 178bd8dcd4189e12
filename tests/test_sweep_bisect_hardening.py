"""sweep, bisect and grid from a new user's trial (issue #10: C, D1-D4, E2, H): each finding as a test."""

from __future__ import annotations

import csv

import numpy as np
import onnx
import pytest

from npusim import zoo
from npusim.cli import main
from npusim.compiler import CompileOptions
from npusim.reference import ort_run
from npusim.tools.bisect import bisect
from npusim.tools.plots import FAULTED, MEASURED, NOT_REACHED, heatmap_cells, sweep_figure
from npusim.tools.sweep import SweepPoint, SweepResult
from npusim.tools.variants import cut_ready, single_op_models, sub_model_calibration


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def conv_path(tmp_path_factory):
    p = tmp_path_factory.mktemp("hardening") / "conv.onnx"
    onnx.save(zoo.conv_model(cin=16, cout=16, h=28, w=28), p)
    return p


def _two_convs():
    b = zoo.Builder(0)
    y = b.node("Relu", [b.conv("input", 3, 16, 3, name="stem")], name="relu")
    y = b.conv(y, 16, 16, 3, name="body")
    return b.model([1, 3, 20, 20], [y], "two_convs")


# ------------------------------------------------------------------ D1: bisect --calibration

def test_sub_models_are_calibrated_on_the_whole_models_intermediates():
    model = _two_convs()
    ready = cut_ready(model)
    cases = single_op_models(model, ready=ready)
    samples = {"input": np.random.default_rng(1).standard_normal((3, 1, 3, 20, 20)).astype(np.float32)}
    cals = {}
    for idx, chunk in sub_model_calibration(ready, samples, cases, chunk_bytes=1):  # one case per chunk
        cals.update(zip(idx, chunk))
    by_node = {n.name: cals[i] for i, (n, _) in enumerate(cases)}
    assert np.array_equal(by_node["stem"]["input"], samples["input"])
    relu_in = by_node["relu"]
    (name,) = relu_in
    for i in range(3):  # the Relu alone sees what the stem conv gives inside the whole model
        stem_alone = ort_run(cases[0][1], {"input": samples["input"][i]})
        assert np.allclose(relu_in[name][i], next(iter(stem_alone.values())), atol=1e-5)


def test_bisect_with_a_calibration_file(tmp_path, capsys):
    model = tmp_path / "two.onnx"
    onnx.save(_two_convs(), model)
    cal = tmp_path / "cal.npz"
    np.savez(cal, input=np.random.default_rng(2).standard_normal((4, 1, 3, 20, 20)).astype(np.float32))
    code, out, err = cli(capsys, "bisect", model, "--calibration", cal, "--mem-align", "16", "-o", tmp_path / "r",
                         "--workers", "1", "--no-progress")
    assert code == 0, err
    assert "body" in out and "verdict:" in out
    bad = tmp_path / "bad.npz"
    np.savez(bad, other=np.zeros((2, 1, 3, 20, 20), np.float32))
    code, _, err = cli(capsys, "bisect", model, "--calibration", bad, "--workers", "1", "--no-progress")
    assert code == 65 and "no array for model input 'input'" in err and err.count("\n") == 1


# ------------------------------------------------------------------ D2: shrinking never builds a window larger than its map

def test_shrinking_a_strided_unpadded_conv_stays_valid(tmp_path):
    model = zoo.conv_model(cin=16, cout=16, h=28, w=28, k=3, stride=2, pad=0)
    rep = bisect(model, CompileOptions(mem_align=16), out_dir=tmp_path)
    (f,) = rep.findings
    assert f.outcome.faulted and not rep.errors
    size = int(f.minimal.split(" at ")[1].split("x")[0])
    assert size >= 3 and "buffer-overflow" in f.minimal_fault  # a 3x3 window needs at least 3x3 (no pads)


# ------------------------------------------------------------------ D3, D4: what sweep takes

def test_sweep_fuse_all_none_as_the_readme_shows(conv_path, capsys, tmp_path):
    code, out, err = cli(capsys, "sweep", conv_path, "--fuse", "all,none", "--csv", tmp_path / "f.csv",
                         "--no-progress", "--workers", "1")
    assert code == 0, err
    assert [r["value"] for r in csv.DictReader(open(tmp_path / "f.csv"))] == ["all", "none"]
    code, out, err = cli(capsys, "sweep", conv_path, "--fuse", "conv-bn,conv-act", "--mem-align", "16,128",
                         "--no-progress", "--workers", "1")
    assert code == 0 and "mem_align" in out  # a valid comma list is one value


def test_repeated_sweep_set_is_refused_and_grid_runs_the_product(conv_path, capsys, tmp_path):
    code, _, err = cli(capsys, "sweep", conv_path, "--sweep-set", "bus.max_burst_beats=4,8",
                       "--sweep-set", "pool.npuRAM3.banks=4,8", "--no-progress")
    assert code == 2 and "npusim grid runs the product" in err and err.count("\n") == 1
    code, _, err = cli(capsys, "sweep", conv_path, "--sweep-set", "pool.npuRAM3.banks=4",
                       "--sweep-set", "pool.npuRAM3.banks=8", "--no-progress")
    assert code == 2 and "given twice" in err
    code, out, err = cli(capsys, "grid", conv_path, "--sweep-set", "bus.max_burst_beats=4,8",
                         "--sweep-set", "pool.npuRAM3.banks=4,8", "--csv", tmp_path / "g.csv", "--no-progress",
                         "--workers", "1")
    assert code == 0, err
    rows = list(csv.DictReader(open(tmp_path / "g.csv")))
    assert [(r["set:bus.max_burst_beats"], r["set:pool.npuRAM3.banks"]) for r in rows] == [
        ("4", "4"), ("4", "8"), ("8", "4"), ("8", "8")]


# ------------------------------------------------------------------ C: output paths checked before the work

def test_bad_output_paths_are_refused_before_the_work(conv_path, capsys, tmp_path):
    code, _, err = cli(capsys, "sweep", conv_path, "--mem-align", "16,128", "--plot", tmp_path / "cost.xyz",
                       "--csv", tmp_path / "c.csv", "--no-progress")
    assert code == 2 and "unsupported image format .xyz" in err and err.count("\n") == 1
    assert not (tmp_path / "c.csv").exists()  # refused before any point ran
    afile = tmp_path / "afile"
    afile.write_text("x")
    code, _, err = cli(capsys, "bisect", conv_path, "-o", afile, "--no-progress")
    assert code == 2 and "existing file" in err
    code, _, err = cli(capsys, "grid", conv_path, "--mem-align", "16,128", "--json", afile / "g.json")
    assert code == 2 and "is a file, not a folder" in err and err.count("\n") == 1


# ------------------------------------------------------------------ E2: the heat map

def _synthetic() -> SweepResult:
    fault = SweepPoint(value=16, mem_align=16, status="fault", cycles=105, first_fault="buffer-overflow",
                       fault_layer="b", layers={"a": 100, "b": 5})
    clean = SweepPoint(value=128, mem_align=128, status="ok", cycles=1170, layers={"a": 120, "b": 1000, "c": 50})
    broken = SweepPoint(value=256, mem_align=256, status="error", error="ModelError: nope")
    return SweepResult("mem_align", [fault, clean, broken])


def test_heatmap_never_takes_a_partial_fault_layer_as_the_best():
    layers, percent, state = heatmap_cells(_synthetic())
    assert layers == ["a", "b", "c"]
    assert state.tolist() == [[MEASURED, MEASURED, NOT_REACHED], [FAULTED, MEASURED, NOT_REACHED],
                              [NOT_REACHED, MEASURED, NOT_REACHED]]
    assert percent[1, 1] == 0.0 and np.isnan(percent[1, 0])  # b's best is the clean 1000, not the partial 5
    assert percent[0, 0] == pytest.approx(100 * (100 / 120 - 1))  # a ran to its end before the fault
    assert np.isnan(percent[2, 0]) and np.isnan(percent[:, 2]).all()


def test_sweep_figure_labels_and_legends_stay_clear_of_the_data():
    fig = sweep_figure(_synthetic())
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    top, bars, hm = fig.axes[:3]
    colorbar = [a for a in fig.axes if a.get_ylabel().startswith("% above")]
    assert colorbar, "the colour bar is labelled"
    legend_texts = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    assert "faulted here (cycles up to the fault)" in legend_texts and "not reached (after the fault)" in legend_texts
    boxes = [bars.get_legend().get_window_extent(renderer)] + [lg.get_window_extent(renderer) for lg in fig.legends]
    for ax in (top, bars, hm):
        frame = ax.get_window_extent(renderer)
        assert not any(b.overlaps(frame) for b in boxes), "a legend covers a panel"
    frame = top.get_window_extent(renderer)
    ticks = [t.get_window_extent(renderer) for t in top.get_xticklabels()]
    for text in top.texts:  # the percent and fault labels: inside the frame, off the tick labels
        box = text.get_window_extent(renderer)
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
        assert not any(box.overlaps(t) for t in ticks)


# ------------------------------------------------------------------ H: progress on stderr, cleared before an error

def test_bisect_shows_progress_of_the_whole_model_retries_on_stderr(tmp_path, capsys, conv_path):
    code, out, err = cli(capsys, "bisect", conv_path, "--mem-align", "16", "--no-shrink", "-o", tmp_path / "r",
                         "--workers", "1")
    assert code == 0
    assert "bisect: operators" in err and "bisect:" not in out
    assert "with --fuse none:" in out


def test_the_progress_line_is_cleared_before_an_error(tmp_path, capsys):
    model = tmp_path / "bigw.onnx"
    onnx.save(zoo.conv_model(cin=256, cout=512, h=4, w=4), model)  # 1.2 MB of weights: no RAM pool holds them
    code, out, err = cli(capsys, "sweep", model, "--weights-pool", "cpuRAM2,npuRAM6", "--workers", "1")
    assert code == 65, err
    assert "sweep weights_pool" in err and "error" in out  # the bar ran; the table shows both errors
    lines = err.rstrip("\n").split("\r")
    assert lines[-1].startswith("npusim: error: 2 of 2 point(s) failed") and "too big" in lines[-1]
    assert lines[-2].strip() == ""  # the bar's line was blanked first


def test_plot_files_are_byte_identical_however_memory_is_laid_out(tmp_path):
    """matplotlib hashes id() of clip paths into its SVG ids: the plot must not depend on it."""
    from npusim.tools.plots import plot_sweep
    from npusim.tools.sweep import sweep

    path = tmp_path / "c.onnx"
    onnx.save(zoo.conv_model(16, 16, 52, 52, 3), path)
    res = sweep(str(path), "mem_align", [16, 128], progress=False)
    assert {p.status for p in res.points} == {"ok", "fault"}
    a = plot_sweep(res, tmp_path / "a.svg")
    keep = [object() for _ in range(20000)]  # move the next figure's objects elsewhere in memory
    b = plot_sweep(res, tmp_path / "b.svg")
    assert keep and a.read_bytes() == b.read_bytes()


def test_one_model_calibrated_on_two_sets_gets_two_front_ends():
    """The per-process cache of prepared front ends is keyed by the calibration set too."""
    from npusim.hw import load_profile
    from npusim.program.blob import encode_blob
    from npusim.tools.points import compile_point, share_model

    model, profile = zoo.conv_model(cin=16, cout=16, h=12, w=12), load_profile()
    rng = np.random.default_rng(1)
    small, large = ({"input": (s * rng.standard_normal((4, 1, 16, 12, 12))).astype(np.float32)} for s in (0.1, 10))
    blobs = [encode_blob(compile_point(share_model(model, cal), CompileOptions(), profile), profile)
             for cal in (small, large, small)]
    assert blobs[0] != blobs[1] and blobs[0] == blobs[2]


# ------------------------------------------------------------------ bisect tasks: chunks of operators (issue #16)

def test_bisect_chunks_cover_every_operator_once_in_order_and_end_small():
    from npusim.tools.bisect import chunks

    for n, workers in ((0, 2), (1, 1), (7, 2), (174, 2), (300, 8)):
        parts = chunks(n, workers)
        assert [k for p in parts for k in p] == list(range(n))
        assert all(1 <= len(p) <= 8 for p in parts)
        assert [len(p) for p in parts] == sorted((len(p) for p in parts), reverse=True)
        if n:
            assert len(parts[-1]) == 1


@pytest.fixture(scope="module")
def squeezenet_bisect(tmp_path_factory):
    """The bisect of SqueezeNet-style at a 16 B alignment with the default chunking, and its folder: the
    reference of the two tests below (each reruns it its own way, checked against its run)."""
    out = tmp_path_factory.mktemp("bisect") / "a"
    return bisect(zoo.squeezenet_style(), CompileOptions(mem_align=16), out_dir=out), out


def test_bisect_report_does_not_depend_on_the_chunking(tmp_path, monkeypatch, squeezenet_bisect):
    import npusim.tools.bisect as bis

    model = zoo.squeezenet_style()
    one, one_dir = squeezenet_bisect
    assert one.faulting and len(one.findings) > 8
    monkeypatch.setattr(bis, "chunks", lambda n, workers: [range(k, k + 1) for k in range(n)])
    other = bisect(model, CompileOptions(mem_align=16), out_dir=tmp_path / "b")
    assert other.table().replace(str(tmp_path / "b"), "D") == one.table().replace(str(one_dir), "D")
    for f, g in zip(one.faulting, other.faulting):
        for kind in f.reproducer:
            assert open(f.reproducer[kind], "rb").read() == open(g.reproducer[kind], "rb").read()


def test_an_operator_that_raises_is_reported_alone_and_the_rest_of_its_chunk_completes(tmp_path, monkeypatch,
                                                                                      squeezenet_bisect):
    import npusim.tools.bisect as bis

    model = zoo.squeezenet_style()
    ref = squeezenet_bisect[0]
    real = bis._op_task

    def op_task(task, ops):
        if task["index"] == 1:
            raise RuntimeError("boom")
        return real(task, ops)

    monkeypatch.setattr(bis, "_op_task", op_task)
    rep = bisect(model, CompileOptions(mem_align=16), out_dir=tmp_path / "b")
    assert rep.findings[1].outcome.status == "error" and "boom" in rep.findings[1].outcome.fault
    assert [str(e) for e in rep.errors] == ["RuntimeError: boom"]
    others = [k for k in range(len(ref.findings)) if k != 1]
    assert [rep.findings[k].outcome for k in others] == [ref.findings[k].outcome for k in others]
    assert [rep.findings[k].minimal for k in others] == [ref.findings[k].minimal for k in others]
