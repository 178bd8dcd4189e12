"""The int8 depthwise convolution (one input channel per output channel), fused (Numba): window sums
over the planes of the input stream, requantized straight into the planes of the output stream.

Channel ch of the input is plane ch // B, lane ch % B (`layout.Planes`: blocked16 stream bytes, or an
[H][W][C] array as one plane of B = C), and a depthwise output channel depends on its own input
channel only, so each input plane is summed on its own, all B lanes of a pixel at once. The lanes are
int32 and start at wrap32(bias): sums modulo 2^32 are the 32-bit accumulator's wrap32(acc + bias)
for any window. Taps in the padding are skipped (they read in_zp, so add 0). The sums are
requantized as `requant.requantize_planes` does: the same bits as `conv._grouped_int` + `conv.requantize`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .requant import channel_params, requant_lanes


@njit(cache=True, nogil=True)
def _tile(v, c0, blk, out):
    """out[k] = v[c0 + k % blk]: a per-channel vector repeated for each pixel of an output row."""
    for xo in range(out.size // blk):
        o = out[xo * blk:(xo + 1) * blk]
        for b in range(blk):
            o[b] = v[c0 + b]


@njit(cache=True, nogil=True)
def _mac(acc, x, w, zp):
    """acc += (x - zp) * w, lane by lane (int32 lanes, int8 x)."""
    for k in range(acc.size):
        acc[k] += (np.int32(x[k]) - zp) * w[k]


@njit(cache=True, nogil=True)
def depthwise_planes(xp, c, zp, w, sh, sw, dh, dw, pt, pl, oh, ow, bias, mult, shift, out_zp, lo, hi, out):
    """out [Po][OH*OW][Bo] (int8) = the requantized depthwise conv of int8 planes xp [P][H][W][B] of c
    channels with weights w [C][KH][KW][1] (int8); output channel ch at [ch // Bo, :, ch % Bo], the
    Po*Bo - c padding channels 0. bias, mult, shift: per output channel (c entries).

    One output row of a plane at a time, as a flat run of OW*B int32 lanes: each tap adds the input
    row's run (contiguous for stride 1) times the tap's weights repeated per pixel; long loops that
    vectorise."""
    n_planes, h, wd, blk = xp.shape
    kh, kw = w.shape[1], w.shape[2]
    po, m_all, bo = out.shape
    width = n_planes * blk
    wt = np.zeros((kh, kw, width), np.int32)  # [KH][KW][lane of the planes], padding lanes 0
    for ch in range(c):
        for i in range(kh):
            for j in range(kw):
                wt[i, j, ch] = w[ch, i, j, 0]
    b32, m32, s1, rnd = channel_params(bias, mult, shift, width)
    same = po == n_planes and bo == blk  # output planes map lane for lane onto the input's
    if not same:
        out[:, :, :] = 0  # the padding channels of the output planes
    n = ow * blk
    acc = np.empty(n, np.int32)
    y8 = np.empty(n, np.int8)
    xs = np.empty(n, np.int8)  # a strided conv's input pixels of one tap, gathered into a run
    wrow = np.empty((kh, kw, n), np.int32)
    brow, mrow = np.empty(n, np.int32), np.empty(n, np.int32)
    srow, rrow = np.empty(n, np.int64), np.empty(n, np.int64)
    zp32 = np.int32(zp)
    for p in range(n_planes):
        c0 = p * blk
        lanes = min(blk, c - c0)
        for i in range(kh):
            for j in range(kw):
                _tile(wt[i, j], c0, blk, wrow[i, j])
        _tile(b32, c0, blk, brow)
        _tile(m32, c0, blk, mrow)
        _tile(s1, c0, blk, srow)
        _tile(rnd, c0, blk, rrow)
        for y in range(oh):
            acc[:] = brow
            for i in range(kh):
                yy = y * sh + i * dh - pt
                if yy < 0 or yy >= h:
                    continue
                xrow = xp[p, yy].reshape(wd * blk)
                for j in range(kw):
                    off = j * dw - pl  # input column of output column xo: xo * sw + off
                    x_lo = max(0, (-off + sw - 1) // sw)
                    x_hi = min(ow, (wd - 1 - off) // sw + 1)
                    if x_hi <= x_lo:
                        continue
                    # runs between slices indexed from 0 (offset indices do not vectorise)
                    k0, k1 = x_lo * blk, x_hi * blk
                    if sw == 1:
                        src = xrow[k0 + off * blk:k1 + off * blk]
                    else:
                        for xo in range(x_lo, x_hi):
                            i0 = (xo * sw + off) * blk
                            d, sx = xs[xo * blk:(xo + 1) * blk], xrow[i0:i0 + blk]
                            for b in range(blk):
                                d[b] = sx[b]
                        src = xs[k0:k1]
                    _mac(acc[k0:k1], src, wrow[i, j, k0:k1], zp32)
            m0 = y * ow
            if same:
                orow = out[p, m0:m0 + ow].reshape(n)
                requant_lanes(acc, mrow, srow, rrow, out_zp, lo, hi, orow)
                for xo in range(ow):
                    for b in range(lanes, blk):
                        orow[xo * blk + b] = 0
            else:
                requant_lanes(acc, mrow, srow, rrow, out_zp, lo, hi, y8)
                for xo in range(ow):
                    for b in range(lanes):
                        ch = c0 + b
                        out[ch // bo, m0 + xo, ch % bo] = y8[xo * blk + b]
