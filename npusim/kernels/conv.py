"""2D convolution of the conv accelerator (CA), int8 and float, on [H][W][C] tensors.

Weights are [OC][KH][KW][IC/groups]; pads = (top, left, bottom, right); output size follows ONNX
(floor). Dense convs use im2col + one matmul per group (exact float32 BLAS for int8, the ordered
Numba GEMM for float); int8 depthwise convs (one input channel per output channel, any window) run
the fused `depthwise.depthwise_into` on the input's planes (its weights per column prepared once per
input layout), other groups with few input channels a Numba loop; int8 sums are requantized by
`requant.requantize_planes` (float64 lanes where exact, else 64-bit integer lanes).
im2col works in bands of output rows of at most TILE_BYTES, so a huge legal conv never allocates
more than that for its patches; a `Patches` cache lets the conv accelerators of one epoch, which
read the same input, share them.

int8 (bit-exact, see isa CONV):
  acc = sum((x - in_zp) * w) + bias[oc]         exact; padded cells contribute 0 (x = in_zp)
  acc is wrapped to int32 (the hardware accumulator width, ASSUMED; real models never come near)
  y   = clamp(out_zp + rshift_round(acc * mult[oc], shift[oc]), max(act_lo,-128), min(act_hi,127))
The sums come from float32 matmuls over chunks of K (the window) short enough that every partial
sum stays an exact integer: with |x - in_zp| <= X and |w| <= W, a chunk holds at most 2^24 / (X*W)
terms (1024 for int8 data), so any summation order (BLAS blocking, SIMD, FMA) gives the exact
integer; the chunks are summed in float64 (exact below 2^53). acc * mult fits int64 because |acc| <= 2^31 and
|mult| <= 2^31, so |acc * mult| <= 2^62; the rounding shift is done as ((p >> (s-1)) + 1) >> 1,
which never overflows (`_requantize`, fused in Numba, equals `requantize`).

float (fp16 / fp32): products and sums in float32 (the ASSUMED accumulator precision of the CA),
summed in window order (kernel row, kernel column, input channel) one term at a time, + bias,
optional clip, then one rounding to the input dtype (fp16 saturates: quant.store_float). The order is part of the semantics: the
float GEMM is a Numba loop (`_gemm_f32`, vectorised over output channels only, no reassociation,
no FMA contraction), not BLAS, whose blocking and summation order differ from machine to machine.
So float results are bit-identical on every machine, and splitting output channels over CAs
changes nothing.

An int8 conv's set-up (`Int8Conv`: geometry, checked parameters, prepared weights, folded biases, the
GEMM's bands in `_DenseSums`) is made once for weights and tables that never change and serves every
input (`conv2d_int8_parts` makes one per call).

Why this module is long (~580 lines): it is one job, the CA's convolution, and its int8 and float
paths share the geometry, padding, im2col bands and the `Patches` cache an epoch's CAs share; the
parts that stand alone are already their own modules (`gemm`, `depthwise`, `requant`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..errors import UsageError
from .gemm import exact_gemm_f32, k_chunks, row_sums_abs
from . import depthwise
from .layout import BLOCK, Planes, as_planes
from .quant import rshift_round, store_float
from .requant import plane_params, requantize_kept as _requantize_kept, requantize_planes as _requantize_planes

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


def _geometry(x_shape, w_shape, stride, dilation, pads, groups):
    if len(x_shape) != 3 or len(w_shape) != 4:
        raise UsageError(f"conv: x must be [H][W][C] and w [OC][KH][KW][IC/g], got {tuple(x_shape)}, {tuple(w_shape)}")
    h, wd, c = x_shape
    oc, kh, kw, icg = w_shape
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


TILE_BYTES = 64 << 20  # im2col patches materialised at once (per band of output rows)
EXACT_F32 = 1 << 24  # integers up to this magnitude are exact in float32


def _im2col(xp, g, y0: int = 0, y1: int | None = None):
    """[rows*OW][KH*KW*C] patches of output rows [y0, y1) of the padded input (row order matches
    w.reshape(OC, -1))."""
    kh, kw, sh, sw, dh, dw, oh, ow = (g[k] for k in ("kh", "kw", "sh", "sw", "dh", "dw", "oh", "ow"))
    y1 = oh if y1 is None else y1
    n = y1 - y0
    c = xp.shape[2]
    if kh == kw == 1 and sh == sw == 1:
        return xp[y0:y1, :ow].reshape(n * ow, c)
    cols = np.empty((n, ow, kh * kw, c), dtype=xp.dtype)
    for i in range(kh):
        r0 = y0 * sh + i * dh
        for j in range(kw):
            cols[:, :, i * kw + j, :] = xp[r0:r0 + (n - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw, :]
    return cols.reshape(n * ow, kh * kw * c)


def _bands(g, k: int, itemsize: int):
    """Bands [y0, y1) of output rows whose patches take at most TILE_BYTES (at least one row)."""
    rows = max(1, TILE_BYTES // max(1, g["ow"] * k * itemsize))
    return [(y, min(g["oh"], y + rows)) for y in range(0, g["oh"], rows)]


class Patches:
    """im2col bands shared by the convolutions of one epoch that read the same input tensor with
    the same geometry (the conv accelerators of a split conv), within a byte budget."""

    def __init__(self, budget: int = 4 * TILE_BYTES):
        self.budget = budget
        self.used = 0
        self._items: dict = {}

    def get(self, x, key, build):
        got = self._items.get((id(x), key))
        if got is not None and got[0] is x:
            return got[1]
        cols = build()
        if self.used + cols.nbytes <= self.budget:
            self._items[(id(x), key)] = (x, cols)  # holding x keeps its id from being reused
            self.used += cols.nbytes
        return cols


_SLICE_MIN_CG = 8  # `_im2col_int8` copies cells of at least this many channels as slices


@njit(cache=True)
def _im2col_int8(x, c0, cg, zp, kh, kw, sh, sw, dh, dw, pt, pl, y0, y1, ow, out):
    """out [(y1-y0)*OW][KH*KW*cg] (float32) = patches of channels [c0, c0+cg) of int8 x [H][W][C]
    for output rows [y0, y1); cells in the padding read `zp` (one pass: no padded copy of x). Each
    cell is a copy between slices indexed from 0 (vectorised; 6x faster than offset indices), or, for
    fewer than _SLICE_MIN_CG channels (an image's 3), a column of the patches at a time along the
    output row (1.3x faster there: no slice per cell of 3 values)."""
    h, w = x.shape[0], x.shape[1]
    if cg < _SLICE_MIN_CG:  # a few channels: a column of the patches at a time, along the output row
        for y in range(y0, y1):
            r0 = (y - y0) * ow
            for i in range(kh):
                yy = y * sh + i * dh - pt
                for j in range(kw):
                    off = j * dw - pl  # input column of output column xo: xo * sw + off
                    x_lo = min(ow, max(0, (-off + sw - 1) // sw))
                    x_hi = max(x_lo, min(ow, (w - 1 - off) // sw + 1))
                    if yy < 0 or yy >= h:
                        x_lo = x_hi = ow
                    for k in range(cg):
                        col = (i * kw + j) * cg + k
                        for xo in range(x_lo):
                            out[r0 + xo, col] = zp
                        for xo in range(x_lo, x_hi):
                            out[r0 + xo, col] = x[yy, xo * sw + off, c0 + k]
                        for xo in range(x_hi, ow):
                            out[r0 + xo, col] = zp
        return
    for y in range(y0, y1):
        for xo in range(ow):
            r = (y - y0) * ow + xo
            for i in range(kh):
                yy = y * sh + i * dh - pt
                for j in range(kw):
                    xx = xo * sw + j * dw - pl
                    dst = out[r, (i * kw + j) * cg:(i * kw + j + 1) * cg]
                    if 0 <= yy < h and 0 <= xx < w:
                        src = x[yy, xx, c0:c0 + cg]
                        for k in range(cg):
                            dst[k] = src[k]
                    else:
                        for k in range(cg):
                            dst[k] = zp


@njit(cache=True)
def _planes_f32(x, c, out):
    """out [M][c] (float32) = channels [0, c) of int8 planes x [P][M][B] (channel ch at
    [ch // B, :, ch % B]): the columns of an unpadded 1x1 conv, cast straight from blocked16 planes."""
    n_planes, m_all, blk = x.shape
    for m in range(m_all):
        row = out[m]
        for p in range(n_planes):
            nb = min(blk, c - p * blk)
            src = x[p, m]
            dst = row[p * blk:p * blk + nb]
            for b in range(nb):
                dst[b] = src[b]


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
def _grouped_int(x, zp, pt, pl, w, oh, ow, sh, sw, dh, dw, groups):
    """int64 [OH][OW][OC] window sums of (x - zp) * w for narrow groups, x the unpadded int8
    [H][W][C]: taps in the padding are skipped (they read zp, so add 0). Output channels run
    innermost over `w` transposed to [KH][KW][IC/g][OC] (contiguous, vectorised)."""
    oc, kh, kw, icg = w.shape
    ocg = oc // groups
    wt = np.ascontiguousarray(w.transpose(1, 2, 3, 0)).astype(np.int64)
    h, wd = x.shape[0], x.shape[1]
    out = np.zeros((oh, ow, oc), dtype=np.int64)
    row = np.empty(oc, dtype=np.int64)
    for y in range(oh):
        for xo in range(ow):
            acc = out[y, xo]
            for i in range(kh):
                yy = y * sh + i * dh - pt
                if yy < 0 or yy >= h:
                    continue
                for j in range(kw):
                    xx = xo * sw + j * dw - pl
                    if xx < 0 or xx >= wd:
                        continue
                    px = x[yy, xx]
                    for k in range(icg):
                        if icg == 1 and ocg == 1:
                            for o in range(oc):
                                row[o] = np.int64(px[o]) - zp
                        else:
                            for o in range(oc):
                                row[o] = np.int64(px[(o // ocg) * icg + k]) - zp
                        wk = wt[i, j, k]
                        for o in range(oc):
                            acc[o] += row[o] * wk[o]
    return out


@njit(cache=True)
def _grouped_f32(xp, w, oh, ow, sh, sw, dh, dw, groups):
    """float32 [OH][OW][OC] window sums of padded xp * w for narrow groups, each output summed in
    window order (kernel row, column, input channel) one term at a time; output channels run
    innermost over `w` transposed to [KH][KW][IC/g][OC] (same order per output, vectorised)."""
    oc, kh, kw, icg = w.shape
    ocg = oc // groups
    wt = np.ascontiguousarray(w.transpose(1, 2, 3, 0))
    out = np.zeros((oh, ow, oc), dtype=np.float32)
    row = np.empty(oc, dtype=np.float32)
    for y in range(oh):
        for xo in range(ow):
            acc = out[y, xo]
            for i in range(kh):
                yy = y * sh + i * dh
                for j in range(kw):
                    px = xp[yy, xo * sw + j * dw]
                    for k in range(icg):
                        if icg == 1 and ocg == 1:
                            for o in range(oc):
                                row[o] = px[o]
                        else:
                            for o in range(oc):
                                row[o] = px[(o // ocg) * icg + k]
                        wk = wt[i, j, k]
                        for o in range(oc):
                            acc[o] += row[o] * wk[o]
    return out


def _narrow(g) -> bool:
    """Groups too narrow for a GEMM (depthwise and the like): the Numba loops sum them."""
    return g["kh"] * g["kw"] * g["icg"] < _BLAS_MIN_ROW and g["groups"] > 1


def _accumulate(xp, w, g, patches=None, x=None, tag=()):
    """Sum over the window for every output of padded xp: the ordered `_gemm_f32` per group and
    band of output rows (float data), or the Numba `_grouped_f32` for narrow groups. `patches`/`x`/`tag`:
    share the im2col bands of input `x`, where `tag` names how xp was made from x."""
    groups, oc, icg = g["groups"], g["oc"], g["icg"]
    if _narrow(g):
        return _grouped_f32(xp, w, g["oh"], g["ow"], g["sh"], g["sw"], g["dh"], g["dw"], groups)
    ocg = oc // groups
    ow = g["ow"]
    k = g["kh"] * g["kw"] * icg
    out = np.empty((g["oh"] * ow, oc), dtype=np.float32)
    geo = tuple(g[n] for n in ("kh", "kw", "sh", "sw", "dh", "dw", "oh", "ow")) + (g["pads"],)
    for gi in range(groups):
        xg = xp if groups == 1 else xp[:, :, gi * icg:(gi + 1) * icg]
        wt = w[gi * ocg:(gi + 1) * ocg].reshape(ocg, -1).astype(np.float32).T
        for y0, y1 in _bands(g, k, 4):
            def build(y0=y0, y1=y1):
                return np.ascontiguousarray(_im2col(xg, g, y0, y1))
            if patches is not None and x is not None and groups == 1:
                cols = patches.get(x, (geo, tag, y0, y1), build)
            else:
                cols = build()
            out[y0 * ow:y1 * ow, gi * ocg:(gi + 1) * ocg] = _gemm_f32(cols, wt)
    return out.reshape(g["oh"], ow, oc)


def prepare_weights(w) -> tuple:
    """(float32 [K][OC] C-contiguous, sum(w), sum|w|) of int8 conv weights [OC][KH][KW][IC/g]: what
    `conv2d_int8_parts` derives from its weights (`prepared=`, for weights that never change). The
    GEMM reads the weights as [K][OC]; BLAS runs faster on them stored so than transposed."""
    w8 = np.ascontiguousarray(np.asarray(w).reshape(np.shape(w)[0], -1))
    wsum, wmag = row_sums_abs(w8)
    return np.ascontiguousarray(w8.T, dtype=np.float32), wsum, wmag


def _window_chunk(prepared, g, zp: int, chunk: int) -> int:
    """The K chunk of `_DenseSums` for weights `prepared` (`prepare_weights`): `chunk` is the bound
    for any data; the whole window is one chunk when max|x| x sum|w| of every output channel stays
    within 2^24 (that bounds every partial sum, in any order)."""
    if int(prepared[2].max(initial=0)) * max(128, abs(zp)) <= EXACT_F32:
        return max(chunk, g["kh"] * g["kw"] * g["icg"])
    return chunk


class _DenseSums:
    """sum(x * w) over each output's window of a dense-group conv, x padded with `zp`, [OH*OW][OC], with
    everything but x worked out (bands, patches keys, weight columns): per group and band of output
    rows, the float32 patches of int8 x (`layout.Planes`: a cast of its planes for an unpadded 1x1
    conv; else `_im2col_int8` of its [H][W][C] form, no padded copy), then an exact float32 BLAS GEMM
    in K chunks of `chunk` terms (`gemm.exact_gemm_f32`: float32 sums for one chunk, float64 for
    several; `_window_chunk`) with the weights `prepared` (`prepare_weights`)."""

    def __init__(self, g, zp: int, chunk: int, prepared):
        self.g, self.chunk = g, chunk
        self.groups, oc, self.icg = g["groups"], g["oc"], g["icg"]
        self.ocg, self.ow = oc // self.groups, g["ow"]
        self.k = g["kh"] * g["kw"] * self.icg
        self.shape = (g["oh"] * self.ow, oc)
        self.dtype = np.float32 if self.k <= chunk else np.float64
        self.fill = np.float32(zp)
        self.view = g["kh"] == g["kw"] == 1 and g["sh"] == g["sw"] == 1 and not any(g["pads"])
        geo = tuple(g[n] for n in ("kh", "kw", "sh", "sw", "dh", "dw", "oh", "ow")) + (g["pads"],)
        self.bands = [(y0, y1, (geo, ("<f4", zp), y0, y1)) for y0, y1 in _bands(g, self.k, 4)]  # + patches keys
        self.wgs = [prepared[0][:, gi * self.ocg:(gi + 1) * self.ocg] for gi in range(self.groups)]
        self.chunks = k_chunks(self.k, chunk)

    def __call__(self, x, patches=None, src=None):
        """The sums for x (`layout.Planes`); `src`: the object `patches` knows the input by (default x)."""
        out = np.empty(self.shape, dtype=self.dtype)
        if len(self.bands) == 1 and self.groups == 1 and patches is None:  # one GEMM, nothing shared
            exact_gemm_f32(self._cols(x, 0, self.g["oh"], 0), self.wgs[0], self.chunk, out, self.chunks)
            return out
        ow, groups = self.ow, self.groups
        for gi, wg in enumerate(self.wgs):
            for y0, y1, key in self.bands:
                if patches is not None and groups == 1:
                    cols = patches.get(x if src is None else src, key, lambda y0=y0, y1=y1: self._cols(x, y0, y1, 0))
                else:
                    cols = self._cols(x, y0, y1, gi)
                o = out[y0 * ow:y1 * ow] if groups == 1 else out[y0 * ow:y1 * ow, gi * self.ocg:(gi + 1) * self.ocg]
                exact_gemm_f32(cols, wg, self.chunk, o, self.chunks)
        return out

    def _cols(self, x, y0: int, y1: int, gi: int) -> np.ndarray:
        """The float32 patches [(y1-y0)*OW][K] of group gi for output rows [y0, y1): an unpadded 1x1 conv
        casts the planes straight into its columns (`_planes_f32`); any other conv copies patches from
        the [H][W][C] tensor (unpacked once: faster than runs of B)."""
        g, k, ow, icg = self.g, self.k, self.ow, self.icg
        m = (y1 - y0) * ow
        n_planes, blk = x.planes.shape[0], x.planes.shape[3]
        if self.view and n_planes > 1 and self.groups == 1:
            cols = np.empty((m, k), dtype=np.float32)
            _planes_f32(x.planes[:, y0:y1].reshape(n_planes, m, blk), k, cols)
            return cols
        xh = x.hwc()
        if self.view:
            return xh[y0:y1, :ow, gi * icg:(gi + 1) * icg].reshape(m, icg).astype(np.float32)
        cols = np.empty((m, k), dtype=np.float32)
        _im2col_int8(xh, gi * icg, icg, self.fill, g["kh"], g["kw"], g["sh"], g["sw"], g["dh"], g["dw"],
                     g["pads"][0], g["pads"][1], y0, y1, ow, cols)
        return cols


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


@njit(cache=True)
def _requantize(acc, bias, mult, shift, out_zp, lo, hi, out):
    """`requantize` fused over acc [M][N] (int64, or float64 holding integers) into out [M][N] (int8):
    no whole-tensor temporaries (`_requantize_planes` with one plane; `tools.warmup` compiles the
    float64 form through it)."""
    n0 = acc.shape[0] * 0  # an int64, not a literal 0: the signature `conv2d_int8_parts` calls with
    _requantize_planes(acc, n0, out.shape[1], bias, mult, shift, out_zp, lo, hi,
                       out.reshape(1, out.shape[0], out.shape[1]))


def conv2d_int8(x, w, bias, mult, shift, *, in_zp, out_zp, stride=1, dilation=1, pads=(0, 0, 0, 0),
                groups=1, act_lo=-128, act_hi=127, patches: Patches | None = None) -> np.ndarray:
    """int8 [OH][OW][OC] convolution with per-channel integer requantization (module doc).
    `patches`: an epoch's im2col cache, shared by the convs that read the same `x`."""
    return conv2d_int8_parts(x, [(w, bias, mult, shift, out_zp, act_lo, act_hi)], in_zp=in_zp, stride=stride,
                             dilation=dilation, pads=pads, groups=groups, patches=patches)[0]


def conv2d_int8_parts(x, parts, *, in_zp, stride=1, dilation=1, pads=(0, 0, 0, 0), groups=1,
                      patches: Patches | None = None, prepared=None, out_layouts=None, block: int = BLOCK) -> list:
    """`conv2d_int8` of one input x with each part (w, bias, mult, shift, out_zp, act_lo, act_hi), as
    many outputs: the convs of the conv accelerators that split one conv's output channels. A dense
    conv (groups=1) takes one GEMM over all the parts' output channels (wider GEMMs run faster in
    BLAS; the sums are exact integers either way, so every bit is the same as part by part).
    x: an int8 [H][W][C] array, or `layout.Planes` (blocked16 stream bytes read in place).
    `prepared`: `prepare_weights` of all the parts' weights stacked (a caller's cache), or None.
    `out_layouts`: one layout per part; each output is then its dense stream bytes, as
    `layout.pack(y, layout, block=block)` of the [OH][OW][OC] array (requantized straight into it).
    The same as `Int8Conv(...).run(x, patches)`."""
    if not isinstance(x, Planes):
        x = np.asarray(x)
    return Int8Conv(x.shape, x.dtype, parts, in_zp=in_zp, stride=stride, dilation=dilation, pads=pads, groups=groups,
                    prepared=prepared, out_layouts=out_layouts, block=block).run(x, patches)


class Int8Conv:
    """`conv2d_int8_parts` with everything but the input's values worked out: the geometry, the checked
    per-channel parameters, the GEMM's weights (`prepare_weights`) and the requantization's biases with
    the input zero point folded in. `run(x, patches)` computes the outputs of an input of `x_shape`;
    an object made once for weights and tables that never change serves every run. `owned_bytes`: the
    bytes of prepared weights it made itself (0 when they came from `prepared`)."""

    def __init__(self, x_shape, x_dtype, parts, *, in_zp, stride=1, dilation=1, pads=(0, 0, 0, 0), groups=1,
                 prepared=None, out_layouts=None, block: int = BLOCK):
        ws = [np.asarray(p[0]) for p in parts]
        for w in ws:
            if x_dtype != np.int8 or w.dtype != np.int8:
                raise UsageError(f"conv2d_int8: x and w must be int8, got {x_dtype}, {w.dtype}")
        geo: dict = {}  # the parts of a split conv share their geometry but out_c
        gs = []
        for w in ws:
            g = geo.get(w.shape)
            if g is None:
                g = geo[w.shape] = _geometry(x_shape, w.shape, stride, dilation, pads, groups)
            gs.append(g)
        qs = []
        for (_, b, m, s, *_rest), g in zip(parts, gs):
            q = tuple(_per_channel(v, g["oc"], n) for v, n in ((b, "bias"), (m, "mult"), (s, "shift")))
            if q[2].size and (q[2].min() < 0 or q[2].max() > 63):
                raise UsageError("requantize: shift must be in [0, 63]")
            if q[1].size and (q[1].min() < -(1 << 31) or q[1].max() >= 1 << 31):
                raise UsageError("requantize: mult must be a 32-bit signed value")
            qs.append(q)
        self.x_shape, self.block, self.zp = tuple(x_shape), block, int(in_zp)
        self.gs, self.ws, self.owned_bytes = gs, ws, 0
        self.layouts = list(out_layouts) if out_layouts is not None else [None] * len(parts)
        # per part: clamp (out_zp, lo, hi) as the requantization takes it
        self.clamps = [(int(p[4]), max(int(p[5]), -128), min(int(p[6]), 127)) for p in parts]
        zp, g0 = self.zp, gs[0]
        self.depthwise = all(g["icg"] == 1 and g["oc"] == g["groups"] for g in gs)  # depthwise, any window
        self.dense = not self.depthwise and not _narrow(g0)
        self.shared = self.dense and len(ws) > 1 and g0["groups"] == 1  # one GEMM for all the parts
        # sum(x*w) - zp*sum(w) over the window, x padded with zp: the raw int8 values keep every
        # product within 2^14, so a float32 chunk of up to 2^24 / (X*W) terms stays exact
        self.chunk = max(1, EXACT_F32 // (max(128, abs(zp)) * 128))  # int8 bounds: no pass over the data
        if self.shared:
            self.g_all = dict(g0, oc=sum(g["oc"] for g in gs))
            if prepared is None:
                prepared = prepare_weights(np.concatenate([w.reshape(w.shape[0], -1) for w in ws]))
                self.owned_bytes = prepared[0].nbytes
            self.prepared = [prepared]
            wsums, a = [], 0
            for g in gs:
                wsums.append(prepared[1][a:a + g["oc"]])
                a += g["oc"]
        elif self.dense:
            if prepared is None or len(ws) > 1:
                self.prepared = [prepare_weights(w) for w in ws]
                self.owned_bytes = sum(p[0].nbytes for p in self.prepared)
            else:
                self.prepared = [prepared]
            wsums = [p[1] for p in self.prepared]
        else:
            wsums = [None] * len(ws)
        if self.dense:  # per GEMM
            self.sums = [_DenseSums(g, zp, _window_chunk(p, g, zp, self.chunk), p)
                         for p, g in zip(self.prepared, [self.g_all] if self.shared else gs)]
        if self.dense and zp:
            qs = [(bias - zp * wsum, mult, shift) for (bias, mult, shift), wsum in zip(qs, wsums)]
        self.qs = qs
        # a split conv into whole blocked16 planes: one requantization; each part's stream is a run of the planes
        self.fused = (self.shared and len(set(self.clamps)) == 1 and out_layouts is not None
                      and all(lay == "blocked16" for lay in self.layouts) and all(g["oc"] % block == 0 for g in gs))
        if self.fused:
            self.q_all = tuple(np.concatenate([q[i] for q in qs]) for i in range(3))
        self._dw_prepared: dict = {}  # (planes, lanes) of the input -> `depthwise.prepare` of each part
        # per part: its output planes (P, B): blocked16 planes, else one plane of B = OC (the dense [H][W][C]
        # order of the other layouts and of none)
        self.planes = [((-(-g["oc"] // block), block) if lay == "blocked16" else (1, g["oc"]))
                       for g, lay in zip(gs, self.layouts)]
        self._none = (None,) * len(parts)
        if not self.depthwise:  # the requantization's parameters per plane (`requant.plane_params`), once
            self.rq = [plane_params(*q, g["oc"], *pb) for q, g, pb in zip(qs, gs, self.planes)]
            if self.fused:
                oc_all = self.g_all["oc"]
                self.rq_all = plane_params(*self.q_all, oc_all, oc_all // block, block)

    def out_planes(self, i: int) -> tuple:
        """(P, OH, OW, B): the planes of part i's output stream, in stream order (a target of `run`'s
        `into` holds them)."""
        g = self.gs[i]
        return self.planes[i][0], g["oh"], g["ow"], self.planes[i][1]

    def _target(self, i: int, into):
        """(flat int8 array, offset, plane stride, line stride, new planes or None) where part i's planes go:
        `into[i]`, else a new [P][OH*OW][B] array."""
        got = into[i]
        if got is not None:
            return (*got, None)
        (p, b), g = self.planes[i], self.gs[i]
        m = g["oh"] * g["ow"]
        out = np.empty((p, m, b), dtype=np.int8)
        return out.reshape(-1), 0, m * b, g["ow"] * b, out

    def run(self, x, patches: Patches | None = None, into=None) -> list:
        """The outputs for input x (int8 [H][W][C] array or `layout.Planes`, of the shape planned).
        `into`: per part, None or where its output stream's planes go (`out_planes`): (flat int8 array,
        offset, plane stride, line stride), pixel (y, x) of plane p at offset + p*plane + y*line + x*B
        (a write SE's bytes in a pool's array); such a part's output is None."""
        src = x
        if not isinstance(x, Planes):
            x = np.asarray(x)
        if tuple(x.shape) != self.x_shape or x.dtype != np.int8:
            raise UsageError(f"conv2d_int8: input {tuple(x.shape)} {x.dtype}, planned for {self.x_shape} int8")
        gs, zp, block = self.gs, self.zp, self.block
        into = self._none if into is None else into
        outs = []
        if self.depthwise:
            xp = np.ascontiguousarray(as_planes(x).planes)
            n_planes, blk = xp.shape[0], xp.shape[3]
            prepared = self._dw_prepared.get((n_planes, blk))
            if prepared is None:  # once per input layout: the weights per column and channel parameters
                prepared = self._dw_prepared[(n_planes, blk)] = [
                    depthwise.prepare(w, g["oc"], n_planes, blk, g["ow"], g["sw"], g["dw"], zp, *q)
                    for w, g, q in zip(self.ws, gs, self.qs)]
            for i, ((wt, params), g, (out_zp, lo, hi)) in enumerate(zip(prepared, gs, self.clamps)):
                flat, off, ps, ls, out = self._target(i, into)
                depthwise.depthwise_into(xp, g["oc"], zp, wt, params, g["sh"], g["sw"], g["dh"], g["dw"],
                                         g["pads"][0], g["pads"][1], g["oh"], g["ow"], out_zp, lo, hi, flat, off, ps,
                                         ls, *self.planes[i])
                outs.append(None if out is None else _stream_or_hwc(out, g, self.layouts[i]))
            return outs
        if self.shared:
            acc_all = self.sums[0](as_planes(x), patches, src)
            accs, a = [], 0
            for g in gs:  # each part requantizes its columns of the one GEMM (no copies of them)
                accs.append((acc_all, a))
                a += g["oc"]
        elif self.dense:
            accs = [(sums(as_planes(x), patches, src), 0) for sums in self.sums]
        else:
            xh = np.ascontiguousarray(x.hwc() if isinstance(x, Planes) else x)
            g0 = gs[0]
            pt, pl = g0["pads"][0], g0["pads"][1]
            accs = [(_grouped_int(xh, zp, pt, pl, w, g["oh"], g["ow"], g["sh"], g["sw"], g["dh"], g["dw"],
                                  g["groups"]).reshape(-1, g["oc"]), 0) for w, g in zip(self.ws, gs)]
        if self.fused and into is self._none:
            (out_zp, lo, hi), g0 = self.clamps[0], gs[0]
            oc_all = self.g_all["oc"]
            m = g0["oh"] * g0["ow"]
            out = np.empty((oc_all // block, m, block), dtype=np.int8)
            _requantize_kept(accs[0][0], 0, oc_all, *self.rq_all, out_zp, lo, hi, out.reshape(-1), 0, m * block, block,
                             m, 1, oc_all // block, block)
            return [out[n0 // block:(n0 + g["oc"]) // block].view(np.uint8).reshape(-1) for (_, n0), g in zip(accs, gs)]
        for i, ((acc, n0), rq, g, (out_zp, lo, hi)) in enumerate(zip(accs, self.rq, gs, self.clamps)):
            flat, off, ps, ls, out = self._target(i, into)
            _requantize_kept(acc, n0, g["oc"], *rq, out_zp, lo, hi, flat, off, ps, ls, g["oh"], g["ow"], *self.planes[i])
            outs.append(None if out is None else _stream_or_hwc(out, g, self.layouts[i]))
        return outs


def _stream_or_hwc(out: np.ndarray, g, lay: str | None) -> np.ndarray:
    """The output planes as stream bytes (a layout given) or as the [OH][OW][OC] array (lay None)."""
    if lay is None:
        return out.reshape(g["oh"], g["ow"], g["oc"])
    return out.view(np.uint8).reshape(-1)


def conv2d_float(x, w, bias=None, *, stride=1, dilation=1, pads=(0, 0, 0, 0), groups=1,
                 act_lo=None, act_hi=None, patches: Patches | None = None) -> np.ndarray:
    """float convolution (fp16 or fp32 x; float32 accumulation), result in x's dtype."""
    x = np.asarray(x)
    if x.dtype not in (np.float16, np.float32):
        raise UsageError(f"conv2d_float: x must be float16 or float32, got {x.dtype}")
    w = np.asarray(w)
    g = _geometry(x.shape, w.shape, stride, dilation, pads, groups)
    xs = _pad(x.astype(np.float32), g["pads"])
    acc = _accumulate(xs, w.astype(np.float32), g, patches, x, ("float",))
    if bias is not None:
        b = np.asarray(bias, dtype=np.float32).reshape(-1)
        if b.size not in (1, g["oc"]):
            raise UsageError(f"conv2d_float: bias has {b.size} entries, expected out_c={g['oc']}")
        acc = acc + b
    if act_lo is not None:
        acc = np.maximum(acc, np.float32(act_lo))
    if act_hi is not None:
        acc = np.minimum(acc, np.float32(act_hi))
    return store_float(acc, x.dtype)
