"""How far apart the model's own runtimes are, beside ST's program: for an ST Edge AI output with its source
TFLite model, the cosine of every output between each pair of {ST's program (npusim's functional run), the
TFLite interpreter's builtin kernels, its reference kernels, its default (XNNPACK) kernels}, on one input.

When TFLite's own kernel sets part as far as ST's program does from any of them, the output is
ill-conditioned on that input (a one-step difference early grows with depth), and a cosine goal against one
kernel set says nothing about ST's program. The input is seeded noise (validate's default) or a photograph:
by default matplotlib's bundled sample photo of a person, resized to the model's input.

    python scripts/st_reference_spread.py ../shared/stedgeai/st_pose_movenet192_dk
    python scripts/st_reference_spread.py DIR --input seeded --seed 3
    python scripts/st_reference_spread.py DIR --input photo.jpg
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from pathlib import Path

import numpy as np

KERNEL_SETS = ("builtin", "reference", "auto")


def sample_photo() -> Path:
    import matplotlib

    return Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg"


def photo_input(path: Path, shape, dtype) -> np.ndarray:
    """An RGB photo resized to an NHWC image input's height and width, as the input's 8-bit codes."""
    from PIL import Image

    _, h, w, c = shape
    if c != 3 or np.dtype(dtype) not in (np.uint8, np.int8):
        raise SystemExit(f"the model's input is {list(shape)} {np.dtype(dtype)}: a photo binds an NHWC 8-bit RGB input")
    pixels = np.asarray(Image.open(path).convert("RGB").resize((w, h), Image.BILINEAR), np.uint8)
    codes = pixels if np.dtype(dtype) == np.uint8 else (pixels.astype(np.int16) - 128).astype(np.int8)
    return codes[None]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    den = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / den) if den else float(np.array_equal(a, b))


def spread(folder: Path, model: Path, arrays: list) -> dict:
    """{output name: {(run a, run b): cosine}} over ST's program and the interpreter's kernel sets."""
    from npusim.importers.stedgeai import execute, load
    from npusim.tools import st_validate as sv

    runs = {k: {n: v for n, v, _ in sv.reference_outputs(str(model), arrays, kernels=k)} for k in KERNEL_SETS}
    out = load(folder)
    run = execute.run(out, sv.st_inputs(out, arrays))
    sim = [sv._dequantised(b, run.outputs[b.name]) for b in out.buffers if b.role == "output"]
    names = list(runs["builtin"])
    runs["st"] = {n: s.reshape(runs["builtin"][n].shape) for n, s in zip(names, sim)}
    return {n: {(a, b): cosine(runs[a][n], runs[b][n]) for a, b in itertools.combinations(list(runs), 2)}
            for n in names}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="an ST Edge AI output folder holding its source .tflite")
    ap.add_argument("--input", default="photo", help="'photo' (matplotlib's sample photo), 'seeded', or an image file")
    ap.add_argument("--seed", type=int, default=0, help="seed of the 'seeded' input")
    a = ap.parse_args(argv)
    models = sorted(a.folder.glob("*.tflite"))
    if not models:
        raise SystemExit(f"{a.folder}: no source .tflite beside the compile")
    from npusim.tools import st_validate as sv

    if a.input == "seeded":
        arrays, what = sv.seeded_model_inputs(str(models[0]), a.seed), f"seeded input (seed {a.seed})"
    else:
        ins, _ = sv._reference_io(str(models[0]))
        if len(ins) != 1:
            raise SystemExit("a photo binds a model of one input; use --input seeded")
        path = sample_photo() if a.input == "photo" else Path(a.input)
        arrays, what = [photo_input(path, ins[0][1], ins[0][2])], f"photo {path.name}"
    print(f"{a.folder.name} on {what}: cosine between each pair of runs, per output")
    for name, pairs in spread(a.folder, models[0], arrays).items():
        print(f"  {name}")
        for (x, y), c in pairs.items():
            print(f"    {x:>9} ~ {y:<9} {c:.4f}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
