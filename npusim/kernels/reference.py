"""Slow, obvious references that define the kernels' semantics (direct loops, Python ints).

They share no code with the fast kernels. Use them on small tensors only (tests).
"""

from __future__ import annotations

import math

import numpy as np

from .eltwise import TWO_MAPS


def _rsr(v: int, s: int) -> int:
    """(v + 2^(s-1)) >> s with Python ints (round half up); s = 0 -> v."""
    return v if s == 0 else (v + (1 << (s - 1))) >> s


def _clamp(v, lo, hi):
    return lo if v < lo else hi if v > hi else v


def _out(n, k, s, d, pa, pb):
    return (n + pa + pb - d * (k - 1) - 1) // s + 1


def _store(y, dtype):
    """float64 results in `dtype`; fp16 saturates finite results at +-65504 (the kernels' ASSUMED rule)."""
    y = np.asarray(y, dtype=np.float64)
    if np.dtype(dtype) == np.float16:
        y = np.where(np.isfinite(y), np.minimum(np.maximum(y, -65504.0), 65504.0), y)
    return y.astype(dtype)


def _vec(v, n):
    v = list(np.asarray(v).reshape(-1).tolist())
    return v * n if len(v) == 1 else v


def conv2d_int8_ref(x, w, bias, mult, shift, *, in_zp, out_zp, stride=(1, 1), dilation=(1, 1),
                    pads=(0, 0, 0, 0), groups=1, act_lo=-128, act_hi=127):
    h, wd, c = x.shape
    oc, kh, kw, icg = w.shape
    sh, sw = stride
    dh, dw = dilation
    pt, pl, pb, pr = pads
    oh, ow = _out(h, kh, sh, dh, pt, pb), _out(wd, kw, sw, dw, pl, pr)
    bias, mult, shift = _vec(bias, oc), _vec(mult, oc), _vec(shift, oc)
    ocg = oc // groups
    xl, wl = x.tolist(), w.tolist()
    lo, hi = max(act_lo, -128), min(act_hi, 127)
    y = np.zeros((oh, ow, oc), dtype=np.int8)
    for o in range(oc):
        g = o // ocg
        for yy in range(oh):
            for xx in range(ow):
                acc = 0
                for i in range(kh):
                    r = yy * sh + i * dh - pt
                    if not 0 <= r < h:
                        continue
                    for j in range(kw):
                        q = xx * sw + j * dw - pl
                        if not 0 <= q < wd:
                            continue
                        for k in range(icg):
                            acc += (xl[r][q][g * icg + k] - in_zp) * wl[o][i][j][k]
                acc += int(bias[o])
                acc = ((acc + 2**31) % 2**32) - 2**31  # 32-bit accumulator
                y[yy, xx, o] = _clamp(out_zp + _rsr(acc * int(mult[o]), int(shift[o])), lo, hi)
    return y


def conv2d_float_ref(x, w, bias=None, *, stride=(1, 1), dilation=(1, 1), pads=(0, 0, 0, 0), groups=1,
                     act_lo=None, act_hi=None):
    """float64 direct convolution, rounded to x's dtype at the end."""
    h, wd, c = x.shape
    oc, kh, kw, icg = w.shape
    sh, sw = stride
    dh, dw = dilation
    pt, pl, pb, pr = pads
    oh, ow = _out(h, kh, sh, dh, pt, pb), _out(wd, kw, sw, dw, pl, pr)
    ocg = oc // groups
    xf, wf = x.astype(np.float64), w.astype(np.float64)
    y = np.zeros((oh, ow, oc))
    for o in range(oc):
        g = o // ocg
        for yy in range(oh):
            for xx in range(ow):
                s = 0.0 if bias is None else float(np.asarray(bias).reshape(-1)[o])
                for i in range(kh):
                    for j in range(kw):
                        r, q = yy * sh + i * dh - pt, xx * sw + j * dw - pl
                        if 0 <= r < h and 0 <= q < wd:
                            s += float(xf[r, q, g * icg:(g + 1) * icg] @ wf[o, i, j])
                if act_lo is not None:
                    s = max(s, act_lo)
                if act_hi is not None:
                    s = min(s, act_hi)
                y[yy, xx, o] = s
    return _store(y, x.dtype)


def _windows(h, w, k, stride, pads):
    """For each (oy, ox): the list of valid (r, q) cells and the full window size."""
    kh, kw = k
    sh, sw = stride
    pt, pl, pb, pr = pads
    oh, ow = _out(h, kh, sh, 1, pt, pb), _out(w, kw, sw, 1, pl, pr)
    for oy in range(oh):
        for ox in range(ow):
            cells = [(oy * sh + i - pt, ox * sw + j - pl) for i in range(kh) for j in range(kw)]
            yield oy, ox, [(r, q) for r, q in cells if 0 <= r < h and 0 <= q < w], oh, ow


def maxpool_ref(x, k, stride, pads):
    h, w, c = x.shape
    out = None
    for oy, ox, cells, oh, ow in _windows(h, w, k, stride, pads):
        if out is None:
            out = np.zeros((oh, ow, c), dtype=x.dtype)
        for ch in range(c):
            out[oy, ox, ch] = max(x[r, q, ch] for r, q in cells)
    return out


def _avg_int(s: int, count: int, out_zp, mult, shift, rounding="half_up") -> int:
    """round(out_zp + s * mult / (count << shift)): the value n / d with its zero point, rounded half up
    (floor(v + 1/2)) or half away from zero (sign(v) * floor(|v| + 1/2))."""
    d = count << shift
    n = s * mult + out_zp * d
    if rounding == "half_up":
        q = (2 * n + d) // (2 * d)
    elif rounding == "half_away":
        q = (2 * abs(n) + d) // (2 * d) * (-1 if n < 0 else 1)
    else:
        raise ValueError(f"unknown rounding {rounding!r}")
    return _clamp(q, -128, 127)


def avgpool_int8_ref(x, k, stride, pads, include_pad, in_zp, out_zp, mult, shift, rounding="half_up"):
    h, w, c = x.shape
    xl = x.tolist()
    out = None
    for oy, ox, cells, oh, ow in _windows(h, w, k, stride, pads):
        if out is None:
            out = np.zeros((oh, ow, c), dtype=np.int8)
        count = k[0] * k[1] if include_pad else len(cells)
        for ch in range(c):
            s = sum(xl[r][q][ch] - in_zp for r, q in cells)
            out[oy, ox, ch] = _avg_int(s, count, out_zp, int(mult), int(shift), rounding)
    return out


def avgpool_float_ref(x, k, stride, pads, include_pad=False):
    h, w, c = x.shape
    out = None
    for oy, ox, cells, oh, ow in _windows(h, w, k, stride, pads):
        if out is None:
            out = np.zeros((oh, ow, c))
        count = k[0] * k[1] if include_pad else len(cells)
        for ch in range(c):
            out[oy, ox, ch] = sum(float(x[r, q, ch]) for r, q in cells) / count
    return out.astype(x.dtype)


def global_avg_int8_ref(x, in_zp, out_zp, mult, shift, rounding="half_up"):
    h, w, c = x.shape
    xl = x.tolist()
    return np.array([[[_avg_int(sum(xl[r][q][ch] - in_zp for r in range(h) for q in range(w)),
                                h * w, out_zp, int(mult), int(shift), rounding) for ch in range(c)]]], dtype=np.int8)


def _src(o, n, m, coord):
    """Exact source coordinate as (num, den)."""
    if coord == "asymmetric":
        return o * n, m
    if coord == "half_pixel":
        return (2 * o + 1) * n - m, 2 * m
    return (0, 1) if m == 1 else (o * (n - 1), m - 1)


def resize_ref(x, out_h, out_w, mode="nearest", coord="asymmetric"):
    h, w, c = x.shape
    out = np.zeros((out_h, out_w, c), dtype=x.dtype)
    for oy in range(out_h):
        ny, dy = _src(oy, h, out_h, coord)
        for ox in range(out_w):
            nx, dx = _src(ox, w, out_w, coord)
            if mode == "nearest":
                r, q = _clamp(ny // dy, 0, h - 1), _clamp(nx // dx, 0, w - 1)
                out[oy, ox] = x[r, q]
                continue
            if x.dtype == np.int8:
                fy = _clamp((2 * ny * 2048 + dy) // (2 * dy), 0, (h - 1) * 2048)
                fx = _clamp((2 * nx * 2048 + dx) // (2 * dx), 0, (w - 1) * 2048)
                y0, x0 = fy // 2048, fx // 2048
                y1, x1, ay, ax = min(y0 + 1, h - 1), min(x0 + 1, w - 1), fy % 2048, fx % 2048
                for ch in range(c):
                    v = (int(x[y0, x0, ch]) * (2048 - ax) * (2048 - ay) + int(x[y0, x1, ch]) * ax * (2048 - ay)
                         + int(x[y1, x0, ch]) * (2048 - ax) * ay + int(x[y1, x1, ch]) * ax * ay)
                    out[oy, ox, ch] = (v + 2**21) >> 22
            else:
                sy = _clamp(ny / dy, 0.0, h - 1.0)
                sx = _clamp(nx / dx, 0.0, w - 1.0)
                y0, x0 = math.floor(sy), math.floor(sx)
                y1, x1, ay, ax = min(y0 + 1, h - 1), min(x0 + 1, w - 1), sy - y0, sx - x0
                xf = x.astype(np.float64)
                out[oy, ox] = ((xf[y0, x0] * (1 - ax) + xf[y0, x1] * ax) * (1 - ay)
                               + (xf[y1, x0] * (1 - ax) + xf[y1, x1] * ax) * ay)
    return out


def eltwise_int8_ref(op, a, b, ma, mb, shift, bconst, *, a_zp, b_zp, out_zp, lo=-128, hi=127):
    h, w, c = a.shape
    ma, mb, shift, bconst = (_vec(v, c) for v in (ma, mb, shift, bconst))
    out = np.zeros_like(a)
    for idx in np.ndindex(h, w, c):
        ch = idx[2]
        A = int(a[idx]) - a_zp
        if op == "copy":
            out[idx] = a[idx]
            continue
        if op == "mul_channel":
            B = int(b[0, 0, ch]) - b_zp
        else:
            B = int(b[idx]) - b_zp if op in TWO_MAPS else int(bconst[ch])
        s = int(shift[ch])
        if op in ("max", "min"):
            pick = max if op == "max" else min
            r = pick(_rsr(A * int(ma[ch]), s), _rsr(B * int(mb[ch]), s))
        elif op == "prelu":
            r = _rsr(A * int(ma[ch] if A >= 0 else mb[ch]), s)
        elif op in ("add", "add_const", "sub"):
            r = _rsr(A * int(ma[ch]) + B * int(mb[ch]), s)
        else:
            r = _rsr(A * B * int(ma[ch]), s)
        out[idx] = _clamp(out_zp + r, max(lo, -128), min(hi, 127))
    return out


def act_ref(func, v: float, alpha=0.01, lo=None, hi=None) -> float:
    """Scalar float64 activation."""
    if func == "relu":
        return max(v, 0.0)
    if func == "clip":
        v = v if lo is None else max(v, lo)
        return v if hi is None else min(v, hi)
    if func == "leaky":
        return v if v >= 0 else alpha * v
    sig = 1.0 / (1.0 + math.exp(-v)) if v > -700 else 0.0
    if func == "sigmoid":
        return sig
    if func == "silu":
        return v * sig
    if func == "hardswish":
        return v * min(1.0, max(0.0, v / 6 + 0.5))
    if func == "tanh":
        return math.tanh(v)
    if func == "identity":
        return v
    if func == "hardsigmoid":
        return min(1.0, max(0.0, alpha * v + (lo or 0.0)))
    if func == "elu":
        return v if v >= 0 else alpha * math.expm1(v)
    softplus = max(v, 0.0) + math.log1p(math.exp(-abs(v)))
    if func == "softplus":
        return softplus
    if func == "gelu":
        return v * (1 + math.erf(v / math.sqrt(2))) / 2
    if func == "gelu_tanh":
        return v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3))) / 2
    if func == "mish":
        return v * math.tanh(softplus)
    if func == "reciprocal":
        return 1.0 / v if v else math.copysign(math.inf, v)
    if func == "exp":
        return math.exp(v) if v < 709 else math.inf
    raise ValueError(func)


def make_lut_ref(func, in_scale, in_zp, out_scale, out_zp, alpha=0.01, lo=None, hi=None):
    out = []
    for q in range(-128, 128):
        y = act_ref(func, (q - in_zp) * in_scale, alpha, lo, hi) / out_scale
        r = math.floor(y + 0.5)
        if r - y == 0.5 and r % 2:  # exact tie: round half to even
            r -= 1
        out.append(_clamp(r + out_zp, -128, 127))
    return np.array(out, dtype=np.int8)



def pack_ref(hwc, layout):
    """Stream bytes built element by element (blocked16: [plane][h][w][16], zeros past C)."""
    h, w, c = hwc.shape
    es = hwc.dtype.itemsize
    le = hwc.astype(hwc.dtype.newbyteorder("<"))
    if layout != "blocked16":
        return np.frombuffer(b"".join(le[i, j, k].tobytes() for i in range(h) for j in range(w)
                                      for k in range(c)), dtype=np.uint8)
    zero = bytes(es)
    out = []
    for p in range(-(-c // 16)):
        for i in range(h):
            for j in range(w):
                for k in range(16):
                    ch = p * 16 + k
                    out.append(le[i, j, ch].tobytes() if ch < c else zero)
    return np.frombuffer(b"".join(out), dtype=np.uint8)


def lut_int8_ref(x, lut):
    t = [v - 256 if v >= 128 else v for v in np.asarray(lut).view(np.uint8).tolist()]
    return np.array([[[t[v + 128] for v in row] for row in plane] for plane in x.tolist()], dtype=np.int8)


def global_avg_float_ref(x):
    h, w, c = x.shape
    return np.array([[[sum(float(x[i, j, k]) for i in range(h) for j in range(w)) / (h * w)
                       for k in range(c)]]]).astype(x.dtype)


def eltwise_float_ref(op, a, b=None, bconst=0.0, lo=None, hi=None):
    """float64 elementwise op, clip, rounded to a's dtype."""
    x = a.astype(np.float64)
    k = np.broadcast_to(np.asarray(bconst, dtype=np.float64).reshape(-1), (a.shape[-1],))
    out = np.empty_like(x)
    for idx in np.ndindex(*a.shape):
        v = x[idx]
        other = float(b[0, 0, idx[2]]) if op == "mul_channel" else \
            float(b[idx]) if op in TWO_MAPS else float(k[idx[2]])
        if op == "copy":
            r = v
        elif op in ("add", "add_const"):
            r = v + other
        elif op == "sub":
            r = v - other
        elif op in ("max", "min"):
            r = max(v, other) if op == "max" else min(v, other)
        elif op == "prelu":
            r = v * other if v < 0 else v
        else:
            r = v * other
        r = r if lo is None else max(r, lo)
        out[idx] = r if hi is None else min(r, hi)
    return _store(out, a.dtype)
