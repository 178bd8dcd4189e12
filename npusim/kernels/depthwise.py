"""The int8 depthwise convolution (one input channel per output channel), fused (Numba): window sums
over the planes of the input stream, requantized straight into the planes of the output stream.

Channel ch of the input is plane ch // B, lane ch % B (`layout.Planes`: blocked16 stream bytes, or an
[H][W][C] array as one plane of B = C), and a depthwise output channel depends on its own input
channel only, so each input plane is summed on its own, the B lanes of a pixel at once (channels
innermost). Each tap is one long run of lanes, which vectorises: an output row's sums are taken at
every padded column (output pixel xo takes column xo * SW, any stride), and small planes go side by
side in groups (`_group`). `prepare` makes the weights repeated per column and the channel
parameters once per conv (`conv.Int8Conv` keeps them); `depthwise_into` computes an input.

The sums are float lanes: each input row is converted once to x - in_zp (a ring of the window's rows,
the padding columns 0, as padded taps read in_zp), then each tap adds row * weight. Every product and
partial sum is an integer within taps * max|x - zp| * 128, so float32 lanes are exact below 2^24 (any
3 x 3 window: 9 * 256 * 128 < 2^19) and float64 lanes otherwise; the order of the sums does not matter.
The sums are requantized by `requant.requant_run` (bias added there, the 32-bit wrap included): the
same bits as `conv._grouped_int` + `conv.requantize`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .requant import channel_params, requant_run

EXACT_F32 = 1 << 24  # integers up to this magnitude are exact in float32


@njit(cache=True, nogil=True)
def _mac(acc, x, w):
    """acc += x * w, lane by lane (runs indexed from 0: a long loop that vectorises)."""
    for k in range(acc.size):
        acc[k] += x[k] * w[k]


@njit(cache=True, nogil=True)
def _copy(src, dst):
    """dst[:] = src (runs indexed from 0 that do not overlap)."""
    for k in range(dst.size):
        dst[k] = src[k]


@njit(cache=True, nogil=True)
def _mac9(acc, x0, x1, x2, x3, x4, x5, x6, x7, x8, w0, w1, w2, w3, w4, w5, w6, w7, w8):
    """acc = the 9 taps of a 3 x 3 window, lane by lane: sum of x_t * w_t (runs indexed from 0)."""
    for k in range(acc.size):
        acc[k] = (x0[k] * w0[k] + x1[k] * w1[k] + x2[k] * w2[k] + x3[k] * w3[k] + x4[k] * w4[k]
                  + x5[k] * w5[k] + x6[k] * w6[k] + x7[k] * w7[k] + x8[k] * w8[k])


@njit(cache=True, nogil=True)
def _convert_row(src, zp, pl, blk, dst):
    """dst [Wp*B] = src's pixels minus zp after pl zero pixels (the left padding), zeros past them:
    long loops over runs indexed from 0, which vectorise."""
    left = min(pl * blk, dst.size)
    for k in range(left):
        dst[k] = 0
    d = dst[left:]
    n = min(src.size, d.size)
    for k in range(n):
        d[k] = src[k] - zp
    for k in range(n, d.size):
        d[k] = 0


@njit(cache=True, nogil=True)
def _requant_row(acc, a0, sw, params, q0, ow, blk, lanes, out_zp, lo, hi, orow):
    """orow [OW*B] = the requantized sums of output pixels xo at acc[a0 + xo*SW*B:...] (`requant_run`
    per pixel: B lanes, channels q0 .. q0+B-1 of params); the padding lanes past `lanes` 0. A function
    of its own: inlined into `_group`'s loop nest the runs do not vectorise."""
    for xo in range(ow):
        if blk == 16:  # blocked16 planes: a constant trip count
            requant_run(acc, a0 + xo * sw * 16, params, q0, 16, out_zp, lo, hi, orow, xo * 16)
        else:
            requant_run(acc, a0 + xo * sw * blk, params, q0, blk, out_zp, lo, hi, orow, xo * blk)
        for b in range(lanes, blk):
            orow[xo * blk + b] = 0  # the padding channels of the planes


@njit(cache=True, nogil=True)
def _columns(ow: int, sw: int, kw: int, dw: int) -> int:
    """Padded columns a plane's taps read: every column up to the last output's, and the window past it."""
    return (ow - 1) * sw + 1 + (kw - 1) * dw



@njit(cache=True, nogil=True)
def _group(xp, p0, c, zp, wt, sh, sw, dh, dw, pt, pl, oh, ow, params, out_zp, lo, hi, out, off, ps, ls, bo, same, ring,
           held, acc, y8):
    """The requantized depthwise conv of planes p0 .. p0+G-1 (module doc), side by side: each plane a
    segment of Wp*B lanes (its padded columns) in ring [R][G*Wp*B] (the window's input rows,
    `_convert_row`), acc (the sums of one output row at every padded column; output pixel xo of plane
    g takes column xo * SW of segment g: all strides, each tap one long run over the group) and wt
    [KH][KW][G*Wp*B] (the weights, float, repeated per column). The columns past a plane's last
    output mix in the next segment and are never read."""
    n_planes, h, wd, blk = xp.shape
    kh, kw = wt.shape[0], wt.shape[1]
    n_ring = ring.shape[0] - 1  # the last slot stays zero
    held[:] = -1  # which input row each ring slot holds
    fzp = acc.dtype.type(zp)
    rows = np.empty(kh, np.int64)  # the ring slot of each window row (the zero slot for padding rows)
    wp = _columns(ow, sw, kw, dw)
    g_n = min(n_planes - p0, ring.shape[1] // (wp * blk))
    n = g_n * wp * blk - (kw - 1) * dw * blk  # the lanes summed: every tap's run stays in the ring row
    for y in range(oh):
        for i in range(kh):
            r = y * sh + i * dh - pt
            if r < 0 or r >= h:
                rows[i] = n_ring  # a padding row adds 0
                continue
            slot = r % n_ring
            if held[slot] != r:
                held[slot] = r
                for g in range(g_n):
                    _convert_row(xp[p0 + g, r].reshape(wd * blk), fzp, pl, blk,
                                 ring[slot, g * wp * blk:(g + 1) * wp * blk])
            rows[i] = slot
        if kh == 3 and kw == 3:  # one pass over the row for the 9 taps
            d = dw * blk
            r0, r1, r2 = ring[rows[0]], ring[rows[1]], ring[rows[2]]
            _mac9(acc[:n], r0[:n], r0[d:d + n], r0[2 * d:2 * d + n], r1[:n], r1[d:d + n], r1[2 * d:2 * d + n],
                  r2[:n], r2[d:d + n], r2[2 * d:2 * d + n], wt[0, 0], wt[0, 1], wt[0, 2], wt[1, 0], wt[1, 1],
                  wt[1, 2], wt[2, 0], wt[2, 1], wt[2, 2])
        else:
            acc[:n] = 0
            for i in range(kh):
                if rows[i] == n_ring:
                    continue
                for j in range(kw):
                    k0 = j * dw * blk
                    _mac(acc[:n], ring[rows[i], k0:k0 + n], wt[i, j])
        for g in range(g_n):
            p = p0 + g
            c0 = p * blk
            lanes = min(blk, c - c0)
            row = off + p * ps + y * ls
            orow = out[row:row + ow * blk] if same else y8
            _requant_row(acc, g * wp * blk, sw, params, c0, ow, blk, lanes, out_zp, lo, hi, orow)
            if not same:
                for xo in range(ow):
                    for b in range(lanes):
                        ch = c0 + b
                        out[off + (ch // bo) * ps + y * ls + xo * bo + ch % bo] = y8[xo * blk + b]


GROUP_LANES = 8192  # lanes of a group's ring row: planes side by side up to this (small maps), else one


def prepare(w, c: int, n_planes: int, blk: int, ow: int, sw: int, dw: int, zp: int, bias, mult, shift) -> tuple:
    """What `depthwise_into` takes besides the input and the output, made once for weights and tables that never change:
    (the weights repeated per column, [groups][KH][KW][G*Wp*B], float32 when every sum is exact in it,
    else float64; the requantization's `requant.channel_params` of the P*B channels)."""
    w = np.asarray(w)
    kh, kw = w.shape[1], w.shape[2]
    wp = _columns(ow, sw, kw, dw)
    g_max = max(1, min(n_planes, GROUP_LANES // (wp * blk)))
    w_max = int(np.abs(w.astype(np.int64)).max(initial=0))
    exact32 = kh * kw * (128 + abs(int(zp))) * w_max <= EXACT_F32
    wt = np.zeros((-(-n_planes // g_max), kh, kw, g_max * wp * blk), np.float32 if exact32 else np.float64)
    _tile_weights(w, c, blk, wp, wt)
    params = channel_params(np.asarray(bias, np.int64), np.asarray(mult, np.int64), np.asarray(shift, np.int64),
                            n_planes * blk)  # the padding channels' are zeros
    return wt, params


@njit(cache=True, nogil=True)
def _tile_weights(w, c, blk, wp, wt):
    """wt [groups][KH][KW][G*Wp*B] = weight (i, j) of channel (p0 + g)*B + b at every column of segment
    g of its group (zeros past c), from w [C][KH][KW][1]."""
    n_groups, kh, kw, width = wt.shape
    g_max = width // (wp * blk)
    for gi in range(n_groups):
        for g in range(g_max):
            c0 = (gi * g_max + g) * blk
            if c0 >= c:
                break
            for i in range(kh):
                for j in range(kw):
                    wr = wt[gi, i, j, g * wp * blk:(g + 1) * wp * blk]
                    for b in range(min(blk, c - c0)):
                        wr[b] = w[c0 + b, i, j, 0]
                    done = blk
                    while done < wr.size:  # the same weights at every column: doubling copies
                        k = min(done, wr.size - done)
                        _copy(wr[:k], wr[done:done + k])
                        done += k


@njit(cache=True, nogil=True)
def depthwise_into(xp, c, zp, wt, params, sh, sw, dh, dw, pt, pl, oh, ow, out_zp, lo, hi, out, off, ps, ls, po, bo):
    """The requantized depthwise conv of int8 planes xp [P][H][W][B] of c channels, with the weights and channel
    parameters of `prepare`, into planes [Po][OH][OW][Bo] laid out at flat int8 `out` (output channel ch in plane
    ch // Bo, lane ch % Bo; the Po*Bo - c padding channels 0): pixel (y, x) of plane q at
    out[off + q*ps + y*ls + x*Bo:][:Bo] (rows dense, planes and rows at any stride: where a write SE puts
    the stream, or a new array). The planes go by groups (`_group`)."""
    n_planes, h, wd, blk = xp.shape
    n_groups, kh, kw, width = wt.shape
    same = po == n_planes and bo == blk  # output planes map lane for lane onto the input's
    if not same:
        for q in range(po):  # the padding channels of the output planes
            for y in range(oh):
                row = off + q * ps + y * ls
                out[row:row + ow * bo] = 0
    g_max = width // (_columns(ow, sw, kw, dw) * blk)
    ring = np.zeros(((kh - 1) * dh + 2, width), wt.dtype)  # the window's rows and a zero row
    acc = np.empty(width, wt.dtype)
    y8 = np.empty(ow * blk, np.int8)
    held = np.empty(ring.shape[0] - 1, np.int64)
    for gi in range(n_groups):
        _group(xp, gi * g_max, c, zp, wt[gi], sh, sw, dh, dw, pt, pl, oh, ow, params, out_zp, lo, hi, out, off, ps, ls,
               bo, same, ring, held, acc, y8)

