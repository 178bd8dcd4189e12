"""Input binding for the CLI and tools: `NAME=FILE` arguments, FILE a .npy array or a photo (seeded inputs:
`runtime.seeded_inputs`).

A photo (PNG, JPEG, BMP, GIF, TIFF, WebP, PPM/PGM: anything Pillow opens) binds an 8-bit image input: it is
decoded to RGB (3 channels) or grayscale (1 channel), resized to the input's height and width with bilinear
filtering, and given as the input's codes: uint8 codes are the pixels, int8 codes the pixels minus 128 (the
TFLite convention for int8 image models). An input taking floats is refused: its preprocessing (mean, scale)
belongs to the model's application, so give it as a .npy."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import DataError, UsageError
from ..model_inputs import ImageTarget


_NPY_MAGIC = b"\x93NUMPY"
MAX_PHOTO_PIXELS = 1 << 26  # a photo larger than this (64 Mpixel) is refused before it is decoded


def _photo_fits(where: str, im, target: ImageTarget | None) -> tuple[int, int, int]:
    """(height, width, channels) the photo becomes; a photo the input cannot take is refused in one line
    (checked before any pixel is decoded)."""
    if target is None:
        raise DataError(f"{where}: a photo needs the input's shape, which this command does not know; give a .npy")
    if target.dtype not in ("uint8", "int8") or target.layout not in ("NHWC", "NCHW") or len(target.shape) != 4:
        raise DataError(f"{where}: a photo binds an 8-bit NHWC or NCHW image input; this one takes "
                        f"{target.layout or 'an array of'} {target.dtype} {list(target.shape)} (give a .npy with "
                        f"the model's own preprocessing)")
    n, h, w, c = target.shape if target.layout == "NHWC" else (target.shape[0], *target.shape[2:], target.shape[1])
    if min(target.shape) < 1:
        raise DataError(f"{where}: the model leaves this input's size open ({list(target.shape)}); give a .npy")
    if c not in (1, 3) or n != 1:
        raise DataError(f"{where}: a photo binds one RGB or grayscale image; this input is {target.layout} "
                        f"{list(target.shape)}")
    if im.width * im.height > MAX_PHOTO_PIXELS:
        raise DataError(f"{where}: {im.width}x{im.height} pixels, more than npusim decodes ({MAX_PHOTO_PIXELS}); "
                        "resize it first")
    return h, w, c


def _photo(name: str, path: Path, target: ImageTarget | None) -> np.ndarray:
    """The photo at `path` as the input's codes (module doc)."""
    from PIL import Image, UnidentifiedImageError

    where = f"--input {name}: {path}"
    try:
        with Image.open(path) as im:
            h, w, c = _photo_fits(where, im, target)
            pixels = np.asarray(im.convert("RGB" if c == 3 else "L").resize((w, h), Image.BILINEAR), np.uint8)
    except DataError:
        raise
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as e:
        raise DataError(f"{where}: not a .npy array nor a photo Pillow reads ({' '.join(str(e).split())})") from None
    pixels = pixels.reshape(h, w, c)
    codes = pixels if target.dtype == "uint8" else (pixels.astype(np.int16) - 128).astype(np.int8)
    return (codes if target.layout == "NHWC" else codes.transpose(2, 0, 1))[None]


def load_inputs(items, targets: dict[str, ImageTarget] | None = None) -> dict[str, np.ndarray]:
    """['x=in.npy', 'image=photo.jpg', ...] -> {name: array}: a plain (non-pickled) .npy array, or a photo
    made into the codes of the input `targets[name]` describes (module doc)."""
    out = {}
    for item in items or ():
        if "=" not in item:
            raise UsageError(f"--input {item!r}: expected NAME=FILE (a .npy array or a photo)")
        name, path = (s.strip() for s in item.split("=", 1))
        if name in out:
            raise UsageError(f"--input {name}: given twice (bind each input once)")
        p = Path(path)
        if p.is_dir():
            raise DataError(f"--input {name}: {path} is a folder, not a .npy file")
        if not p.is_file():
            raise DataError(f"--input {name}: {path}: no such file")
        try:
            with open(p, "rb") as fh:
                magic = fh.read(len(_NPY_MAGIC))
        except OSError as e:
            raise DataError(f"--input {name}: {path}: cannot read ({e.strerror or e})") from None
        if magic != _NPY_MAGIC:
            if targets is not None and name not in targets:
                raise DataError(f"--input {name}: the model has no such input (its inputs: {', '.join(targets) or 'none'})")
            out[name] = _photo(name, p, (targets or {}).get(name))
            continue
        try:
            out[name] = np.load(path, mmap_mode="r", allow_pickle=False)  # shape checked before reading
        except (ValueError, OSError, EOFError) as e:
            raise DataError(f"--input {name}: {path}: not a .npy array ({' '.join(str(e).split())})") from None
    return out
