"""The int8 requantization of the CONV's integer sums, fused (Numba), into the planes of a stream.

    y = clamp(out_zp + rshift_round(wrap32(acc + bias) * mult, shift), lo, hi)   (`conv.requantize`)

Two forms give the same bits, both vectorised on AVX2 (which has no 64-bit arithmetic shift and no
64 x 64 multiply). A run of lanes takes the float64 one, and the integer one again where a value
was out of the float64 one's bound (`requant_run`).

Integer form (`_run_int`, any values): wrap32(acc + bias) = wrap32(wrap32(acc) + wrap32(bias)) (the
wrap is a ring map), so the bias is added with int32 wrap-around; a = wrap32(...) and mult are int32,
so P = a * mult is one signed 32 x 32 -> 64 bit multiply (vpmuldq), |P| <= 2^62. The rounding shift
((P >> s1) + r) >> r, with (s1, r) = (s - 1, 1), or (0, 0) for s = 0, is done on U = P + 2^63 as
an unsigned number (logical shifts, vpsrlvq): floor(U / 2^s1) = floor(P / 2^s1) + 2^(63-s1), and
adding r and halving keeps the offset a power of two, so the result is T - 2^(63-s) (no overflow:
U + r < 2^64).

float64 form (`_run_f64`: adds, multiplies, vroundpd, min/max; 4 lanes per instruction):

    y = clamp(out_zp + floor(v * (mult * 2^-shift) + 1/2)),   v = fl(acc + wrap32(bias))

exact for the lanes where |v| <= L = min(2^31 - 1, (2^52 - 1) // max|mult|) (an integer bound, so the
test is exact). Proof, for acc holding the integer A and B = wrap32(bias):
1. |v| <= L < 2^31 implies |fl(A)| < 2^32 (else |A + B| >= 2^32 - 2^31, so |v| >= 2^31, as rounding
   is monotone and 2^31 is a float64), so fl(A) = A, A + B is exact and v = A + B lies in int32's
   range: v = wrap32(A + B) = wrap32(acc + bias).
2. |v * m| <= L * |m| < 2^52: P = v * m is an integer, exact in float64; m * 2^-s is exact (a power of
   two; no underflow) and so is x = fl(v * (m * 2^-s)) = P * 2^-s, a multiple of 2^-s.
3. s <= 53: |x + 1/2| <= 2^(52-s) - 2^-s + 1/2 < 2^(53-s), so x + 1/2 is k * 2^-s with |k| < 2^53,
   exact; s >= 54: |x| < 2^-2, so x + 1/2 and its rounding lie in (1/4, 3/4), floor 0 = the exact one.
4. floor(P * 2^-s + 1/2) = floor((floor(P * 2^-(s-1)) + 1) / 2) = ((P >> (s-1)) + 1) >> 1 for s >= 1
   (floor(floor(z) / 2) = floor(z / 2)), and P for s = 0: the integer form's rounding shift.
5. out_zp + that is an integer below 2^53, exact, and both forms clamp as min(max(y, lo), hi).
`tests/test_kernels_depthwise.py` sweeps the bound (|v| at L and L + 1, at 2^31, shifts 0, 1, 31,
52-54, 62, 63, negative values, ties); `tests/test_kernels_conv.py` checks every form against
`conv.requantize`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types
from numba.extending import overload

INT32_MAX = (1 << 31) - 1
EXACT_PRODUCT = (1 << 52) - 1  # |v * mult| up to this keeps the float64 form exact (module doc)
_OFFSET = np.uint64(1 << 63)  # P + 2^63: the int64 product as an unsigned number, order kept


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
    """Both forms' parameters of n output channels (zeros past len(bias)), as the tuple `requant_run`
    takes: (wrap32(bias) and mult * 2^-shift (float64), wrap32(bias) and mult (int32), s1, r and
    2^(63 - shift) (uint64), the float64 form's bound L on |v| (int)). mult must be an int32 value,
    shift in [0, 63]."""
    qb, qm = np.zeros(n, np.float64), np.zeros(n, np.float64)
    b32, m32 = np.zeros(n, np.int32), np.zeros(n, np.int32)
    s1, rnd, off = np.zeros(n, np.uint64), np.zeros(n, np.uint64), np.full(n, _OFFSET, np.uint64)
    m_max = 0
    for i in range(min(n, bias.size)):
        b32[i] = wrap32(bias[i])
        m32[i] = np.int32(mult[i])
        s = np.int64(shift[i])
        qb[i] = np.float64(b32[i])
        qm[i] = math.ldexp(np.float64(m32[i]), -s)  # exact: a power-of-two scaling
        s1[i] = np.uint64(s - 1 if s > 0 else 0)
        rnd[i] = np.uint64(1 if s > 0 else 0)
        off[i] = np.uint64(1) << np.uint64(63 - s)
        m_max = max(m_max, abs(np.int64(m32[i])))
    return qb, qm, b32, m32, s1, rnd, off, min(INT32_MAX, EXACT_PRODUCT // max(1, m_max))


@njit(cache=True, nogil=True, inline="always")
def _run_f64(acc, a0, qb, qm, q0, n, bound, out_zp, lo, hi, out, o0) -> bool:
    """out[o0 + i] = the float64 form of acc[a0 + i] (channel q0 + i), i < n; whether some |v| > bound."""
    zp, flo, fhi, lim = np.float64(out_zp), np.float64(lo), np.float64(hi), np.float64(bound)
    bad = False
    for i in range(n):
        k = np.uint64(q0 + i)
        v = np.float64(acc[np.uint64(a0 + i)]) + qb[k]
        bad |= abs(v) > lim
        y = np.floor(v * qm[k] + 0.5) + zp
        out[np.uint64(o0 + i)] = np.int32(min(max(y, flo), fhi))
    return bad


@njit(cache=True, nogil=True, inline="always")
def _run_int(acc, a0, b32, m32, s1, rnd, off, q0, n, out_zp, lo, hi, out, o0):
    """out[o0 + i] = the integer form of acc[a0 + i] (channel q0 + i), i < n."""
    for i in range(n):
        k = np.uint64(q0 + i)
        a = np.int64(np.int32(np.int64(wrap32(acc[np.uint64(a0 + i)])) + np.int64(b32[k])))  # the 32-bit wrap
        u = np.uint64(a * np.int64(m32[k])) + _OFFSET
        t = ((u >> s1[k]) + rnd[k]) >> rnd[k]
        y = np.int64(t - off[k]) + out_zp
        out[np.uint64(o0 + i)] = min(max(y, lo), hi)  # np.clip's order, as `conv.requantize`


@njit(cache=True, nogil=True, inline="always")
def requant_run(acc, a0, params, q0, n, out_zp, lo, hi, out, o0):
    """out[o0 + i] = the requantized acc[a0 + i] with channel q0 + i's parameters (`channel_params`),
    for i < n: the float64 form, the integer one again if a |v| of the run exceeds the bound
    (module doc). Inlined, so that a literal n is a constant trip count; the indices are
    unsigned, which vectorises (no wrap-around of negative indices)."""
    qb, qm, b32, m32, s1, rnd, off, bound = params
    if _run_f64(acc, a0, qb, qm, q0, n, bound, out_zp, lo, hi, out, o0):
        _run_int(acc, a0, b32, m32, s1, rnd, off, q0, n, out_zp, lo, hi, out, o0)


@njit(cache=True, nogil=True)
def requantize_planes(acc, n0, c, bias, mult, shift, out_zp, lo, hi, out):
    """`conv.requantize` of columns [n0, n0 + c) of acc [M][N] (int32/int64, or float32/float64
    holding integers) into out [P][M][B] (int8): column n0 + ch goes to [ch // B, :, ch % B] (blocked16
    planes, or one plane of B = c for [M][c]); the P*B - c padding channels are written as 0. bias,
    mult, shift are indexed by the output channel (0 .. c-1); c <= P*B. `requantize_into` with the
    planes of `out` as its rows."""
    n_planes, m_all, blk = out.shape
    requantize_into(acc, n0, c, bias, mult, shift, out_zp, lo, hi, out.reshape(n_planes * m_all * blk), 0,
                    m_all * blk, blk, m_all, 1, n_planes, blk)


@njit(cache=True, nogil=True)
def requantize_into(acc, n0, c, bias, mult, shift, out_zp, lo, hi, out, off, ps, ls, oh, ow, n_planes, blk):
    """`requantize_planes` of acc [OH*OW][N] into planes [P][OH][OW][B] laid out at flat int8 `out`:
    pixel (y, x) of plane p at out[off + p*ps + y*ls + x*B:][:B] (its rows dense, the planes and rows
    at any stride: a stream's bytes where a write SE puts them, or a new array). `requantize_kept` with
    the `plane_params` of bias, mult and shift."""
    params, bounds = plane_params(bias, mult, shift, c, n_planes, blk)
    requantize_kept(acc, n0, c, params, bounds, out_zp, lo, hi, out, off, ps, ls, oh, ow, n_planes, blk)


@njit(cache=True, nogil=True)
def plane_params(bias, mult, shift, c, n_planes, blk):
    """What `requantize_kept` takes of c output channels in planes of B lanes, made once for a conv whose
    tables never change: (`channel_params` of the P*B channels, zeros past c; the float64 form's bound L of
    each plane, from its own channels' multipliers)."""
    params = channel_params(bias, mult, shift, n_planes * blk)
    m32 = params[3]
    bounds = np.empty(n_planes, np.int64)
    for p in range(n_planes):
        m_max = 0
        for b in range(p * blk, min(c, (p + 1) * blk)):
            m_max = max(m_max, abs(np.int64(m32[b])))
        bounds[p] = min(INT32_MAX, EXACT_PRODUCT // max(1, m_max))
    return params, bounds


@njit(cache=True, nogil=True)
def requantize_kept(acc, n0, c, params, bounds, out_zp, lo, hi, out, off, ps, ls, oh, ow, n_planes, blk):
    """`requantize_into` with its `plane_params`: plane by plane, the plane's lanes of each pixel
    (`requant_run`, the plane's bound) straight into it; the padding lanes 0."""
    qb, qm, b32, m32, s1, rnd, offs, _ = params
    for p in range(n_planes):
        c0 = min(c, p * blk)
        nb = min(blk, c - c0)
        pp = (qb, qm, b32, m32, s1, rnd, offs, bounds[p])
        for y in range(oh):
            for x in range(ow):
                m = y * ow + x
                o0 = off + p * ps + y * ls + x * blk
                if nb == 16:  # blocked16 planes: a constant trip count
                    requant_run(acc[m], n0 + c0, pp, c0, 16, out_zp, lo, hi, out, o0)
                else:
                    requant_run(acc[m], n0 + c0, pp, c0, nb, out_zp, lo, hi, out, o0)
                for b in range(nb, blk):
                    out[o0 + b] = 0
