"""Bad arguments are refused before any work, with one line and the documented exit code
(2 usage, 65 bad input file); the defaults every option shows in --help."""

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import simpy

import npusim
from npusim import zoo
from npusim.cli import main


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("args")
    model = d / "y.onnx"
    onnx.save(zoo.yolo_style(size=64), model)
    blob = d / "y.npu"
    assert main(["compile", str(model), "-o", str(blob)]) == 0
    text = d / "text.npy"
    text.write_text("not an array\n")
    return {"dir": d, "model": model, "blob": blob, "text": text}


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _no_work(*_args, **_kwargs):
    raise AssertionError("the work started before the arguments were refused")


def one_line(capsys, code, *argv, needle=""):
    """Run argv; assert the exit code and a single `npusim: error:` line containing `needle`, given
    before any work: no simulation (SimPy) and no calibration or reference run (ONNX Runtime) starts."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(simpy.Environment, "run", _no_work)
        mp.setattr(onnxruntime.InferenceSession, "__init__", _no_work)
        got, _, err = cli(capsys, *argv)
    assert got == code, (got, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("npusim: error: "), err
    assert needle in lines[0], lines[0]
    return lines[0]


def test_usage_errors_before_the_work(files, capsys, tmp_path):
    b, m = files["blob"], files["model"]
    one_line(capsys, 2, "run", b, "--seed", "-1", needle="run: argument --seed")
    one_line(capsys, 2, "run", b, "--outputs", b, needle="existing file, not a folder")
    one_line(capsys, 2, "run", b, "--json", Path(b) / "r.json", needle="is a file, not a folder")
    one_line(capsys, 2, "run", b, "--timing-only", "--outputs", tmp_path / "o", needle="timing-only")
    one_line(capsys, 2, "demo", "-o", b, needle="existing file, not a folder")
    one_line(capsys, 2, "bisect", m, "-o", b, needle="existing file, not a folder")
    one_line(capsys, 2, "compile", m, "--calibration-samples", "100000000", needle="calibration_samples")
    one_line(capsys, 2, "compile", m, "--calibration-seed", "-3", needle="seed")
    one_line(capsys, 2, "compile", m, "--mem-align", str(1 << 40), needle="mem_align")
    one_line(capsys, 2, "validate", b, "--reference", m, "--max-rel", "-1", needle="--max-rel")
    one_line(capsys, 2, "validate", b, "--reference", m, "--min-cosine", "2", needle="--min-cosine")
    one_line(capsys, 2, "run", b, "--bogus", needle="run: unrecognized arguments: --bogus")
    one_line(capsys, 2, "inspect", needle="inspect: the following arguments are required")


def test_profile_override_errors_name_the_override(files, capsys):
    b = files["blob"]
    line = one_line(capsys, 2, "run", b, "--timing-only", "--set", "pool.npuRAM3.banks=1000000000",
                    needle="--set pool.npuRAM3.banks=1000000000")
    assert "n657.toml" not in line  # the installed profile file is not to blame
    one_line(capsys, 2, "run", b, "--timing-only", "--set", "alignment.granule=1099511627776",
             needle="alignment.granule")
    one_line(capsys, 2, "run", b, "--timing-only", "--set", "pool.npuRAM3.size=0", needle="pool.npuRAM3.size=0")
    one_line(capsys, 2, "run", b, "--timing-only", "--set", "pool.npuRAM3.interleave=1048576",
             needle="banks x interleave")
    one_line(capsys, 65, "run", b, "--profile", "n658", needle="built-in profiles: n657")


def test_bad_files_exit_65(files, capsys):
    b = files["blob"]
    one_line(capsys, 65, "run", b, "--input", f"input={files['text']}", needle="not a .npy array nor a photo")
    one_line(capsys, 65, "compile", files["dir"], needle="is a folder")
    one_line(capsys, 65, "validate", b, "--reference", files["dir"], needle="is a folder")
    np.save(files["dir"] / "x.npy", np.zeros((1, 3, 64, 64), np.float32))
    x = f"input={files['dir'] / 'x.npy'}"
    one_line(capsys, 2, "run", b, "--input", x, "--input", x, needle="given twice")


def test_inputs_default_to_seeded_random(files, capsys):
    b, m = files["blob"], files["model"]
    code, out, err = cli(capsys, "validate", b, "--reference", m)  # as the README shows it
    assert code == 0 and "PASS" in out and "seeded random" in err
    code, out, err = cli(capsys, "run", b, "--timing-only")  # timing-only runs need no inputs
    assert code == 0 and err == ""
    code, out, err = cli(capsys, "run", b, "--random-input", "--seed", "7")
    assert code == 0 and err == ""


def test_help_shows_defaults(capsys):
    for cmd in ("compile", "run", "sweep", "validate"):
        with pytest.raises(SystemExit):
            npusim.cli.build_parser().parse_args([cmd, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        if cmd in ("compile", "sweep"):
            assert "blob's target" not in text  # no blob on these commands
            assert "(default: n657)" in text
        if cmd in ("run", "validate"):
            assert "(default: the blob's target profile)" in text
            assert "seed of the random inputs (default: 0)" in text
        if cmd == "compile":
            assert "(default: int8)" in text and "(default: all)" in text and "(default: unified)" in text


def test_submodules_are_attributes():
    assert callable(npusim.runtime.seeded_inputs) and callable(npusim.zoo.resnet50)
    with pytest.raises(AttributeError):
        npusim.no_such_thing  # noqa: B018


def test_zoo_lists_and_writes_models(capsys, tmp_path):
    code, out, _ = cli(capsys, "zoo")
    assert code == 0 and "yolo_style" in out and "size=416" in out and "resnet50" in out
    f = tmp_path / "d.onnx"
    code, out, _ = cli(capsys, "zoo", "yolo_style", "size=96", "-o", f)
    assert code == 0 and str(f) in out
    m = onnx.load(f)
    assert [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim] == [1, 3, 96, 96]
    assert onnx.load(f).SerializeToString() == zoo.yolo_style(size=96).SerializeToString()  # same seeded model
    one_line(capsys, 2, "zoo", "nope", needle="no model 'nope'")
    one_line(capsys, 2, "zoo", "yolo_style", "sise=3", needle="KEY one of: size")
    one_line(capsys, 2, "zoo", "yolo_style", "size=big", needle="expected an integer")
    one_line(capsys, 2, "zoo", "resnet_style", "width=8192", "-o", tmp_path / "r.onnx", needle="1 GiB")
    one_line(capsys, 2, "zoo", "yolo_style", "-o", tmp_path / "d.txt", needle=".onnx or .tflite file")


def test_every_output_path_creates_its_missing_folders(files, capsys, tmp_path):
    """One rule for -o, --html, --json, --csv, --plot, --outputs: missing parent folders are created."""
    b, m = files["blob"], files["model"]
    out = tmp_path / "a" / "b"
    assert main(["compile", str(m), "-o", str(out / "c" / "y.npu")]) == 0
    assert main(["run", str(b), "--random-input", "--json", str(out / "j" / "r.json"), "--html",
                 str(out / "h" / "r.html"), "--trace", str(out / "t" / "t.json"), "--outputs", str(out / "o")]) == 0
    assert main(["report", str(out / "j" / "r.json"), "-o", str(out / "r" / "r.html")]) == 0
    assert main(["check", str(b), "--json", str(out / "k" / "c.json")]) == 0
    capsys.readouterr()
    for f in ("c/y.npu", "j/r.json", "h/r.html", "t/t.json", "r/r.html", "k/c.json"):
        assert (out / f).is_file(), f
    assert any((out / "o").iterdir())


def test_a_model_given_where_a_blob_goes_is_named_with_the_command_that_compiles_it(files, capsys, tmp_path):
    from npusim.zoo.tflite import tflite_op

    t = tmp_path / "m.tflite"
    t.write_bytes(bytes(tflite_op("conv")))
    line = one_line(capsys, 65, "run", t, needle="is a TFLite model, not a compiled blob")
    assert line.startswith(f"npusim: error: {t}:") and f"npusim compile {t} -o m.npu" in line
    one_line(capsys, 65, "run", files["model"], needle="is an ONNX model, not a compiled blob: compile it first")
    one_line(capsys, 65, "check", t, needle="compile it first")
    junk = tmp_path / "junk.npu"
    junk.write_bytes(b"\x00" * 64)
    one_line(capsys, 65, "run", junk, needle=f"{junk}: bad magic")


def test_a_file_that_is_no_model_is_refused_naming_both_formats(capsys, tmp_path):
    png = tmp_path / "cat.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    line = one_line(capsys, 65, "compile", png, needle="not an ONNX model")
    assert "nor a TFLite model" in line and str(png) in line
