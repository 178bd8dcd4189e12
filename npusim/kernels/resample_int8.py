"""The Numba loop of the int8 bilinear resize (`resample.resize`), in a module of its own so that importing
`kernels.resample` (the engine does, for timing-only runs too) does not import Numba."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _bilinear_int8(x, y0, y1, fy, x0, x1, fx, frac_bits, out):
    """out [OH][OW][C] = the int8 bilinear resize of x [H][W][C] (`resample` module doc) from `fixed_coords` of
    both axes (F = frac_bits fractional bits): (row(y0) * wy0 + row(y1) * wy1 + 2^(2F-1)) >> 2F with
    row(r) = x[r, x0] * wx0 + x[r, x1] * wx1 per channel, in int32 (|x| <= 128 and wx0 + wx1 = wy0 + wy1 =
    2^F keep every sum within 2^(7+2F), 2^29 for F = 11). Each source row is interpolated along x once while
    consecutive output rows read it (two rows kept), then an output row is one long run of lanes."""
    oh, ow, c = out.shape
    n = ow * c
    rows = np.empty((2, n), np.int32)
    held = np.full(2, -1, np.int64)  # the source row each slot holds
    one = np.int32(1 << frac_bits)
    half = np.int32(1 << (2 * frac_bits - 1))
    slots = np.zeros(2, np.int64)
    for oy in range(oh):
        for i in range(2):
            r = y0[oy] if i == 0 else y1[oy]
            if held[0] == r:
                slot = 0
            elif held[1] == r:
                slot = 1
            else:  # never evict the other row this output reads
                slot = 1 - slots[0] if i == 1 else 1 if held[0] == y1[oy] else 0
                held[slot] = r
                src, dst = x[r], rows[slot]
                for ox in range(ow):
                    wx1 = np.int32(fx[ox])
                    wx0 = one - wx1
                    a, b = src[x0[ox]], src[x1[ox]]
                    for k in range(c):
                        dst[ox * c + k] = np.int32(a[k]) * wx0 + np.int32(b[k]) * wx1
            slots[i] = slot
        wy1 = np.int32(fy[oy])
        wy0 = one - wy1
        top, bot, o = rows[slots[0]], rows[slots[1]], out[oy].reshape(n)
        for k in range(n):
            o[k] = (top[k] * wy0 + bot[k] * wy1 + half) >> np.int32(2 * frac_bits)
