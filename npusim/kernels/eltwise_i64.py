"""The Numba loop of the int8 elementwise ops (`eltwise.eltwise_int8`), in a module of its own so that
importing `kernels.eltwise` (the engine does, for timing-only runs too) does not import Numba."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def _fin(t, s, out_zp, lo, hi):
    """clamp(out_zp + rshift_round(t, s), lo, hi)."""
    y = (t if s == 0 else ((t >> (s - 1)) + 1) >> 1) + out_zp
    return lo if y < lo else (hi if y > hi else y)


@njit(cache=True)
def _eltwise_i64(code, a, b, ma, mb, sh, bc, a_zp, b_zp, out_zp, lo, hi, out):
    """The int8 op `OPS[code]` over a, out [N][C] in int64 (the caller checked the bound), fused:
    b is [N][C] (two maps), [1][C] (mul_channel) or unused; ma, mb, sh, bc hold C entries.
    One loop per op, so that each is branch-free inside."""
    n, c = a.shape
    two = b.shape[0] == n
    if code == 0 or code == 6:  # add, sub
        for i in range(n):
            for ch in range(c):
                t = (np.int64(a[i, ch]) - a_zp) * ma[ch] + (np.int64(b[i, ch]) - b_zp) * mb[ch]
                out[i, ch] = _fin(t, sh[ch], out_zp, lo, hi)
    elif code == 2:  # add_const
        for i in range(n):
            for ch in range(c):
                t = (np.int64(a[i, ch]) - a_zp) * ma[ch] + bc[ch] * mb[ch]
                out[i, ch] = _fin(t, sh[ch], out_zp, lo, hi)
    elif code == 3:  # mul_const
        for i in range(n):
            for ch in range(c):
                t = (np.int64(a[i, ch]) - a_zp) * bc[ch] * ma[ch]
                out[i, ch] = _fin(t, sh[ch], out_zp, lo, hi)
    elif code == 1 or code == 5:  # mul, mul_channel
        for i in range(n):
            bi = i if two else 0
            for ch in range(c):
                t = (np.int64(a[i, ch]) - a_zp) * (np.int64(b[bi, ch]) - b_zp) * ma[ch]
                out[i, ch] = _fin(t, sh[ch], out_zp, lo, hi)
    elif code == 7 or code == 8:  # max, min
        sign = 1 if code == 7 else -1
        for i in range(n):
            for ch in range(c):
                s = sh[ch]
                ya = (np.int64(a[i, ch]) - a_zp) * ma[ch]
                yb = (np.int64(b[i, ch]) - b_zp) * mb[ch]
                ya = ya if s == 0 else ((ya >> (s - 1)) + 1) >> 1
                yb = yb if s == 0 else ((yb >> (s - 1)) + 1) >> 1
                y = (ya if sign * ya >= sign * yb else yb) + out_zp
                out[i, ch] = lo if y < lo else (hi if y > hi else y)
    else:  # prelu
        for i in range(n):
            for ch in range(c):
                av = np.int64(a[i, ch]) - a_zp
                t = av * (ma[ch] if av >= 0 else mb[ch])
                out[i, ch] = _fin(t, sh[ch], out_zp, lo, hi)


@njit(cache=True)
def _add_f64(a, b, ma, mb, scale, a_zp, b_zp, out_zp, lo, hi, out):
    """add / sub (`_eltwise_i64` codes 0 and 6) in float64 lanes, the same bits when every
    |A*ma + B*mb| < 2^52 (the caller's bound over the int8 range and zero points): then every product and
    sum is an exact float64 integer t, t * 2^-shift (`scale`) is exact, and floor(t * 2^-s + 1/2) equals
    rshift_round(t, s) (as `requant`'s float64 form: for s >= 53 both are 0); clamped as `_fin`.
    a, b, out [N][C]; ma, mb, scale hold C float64 entries."""
    n, c = a.shape
    fa, fb, fz, flo, fhi = np.float64(a_zp), np.float64(b_zp), np.float64(out_zp), np.float64(lo), np.float64(hi)
    for i in range(n):
        for ch in range(c):
            t = (np.float64(a[i, ch]) - fa) * ma[ch] + (np.float64(b[i, ch]) - fb) * mb[ch]
            y = np.floor(t * scale[ch] + 0.5) + fz
            out[i, ch] = np.int32(flo if y < flo else (fhi if y > fhi else y))
