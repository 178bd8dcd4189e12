"""`npusim run ST_OUTPUT --outputs DIR`: the values of ST's own program without a reference model (inputs by
ST's buffer names, .npy or photo, seeded otherwise), and its refusals (one line, documented exit codes)."""

from __future__ import annotations

import numpy as np
import pytest

from npusim.cli import main
from npusim.errors import EXIT_INVALID_INPUT, EXIT_USAGE
from test_stedgeai_ecblob import SHARED, needs_shared

pytestmark = needs_shared

MNV1 = SHARED / "st_ic_mnv1_nucleo"
INPUT = "Input_0_out_0"  # its one input buffer: uint8, mem_shape (1, 96, 96, 3)
OUTPUT = "Dequantize_133_out_0"  # its one output buffer: float32 (1, 5)


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def mnv1():
    from npusim.importers.stedgeai import load

    return load(MNV1)


def program_values(out, x):
    from npusim.importers.stedgeai.execute import run

    return run(out, {INPUT: x}).outputs[OUTPUT]


def test_outputs_are_the_program_run_on_the_given_input(capsys, tmp_path, mnv1):
    xs = [np.random.default_rng(s).integers(0, 256, (1, 96, 96, 3), dtype=np.uint8) for s in (1, 2)]
    got = []
    for k, x in enumerate(xs):
        np.save(tmp_path / f"x{k}.npy", x)
        code, out, err = cli(capsys, "run", MNV1, "--input", f"{INPUT}={tmp_path / f'x{k}.npy'}",
                             "--outputs", tmp_path / f"o{k}")
        assert code == 0, err
        assert "values from the functional run" in out and "no values" not in out
        assert "no --input" not in err and "wrote 1 output(s)" in err
        a = np.load(tmp_path / f"o{k}" / f"{OUTPUT}.npy")
        assert a.dtype == np.float32 and a.shape == (1, 5)
        np.testing.assert_array_equal(a, program_values(mnv1, x))
        got.append(a)
    assert not np.array_equal(*got)  # the input given is the one run


def test_float_input_is_quantised_by_the_buffers_scale(capsys, tmp_path, mnv1):
    b = next(b for b in mnv1.buffers if b.name == INPUT)
    codes = np.random.default_rng(3).integers(0, 256, (1, 96, 96, 3), dtype=np.uint8)
    real = ((codes.astype(np.float64) - b.zero_point[0]) * b.scale[0]).astype(np.float32)
    np.save(tmp_path / "x.npy", real)
    code, _, err = cli(capsys, "run", MNV1, "--input", f"{INPUT}={tmp_path / 'x.npy'}", "--outputs", tmp_path / "o")
    assert code == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "o" / f"{OUTPUT}.npy"), program_values(mnv1, codes))


def test_photo_binds_the_image_buffer(capsys, tmp_path, mnv1):
    from PIL import Image

    rng = np.random.default_rng(4)
    Image.fromarray(rng.integers(0, 256, (70, 130, 3), dtype=np.uint8)).save(tmp_path / "p.png")
    code, _, err = cli(capsys, "run", MNV1, "--input", f"{INPUT}={tmp_path / 'p.png'}", "--outputs", tmp_path / "o")
    assert code == 0, err
    with Image.open(tmp_path / "p.png") as im:
        pixels = np.asarray(im.convert("RGB").resize((96, 96), Image.BILINEAR), np.uint8)[None]
    np.testing.assert_array_equal(np.load(tmp_path / "o" / f"{OUTPUT}.npy"), program_values(mnv1, pixels))


def test_seeded_inputs_are_noted_and_deterministic(capsys, tmp_path):
    files = []
    for k, seed in enumerate((5, 5, 6)):
        code, _, err = cli(capsys, "run", MNV1, "--seed", seed, "--outputs", tmp_path / f"o{k}")
        assert code == 0 and f"no --input for '{INPUT}': seeded random codes (seed {seed})" in err
        files.append(np.load(tmp_path / f"o{k}" / f"{OUTPUT}.npy"))
    np.testing.assert_array_equal(files[0], files[1])
    assert not np.array_equal(files[0], files[2])
    code, _, err = cli(capsys, "run", MNV1, "--random-input", "--outputs", tmp_path / "o3")
    assert code == 0 and "no --input" not in err


@pytest.mark.parametrize("case, code, needle", [
    ("unknown name", EXIT_INVALID_INPUT, "no input buffer of that name (its inputs: Input_0_out_0)"),
    ("wrong type", EXIT_INVALID_INPUT, "int16 values given, the buffer holds uint8"),
    ("NCHW", EXIT_INVALID_INPUT, "shape [1, 3, 96, 96], the buffer holds [1, 96, 96, 3]"),
    ("input without outputs", EXIT_USAGE, "add --outputs DIR"),
    ("timing-only", EXIT_USAGE, "a --timing-only run computes no values"),
    ("no weight image", EXIT_INVALID_INPUT, "no weight image for pool(s) octoFlash"),
])
def test_refusals_are_one_line(capsys, tmp_path, case, code, needle):
    x = np.zeros((1, 96, 96, 3), np.uint8)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "x16.npy", x.astype(np.int16))
    np.save(tmp_path / "nchw.npy", x.transpose(0, 3, 1, 2))
    o = ("--outputs", tmp_path / "o")
    argv = {"unknown name": (MNV1, "--input", f"image={tmp_path / 'x.npy'}", *o),
            "wrong type": (MNV1, "--input", f"{INPUT}={tmp_path / 'x16.npy'}", *o),
            "NCHW": (MNV1, "--input", f"{INPUT}={tmp_path / 'nchw.npy'}", *o),
            "input without outputs": (MNV1, "--input", f"{INPUT}={tmp_path / 'x.npy'}"),
            "timing-only": (MNV1, "--timing-only", *o),
            "no weight image": (SHARED / "ei_person_logo_od_nonec", *o)}[case]
    got, out, err = cli(capsys, "run", *argv)
    assert got == code and needle in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_inspect_names_the_buffers_run_binds_and_the_weight_images(capsys):
    code, out, _ = cli(capsys, "inspect", MNV1)
    assert code == 0
    head = out.split("\n\n")[0].splitlines()
    assert f"input {INPUT}: uint8 [1, 96, 96, 3], scale 0.00784314 zero point 127" in head
    assert f"output {OUTPUT}: float32 [1, 5]" in head and "weight images: octoFlash" in head
    code, out, _ = cli(capsys, "inspect", SHARED / "ei_person_logo_od_nonec")
    assert "weight images: none (values need them: validate, run --outputs)" in out.split("\n\n")[0]
