"""Numba kernels for the functional run's element-wise passes: one pass per streamed element where numpy
needs one per operation. Each equals, bit for bit, the numpy formula it replaces (`units_exec`, `execute`);
the callers use them only for the cases written here (half-up rounding, shifts in [0, 63]) and keep numpy
for the rest."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def _affine_one(xp, yp, a, b, c, xmask, xsign, ymask, ysign, ax_shift, by_shift, c_shift, lshift, rnd, rshift,
                lo_clip, hi_clip, lo_sat, hi_sat, lo, mask):
    """One element, without branches (so the loops vectorise): lanes by mask and sign bit, the affine sum,
    then the left or right shift with its rounding term, the clip, the saturation, the wrap to the output width."""
    x = ((xp & xmask) ^ xsign) - xsign
    y = ((yp & ymask) ^ ysign) - ysign
    v = ((a * x) >> ax_shift) + (c << c_shift) + ((b * y) >> by_shift)
    v = (((v << lshift) + rnd) >> rshift)
    v = min(max(min(max(v, lo_clip), hi_clip), lo_sat), hi_sat)
    return ((v - lo) & mask) + lo


@njit(cache=True, nogil=True)
def arith_affine(x, y, a, b, c, groups, plane, depth, lanes, shifts, bounds):
    """ARITH_AFFINE over x and y (patterns, groups*plane*depth of each): coefficient (g, d) of the 2-D arrays
    a, b, c for element (g, p, d) (a coefficient dimension of 1 broadcasts). lanes: (X mask, X sign bit, Y
    mask, Y sign bit); shifts: (AX, BY, CSHIFT, left, rounding term, right); bounds: (clip low, clip high,
    saturation low, high, output low, output mask)."""
    out = np.empty(x.size, np.int64)
    xm, xs, ym, ys = lanes
    ax, by, cs, ls, rnd, rs = shifts
    lc, hc, sl, sh, lo, mask = bounds
    per_channel = a.shape[1] > 1
    i = 0
    for g in range(groups):
        gi = g if a.shape[0] > 1 else 0
        if per_channel:
            ar, br, cr = a[gi], b[gi], c[gi]
            for p in range(plane):
                for d in range(depth):
                    out[i + d] = _affine_one(x[i + d], y[i + d], ar[d], br[d], cr[d], xm, xs, ym, ys, ax, by, cs,
                                             ls, rnd, rs, lc, hc, sl, sh, lo, mask)
                i += depth
        else:
            a0, b0, c0 = a[gi, 0], b[gi, 0], c[gi, 0]
            m = plane * depth
            for k in range(m):
                out[i + k] = _affine_one(x[i + k], y[i + k], a0, b0, c0, xm, xs, ym, ys, ax, by, cs, ls, rnd, rs,
                                         lc, hc, sl, sh, lo, mask)
            i += m
    return out


@njit(cache=True, nogil=True)
def pack3(p):
    """The low 3 bytes of each int64 of `p`, little-endian, as one uint8 array."""
    out = np.empty(p.size * 3, np.uint8)
    for i in range(p.size):
        v = p[i]
        out[3 * i] = v & 0xFF
        out[3 * i + 1] = (v >> 8) & 0xFF
        out[3 * i + 2] = (v >> 16) & 0xFF
    return out


@njit(cache=True, nogil=True)
def unpack3(raw):
    """Little-endian unsigned 3-byte elements of the bytes `raw` (a whole number of them), as int64."""
    out = np.empty(raw.size // 3, np.int64)
    for i in range(out.size):
        out[i] = np.int64(raw[3 * i]) | (np.int64(raw[3 * i + 1]) << 8) | (np.int64(raw[3 * i + 2]) << 16)
    return out
