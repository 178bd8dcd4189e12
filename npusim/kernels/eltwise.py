"""Arithmetic unit: elementwise add / sub / mul / max / min (tensor or constant), PRelu, copy and channel concat.

int8 (see isa ARITH), with A = a - a_zp, B = b - b_zp, per channel c (params of length C or 1):
  add:       y = out_zp + rshift_round(A*ma + B*mb, shift)
  mul:       y = out_zp + rshift_round(A*B*ma, shift)
  mul_channel: as mul with b a [1][1][C] vector broadcast over H x W (B[h][w][c] := B[0][0][c])
  add_const: as add with B := bconst;   mul_const: as mul with B := bconst;   copy: y = a
  sub:       as add (the table holds a negative mb)
  max / min: y = out_zp + max / min(rshift_round(A*ma, shift), rshift_round(B*mb, shift))
  prelu:     y = out_zp + rshift_round(A * (A >= 0 ? ma : mb), shift)   (per-channel slope in mb)
  then clamp to [max(lo, -128), min(hi, 127)].
Intermediates are exact integers: int64 when the bound allows it (one fused Numba pass,
`eltwise_i64._eltwise_i64`, no temporaries; a two-map add / sub on planes whose sums stay below 2^52 in
float64 lanes, `eltwise_i64._add_f64`, the same bits), Python ints otherwise, a band of rows at a time
(`tiles.row_bands`), so no temporary grows with the whole tensor.
float: computed in float32 then rounded to the dtype (for fp16 operands one float32 add/mul
followed by rounding to fp16 equals the correctly rounded fp16 result).
"""

from __future__ import annotations

import numpy as np

from ..errors import UsageError
from .layout import Planes, pack
from .quant import rshift_round, store_float
from .tiles import row_bands

OPS = ("add", "mul", "add_const", "mul_const", "copy", "mul_channel", "sub", "max", "min", "prelu")
TWO_MAPS = ("add", "mul", "sub", "max", "min")  # ops whose port 1 is a tensor of a's shape
_INT64_SAFE = 1 << 62
_F64_EXACT = 1 << 52  # add / sub whose |A*ma + B*mb| stays below this take float64 lanes (`eltwise_i64._add_f64`)


def _params(v, c, name):
    a = np.asarray(v if v is not None else 0, dtype=np.int64).reshape(-1)
    if a.size not in (1, c):
        raise UsageError(f"eltwise: {name} has {a.size} entries, expected 1 or c={c}")
    return a


_CODES = {op: i for i, op in enumerate(OPS)}


def _amax(a) -> int:
    return int(np.abs(a).max(initial=0))


def _int8_params(c, ma, mb, shift, bconst):
    ma, mb, sh, bc = (_params(v, c, n) for v, n in ((ma, "ma"), (mb, "mb"), (shift, "shift"), (bconst, "bconst")))
    if np.any((sh < 0) | (sh > 63)):
        raise UsageError("eltwise_int8: shift must be in [0, 63]")
    return ma, mb, sh, bc


def _int64_fits(op, ma, mb, bc) -> bool:
    """Whether every intermediate of `op` stays below 2^62 (the fused int64 kernel is exact)."""
    bmax = 255 if op in TWO_MAPS + ("mul_channel",) else _amax(bc)
    if op in ("add", "add_const", "sub"):
        bound = 255 * _amax(ma) + bmax * _amax(mb)
    elif op in ("max", "min", "prelu"):
        bound = 255 * max(_amax(ma), _amax(mb))
    else:
        bound = 255 * bmax * _amax(ma)
    return bound < _INT64_SAFE


def _zps_fit(*zps) -> bool:
    return all(abs(int(z)) < _INT64_SAFE for z in zps)


def eltwise_int8_planes(op, a: Planes, b: Planes, ma=1, mb=0, shift=0, *, a_zp=0, b_zp=0, out_zp=0,
                        lo=-128, hi=127) -> np.ndarray:
    """`eltwise_int8` of a two-map op (TWO_MAPS) on tensors held as blocked planes
    (`layout.Planes`, as blocked16 streams hold them), as the stream bytes of the result in the
    same planes (padding channels 0): `layout.pack(eltwise_int8(op, a.hwc(), b.hwc(), ...))`
    without unpacking or packing, where the fused int64 kernel applies (else exactly that).
    The same as `Int8PlanesEltwise(...).run(a, b)`."""
    return Int8PlanesEltwise(op, a.planes.shape, a.c, ma, mb, shift, a_zp=a_zp, b_zp=b_zp, out_zp=out_zp, lo=lo,
                             hi=hi).run(a, b)


class Int8PlanesEltwise:
    """`eltwise_int8_planes` with everything but the operands worked out for operands of planes
    `shape` ([P][H][W][B]) holding c channels: the checked parameters, whether the fused int64 kernel
    applies, its per-lane parameter rows. Made once for a table that never changes, it serves every run."""

    def __init__(self, op, shape, c: int, ma=1, mb=0, shift=0, *, a_zp=0, b_zp=0, out_zp=0, lo=-128, hi=127):
        if op not in TWO_MAPS:
            raise UsageError(f"eltwise_int8_planes: {op!r} is not one of {', '.join(TWO_MAPS)}")
        self.op, self.shape, self.c = op, tuple(shape), int(c)
        self.raw = (ma, mb, shift, dict(a_zp=a_zp, b_zp=b_zp, out_zp=out_zp, lo=lo, hi=hi))  # the slow path's
        self.fast = False
        if self.c == 0 or -(-self.c // self.shape[3]) != self.shape[0]:
            return
        ma, mb, sh, bc = _int8_params(self.c, ma, mb, shift, 0)
        self.fast = _int64_fits(op, ma, mb, bc) and _zps_fit(a_zp, b_zp, out_zp)
        if not self.fast:
            return
        n_planes, blk = self.shape[0], self.shape[3]
        self.zps = (int(a_zp), int(b_zp), int(out_zp), max(int(lo), -128), min(int(hi), 127))
        # add / sub within 2^52: the float64 lanes of `eltwise_i64._add_f64`, the same bits
        bound = (128 + abs(int(a_zp))) * _amax(ma) + (128 + abs(int(b_zp))) * _amax(mb)
        self.f64 = op in ("add", "sub") and bound < _F64_EXACT
        params = (ma, mb, sh, bc)
        if self.f64:
            params = (ma.astype(np.float64), mb.astype(np.float64), np.ldexp(1.0, -sh))
        if ma.size == mb.size == sh.size == 1:  # per-tensor: one pass over every plane
            self.per = [np.ascontiguousarray(np.broadcast_to(v, (blk,))) for v in params]
        else:  # per-channel: plane by plane, the parameters of its channels (the padding's are 0)
            full = [np.zeros(n_planes * blk, v.dtype) for v in params]
            for f, v in zip(full, params):
                f[:self.c] = np.broadcast_to(v, (self.c,))
            self.per = None
            self.planes = [[f[p * blk:(p + 1) * blk] for f in full] for p in range(n_planes)]

    def run(self, a: Planes, b: Planes) -> np.ndarray:
        """The result's stream bytes for operands a and b."""
        if not (self.fast and a.dtype == np.int8 and b.dtype == np.int8 and a.planes.shape == self.shape
                and b.planes.shape == self.shape and a.c == b.c == self.c):
            ma, mb, shift, kw = self.raw
            y = eltwise_int8(self.op, a.hwc(), b.hwc(), ma, mb, shift, **kw)
            return pack(y, "blocked16", block=a.planes.shape[3])
        from .eltwise_i64 import _add_f64, _eltwise_i64  # Numba only when an int8 op runs

        n_planes, _, _, blk = self.shape
        c = self.c
        out = np.empty(self.shape, dtype=np.int8)
        code = _CODES[self.op]
        for p, per in enumerate([self.per] if self.per is not None else self.planes):
            pa, pb, po = (a.planes, b.planes, out) if self.per is not None else (a.planes[p], b.planes[p], out[p])
            if self.f64:
                _add_f64(pa.reshape(-1, blk), pb.reshape(-1, blk), *per, *self.zps, po.reshape(-1, blk))
            else:
                _eltwise_i64(code, pa.reshape(-1, blk), pb.reshape(-1, blk), *per, *self.zps, po.reshape(-1, blk))
        if c < n_planes * blk:
            out[-1, :, :, c - (n_planes - 1) * blk:] = 0
        return out.view(np.uint8).reshape(-1)


def eltwise_int8(op, a, b=None, ma=1, mb=0, shift=0, bconst=0, *, a_zp=0, b_zp=0, out_zp=0,
                 lo=-128, hi=127) -> np.ndarray:
    """int8 elementwise op over [H][W][C] (module doc); b is required for add and mul."""
    if op not in OPS:
        raise UsageError(f"eltwise_int8: unknown op {op!r} (expected {', '.join(OPS)})")
    a = np.asarray(a)
    if a.dtype != np.int8:
        raise UsageError(f"eltwise_int8: a must be int8, got {a.dtype}")
    if op == "copy":
        return a.copy()
    c = a.shape[-1]
    ma, mb, sh, bc = _int8_params(c, ma, mb, shift, bconst)
    if op in TWO_MAPS + ("mul_channel",):
        b = np.asarray(b) if b is not None else None
        want = (1, 1, c) if op == "mul_channel" else a.shape
        if b is None or b.dtype != np.int8 or b.shape != want:
            raise UsageError(f"eltwise_int8: {op} needs an int8 b of shape {want}")
    exact_py = not _int64_fits(op, ma, mb, bc)
    out = np.empty(a.shape, dtype=np.int8)
    lo, hi = max(int(lo), -128), min(int(hi), 127)
    if not exact_py and _zps_fit(a_zp, b_zp, out_zp):
        per = [np.ascontiguousarray(np.broadcast_to(v, (c,))) for v in (ma, mb, sh, bc)]
        bb = np.zeros((1, c), np.int8) if b is None or op not in TWO_MAPS + ("mul_channel",) else b.reshape(-1, c)
        from .eltwise_i64 import _eltwise_i64  # Numba only when an int8 op runs

        _eltwise_i64(_CODES[op], a.reshape(-1, c), bb, *per, int(a_zp), int(b_zp), int(out_zp), lo, hi,
                     out.reshape(-1, c))
        return out
    h = a.shape[0] if a.ndim == 3 else 1
    a3 = a.reshape((h, -1, c))
    b3 = b.reshape((h, -1, c)) if op in TWO_MAPS else b
    o3 = out.reshape((h, -1, c))
    for r0, r1 in row_bands(h, a3.shape[1] * c * 8 * 4):  # int64 temporaries of one band at a time
        A = a3[r0:r1].astype(np.int64) - int(a_zp)
        if op in TWO_MAPS:
            B = b3[r0:r1].astype(np.int64) - int(b_zp)
        elif op == "mul_channel":
            B = b3.astype(np.int64) - int(b_zp)
        else:
            B = bc
        m_a, m_b = ma, mb
        if exact_py:  # exact Python-int arithmetic
            A, B, m_a, m_b = (v.astype(object) for v in (A, np.asarray(B), ma, mb))
        if op in ("max", "min"):
            pick = np.maximum if op == "max" else np.minimum
            y = pick(rshift_round(A * m_a, sh), rshift_round(B * m_b, sh)) + int(out_zp)
        else:
            if op == "prelu":
                t = A * np.where(A >= 0, m_a, m_b)
            else:
                t = A * m_a + B * m_b if op in ("add", "add_const", "sub") else A * B * m_a
            y = rshift_round(t, sh) + int(out_zp)
        o3[r0:r1] = np.minimum(np.maximum(y, lo), hi)
    return out


def eltwise_float(op, a, b=None, bconst=0.0, lo=None, hi=None) -> np.ndarray:
    """float elementwise op (OPS), optional clip, in a's dtype."""
    if op not in OPS:
        raise UsageError(f"eltwise_float: unknown op {op!r} (expected {', '.join(OPS)})")
    a = np.asarray(a)
    if a.dtype.kind != "f":
        raise UsageError(f"eltwise_float: a must be float, got {a.dtype}")
    x = a.astype(np.float32)
    if op in TWO_MAPS + ("mul_channel",):
        want = (1, 1, a.shape[-1]) if op == "mul_channel" else a.shape
        if b is None or np.shape(b) != want:
            raise UsageError(f"eltwise_float: {op} needs b of shape {want}")
        y = np.asarray(b, dtype=np.float32)
    else:
        y = np.asarray(bconst, dtype=np.float32).reshape(-1)
        if y.size not in (1, a.shape[-1]):
            raise UsageError(f"eltwise_float: bconst has {y.size} entries, expected 1 or c={a.shape[-1]}")
    if op == "copy":
        r = x
    elif op in ("add", "add_const"):
        r = x + y
    elif op == "sub":
        r = x - y
    elif op in ("max", "min"):
        r = (np.maximum if op == "max" else np.minimum)(x, y)
    elif op == "prelu":
        r = np.where(x < 0, x * y, x)
    else:
        r = x * y
    if lo is not None:
        r = np.maximum(r, np.float32(lo))
    if hi is not None:
        r = np.minimum(r, np.float32(hi))
    return store_float(r, a.dtype)


def concat(a, b) -> np.ndarray:
    """[H][W][Ca + Cb]: channels of a, then channels of b (same H, W and dtype)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim != 3 or b.ndim != 3 or a.shape[:2] != b.shape[:2] or a.dtype != b.dtype:
        raise UsageError(f"concat: need [H][W][C] tensors of one H, W and dtype, got "
                         f"{a.shape} {a.dtype} and {b.shape} {b.dtype}")
    return np.concatenate([a, b], axis=2)
