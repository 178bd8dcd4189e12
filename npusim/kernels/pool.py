"""Pooling unit: max, average and global average over [H][W][C] tensors.

k = (kh, kw), stride = (sh, sw), pads = (top, left, bottom, right); output size = ONNX floor mode.
max: padding never wins (a window with no valid cell gives the dtype's lowest value).
int8 average (exact integers, see isa POOL):
  S = sum(x - in_zp) over the valid cells; count = kh*kw (include_pad) or the valid cells
  y = clamp(round(out_zp + S * mult / (count << shift)), -128, 127), rounded by `rounding`:
  half_up: floor(v + 1/2); half_away: sign(v) * floor(|v| + 1/2) (TFLite's AVERAGE_POOL_2D, which rounds
  the raw window sum, zero point included). Exact: n = S * mult + out_zp * (count << shift) over
  d = count << shift; int64 when that cannot overflow, else Python ints.
float average: mean in float32, then rounded to the input dtype.
Averages work a band of output rows at a time (`tiles.row_bands`): no temporary grows with the map.
An int8 max pool of a blocked16 stream runs on its planes (`maxpool_planes`, Numba): no unpack or pack.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..errors import UsageError
from .conv import conv_out_size
from .quant import ROUNDINGS, round_div
from .tiles import row_bands

_INT64_SAFE = 1 << 62


def pool_out_size(n: int, k: int, stride: int, pad_a: int, pad_b: int) -> int:
    return conv_out_size(n, k, stride, 1, pad_a, pad_b)


def _geometry(x, k, stride, pads):
    x = np.asarray(x)
    if x.ndim != 3:
        raise UsageError(f"pool: x must be [H][W][C], got shape {x.shape}")
    kh, kw = (int(k), int(k)) if np.isscalar(k) else (int(k[0]), int(k[1]))
    sh, sw = (int(stride), int(stride)) if np.isscalar(stride) else (int(stride[0]), int(stride[1]))
    pt, pl, pb, pr = (int(p) for p in pads)
    if min(kh, kw, sh, sw) < 1 or min(pt, pl, pb, pr) < 0:
        raise UsageError(f"pool: bad kernel {k!r}, stride {stride!r} or pads {pads!r}")
    h, w, _ = x.shape
    oh, ow = pool_out_size(h, kh, sh, pt, pb), pool_out_size(w, kw, sw, pl, pr)
    if oh < 1 or ow < 1:
        raise UsageError(f"pool: empty output {oh}x{ow} for input {h}x{w}, kernel {kh}x{kw}")
    return x, (kh, kw, sh, sw, pt, pl, pb, pr, oh, ow)


def _windows(xp, g):
    """Yield the strided [OH][OW][C] view of every kernel cell of the padded input."""
    kh, kw, sh, sw, _, _, _, _, oh, ow = g
    for i in range(kh):
        for j in range(kw):
            yield xp[i:i + (oh - 1) * sh + 1:sh, j:j + (ow - 1) * sw + 1:sw, :]


def _pad(x, g, value):
    """x padded with `value` (x itself when there is no padding: callers only read it)."""
    _, _, _, _, pt, pl, pb, pr, _, _ = g
    if not (pt or pl or pb or pr):
        return x
    return np.pad(x, ((pt, pb), (pl, pr), (0, 0)), constant_values=value)


def maxpool(x, k, stride, pads=(0, 0, 0, 0)) -> np.ndarray:
    """Max over each window (int8, fp16 or fp32), same dtype (in place over one copy of the first
    window cell: no temporary per cell)."""
    x, g = _geometry(x, k, stride, pads)
    low = np.iinfo(x.dtype).min if x.dtype.kind == "i" else -np.inf
    xp = _pad(x, g, low)
    out = None
    for v in _windows(xp, g):
        if out is None:
            out = v.copy()
        else:
            np.maximum(out, v, out=out)
    return out.astype(x.dtype, copy=False)


def maxpool_planes(x, k, stride, pads=(0, 0, 0, 0)) -> np.ndarray:
    """`maxpool` of an int8 `layout.Planes` x ([P][H][W][B] planes holding C channels), on its planes:
    the result's planes [P][OH][OW][B] (lanes of the P*B - C padding channels 0), which are its
    blocked16 stream bytes when B is the block."""
    planes = np.ascontiguousarray(x.planes)
    if planes.dtype != np.int8:
        raise UsageError(f"maxpool_planes: int8 planes only, got {planes.dtype}")
    _, (kh, kw, sh, sw, pt, pl, _, _, oh, ow) = _geometry(np.empty(x.shape, np.int8), k, stride, pads)
    out = np.empty((planes.shape[0], oh, ow, planes.shape[3]), np.int8)
    _maxpool_planes(planes, x.c, kh, kw, sh, sw, pt, pl, out)
    return out


@njit(cache=True, nogil=True)
def _maxpool_planes(xp, c, kh, kw, sh, sw, pt, pl, out):
    """out [P][OH][OW][B] = the max over each window of int8 planes xp [P][H][W][B]: one output row of a
    plane at a time, as a run of OW*B lanes, each cell of the window maxed into it (cells in the
    padding skipped: padding never wins; a window without a valid cell stays -128); lanes of
    channels >= c are 0."""
    n_planes, h, wd, blk = xp.shape
    oh, ow = out.shape[1], out.shape[2]
    n = ow * blk
    for p in range(n_planes):
        for y in range(oh):
            orow = out[p, y].reshape(n)
            orow[:] = -128
            for i in range(kh):
                yy = y * sh + i - pt
                if yy < 0 or yy >= h:
                    continue
                xrow = xp[p, yy].reshape(wd * blk)
                for j in range(kw):
                    off = j - pl  # input column of output column xo: xo * sw + off
                    x_lo = max(0, (-off + sw - 1) // sw)
                    x_hi = min(ow, (wd - 1 - off) // sw + 1)
                    if x_hi <= x_lo:
                        continue
                    if sw == 1:  # runs between slices indexed from 0 (vectorised)
                        src = xrow[(x_lo + off) * blk:(x_hi + off) * blk]
                        dst = orow[x_lo * blk:x_hi * blk]
                        for t in range(dst.size):
                            dst[t] = max(dst[t], src[t])
                    else:
                        for xo in range(x_lo, x_hi):
                            i0 = (xo * sw + off) * blk
                            dst, src = orow[xo * blk:(xo + 1) * blk], xrow[i0:i0 + blk]
                            for b in range(blk):
                                dst[b] = max(dst[b], src[b])
    last = c - (n_planes - 1) * blk
    if n_planes and last < blk:
        out[n_planes - 1, :, :, last:] = 0


def _padded_band(x, g, o0: int, o1: int, value, dtype):
    """The padded input rows that output rows [o0, o1) read, as `dtype`, and their geometry."""
    kh, kw, sh, sw, pt, pl, pb, pr, oh, ow = g
    h, w, c = x.shape
    r0, r1 = o0 * sh, (o1 - 1) * sh + kh
    band = np.full((r1 - r0, w + pl + pr, c), value, dtype=dtype)
    s0, s1 = max(r0, pt), min(r1, pt + h)
    if s0 < s1:
        band[s0 - r0:s1 - r0, pl:pl + w] = x[s0 - pt:s1 - pt]
    return band, (kh, kw, sh, sw, pt, pl, pb, pr, o1 - o0, ow)


def _bands(g, c: int, itemsize: int):
    """Bands of output rows whose padded input and sums fit the kernels' band budget."""
    kh, kw, sh, sw, pt, pl, pb, pr, oh, ow = g
    return row_bands(oh, (ow + kw) * max(sh, 1) * c * itemsize * 3 + ow * c * itemsize * 2)


def _avg_requant(s, cnt, out_zp, mult, shift, rounding="half_up"):
    mult, shift, out_zp = int(mult), int(shift), int(out_zp)
    if not 0 <= shift <= 63 or mult < 0:
        raise UsageError(f"avgpool: shift {shift} must be in [0, 63] and mult {mult} >= 0")
    if rounding not in ROUNDINGS:
        raise UsageError(f"avgpool: unknown rounding {rounding!r} (expected one of {', '.join(ROUNDINGS)})")
    cmax = int(cnt.max(initial=1)) << shift
    bound = 2 * (int(np.abs(s).max(initial=0)) * mult + abs(out_zp) * cmax) + 2 * cmax
    if bound < _INT64_SAFE:
        d = cnt << shift
        q = round_div(s * mult + out_zp * d, d, rounding)
    else:  # exact Python-int arithmetic for extreme mult/shift/window sizes
        d = cnt.astype(object) * (1 << shift)
        q = round_div(s.astype(object) * mult + out_zp * d, d, rounding)
    q = np.minimum(np.maximum(q, -128), 127)
    return q.astype(np.int8)


def avgpool_int8(x, k, stride, pads, include_pad, in_zp, out_zp, mult, shift, rounding="half_up") -> np.ndarray:
    """int8 average pooling with integer rescale (module doc)."""
    x, g = _geometry(x, k, stride, pads)
    if x.dtype != np.int8:
        raise UsageError(f"avgpool_int8: x must be int8, got {x.dtype}")
    kh, kw = g[0], g[1]
    out = np.empty((g[8], g[9], x.shape[2]), dtype=np.int8)
    ones = np.ones(x.shape[:2] + (1,), dtype=np.int8)
    for o0, o1 in _bands(g, x.shape[2], 8):  # int64 sums of one band of output rows at a time
        xp, gb = _padded_band(x, g, o0, o1, int(in_zp), np.int64)
        xp -= int(in_zp)  # padded cells held in_zp: they contribute 0
        s = sum(_windows(xp, gb))
        if include_pad:
            cnt = np.full(s.shape[:2] + (1,), kh * kw, dtype=np.int64)
        else:
            cnt = sum(_windows(_padded_band(ones, g, o0, o1, 0, np.int64)[0], gb))
        out[o0:o1] = _avg_requant(s, cnt, out_zp, mult, shift, rounding)
    return out


def avgpool_float(x, k, stride, pads=(0, 0, 0, 0), include_pad=False) -> np.ndarray:
    """float average pooling: float32 sum / count, rounded to x's dtype."""
    x, g = _geometry(x, k, stride, pads)
    if x.dtype.kind != "f":
        raise UsageError(f"avgpool_float: x must be float, got {x.dtype}")
    kh, kw = g[0], g[1]
    out = np.empty((g[8], g[9], x.shape[2]), dtype=x.dtype)
    ones = np.ones(x.shape[:2] + (1,), dtype=np.float32)
    for o0, o1 in _bands(g, x.shape[2], 4):  # window order per output is the same in every band
        xp, gb = _padded_band(x, g, o0, o1, 0, np.float32)
        s = np.zeros((o1 - o0, g[9], x.shape[2]), dtype=np.float32)
        for v in _windows(xp, gb):
            s += v
        if include_pad:
            cnt = np.float32(kh * kw)
        else:
            cnt = sum(_windows(_padded_band(ones, g, o0, o1, 0, np.float32)[0], gb))
        out[o0:o1] = s / cnt
    return out


def global_avg_int8(x, in_zp, out_zp, mult, shift, rounding="half_up") -> np.ndarray:
    """int8 [1][1][C] mean over the plane (window = whole plane, count = H*W)."""
    x = np.asarray(x)
    if x.ndim != 3 or x.dtype != np.int8:
        raise UsageError(f"global_avg_int8: x must be int8 [H][W][C], got {x.dtype} {x.shape}")
    s = np.zeros((1, 1, x.shape[2]), dtype=np.int64)
    for r0, r1 in row_bands(x.shape[0], x.shape[1] * x.shape[2] * 8):  # exact: any order
        s += (x[r0:r1].astype(np.int64) - int(in_zp)).sum(axis=(0, 1), keepdims=True)
    cnt = np.full((1, 1, 1), x.shape[0] * x.shape[1], dtype=np.int64)
    return _avg_requant(s, cnt, out_zp, mult, shift, rounding)


def global_avg_float(x) -> np.ndarray:
    """float [1][1][C] mean over the plane, accumulated in float32, in x's dtype."""
    x = np.asarray(x)
    if x.ndim != 3 or x.dtype.kind != "f":
        raise UsageError(f"global_avg_float: x must be float [H][W][C], got {x.dtype} {x.shape}")
    s = x.astype(np.float32).sum(axis=(0, 1), keepdims=True, dtype=np.float32)
    return (s / np.float32(x.shape[0] * x.shape[1])).astype(x.dtype)


def global_max(x) -> np.ndarray:
    """[1][1][C] maximum over the plane (int8 or float; in and out share scale and zero point)."""
    x = np.asarray(x)
    if x.ndim != 3 or x.size == 0:
        raise UsageError(f"global_max: x must be a non-empty [H][W][C] tensor, got {x.shape}")
    return x.max(axis=(0, 1), keepdims=True)
