"""CLI workflows end to end: compile, run, validate, sweep, bisect (and their error paths)."""

import csv
import json

import numpy as np
import onnx
import pytest

from npusim import zoo
from npusim.cli import main
from npusim.compiler import CompileOptions
from npusim.tools.bisect import bisect
from npusim.tools.sweep import sweep


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    paths = {}
    for name, m in {"conv16": zoo.conv_model(cin=16, cout=16, h=52, w=52),
                    "conv16_56": zoo.conv_model(cin=16, cout=16, h=56, w=56),
                    "yolo": zoo.yolo_style(size=64)}.items():
        paths[name] = d / f"{name}.onnx"
        onnx.save(m, paths[name])
    return paths


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_misaligned_compile_faults_with_exit_139_and_reports(models, tmp_path, capsys):
    blob = tmp_path / "a16.npu"
    code, out, _ = cli(capsys, "compile", models["conv16"], "--mem-align", 16, "-o", blob)
    assert code == 0 and "mem_align 16" in out
    code, out, _ = cli(capsys, "run", blob, "--random-input", "--json", tmp_path / "r.json")
    assert code == 139
    first = next(line for line in out.splitlines() if "ERROR: NPUSanitizer" in line)
    assert "buffer-overflow" in first
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["status"] == "fault" and rep["faults"][0]["class"] == "buffer-overflow"
    f = rep["faults"][0]
    # the 52x16 B = 832 B lines the compiler laid out are walked at 896 B (7 granules) by the hardware
    region = f["region"]
    assert f["address"] >= region["start"] + region["size"] or f["address"] < region["start"]
    for key in ("cycles", "stats"):
        assert key in rep
    for key in ("bank_conflicts", "cross_bank_splits", "bytes_read", "bytes_written", "layers"):
        assert key in rep["stats"]


def test_aligned_compile_runs_clean_and_writes_outputs_and_trace(models, tmp_path, capsys):
    blob = tmp_path / "a128.npu"
    assert cli(capsys, "compile", models["conv16"], "-o", blob)[0] == 0
    code, out, _ = cli(capsys, "run", blob, "--random-input", "--seed", 3, "--outputs", tmp_path / "out",
                       "--trace", tmp_path / "t.json")
    assert code == 0 and out.startswith("npusim: ok, ")
    (npy,) = (tmp_path / "out").glob("*.npy")
    assert np.load(npy).shape == (1, 16, 52, 52)
    trace = json.loads((tmp_path / "t.json").read_text())
    assert trace["traceEvents"]


def test_timing_only_gives_the_same_cycles(models, tmp_path, capsys):
    blob = tmp_path / "b.npu"
    cli(capsys, "compile", models["yolo"], "-o", blob)
    cli(capsys, "run", blob, "--random-input", "--json", tmp_path / "f.json")
    cli(capsys, "run", blob, "--random-input", "--timing-only", "--json", tmp_path / "t.json")
    f, t = (json.loads((tmp_path / n).read_text()) for n in ("f.json", "t.json"))
    assert f["cycles"] == t["cycles"] > 0


def test_validate_exit_codes(models, tmp_path, capsys):
    good, bad = tmp_path / "g.npu", tmp_path / "b.npu"
    cli(capsys, "compile", models["yolo"], "-o", good)
    cli(capsys, "compile", models["conv16"], "--mem-align", 16, "-o", bad)
    code, out, _ = cli(capsys, "validate", good, "--reference", models["yolo"], "--random-input")
    assert code == 0 and "PASS" in out
    code, out, _ = cli(capsys, "validate", good, "--reference", models["yolo"], "--random-input",
                       "--max-rel", "0")  # int8 never matches fp32 exactly
    assert code == 3 and "FAIL" in out
    for bad_value in (("--min-cosine", "1.5"), ("--min-cosine", "nan"), ("--max-rel", "-1")):
        code, _, err = cli(capsys, "validate", good, "--reference", models["yolo"], *bad_value)
        assert code == 2 and bad_value[0] in err and len(err.strip().splitlines()) == 1
    assert cli(capsys, "validate", bad, "--reference", models["conv16"], "--random-input")[0] == 139


def test_input_file_binding_and_bad_inputs(models, tmp_path, capsys):
    blob = tmp_path / "c.npu"
    cli(capsys, "compile", models["conv16_56"], "-o", blob)
    x = np.random.default_rng(0).standard_normal((1, 16, 56, 56)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert cli(capsys, "run", blob, "--input", f"input={tmp_path / 'x.npy'}")[0] == 0
    np.save(tmp_path / "wrong.npy", x[:, :8])
    code, _, err = cli(capsys, "run", blob, "--input", f"input={tmp_path / 'wrong.npy'}")
    assert code == 65 and "shape" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli(capsys, "run", blob, "--input", "nonsense")
    assert code == 2
    code, _, err = cli(capsys, "run", blob, "--input", f"input={tmp_path / 'missing.npy'}")
    assert code == 65 and "no such file" in err


def test_compile_bad_inputs_exit_65(tmp_path, capsys):
    code, _, err = cli(capsys, "compile", tmp_path / "missing.onnx")
    assert code == 65 and len(err.strip().splitlines()) == 1
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00not an onnx model" * 10)
    code, _, err = cli(capsys, "compile", junk)
    assert code == 65 and "Traceback" not in err


def test_sweep_writes_csv_and_plot_and_128_beats_smaller_alignments(models, tmp_path, capsys):
    code, out, _ = cli(capsys, "sweep", models["conv16"], "--mem-align", "16,32,64,128,256", "--csv",
                       tmp_path / "c.csv", "--plot", tmp_path / "c.png", "--no-progress")
    assert code == 0 and "mem_align" in out
    rows = list(csv.DictReader(open(tmp_path / "c.csv")))
    assert [r["mem_align"] for r in rows] == ["16", "32", "64", "128", "256"]
    for col in ("status", "cycles", "bank_conflicts", "cross_bank_splits", "footprint_bytes", "faults"):
        assert col in rows[0]
    status = {r["mem_align"]: r["status"] for r in rows}
    assert status["16"] == "fault" and status["128"] == "ok"  # 52 x 16 B lines are not whole granules
    assert int(rows[0]["cycles"]) > 0  # a faulting point still records its cycles up to the fault
    assert (tmp_path / "c.png").stat().st_size > 10_000


def test_sweep_of_a_clean_model_favours_128(models):
    res = sweep(models["conv16_56"], "mem_align", [16, 128], progress=False)
    a16, a128 = res.points
    assert a16.status == a128.status == "ok"
    assert a128.cycles <= a16.cycles


def test_sweep_needs_exactly_one_list(models, capsys):
    assert cli(capsys, "sweep", models["conv16"], "--mem-align", "128", "--no-progress")[0] == 2


def test_sweep_a_profile_key(models):
    res = sweep(models["conv16_56"], "set:bus.max_burst_beats", [4, 16], progress=False)
    short, long_ = res.points
    assert short.status == long_.status == "ok" and short.cycles >= long_.cycles


def test_bisect_finds_the_minimal_faulting_conv(tmp_path):
    # a model it has never seen: a Cin=3 stem at 56x56 (whole granules), then a 5x5 valid conv to 52x52
    b = zoo.Builder(1)
    y = b.conv("input", 3, 16, 3, 1, 1, name="stem")
    y = b.node("Relu", [y], name="relu")
    y = b.conv(y, 16, 16, 5, 1, 1, pad=0, name="body")
    model = b.model([1, 3, 56, 56], [y], "bisect_me")
    rep = bisect(model, CompileOptions(mem_align=16), out_dir=tmp_path)
    by_node = {f.node: f for f in rep.findings}
    assert not by_node["stem"].outcome.faulted and not by_node["relu"].outcome.faulted
    body = by_node["body"]
    assert body.outcome.faulted and "buffer-overflow" in body.outcome.fault and "write" in body.outcome.fault
    # the shrunk reproducer shows the same bug (an overflow of the output write), not another one
    assert "Cin=" in body.minimal and "buffer-overflow" in body.minimal_fault and "write" in body.minimal_fault
    assert body.clean_neighbours and 128 in body.clean_alignments
    assert rep.verdict.startswith("compiler layout") and "hardware walks" in rep.verdict
    repro = body.reproducer
    assert onnx.load(repro["onnx"]).graph.node[0].op_type == "Conv"
    assert main(["run", repro["blob"], "--random-input", "--timing-only"]) == 139


def test_huge_input_shape_is_refused_before_any_big_allocation(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "dyn.onnx"
    onnx.save(zoo.dynamic_model(), path)
    # 2 GiB of address space: a 1x3x20000x20000 float calibration array (and its samples) could never fit
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)); "
            "from npusim.cli import main; sys.exit(main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, "compile", str(path), "--input-shape", "1,3,20000,20000"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 65, proc.stderr
    assert "model too big" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_mem_align_must_be_a_power_of_two(models, capsys):
    code, _, err = cli(capsys, "compile", models["conv16"], "--mem-align", 12)
    assert code == 2 and "power of two" in err


def test_bisect_shrinks_operators_without_weights(tmp_path):
    b = zoo.Builder(2)
    y = b.node("Relu", ["input"], name="act")
    y = b.node("MaxPool", [y], name="pool", kernel_shape=[2, 2], strides=[2, 2])
    model = b.model([1, 16, 52, 52], [y], "no_weights")
    rep = bisect(model, CompileOptions(mem_align=16), out_dir=tmp_path)
    act = next(f for f in rep.findings if f.node == "act")
    assert act.outcome.faulted and act.minimal.startswith("Relu C=")
    # 4 channels use the packed image layout (8 B word strides), widths that are multiples of 8 fill whole granules
    assert "C=4" in act.clean_neighbours and {"48x48", "56x56"} <= set(act.clean_neighbours)
    assert onnx.load(act.reproducer["onnx"]).graph.input[0].type.tensor_type.shape.dim[1].dim_value < 16


def test_sweep_list_valued_options(models, capsys, tmp_path):
    # a fixed comma-list value is not swept; "|" separates the alternatives of a list-valued option
    code, out, _ = cli(capsys, "sweep", models["yolo"], "--fuse", "conv-bn,conv-act", "--mem-align", "16,128",
                       "--no-progress", "--csv", tmp_path / "a.csv")
    assert code == 0 and [r["value"] for r in csv.DictReader(open(tmp_path / "a.csv"))] == ["16", "128"]
    code, out, _ = cli(capsys, "sweep", models["yolo"], "--fuse", "all|none", "--no-progress", "--csv",
                       tmp_path / "b.csv")
    rows = list(csv.DictReader(open(tmp_path / "b.csv")))
    assert code == 0 and [r["value"] for r in rows] == ["all", "none"]
    assert rows[0]["cycles"] != rows[1]["cycles"]  # unfused BN/activations cost their own epochs


def test_bisect_keeps_a_squeeze_excite_mul_a_channel_vector_mul(tmp_path):
    from npusim.program.blob import load_blob

    b = zoo.Builder(3)
    x = b.conv("input", 3, 16, 3, 1, 1, name="stem")
    gate = b.node("Sigmoid", [b.conv(b.node("GlobalAveragePool", [x]), 16, 16, 1, name="fc")], name="gate")
    model = b.model([1, 3, 52, 52], [b.node("Mul", [x, gate], name="scale")], "se52")
    rep = bisect(model, CompileOptions(mem_align=16), out_dir=tmp_path)
    scale = next(f for f in rep.findings if f.node == "scale")
    assert scale.outcome.faulted and scale.minimal.startswith("Mul C=")
    prog = load_blob(scale.reproducer["blob"])
    assert [c["op"] for c in prog.commands if c.op == "ARITH"] == ["mul_channel"]


def test_context_option_refuses_a_pool_given_twice(capsys):
    code, _, err = cli(capsys, "run", "a.npu", "b.npu", "--context", "a:npuRAM3=0x0+0x10000,npuRAM3=0x20000+0x10000",
                       "--context", "b:npuRAM3=0x40000+0x10000")
    assert code == 2 and "given twice" in err
