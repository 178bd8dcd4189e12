"""The int8 requantization of the CONV's integer sums, fused (Numba), into the planes of a stream.

    y = clamp(out_zp + rshift_round(wrap32(acc + bias) * mult, shift), lo, hi)   (`conv.requantize`)

The loops work in 32-bit lanes where the semantics allow it, so that they vectorise on AVX2:
wrap32(acc + bias) = wrap32(wrap32(acc) + wrap32(bias)) (the wrap is a ring map), so the bias is
kept as int32 and added with int32 wrap-around; mult is an int32 table field, so the product is one
signed 32 x 32 -> 64 bit multiply; a float32 sum (an exact integer below 2^24) converts straight to
int32. The rounding shift is branch-free: ((p >> s1) + r) >> r with (s1, r) = (s - 1, 1), or (0, 0)
for s = 0, which never overflows (|p| <= 2^62). `tests/test_kernels_conv.py` checks every form
against `conv.requantize`.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import overload


def wrap32(v):
    """int32 of an integer (or a float holding one) modulo 2^32."""
    return np.int32(np.int64(v))


@overload(wrap32)
def _wrap32_typed(v):
    if isinstance(v, types.Float) and v.bitwidth == 32:
        return lambda v: np.int32(v)  # float32 sums are exact integers below 2^24: one vector convert
    return lambda v: np.int32(np.int64(v))


@njit(cache=True, nogil=True)
def channel_params(bias, mult, shift, n: int):
    """Per output channel (bias mod 2^32, mult, s1, r) as (int32, int32, int64, int64) arrays of n
    entries; channels past len(bias) get zeros. mult must be an int32 value, shift in [0, 63]."""
    b32 = np.zeros(n, np.int32)
    m32 = np.zeros(n, np.int32)
    s1 = np.zeros(n, np.int64)
    rnd = np.zeros(n, np.int64)
    for i in range(min(n, bias.size)):
        b32[i] = wrap32(bias[i])
        m32[i] = np.int32(mult[i])
        s = shift[i]
        s1[i] = s - 1 if s > 0 else 0
        rnd[i] = 1 if s > 0 else 0
    return b32, m32, s1, rnd


@njit(cache=True, nogil=True)
def requant_lanes(a32, m32, s1, rnd, out_zp, lo, hi, out):
    """out[i] = clamp(out_zp + rshift_round(a32[i] * m32[i], s)) for the lanes of out: a32 the wrapped
    sums (bias included, int32), the parameters those of `channel_params`."""
    for i in range(out.size):
        r = rnd[i]
        y = out_zp + (((np.int64(a32[i]) * np.int64(m32[i]) >> s1[i]) + r) >> r)
        out[i] = lo if y < lo else (hi if y > hi else y)


@njit(cache=True, nogil=True)
def requantize_planes(acc, n0, c, bias, mult, shift, out_zp, lo, hi, out):
    """`conv.requantize` of columns [n0, n0 + c) of acc [M][N] (int32/int64, or float32/float64
    holding integers) into out [P][M][B] (int8): column n0 + ch goes to [ch // B, :, ch % B] (blocked16
    planes, or one plane of B = c for [M][c]); the P*B - c padding channels are written as 0. bias,
    mult, shift are indexed by the output channel (0 .. c-1); c <= P*B. Each row is requantized into
    a row buffer copied into the planes (or, for one plane of B = c, straight into it)."""
    n_planes, m_all, blk = out.shape
    b32, m32, s1, rnd = channel_params(bias, mult, shift, c)
    a32 = np.empty(c, np.int32)
    tmp = np.zeros(n_planes * blk, np.int8)  # one output row; the padding channels stay 0
    direct = n_planes == 1 and blk == c
    for m in range(m_all):
        row = acc[m, n0:n0 + c]
        for n in range(c):
            a32[n] = wrap32(row[n]) + b32[n]  # stored as int32: the 32-bit wrap
        t = out[0, m] if direct else tmp[:c]
        requant_lanes(a32, m32, s1, rnd, out_zp, lo, hi, t)
        if not direct:
            for p in range(n_planes):
                o = out[p, m]
                t = tmp[p * blk:(p + 1) * blk]
                for b in range(blk):
                    o[b] = t[b]
