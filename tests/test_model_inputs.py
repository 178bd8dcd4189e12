"""Inputs in the model's own terms (`npusim.model_inputs`, issue 37 D): a TFLite model's NHWC uint8/int8 (or
float32) arrays, an ONNX model's NCHW floats; seeded random inputs of a model quantized by itself uniform over
its int8 codes."""

from __future__ import annotations

import numpy as np
import pytest

from npusim.cli import main
from npusim.compiler import CompileOptions, compile
from npusim.errors import DataError
from npusim.hw import load_profile
from npusim.model_inputs import blob_specs, input_specs, to_program
from npusim.program.blob import encode_blob
from npusim.reference import validate
from npusim.runtime import seeded_inputs


def _conv_model():
    from npusim.zoo import Builder

    b = Builder(0)
    return b.model([1, 3, 8, 8], [b.conv("input", 3, 4, 3)], "conv")


@pytest.fixture(scope="module")
def tflite_models():
    """{io: (model bytes, program)}: one conv exported with uint8, int8 and float32 inputs and outputs."""
    from npusim.zoo.tflite_export import to_tflite

    out = {}
    for io in ("uint8", "int8", "float"):
        m = bytes(to_tflite(_conv_model(), seed=0, io=io))
        out[io] = (m, compile(m, CompileOptions(mem_align=128)))
    return out


def _image(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(1, 8, 8, 3)).astype(np.uint8)


def test_a_tflite_models_input_is_nhwc_in_its_own_type(tflite_models):
    m, prog = tflite_models["uint8"]
    (spec,) = input_specs(prog, m)
    assert (spec.layout, spec.shape, spec.dtypes) == ("NHWC", (1, 8, 8, 3), ("uint8",))
    assert spec.describe() == "NHWC uint8 [1, 8, 8, 3]"
    (blob,) = blob_specs(prog)  # the blob alone knows the layout, not the model's type
    assert blob.describe() == "NHWC uint8, int8 or float32 [1, 8, 8, 3]"
    _, fprog = tflite_models["float"]
    assert input_specs(fprog, tflite_models["float"][0])[0].describe() == "NHWC float32 [1, 8, 8, 3]"


def test_nhwc_uint8_codes_bind_as_the_same_codes_and_match_the_interpreter(tflite_models):
    """An image as read from disk gives the program exactly its codes (uint8 = int8 + 128), and the outputs
    equal the interpreter's on that image."""
    pytest.importorskip("ai_edge_litert")
    m, prog = tflite_models["uint8"]
    img = _image()
    inputs = to_program(prog, {"input": img}, m)
    (buf,) = prog.buffers_of("input")
    assert inputs["input"].shape == (1, 3, 8, 8)
    codes = np.rint(inputs["input"] / buf.scale) + buf.zero_point
    assert np.array_equal(codes, np.transpose(img.astype(np.int64) - 128, (0, 3, 1, 2)))
    as_int8 = to_program(prog, {"input": (img.astype(np.int16) - 128).astype(np.int8)})  # blob alone: int8 codes
    assert np.allclose(as_int8["input"], inputs["input"], rtol=0, atol=1e-12)
    rep = validate(prog, m, inputs)
    for met in rep.metrics.values():
        assert met.exact == 1.0, met.text()


@pytest.mark.parametrize("array,wrong", [
    (np.zeros((1, 3, 8, 8), np.uint8), "shape"),  # NCHW: silently taken before
    (np.zeros((1, 8, 8, 3), np.float32), "type"),
    (np.zeros((1, 8, 8, 3), np.int8), "type"),
    (np.zeros((1, 3, 8, 8), np.float32), "shape and type"),
])
def test_an_array_not_in_the_models_terms_is_one_line_naming_what_it_takes(tflite_models, array, wrong):
    m, prog = tflite_models["uint8"]
    with pytest.raises(DataError) as e:
        to_program(prog, {"input": array}, m, what="--input")
    msg = str(e.value)
    assert len(msg.splitlines()) == 1 and f"has the wrong {wrong}:" in msg
    assert msg.endswith("the model takes NHWC uint8 [1, 8, 8, 3]"), msg


def test_without_the_model_a_tflite_blob_takes_codes_or_values_in_nhwc(tflite_models):
    _, prog = tflite_models["uint8"]
    (buf,) = prog.buffers_of("input")
    x = np.random.default_rng(1).standard_normal((1, 8, 8, 3)).astype(np.float32)
    got = to_program(prog, {"input": x})["input"]
    assert np.array_equal(got, np.transpose(x, (0, 3, 1, 2)))
    with pytest.raises(DataError, match="the blob takes NHWC uint8, int8 or float32"):
        to_program(prog, {"input": np.transpose(x, (0, 3, 1, 2))})
    with pytest.raises(DataError, match="no such input"):
        to_program(prog, {"image": x})
    assert buf.dtype == "int8"


def test_an_onnx_model_keeps_its_nchw_floats():
    model = _conv_model()
    prog = compile(model, CompileOptions(mem_align=128))
    (spec,) = input_specs(prog, model)
    assert spec.describe() == "NCHW float32 [1, 3, 8, 8]" and blob_specs(prog) == [spec]
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8))
    assert to_program(prog, {"input": x}, model)["input"] is not None  # float64 is a float array too
    with pytest.raises(DataError, match=r"uint8 \[1, 3, 8, 8\] has the wrong type: the model takes NCHW float32"):
        to_program(prog, {"input": np.zeros((1, 3, 8, 8), np.uint8)}, model)


def test_seeded_inputs_of_a_tflite_program_are_uniform_over_its_int8_codes(tflite_models):
    """Uniform over the codes (every code about equally often), dequantized so binding gives the codes back;
    the same seed gives the same inputs; an ONNX float model's stay standard normal."""
    _, prog = tflite_models["int8"]
    (buf,) = prog.buffers_of("input")
    big = buf.__class__(**{**vars(buf), "shape": (1, 3, 64, 64)})
    from npusim.runtime import random_input

    x = random_input(big, np.random.default_rng(0), codes=True)
    q = (x / buf.scale) + buf.zero_point
    assert np.allclose(q, np.rint(q), atol=1e-6)
    counts = np.bincount(np.rint(q).astype(np.int64).reshape(-1) + 128, minlength=256)
    assert counts.size == 256 and counts.min() > 20 and counts.max() < 90  # 12288 draws, 48 per code
    a, b = seeded_inputs(prog, 3), seeded_inputs(prog, 3)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["input"], seeded_inputs(prog, 4)["input"])
    onnx_prog = compile(_conv_model(), CompileOptions(mem_align=128))
    z = seeded_inputs(onnx_prog, 0)["input"]
    assert z.dtype == np.float32 and np.array_equal(z, np.random.default_rng(0).standard_normal((1, 3, 8, 8))
                                                    .astype(np.float32))


def test_cli_run_and_validate_take_an_nhwc_uint8_image(tflite_models, tmp_path, capfd):
    pytest.importorskip("ai_edge_litert")
    m, prog = tflite_models["uint8"]
    (tmp_path / "m.tflite").write_bytes(m)
    (tmp_path / "m.npu").write_bytes(encode_blob(prog, load_profile()))
    np.save(tmp_path / "img.npy", _image(2))
    np.save(tmp_path / "nchw.npy", np.transpose(_image(2), (0, 3, 1, 2)))
    assert main(["run", str(tmp_path / "m.npu"), "--input", f"input={tmp_path / 'img.npy'}"]) == 0
    out = capfd.readouterr()
    assert "no --input" not in out.err
    code = main(["validate", str(tmp_path / "m.npu"), "--reference", str(tmp_path / "m.tflite"),
                 "--input", f"input={tmp_path / 'img.npy'}"])
    out = capfd.readouterr().out
    assert code == 0 and "exact=100.00%" in out, out
    for cmd in (["run", str(tmp_path / "m.npu")],
                ["validate", str(tmp_path / "m.npu"), "--reference", str(tmp_path / "m.tflite")]):
        assert main([*cmd, "--input", f"input={tmp_path / 'nchw.npy'}"]) == 65
        err = capfd.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "has the wrong shape" in err[0] and "NHWC" in err[0], err
    assert main(["run", str(tmp_path / "m.npu"), "--random-input"]) == 0
    assert main(["run", str(tmp_path / "m.npu")]) == 0
    assert "uniform over the int8 codes" in capfd.readouterr().err


def test_a_program_input_the_model_lacks_is_named():
    from npusim.zoo.tflite_writer import TFLiteWriter

    t = TFLiteWriter()
    x = t.tensor("image", [1, 8, 8, 3], "int8", scale=0.05, zero_point=0)
    y = t.tensor("y", [1, 8, 8, 3], "int8", scale=0.05, zero_point=0)
    t.op("RELU", [x], [y])
    prog = compile(_conv_model(), CompileOptions(mem_align=128))
    with pytest.raises(DataError, match="input 'input' of the program is not an input of the model"):
        input_specs(prog, t.finish([x], [y]))


def test_stress_frames_are_in_the_models_own_layout(tflite_models, tmp_path, capsys):
    _, prog = tflite_models["uint8"]
    (tmp_path / "m.npu").write_bytes(encode_blob(prog, load_profile()))
    frames = tmp_path / "frames"
    frames.mkdir()
    for i in range(2):
        np.save(frames / f"f{i}.npy", _image(i))
    assert main(["stress", str(tmp_path / "m.npu"), "-n", "4", "--inputs", str(frames)]) == 0
    capsys.readouterr()
    np.save(frames / "nchw.npy", np.transpose(_image(3), (0, 3, 1, 2)))
    assert main(["stress", str(tmp_path / "m.npu"), "-n", "2", "--inputs", str(frames)]) == 65
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "match no program" in err[0] and "NHWC" in err[0], err
    (frames / "nchw.npy").unlink()
    np.save(frames / "bool.npy", np.zeros((1, 8, 8, 3), np.bool_))
    assert main(["stress", str(tmp_path / "m.npu"), "-n", "2", "--inputs", str(frames)]) == 65
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has the wrong type" in err[0], err


def test_from_program_gives_back_what_to_program_takes(tflite_models):
    from npusim.model_inputs import from_program

    _, prog = tflite_models["uint8"]
    x = seeded_inputs(prog, 0)
    back = from_program(prog, x)
    assert back["input"].shape == (1, 8, 8, 3)
    assert np.array_equal(to_program(prog, back)["input"], x["input"])


def test_doctor_takes_a_tflite_models_nhwc_image(tflite_models, tmp_path, capfd):
    """The accuracy step checks the image, and the stability step's frames (written for stress --inputs) are in
    the model's layout too."""
    pytest.importorskip("ai_edge_litert")
    m, _ = tflite_models["uint8"]
    (tmp_path / "m.tflite").write_bytes(m)
    np.save(tmp_path / "img.npy", _image(4))
    code = main(["doctor", str(tmp_path / "m.tflite"), "--input", f"input={tmp_path / 'img.npy'}", "--no-parallel"])
    out = capfd.readouterr().out
    assert code == 0 and "stability" in out and "on the --input arrays" in out, out


def test_a_photo_binds_an_image_input_as_the_pixels_resized_to_it(tflite_models, tmp_path, capfd):
    """`--input NAME=photo.png`: decoded, resized (bilinear) to the input's height and width, uint8 codes the
    pixels and int8 codes the pixels - 128; the run equals the one on the same pixels given as .npy."""
    from PIL import Image

    from npusim.model_inputs import image_targets
    from npusim.tools.inputs import load_inputs

    pytest.importorskip("ai_edge_litert")
    big = np.random.default_rng(3).integers(0, 256, size=(32, 40, 3)).astype(np.uint8)
    Image.fromarray(big).save(tmp_path / "photo.png")
    want = np.asarray(Image.fromarray(big).resize((8, 8), Image.BILINEAR), np.uint8)[None]
    for io, codes in (("uint8", want), ("int8", (want.astype(np.int16) - 128).astype(np.int8))):
        m, prog = tflite_models[io]
        got = load_inputs([f"input={tmp_path / 'photo.png'}"], image_targets(input_specs(prog, m)))["input"]
        assert got.dtype == codes.dtype and np.array_equal(got, codes), io
    m, prog = tflite_models["uint8"]
    (tmp_path / "m.tflite").write_bytes(m)
    (tmp_path / "m.npu").write_bytes(encode_blob(prog, load_profile()))
    np.save(tmp_path / "same.npy", want)
    outs = []
    for f in ("photo.png", "same.npy"):
        assert main(["run", str(tmp_path / "m.npu"), "--input", f"input={tmp_path / f}", "--outputs",
                     str(tmp_path / f"out_{f}")]) == 0
        outs.append({p.name: np.load(p) for p in sorted((tmp_path / f"out_{f}").glob("*.npy"))})
    assert outs[0].keys() == outs[1].keys() and outs[0]
    assert all(np.array_equal(outs[0][k], outs[1][k]) for k in outs[0])
    code = main(["validate", str(tmp_path / "m.npu"), "--reference", str(tmp_path / "m.tflite"),
                 "--input", f"input={tmp_path / 'photo.png'}"])
    assert code == 0 and "exact=100.00%" in capfd.readouterr().out


def test_a_photo_an_input_cannot_take_is_one_line(tflite_models, tmp_path, capfd):
    from PIL import Image

    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(tmp_path / "p.png")
    (tmp_path / "notes.txt").write_text("not a picture\n")
    _, prog = tflite_models["float"]
    m, _ = tflite_models["float"]
    (tmp_path / "f.tflite").write_bytes(m)
    (tmp_path / "f.npu").write_bytes(encode_blob(prog, load_profile()))
    for args, needle in (([f"input={tmp_path / 'p.png'}"], "a photo binds an 8-bit"),
                         ([f"image={tmp_path / 'p.png'}"], "no such input"),
                         ([f"input={tmp_path / 'notes.txt'}"], "not a .npy array nor a photo")):
        assert main(["validate", str(tmp_path / "f.npu"), "--reference", str(tmp_path / "f.tflite"),
                     "--input", *args]) == 65, args
        err = capfd.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], err


@pytest.mark.slow  # a whole ST validate (~4 CPU s); binding a photo: test_a_photo_binds_an_image_input_as_the_pixels_resized_to_it
def test_st_validate_takes_a_photo_for_the_tflite_models_input(tmp_path, capfd):
    """An ST output validated against its source model on a photo: the image is resized to the model's
    NHWC input and bound as its codes, the same as the equal .npy."""
    from PIL import Image

    from test_stedgeai_ecblob import SHARED

    pytest.importorskip("ai_edge_litert")
    st = SHARED / "st_ic_mnv1_nucleo"
    if not st.is_dir():
        pytest.skip("../shared/stedgeai is not here")
    from npusim.tools.st_validate import _reference_io

    model = next(st.glob("*.tflite"))
    (name, shape, dtype), = _reference_io(str(model))[0]
    photo = np.random.default_rng(5).integers(0, 256, size=(70, 50, 3)).astype(np.uint8)
    Image.fromarray(photo).save(tmp_path / "p.jpg")
    pixels = np.asarray(Image.open(tmp_path / "p.jpg").convert("RGB").resize(shape[2:0:-1], Image.BILINEAR))
    np.save(tmp_path / "p.npy", (pixels if dtype == np.uint8 else (pixels.astype(np.int16) - 128).astype(dtype))[None])
    outs = []
    for f in ("p.jpg", "p.npy"):
        assert main(["validate", str(st), "--reference", str(model), "--input", f"{name}={tmp_path / f}"]) == 0
        outs.append(capfd.readouterr().out)
    assert "PASS" in outs[0] and outs[0] == outs[1]
