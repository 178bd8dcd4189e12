"""2D convolution of the conv accelerator (CA), int8 and float, on [H][W][C] tensors.

Weights are [OC][KH][KW][IC/groups]; pads = (top, left, bottom, right); output size follows ONNX
(floor). Dense convs use im2col + one matmul per group (BLAS for int8, the ordered Numba GEMM for
float); groups with few input channels (depthwise and the like) use a Numba loop.

int8 (bit-exact, see isa CONV):
  acc = sum((x - in_zp) * w) + bias[oc]         exact; padded cells contribute 0 (x = in_zp)
  acc is wrapped to int32 (the hardware accumulator width, ASSUMED; real models never come near)
  y   = clamp(out_zp + rshift_round(acc * mult[oc], shift[oc]), max(act_lo,-128), min(act_hi,127))
The sums come from float64 matmuls: |x - in_zp| <= 255, |w| <= 128, at most 4095*15*15 terms, so
|sum| < 2^35 << 2^53 and every partial sum is an exact integer. acc * mult fits int64 because
|acc| <= 2^31 and |mult| <= 2^31, so |acc * mult| <= 2^62; the rounding shift is done as
((p >> (s-1)) + 1) >> 1, which never overflows.

float (fp16 / fp32): products and sums in float32 (the ASSUMED accumulator precision of the CA),
summed in window order (kernel row, kernel column, input channel) one term at a time, + bias,
optional clip, then one rounding to the input dtype. The order is part of the semantics: the
float GEMM is a Numba loop (`_gemm_f32`, vectorised over output channels only, no reassociation,
no FMA contraction), not BLAS, whose blocking and summation order differ from machine to machine.
So float results are bit-identical on every machine, and splitting output channels over CAs
changes nothing.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..errors import UsageError
from .quant import rshift_round

# groups whose im2col row is shorter than this use the Numba loop instead of BLAS
_BLAS_MIN_ROW = 32


def conv_out_size(n: int, k: int, stride: int, dilation: int, pad_a: int, pad_b: int) -> int:
    """ONNX output length of one spatial axis."""
    return (n + pad_a + pad_b - dilation * (k - 1) - 1) // stride + 1


def _pair(v, name):
    t = (int(v), int(v)) if np.isscalar(v) else tuple(int(a) for a in v)
    if len(t) != 2 or min(t) < 1:
        raise UsageError(f"conv: {name} must be one or two ints >= 1, got {v!r}")
    return t


def _geometry(x, w, stride, dilation, pads, groups):
    if x.ndim != 3 or w.ndim != 4:
        raise UsageError(f"conv: x must be [H][W][C] and w [OC][KH][KW][IC/g], got {x.shape}, {w.shape}")
    h, wd, c = x.shape
    oc, kh, kw, icg = w.shape
    sh, sw = _pair(stride, "stride")
    dh, dw = _pair(dilation, "dilation")
    pt, pl, pb, pr = (int(p) for p in pads)
    if min(pt, pl, pb, pr) < 0:
        raise UsageError(f"conv: negative padding {pads!r}")
    groups = int(groups)
    if groups < 1 or c % groups or oc % groups or icg != c // groups:
        raise UsageError(f"conv: groups={groups} does not fit in_c={c}, out_c={oc}, w in_c/g={icg}")
    oh = conv_out_size(h, kh, sh, dh, pt, pb)
    ow = conv_out_size(wd, kw, sw, dw, pl, pr)
    if oh < 1 or ow < 1:
        raise UsageError(f"conv: empty output {oh}x{ow} for input {h}x{wd}, kernel {kh}x{kw}")
    return dict(oc=oc, kh=kh, kw=kw, icg=icg, sh=sh, sw=sw, dh=dh, dw=dw,
                pads=(pt, pl, pb, pr), groups=groups, oh=oh, ow=ow)


def _pad(x, pads):
    pt, pl, pb, pr = pads
    if not (pt or pl or pb or pr):
        return x
    return np.pad(x, ((pt, pb), (pl, pr), (0, 0)))


def _im2col(xp, g):
    """[OH*OW][KH*KW*C] patches of the padded input (row order matches w.reshape(OC, -1))."""
    kh, kw, sh, sw, dh, dw, oh, ow = (g[k] for k in ("kh", "kw", "sh", "sw", "dh", "dw", "oh", "ow"))
    c = xp.shape[2]
    if kh == kw == 1 and sh == sw == 1:
        return xp[:oh, :ow].reshape(oh * ow, c)
    cols = np.empty((oh, ow, kh * kw, c), dtype=xp.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i * kw + j, :] = xp[i * dh:i * dh + (oh - 1) * sh + 1:sh,
                                           j * dw:j * dw + (ow - 1) * sw + 1:sw, :]
    return cols.reshape(oh * ow, kh * kw * c)


@njit(cache=True)
def _gemm_f32(a, b):
    """a [M][K] @ b [K][N] in float32; out[m, n] sums k = 0, 1, ... in order (4 rows at a time)."""
    m_all, k_all = a.shape
    n_all = b.shape[1]
    out = np.zeros((m_all, n_all), dtype=np.float32)
    acc = np.zeros((4, n_all), dtype=np.float32)
    m = 0
    while m + 4 <= m_all:
        acc[:] = 0
        for k in range(k_all):
            a0, a1, a2, a3 = a[m, k], a[m + 1, k], a[m + 2, k], a[m + 3, k]
            for n in range(n_all):
                bv = b[k, n]
                acc[0, n] += a0 * bv
                acc[1, n] += a1 * bv
                acc[2, n] += a2 * bv
                acc[3, n] += a3 * bv
        out[m:m + 4] = acc
        m += 4
    while m < m_all:
        for k in range(k_all):
            av = a[m, k]
            for n in range(n_all):
                out[m, n] += av * b[k, n]
        m += 1
    return out


@njit(cache=True)
def _grouped_int(xp, w, oh, ow, sh, sw, dh, dw, groups):
    oc, kh, kw, icg = w.shape
    ocg = oc // groups
    out = np.zeros((oh, ow, oc), dtype=np.int64)
    for y in range(oh):
        for x in range(ow):
            for o in range(oc):
                c0 = (o // ocg) * icg
                acc = 0
                for i in range(kh):
                    yy = y * sh + i * dh
                    for j in range(kw):
                        xx = x * sw + j * dw
                        for k in range(icg):
                            acc += np.int64(xp[yy, xx, c0 + k]) * np.int64(w[o, i, j, k])
                out[y, x, o] = acc
    return out


@njit(cache=True)
def _grouped_f32(xp, w, oh, ow, sh, sw, dh, dw, groups):
    oc, kh, kw, icg = w.shape
    ocg = oc // groups
    out = np.zeros((oh, ow, oc), dtype=np.float32)
    for y in range(oh):
        for x in range(ow):
            for o in range(oc):
                c0 = (o // ocg) * icg
                acc = np.float32(0.0)
                for i in range(kh):
                    yy = y * sh + i * dh
                    for j in range(kw):
                        xx = x * sw + j * dw
                        for k in range(icg):
                            acc += xp[yy, xx, c0 + k] * w[o, i, j, k]
                out[y, x, o] = acc
    return out


def _accumulate(xp, w, g, blas_dtype, loop):
    """Sum over the window for every output: a GEMM per group (BLAS float64 for exact integer
    sums, the ordered `_gemm_f32` for float32), or the Numba loop for narrow groups."""
    groups, oc, icg = g["groups"], g["oc"], g["icg"]
    if g["kh"] * g["kw"] * icg < _BLAS_MIN_ROW and groups > 1:
        return loop(xp, w, g["oh"], g["ow"], g["sh"], g["sw"], g["dh"], g["dw"], groups)
    ocg = oc // groups
    out = np.empty((g["oh"] * g["ow"], oc), dtype=blas_dtype)
    for gi in range(groups):
        cols = _im2col(xp[:, :, gi * icg:(gi + 1) * icg].astype(blas_dtype, copy=False), g)
        wg = w[gi * ocg:(gi + 1) * ocg].reshape(ocg, -1).astype(blas_dtype)
        if blas_dtype == np.float32:
            out[:, gi * ocg:(gi + 1) * ocg] = _gemm_f32(np.ascontiguousarray(cols), np.ascontiguousarray(wg.T))
        else:
            out[:, gi * ocg:(gi + 1) * ocg] = cols @ wg.T
    return out.reshape(g["oh"], g["ow"], oc)


def _per_channel(v, oc, name):
    a = np.asarray(v, dtype=np.int64).reshape(-1)
    if a.size == 1:
        a = np.repeat(a, oc)
    if a.size != oc:
        raise UsageError(f"conv: {name} has {a.size} entries, expected out_c={oc}")
    return a


def requantize(acc, bias, mult, shift, out_zp, lo=-128, hi=127) -> np.ndarray:
    """int8 of clamp(out_zp + rshift_round(wrap32(acc + bias) * mult, shift)); per last axis."""
    acc = np.asarray(acc, dtype=np.int64) + bias
    acc = ((acc + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
    if np.any((shift < 0) | (shift > 63)):
        raise UsageError("requantize: shift must be in [0, 63]")
    y = int(out_zp) + rshift_round(acc * mult, shift)
    return np.clip(y, max(int(lo), -128), min(int(hi), 127)).astype(np.int8)


def conv2d_int8(x, w, bias, mult, shift, *, in_zp, out_zp, stride=1, dilation=1, pads=(0, 0, 0, 0),
                groups=1, act_lo=-128, act_hi=127) -> np.ndarray:
    """int8 [OH][OW][OC] convolution with per-channel integer requantization (module doc)."""
    x = np.asarray(x)
    w = np.asarray(w)
    if x.dtype != np.int8 or w.dtype != np.int8:
        raise UsageError(f"conv2d_int8: x and w must be int8, got {x.dtype}, {w.dtype}")
    g = _geometry(x, w, stride, dilation, pads, groups)
    oc = g["oc"]
    bias, mult, shift = (_per_channel(v, oc, n) for v, n in ((bias, "bias"), (mult, "mult"), (shift, "shift")))
    xs = _pad(x.astype(np.int32) - int(in_zp), g["pads"])
    acc = _accumulate(xs, w.astype(np.int32), g, np.float64, _grouped_int)
    acc = np.rint(acc).astype(np.int64) if acc.dtype != np.int64 else acc
    return requantize(acc, bias, mult, shift, out_zp, act_lo, act_hi)


def conv2d_float(x, w, bias=None, *, stride=1, dilation=1, pads=(0, 0, 0, 0), groups=1,
                 act_lo=None, act_hi=None) -> np.ndarray:
    """float convolution (fp16 or fp32 x; float32 accumulation), result in x's dtype."""
    x = np.asarray(x)
    if x.dtype not in (np.float16, np.float32):
        raise UsageError(f"conv2d_float: x must be float16 or float32, got {x.dtype}")
    w = np.asarray(w)
    g = _geometry(x, w, stride, dilation, pads, groups)
    xs = _pad(x.astype(np.float32), g["pads"])
    acc = _accumulate(xs, w.astype(np.float32), g, np.float32, _grouped_f32)
    if bias is not None:
        b = np.asarray(bias, dtype=np.float32).reshape(-1)
        if b.size not in (1, g["oc"]):
            raise UsageError(f"conv2d_float: bias has {b.size} entries, expected out_c={g['oc']}")
        acc = acc + b
    if act_lo is not None:
        acc = np.maximum(acc, np.float32(act_lo))
    if act_hi is not None:
        acc = np.minimum(acc, np.float32(act_hi))
    with np.errstate(over="ignore"):  # fp16 overflow gives inf, as on the hardware
        return acc.astype(x.dtype)
