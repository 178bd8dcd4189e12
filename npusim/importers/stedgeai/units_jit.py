"""Numba kernels for the functional run's element-wise passes: one pass per streamed element where numpy
needs one per operation. Each equals, bit for bit, the numpy formula it replaces (`units_exec`, `execute`);
the callers use them only for the cases written here (half-up rounding, shifts in [0, 63]) and keep numpy
for the rest.

Streams are arrays of bit patterns in the narrowest type that holds their width (`PATTERN_TYPES`: unsigned
8 or 16 bits, int32 for 24 bits, int64 otherwise): a kernel reads an element's low bits through its lane's
mask and sign bit whatever the array's type, computes in int64, and stores its result into the output
array's type (a wrapping store: the pattern's low bits are kept)."""

from __future__ import annotations

import numpy as np
from numba import njit

PATTERN_TYPES = {1: np.uint8, 2: np.uint16, 3: np.int32, 4: np.int32}  # bytes per element -> array type


def pattern_type(nbytes: int):
    """The array type of a stream of `nbytes`-byte patterns (int64 beyond 4 bytes)."""
    return PATTERN_TYPES.get(nbytes, np.int64)


@njit(cache=True, inline="always")
def _affine_one(xp, yp, a, b, cc, has_y, xmask, xsign, ymask, ysign, ax_shift, by_shift, lshift, rshift,
                lo_clip, hi_clip, lo_sat, hi_sat, lo, mask):
    """One element, without data-dependent branches (so the loops vectorise): lanes by mask and sign bit, the
    affine sum shifted left, plus `cc` (C << CSHIFT << left shift, plus the rounding term), shifted right,
    clipped, saturated, wrapped to the output width."""
    x = ((xp & xmask) ^ xsign) - xsign
    v = (a * x) >> ax_shift
    if has_y:
        y = ((yp & ymask) ^ ysign) - ysign
        v += (b * y) >> by_shift
    v = ((v << lshift) + cc) >> rshift
    v = min(max(min(max(v, lo_clip), hi_clip), lo_sat), hi_sat)
    return ((v - lo) & mask) + lo


@njit(cache=True, inline="always")
def _shift_fit(v, lshift, rnd, rshift, lo_sat, hi_sat, lo, mask):
    """v shifted left or right (with its rounding term), saturated, wrapped to the output width."""
    v = ((v << lshift) + rnd) >> rshift
    v = min(max(v, lo_sat), hi_sat)
    return ((v - lo) & mask) + lo


@njit(cache=True, nogil=True)
def conv_requantise(acc, accin, has_in, in_mask, in_sign, in_shift, lshift, rnd, rshift, lo_sat, hi_sat, lo, mask,
                    out):
    """CONVACC output of the sums `acc` (integers, of any numeric type; contiguous) plus, with `has_in`,
    the accumulator input << `in_shift` (patterns of any integer type, as many, read as lanes by `in_mask`
    and sign bit `in_sign`), stored into `out` (as many; its type keeps the output's low bits), returned."""
    a = acc.reshape(-1)
    for i in range(a.size):
        v = np.int64(a[i])
        if has_in:
            v += (((np.int64(accin[i]) & in_mask) ^ in_sign) - in_sign) << in_shift
        out[i] = _shift_fit(v, lshift, rnd, rshift, lo_sat, hi_sat, lo, mask)
    return out


@njit(cache=True, inline="always")
def _shift_fit32(v, lshift, rnd, rshift, lo_sat, hi_sat, lo, mask):
    """`_shift_fit` in int32 (shift counts masked to 0-31): equal to it where no value leaves int32."""
    i32 = np.int32
    v = i32(i32(i32(v << (lshift & 31)) + rnd) >> (rshift & 31))
    v = i32(min(max(v, lo_sat), hi_sat))
    return i32(i32(i32(v - lo) & mask) + lo)


@njit(cache=True, nogil=True)
def conv_requantise32(acc, accin, has_in, in_mask, in_sign, in_shift, lshift, rnd, rshift, lo_sat, hi_sat, lo, mask,
                      out):
    """`conv_requantise` in int32 (float32 sums below 2^24, int32 constants), so that the loop vectorises in
    32-bit lanes: for the units whose every intermediate value fits int32 (`units_exec._output_int32`)."""
    i32 = np.int32
    a = acc.reshape(-1)
    if has_in:
        for i in range(a.size):
            v = i32(i32(a[i]) + i32(i32(i32(i32(i32(accin[i]) & in_mask) ^ in_sign) - in_sign) << (in_shift & 31)))
            out[i] = _shift_fit32(v, lshift, rnd, rshift, lo_sat, hi_sat, lo, mask)
    else:
        for i in range(a.size):
            out[i] = _shift_fit32(i32(a[i]), lshift, rnd, rshift, lo_sat, hi_sat, lo, mask)
    return out


@njit(cache=True, nogil=True)
def arith_affine(x, y, a, b, cc, groups, plane, depth, has_y, lanes, shifts, bounds, out):
    """ARITH_AFFINE over x and y (patterns of any integer type, groups*plane*depth of each; y read only with
    `has_y`) into `out` (returned): coefficient (g, d) of the 2-D arrays a, b, cc for element (g, p, d) (a
    coefficient dimension of 1 broadcasts), cc being C << CSHIFT << left shift, plus the rounding term.
    lanes: (X mask, X sign bit, Y mask, Y sign bit); shifts: (AX, BY, left, right); bounds: (clip low, clip
    high, saturation low, high, output low, mask)."""
    xm, xs, ym, ys = lanes
    ax, by, ls, rs = shifts
    lc, hc, sl, sh, lo, mask = bounds
    per_channel = a.shape[1] > 1
    i = 0
    for g in range(groups):
        gi = g if a.shape[0] > 1 else 0
        if per_channel:
            ar, br, cr = a[gi], b[gi], cc[gi]
            for p in range(plane):
                for d in range(depth):
                    out[i + d] = _affine_one(np.int64(x[i + d]), np.int64(y[i + d]), ar[d], br[d], cr[d], has_y, xm,
                                             xs, ym, ys, ax, by, ls, rs, lc, hc, sl, sh, lo, mask)
                i += depth
        else:
            a0, b0, c0 = a[gi, 0], b[gi, 0], cc[gi, 0]
            m = plane * depth
            for k in range(m):
                out[i + k] = _affine_one(np.int64(x[i + k]), np.int64(y[i + k]), a0, b0, c0, has_y, xm, xs, ym, ys,
                                         ax, by, ls, rs, lc, hc, sl, sh, lo, mask)
            i += m
    return out


@njit(cache=True, inline="always")
def _affine_one32(xp, yp, a, b, cc, has_y, xmask, xsign, ymask, ysign, ax, by, lshift, rshift, lo_clip, hi_clip,
                  lo_sat, hi_sat, lo, mask):
    """`_affine_one` in int32 (every operand and result cast back to int32, shift counts masked to 0-31), so
    that the loops vectorise in 32-bit lanes: equal to it where no value leaves int32 and every shift is
    below 32 (`units_exec._int32_exact` decides)."""
    i32 = np.int32
    x = i32(i32(i32(i32(xp) & xmask) ^ xsign) - xsign)
    v = i32(i32(a * x) >> (ax & 31))
    if has_y:
        y = i32(i32(i32(i32(yp) & ymask) ^ ysign) - ysign)
        v = i32(v + i32(i32(b * y) >> (by & 31)))
    v = i32(i32(i32(v << (lshift & 31)) + cc) >> (rshift & 31))
    v = i32(min(max(min(max(v, lo_clip), hi_clip), lo_sat), hi_sat))
    return i32(i32(i32(v - lo) & mask) + lo)


TILE = 512  # per-channel coefficients are tiled to rows of about this many elements (long vectorised loops)


@njit(cache=True, nogil=True)
def arith_affine32(x, y, a, b, cc, groups, plane, depth, has_y, lanes, shifts, bounds, out):
    """`arith_affine` with int32 coefficients (a, b, cc), lanes, shifts and bounds, computed in int32
    (`_affine_one32`): for the units whose every intermediate value fits int32. Per-channel coefficients are
    tiled along a row of whole pixels, and without Y the loop reads neither Y nor B, so that each inner loop
    is long and touches few arrays (the vectoriser's alias checks stay within its limit)."""
    xm, xs, ym, ys = lanes
    ax, by, ls, rs = shifts
    lc, hc, sl, sh, lo, mask = bounds
    per_channel = a.shape[1] > 1
    reps = max(1, min(plane, TILE // depth)) if per_channel else 1
    run = reps * depth
    ta, tb, tc = np.empty(run, a.dtype), np.empty(run, a.dtype), np.empty(run, a.dtype)
    i = 0
    for g in range(groups):
        gi = g if a.shape[0] > 1 else 0
        if per_channel:
            for j in range(run):
                ta[j], tb[j], tc[j] = a[gi, j % depth], b[gi, j % depth], cc[gi, j % depth]
        else:
            ta[0], tb[0], tc[0] = a[gi, 0], b[gi, 0], cc[gi, 0]
        left = plane * depth
        while left > 0:
            m = min(run, left) if per_channel else left
            xr, orow = x[i:i + m], out[i:i + m]
            if per_channel and has_y:
                yr = y[i:i + m]
                for k in range(m):
                    orow[k] = _affine_one32(xr[k], yr[k], ta[k], tb[k], tc[k], True, xm, xs, ym, ys, ax, by, ls, rs,
                                            lc, hc, sl, sh, lo, mask)
            elif per_channel:
                for k in range(m):
                    orow[k] = _affine_one32(xr[k], 0, ta[k], 0, tc[k], False, xm, xs, ym, ys, ax, by, ls, rs,
                                            lc, hc, sl, sh, lo, mask)
            elif has_y:
                yr, a0, b0, c0 = y[i:i + m], ta[0], tb[0], tc[0]
                for k in range(m):
                    orow[k] = _affine_one32(xr[k], yr[k], a0, b0, c0, True, xm, xs, ym, ys, ax, by, ls, rs,
                                            lc, hc, sl, sh, lo, mask)
            else:
                a0, c0 = ta[0], tc[0]
                for k in range(m):
                    orow[k] = _affine_one32(xr[k], 0, a0, 0, c0, False, xm, xs, ym, ys, ax, by, ls, rs,
                                            lc, hc, sl, sh, lo, mask)
            i += m
            left -= m
    return out


@njit(cache=True, nogil=True)
def arith_chain32(x, a, cc, groups, plane, depth, lanes, shifts, bounds, out):
    """ARITH_AFFINE units without Y in a chain (the output of one the X of the next), in one pass: stage s as
    `arith_affine32` with coefficients a[s], cc[s] (groups or 1, depth) over groups*plane*depth elements of x,
    lanes[s] (X mask, X sign bit), shifts[s] (AX, -, left, right), bounds[s] as `arith_affine32`'s; the last
    stage stored into `out` (returned). A stage's value goes on as its signed int32 value (its pattern's low
    bits, which the next stage's lanes read). Per-channel coefficients are tiled along a row of whole pixels
    and every stage runs over the row while it is in cache."""
    ns = a.shape[0]
    reps = max(1, min(plane, TILE // depth))
    run = reps * depth
    ta, tc = np.empty((ns, run), a.dtype), np.empty((ns, run), a.dtype)
    v = np.empty(run, np.int32)
    i = 0
    for g in range(groups):
        gi = g if a.shape[1] > 1 else 0
        if g == 0 or a.shape[1] > 1:
            for s in range(ns):
                for j in range(run):
                    ta[s, j], tc[s, j] = a[s, gi, j % depth], cc[s, gi, j % depth]
        left = plane * depth
        while left > 0:
            m = min(run, left)
            xr, vr = x[i:i + m], v[:m]
            for k in range(m):  # X's patterns as int32 (the first stage's lanes read their low bits)
                vr[k] = xr[k]
            for s in range(ns):
                xm, xs = lanes[s, 0], lanes[s, 1]
                ax, ls, rs = shifts[s, 0], shifts[s, 2], shifts[s, 3]
                lc, hc, sl, sh, lo, mask = bounds[s, 0], bounds[s, 1], bounds[s, 2], bounds[s, 3], bounds[s, 4], bounds[s, 5]
                sa, sc = ta[s, :m], tc[s, :m]
                for k in range(m):
                    vr[k] = _affine_one32(vr[k], 0, sa[k], 0, sc[k], False, xm, xs, 0, 0, ax, 0, ls, rs,
                                          lc, hc, sl, sh, lo, mask)
            orow = out[i:i + m]
            for k in range(m):
                orow[k] = vr[k]
            i += m
            left -= m
    return out


@njit(cache=True, nogil=True)
def lanes_into(p, mask, sign, offset, out):
    """out[i] = the lane value of pattern p[i] (any integer type; its bits under `mask`, two's complement when
    `sign` is the top bit, unsigned when 0) minus `offset`, converted to out's type."""
    for i in range(p.size):
        out[i] = (((np.int64(p[i]) & mask) ^ sign) - sign) - offset


@njit(cache=True, nogil=True)
def pack3(p):
    """The low 3 bytes of each element of `p` (int32 or int64), little-endian, as one uint8 array."""
    out = np.empty(p.size * 3, np.uint8)
    for i in range(p.size):
        v = np.int64(p[i])
        out[3 * i] = v & 0xFF
        out[3 * i + 1] = (v >> 8) & 0xFF
        out[3 * i + 2] = (v >> 16) & 0xFF
    return out


@njit(cache=True, nogil=True)
def unpack3(raw):
    """Little-endian unsigned 3-byte elements of the bytes `raw` (a whole number of them), as int32."""
    out = np.empty(raw.size // 3, np.int32)
    for i in range(out.size):
        out[i] = np.int32(raw[3 * i]) | (np.int32(raw[3 * i + 1]) << 8) | (np.int32(raw[3 * i + 2]) << 16)
    return out


@njit(cache=True, nogil=True)
def depthwise(x, taps, top, left, rows, cols, tpad, lpad, pad, vs, hs, oh, ow):
    """Sums (oh, ow, K) of a depthwise convolution, in the type of x and taps (an exact one: see
    `units_exec.conv_kernels`): channel k of x (h, w, K) with taps (kh, kw, K); the input window is rows x
    cols from (top, left), padded by `tpad` / `lpad` (and up to the output size) with the value `pad`.
    An output row is a run of ow*K sums, built tap by tap while it stays in cache: each tap one multiply-add
    over contiguous slices (the taps tiled along the row; a strided input row gathered first). Slices, not
    offset indices, so that no index can be negative and the loop vectorises."""
    kh, kw, nk = taps.shape
    run = ow * nk
    out = np.empty((oh, run), taps.dtype)
    xf = x.reshape(x.shape[0], x.shape[1] * nk)
    pad = taps.dtype.type(pad)
    tiled = np.empty((kh, kw, run), taps.dtype)
    for dy in range(kh):
        for dx in range(kw):
            for j in range(run):
                tiled[dy, dx, j] = taps[dy, dx, j % nk]
    gathered = np.empty(run, taps.dtype)
    for oy in range(oh):
        o = out[oy]
        o[:] = 0
        for dy in range(kh):
            iy = oy * vs + dy - tpad
            for dx in range(kw):
                t = tiled[dy, dx]
                if not 0 <= iy < rows:
                    for j in range(run):
                        o[j] += pad * t[j]
                    continue
                lo = max(0, -((dx - lpad) // hs))  # first output column whose input column is inside the window
                hi = max(lo, min(ow, (cols - 1 - dx + lpad) // hs + 1))
                for j in range(lo * nk):
                    o[j] += pad * t[j]
                for j in range(hi * nk, run):
                    o[j] += pad * t[j]
                xr = xf[top + iy]
                a, m = lo * nk, (hi - lo) * nk
                s = (left + lo * hs + dx - lpad) * nk  # the input element of output element a
                if hs == 1:
                    xs = xr[s:s + m]
                else:
                    for p in range(hi - lo):
                        src, dst = xr[s + p * hs * nk:s + p * hs * nk + nk], gathered[p * nk:p * nk + nk]
                        for k in range(nk):
                            dst[k] = src[k]
                    xs = gathered[:m]
                os_, ts = o[a:a + m], t[a:a + m]
                for j in range(m):
                    os_[j] += xs[j] * ts[j]
    return out.reshape(oh, ow, nk)


@njit(cache=True, nogil=True)
def im2col(xp, kh, kw, vs, hs, oh, ow):
    """The im2col matrices (F, oh*ow, kh*kw*C) of padded frames xp (F, H, W, C), contiguous: row (oy, ox) holds
    the window at that output, tap by tap, channel by channel (as `units_exec._columns_strided`). A window
    row's kw*C values are contiguous in xp: one copy per row of the window."""
    nf, _, w, c = xp.shape
    run = kw * c
    out = np.empty((nf, oh * ow, kh * run), xp.dtype)
    for f in range(nf):
        xf = xp[f].reshape(-1)
        of = out[f]
        for oy in range(oh):
            for ox in range(ow):
                row = of[oy * ow + ox]
                for dy in range(kh):
                    s = ((oy * vs + dy) * w + ox * hs) * c
                    src, dst = xf[s:s + run], row[dy * run:(dy + 1) * run]
                    for j in range(run):
                        dst[j] = src[j]
    return out


def warm_calls():
    """(kernel, arguments) of each signature `warm` compiles: every stream type (`PATTERN_TYPES`) in and out,
    the sums in float32 or float64."""
    i64, i32 = np.int64, np.int32
    streams = tuple(dict.fromkeys(PATTERN_TYPES.values()))
    for x in streams:
        for y in streams:
            for out in streams:
                for kernel, t in ((arith_affine, i64), (arith_affine32, i32)):
                    coef = np.zeros((1, 1), t)
                    yield kernel, (np.zeros(8, x), np.zeros(8, y), coef, coef, coef, 1, 8, 1, False,
                                   (t(255), t(128), t(255), t(0)), (t(0), t(0), t(0), t(0)),
                                   (t(0), t(0), t(0), t(0), t(0), t(0)), np.zeros(8, out))
        for out in streams:
            coef = np.zeros((2, 1, 1), i32)
            yield arith_chain32, (np.zeros(8, x), coef, coef, 1, 8, 1, np.zeros((2, 4), i32), np.zeros((2, 4), i32),
                                  np.zeros((2, 6), i32), np.zeros(8, out))
        for t in (np.float32, np.float64):  # the sums' types
            yield lanes_into, (np.zeros(8, x), i64(255), i64(128), i64(0), np.zeros(8, t))
    yield pack3, (np.zeros(8, i32),)
    yield unpack3, (np.zeros(6, np.uint8),)
    for t in (np.float32, np.float64):
        yield im2col, (np.zeros((1, 3, 3, 2), t), 2, 2, 1, 1, 2, 2)
        yield depthwise, (np.zeros((2, 2, 1), t), np.zeros((1, 1, 1), t), 0, 0, 2, 2, 0, 0, 0.0, 1, 1, 2, 2)
        sums = np.zeros(4, t)  # the depthwise pass's sums, flattened
        for out in streams:
            for accin in streams:
                yield conv_requantise, (sums, np.zeros(4, accin), False, i64(255), i64(128), 0, 0, 0, 0, -128, 127,
                                        -128, 255, np.zeros(4, out))
                if t == np.float32:
                    yield conv_requantise32, (sums, np.zeros(4, accin), False, *(i32(v) for v in (
                        255, 128, 0, 0, 0, 0, -128, 127, -128, 255)), np.zeros(4, out))


def warm() -> dict:
    """Compile each kernel with the argument types a functional run passes (`warm_calls`; `npusim warmup`
    may call this); returns {kernel: signatures}."""
    kernels = {}
    for kernel, args in warm_calls():
        kernel(*args)
        kernels[kernel.__name__] = kernel
    return {name: len(f.signatures) for name, f in kernels.items()}
