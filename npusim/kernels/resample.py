"""Resize (run by a pooling unit): nearest (floor) and bilinear, ONNX Resize coordinate modes.

The source coordinate of output index o (in n -> out m) is an exact rational num/den:
  asymmetric     o * n / m
  half_pixel     (o + 0.5) * n / m - 0.5
  align_corners  o * (n - 1) / (m - 1)   (0 when m == 1)
nearest: index = floor(num / den), clamped to [0, n-1] (ONNX nearest_mode=floor).
bilinear: the coordinate is clamped to [0, n-1] (like ONNX Runtime), x0 = floor, x1 = min(x0+1, n-1).
  int8: X = round_half_up(coord * 2^11) in fixed point with 11 fractional bits, fx = X & 2047;
        y = (sum v_ij * wx_i * wy_j + 2^21) >> 22 with wx = (2048 - fx, fx), round half up.
        Input and output share scale and zero point, so no zero point enters the math.
  float: weights and sum in float32 (ONNX Runtime's formula), rounded to the input dtype.
int8 bilinear is a Numba loop (`resample_int8._bilinear_int8`, no temporaries); float bilinear works a band of output
rows at a time, so its wide temporaries stay bounded.
"""

from __future__ import annotations

import functools

import numpy as np

from ..errors import UsageError
from .tiles import row_bands

FRAC_BITS = 11
ONE = 1 << FRAC_BITS
COORDS = ("asymmetric", "half_pixel", "align_corners")
MODES = ("nearest", "bilinear")


def source_coords(n: int, m: int, coord: str) -> tuple[np.ndarray, np.ndarray]:
    """(num, den) int64 arrays: the exact source coordinate num/den of each output index."""
    o = np.arange(m, dtype=np.int64)
    if coord == "asymmetric":
        return o * n, np.full(m, m, dtype=np.int64)
    if coord == "half_pixel":
        return (2 * o + 1) * n - m, np.full(m, 2 * m, dtype=np.int64)
    if coord == "align_corners":
        if m == 1:
            return np.zeros(1, dtype=np.int64), np.ones(1, dtype=np.int64)
        return o * (n - 1), np.full(m, m - 1, dtype=np.int64)
    raise UsageError(f"resize: unknown coordinate mode {coord!r} (expected {', '.join(COORDS)})")


def nearest_index(n: int, m: int, coord: str) -> np.ndarray:
    num, den = source_coords(n, m, coord)
    return np.clip(num // den, 0, n - 1)


def fixed_coords(n: int, m: int, coord: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x0, x1, fx) of the int8 bilinear path: fx in [0, 2048) with 11 fractional bits."""
    num, den = source_coords(n, m, coord)
    x = np.clip((2 * num * ONE + den) // (2 * den), 0, (n - 1) * ONE)
    x0 = x >> FRAC_BITS
    return x0, np.minimum(x0 + 1, n - 1), x & (ONE - 1)


@functools.lru_cache(maxsize=256)
def _kept_fixed_coords(n: int, m: int, coord: str) -> tuple:
    """`fixed_coords`, read-only, worked out once per (n, m, coord) (a program resizes the same maps every run)."""
    got = fixed_coords(n, m, coord)
    for a in got:
        a.setflags(write=False)
    return got


def float_coords(n: int, m: int, coord: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x0, x1, fx) of the float bilinear path: fx float32 in [0, 1)."""
    num, den = source_coords(n, m, coord)
    x = np.clip(num / den, 0.0, float(n - 1))
    x0 = np.floor(x).astype(np.int64)
    return x0, np.minimum(x0 + 1, n - 1), (x - x0).astype(np.float32)


def resize(x, out_h: int, out_w: int, mode: str = "nearest", coord: str = "asymmetric") -> np.ndarray:
    """Resize an [H][W][C] tensor (int8, fp16 or fp32) to [out_h][out_w][C] (module doc)."""
    x = np.asarray(x)
    if x.ndim != 3:
        raise UsageError(f"resize: x must be [H][W][C], got shape {x.shape}")
    if mode not in MODES:
        raise UsageError(f"resize: unknown mode {mode!r} (expected {', '.join(MODES)})")
    if coord not in COORDS:
        raise UsageError(f"resize: unknown coordinate mode {coord!r} (expected {', '.join(COORDS)})")
    out_h, out_w = int(out_h), int(out_w)
    if out_h < 1 or out_w < 1:
        raise UsageError(f"resize: output size {out_h}x{out_w} must be >= 1")
    h, w, _ = x.shape
    if mode == "nearest":
        return np.ascontiguousarray(x[nearest_index(h, out_h, coord)][:, nearest_index(w, out_w, coord)])
    c = x.shape[2]
    if x.dtype == np.int8:
        from .resample_int8 import _bilinear_int8  # Numba only when an int8 resize runs

        out = np.empty((out_h, out_w, c), dtype=np.int8)
        _bilinear_int8(np.ascontiguousarray(x), *_kept_fixed_coords(h, out_h, coord),
                       *_kept_fixed_coords(w, out_w, coord), FRAC_BITS, out)
        return out
    if x.dtype.kind != "f":
        raise UsageError(f"resize: unsupported dtype {x.dtype}")
    y0, y1, fy = float_coords(h, out_h, coord)
    x0, x1, fx = float_coords(w, out_w, coord)
    dx1, dx2 = fx[None, :, None], (np.float32(1) - fx)[None, :, None]
    out = np.empty((out_h, out_w, c), dtype=x.dtype)
    for r0, r1 in row_bands(out_h, out_w * c * 4 * 8):  # float32 temporaries of one band of rows
        top, bot = x[y0[r0:r1]].astype(np.float32), x[y1[r0:r1]].astype(np.float32)
        dy1, dy2 = fy[r0:r1][:, None, None], (np.float32(1) - fy[r0:r1])[:, None, None]
        out[r0:r1] = top[:, x0] * dx2 * dy2 + top[:, x1] * dx1 * dy2 + bot[:, x0] * dx2 * dy1 + bot[:, x1] * dx1 * dy1
    return out
