"""The arithmetic of ATON's units on stream values, as npusim models it from the lifted register fields.

A stream carries raw bit patterns of a fixed width (8, 16 or 24 bits, `Stream.bits`), in an array of
`units_jit.pattern_type` (uint8, uint16, int32: only the low bits count); a unit reads them with its own
byte width and signedness (`lane_values`): a pattern narrower than the unit's input width is zero-extended
(the upper lanes are empty), one of equal width is two's complement unless the unit's unsigned flag is set.
Every unit computes signed integers of its output width (`outbytes_o`), saturated when `saturation_o` is
set, wrapped otherwise, and emits their patterns (`patterns_of`). The register fields read
and the formulas are listed in docs/stedgeai.md ("Values"). A mode npusim does not model raises
`StImportError` (exit 65) naming the unit and the field, never a guessed value.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ...errors import StImportError
from . import dss2
from . import units_jit as jit

# ORNDMODE / FRNDMODE (bit 0; bit 1 is ignored by the hardware): the rounding a right shift applies when
# ROUND is set. ST describes the two modes in a section of its reference manual that is not public. npusim
# rounds half up for both; measured on st_ic_mnv1_nucleo's first eight layers against TFLite, half-up for
# mode 1 (the only mode ST's compiler programs there) matches 0.04-0.16 points more values than half-even.
ROUNDING_BY_MODE = {0: "half_up", 1: "half_up"}


class Refused(StImportError):
    """A unit or mode the functional model does not cover: the run stops with one line (exit 65)."""


def refuse(what: str) -> None:
    raise Refused(f"functional run refused: {what} is not modelled by npusim (values would be guesses)")


def lane_form(bits: int, nbytes: int, unsigned: bool = False, extend_narrow: bool = False) -> tuple[int, bool]:
    """(bits kept, signed) of `nbytes`-wide lanes holding `bits`-wide patterns (see `lane_values`)."""
    width = 8 * nbytes
    return min(bits, width), not (unsigned or (bits < width and not extend_narrow))


def lane_values(patterns: np.ndarray, bits: int, nbytes: int, unsigned: bool = False,
                extend_narrow: bool = False) -> np.ndarray:
    """Signed (or unsigned) values of `nbytes`-wide lanes holding `bits`-wide patterns. A narrower pattern
    is zero-extended (ARITH: an 8-bit stream into its 2-byte lane is unsigned), or with `extend_narrow`
    read as a signed `bits`-wide value unless `unsigned` (CONVACC: its FUNSIGNED flag decides)."""
    top, signed = lane_form(bits, nbytes, unsigned, extend_narrow)
    cast = _LANE_CASTS.get((top, signed))
    if cast is not None:  # the low `top` bits by a wrapping cast, read as that type
        return patterns.astype(cast).astype(np.int64)
    p = patterns.astype(np.int64) & ((1 << top) - 1)
    if not signed:
        return p
    return np.where(p >= 1 << (top - 1), p - (1 << top), p)


_LANE_CASTS = {(8, False): np.uint8, (8, True): np.int8, (16, False): np.uint16, (16, True): np.int16}


def patterns_of(v: np.ndarray, nbytes: int) -> np.ndarray:
    """The `nbytes`-byte patterns of the integers `v`, in their stream's array type (a wrapping cast keeps
    the low bits; no copy when `v` already has that type)."""
    return v.astype(jit.pattern_type(nbytes), copy=False)


def _integer_patterns(p: np.ndarray | None) -> bool:
    """Whether `p` is absent or an array the Numba passes read patterns from (any integer type but uint64)."""
    return p is None or (p.dtype.kind in "iu" and p.dtype != np.uint64)


def shift_round(v: np.ndarray, shift: int, rounding: bool, mode: int) -> np.ndarray:
    """v >> shift (arithmetic); with `rounding`, to nearest with the tie rule of `mode`."""
    if shift <= 0:
        return v << -shift if shift < 0 else v
    if not rounding:
        return v >> shift
    if ROUNDING_BY_MODE.get(mode & 1) == "half_even":
        q = v >> shift
        rem = v - (q << shift)
        half = 1 << (shift - 1)
        return q + ((rem > half) | ((rem == half) & ((q & 1) == 1)))
    return (v + (1 << (shift - 1))) >> shift


def fit(v: np.ndarray, nbytes: int, saturate: bool) -> np.ndarray:
    """Signed values of `nbytes` bytes: clipped (saturation) or two's-complement wrapped."""
    width = 8 * nbytes
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    if saturate:
        return np.minimum(np.maximum(v, lo), hi)
    if width >= 64:  # int64 arithmetic has wrapped already
        return v
    return ((v - lo) & ((1 << width) - 1)) + lo


def _f(u, name, default=0):
    v = u.get(name, default)
    return default if v is None else v


def _derived(u, key, make, keep=None):
    """What `make()` derives from the unit's fields alone, kept in the unit's `memo` (a plan's `UnitFields`
    has one) unless `keep(value)` says no."""
    memo = getattr(u, "memo", None)
    got = memo.get(key) if memo is not None else None
    if got is None:
        got = make()
        if memo is not None and (keep is None or keep(got)):
            memo[key] = got
    return got


# --------------------------------------------------------------------------------------------------- CONVACC

def convacc_check(u) -> None:
    """Refuse the CONVACC modes npusim does not model."""
    if _f(u, "fstat") and _f(u, "fstatcnt") < 1:
        refuse(f"CONVACC{u.index} feature-stationary mode with fstatcnt {_f(u, 'fstatcnt')}")
    if _f(u, "kt1_mode"):
        refuse(f"CONVACC{u.index} kt1_mode={_f(u, 'kt1_mode')}")
    dss2.check(u)
    tot, first, last = _f(u, "kfilt_tot"), _f(u, "kfilt_first"), _f(u, "kfilt_last")
    if tot and not (0 <= first <= last < tot and last - first + 1 == _f(u, "nKernels")
                    and tot % _f(u, "nKernels") == 0 and first % _f(u, "nKernels") == 0):
        raise StImportError(f"CONVACC{u.index}: kernel filter [{first}, {last}] of {tot} does not give its "
                            f"{_f(u, 'nKernels')} kernels")
    if _f(u, "shift_f") or _f(u, "rounding_f") or _f(u, "saturation_f"):
        refuse(f"CONVACC{u.index} input feature shifter (shift_f={_f(u, 'shift_f')})")
    if _f(u, "simd") not in (1, 2):
        refuse(f"CONVACC{u.index} simd={_f(u, 'simd')}")
    if _f(u, "deepmode") and (_f(u, "kernelWidth") != 1 or _f(u, "kernelHeight") != 1):
        refuse(f"CONVACC{u.index} deep mode with a {_f(u, 'kernelWidth')}x{_f(u, 'kernelHeight')} kernel")
    if _f(u, "afilt_mode", "AFILT_MODE_NONE") not in ("AFILT_MODE_NONE", "AFILT_MODE_FRAMEZERO", 0):
        refuse(f"CONVACC{u.index} accumulator filter {_f(u, 'afilt_mode')}")


def conv_features(patterns: np.ndarray, bits: int, nbytes: int, unsigned: bool, fsub: int, dtype) -> np.ndarray:
    """`lane_values(..., extend_narrow=True) - fsub` as `dtype` (the sums' type): a numpy cast where the lane is
    the whole 8- or 16-bit pattern, else one Numba pass."""
    top, signed = lane_form(bits, nbytes, unsigned, extend_narrow=True)
    whole = {8: np.uint8, 16: np.uint16}.get(top)
    if whole is not None and patterns.dtype == whole and (1 << top) + abs(fsub) <= _EXACT.get(np.dtype(dtype), 0):
        # the lane is the whole pattern: a numpy cast of its signed or unsigned view (both exact in `dtype`)
        out = patterns.view(_LANE_CASTS[(top, signed)]).astype(dtype)
        if fsub:
            out -= fsub
        return out
    if patterns.dtype.kind not in "iu" or patterns.dtype == np.uint64 or not 1 <= top <= 62:
        return (lane_values(patterns, bits, nbytes, unsigned, extend_narrow=True) - fsub).astype(dtype)
    out = np.empty(patterns.size, dtype)
    jit.lanes_into(patterns, np.int64((1 << top) - 1), np.int64(int(signed) << (top - 1)), np.int64(fsub), out)
    return out


_EXACT = {np.dtype(np.float32): 1 << 24, np.dtype(np.float64): 1 << 53, np.dtype(np.int64): 1 << 62}  # integers exact below


def checked(u, check) -> None:
    """`check(u)` (one of the `*_check` refusals), once per plan's unit (its memo keeps the pass)."""
    _derived(u, ("checked", check.__name__), lambda: check(u) or True)


def conv_geometry(u) -> dict:
    """Input window (crop), padding, output size of one frame (kept in the unit's memo: read it, never change it)."""
    return _derived(u, "geometry", lambda: _conv_geometry(u))


def _conv_geometry(u) -> dict:
    w, h = _f(u, "fWidth"), _f(u, "fHeight")
    l0, r0 = _f(u, "left_crop"), _f(u, "right_crop") or w - 1
    t0, b0 = _f(u, "top_crop"), _f(u, "bot_crop") or h - 1
    cw, ch = r0 - l0 + 1, b0 - t0 + 1
    lp, rp, tp, bp = (_f(u, k) for k in ("left_padding", "right_padding", "top_padding", "bot_padding"))
    kw, kh = max(_f(u, "kernelWidth"), 1), max(_f(u, "kernelHeight"), 1)
    hs, vs = max(_f(u, "hstride"), 1), max(_f(u, "vstride"), 1)
    ow = (cw + lp + rp - kw) // hs + 1
    oh = (ch + tp + bp - kh) // vs + 1
    if min(cw, ch, ow, oh) <= 0 or r0 >= w or b0 >= h:
        raise StImportError(f"CONVACC{u.index}: crop [{l0},{r0}]x[{t0},{b0}] of a {w}x{h} frame, "
                            f"kernel {kw}x{kh}: no output")
    g = dict(w=w, h=h, l0=l0, t0=t0, cw=cw, ch=ch, lp=lp, rp=rp, tp=tp, bp=bp, kw=kw, kh=kh,
             hs=hs, vs=vs, ow=ow, oh=oh, pad_value=int(_f(u, "zfbias")))
    g["key"] = _geometry_key(g)
    return g


def _geometry_key(g: dict) -> tuple:
    """The geometry's values that decide where a window's taps lie (the pad value aside)."""
    return tuple(v for k, v in g.items() if k not in ("pad_value", "key"))


EXACT_FLOAT32 = 1 << 24  # integers float32 holds exactly: sums bounded below this are computed in float32


def conv_kernels(kern: np.ndarray, feature_bound: int | None = None) -> tuple:
    """A frame's kernels (K, kh, kw, C) as the convolution uses them: ("depthwise", channel per kernel,
    taps (kh, kw, K)) when every kernel reads one channel (a depthwise convolution the compiler spread
    over a dense kernel: the same sums without the zero products), else ("gemm", None, (kh*kw*C, K) matrix).
    The arrays are float32 when `feature_bound` (the largest |feature| the unit's fields allow) times every
    kernel's sum of |weights| (at least 1) stays below 2^24, so that every feature and partial sum is an exact
    float32 integer; float64 otherwise (exact below 2^53)."""
    nk, c = kern.shape[0], kern.shape[3]
    dtype = np.float64
    if feature_bound is not None and kern.size:
        l1 = int(np.abs(kern).reshape(nk, -1).sum(axis=1).max())
        # max(l1, 1): the features themselves must be exact too (a later kernel set may reuse them)
        dtype = np.float32 if feature_bound * max(l1, 1) < EXACT_FLOAT32 else np.float64
    support = (kern != 0).any(axis=(1, 2))  # (K, C): the channels each kernel reads
    if c > 1 and (support.sum(axis=1) <= 1).all():
        ch = support.argmax(axis=1)
        taps = kern[np.arange(nk), :, :, ch].astype(dtype)  # (K, kh, kw)
        return "depthwise", ch, np.ascontiguousarray(taps.transpose(1, 2, 0))
    return "gemm", None, np.ascontiguousarray(kern.reshape(nk, -1).astype(dtype).T)


def conv_feature_bound(u, bits: int) -> int:
    """The largest |feature - FSUB| (or padded ZFBIAS) of a CONVACC reading `bits`-bit values (its input
    lanes' width, or the stream's when narrower)."""
    return max((1 << bits) + abs(int(_f(u, "fsub"))), abs(int(_f(u, "zfbias"))))


def conv_sums(feat: np.ndarray, kern, g: dict) -> np.ndarray:
    """Accumulators (oh, ow, K) of one frame, integers in the kernels' float type: feat (h, w, C) already minus
    FSUB, kern (K, kh, kw, C) or its `conv_kernels`. Padding contributes 0 (a padded feature equals FSUB, the
    zero point); with ZFBIAS set (the compiler then pads with zero frames only), a padded feature is ZFBIAS.
    Exact: every partial sum is an integer the float type holds (`conv_kernels`), so the order of the sums
    does not matter."""
    kind, ch, k = conv_kernels(kern) if isinstance(kern, np.ndarray) else kern
    if kind == "depthwise":  # one Numba pass over the window, in the kernels' exact float type
        same = ch.size == feat.shape[2] and (ch == np.arange(ch.size)).all()
        x = np.ascontiguousarray(feat if same else feat[:, :, ch], dtype=k.dtype)  # channel k feeds kernel k
        return jit.depthwise(x, k, g["t0"], g["l0"], g["ch"], g["cw"], g["tp"], g["lp"], float(g["pad_value"]),
                             g["vs"], g["hs"], g["oh"], g["ow"])
    row = g["ow"] * g["kh"] * g["kw"] * feat.shape[-1] * k.itemsize  # bytes of im2col per output row
    if g["kh"] * g["kw"] > 1 and g["oh"] * row > BAND_BYTES:
        return _banded_sums(feat, k, g, max(1, BAND_BYTES // row))
    return (_columns(feat, g, k.dtype) @ k).reshape(g["oh"], g["ow"], k.shape[1])


BAND_BYTES = 1 << 20  # a larger im2col matrix is made and multiplied in bands of output rows of about this size
# (YOLOX's 240x240x6 3x3 layer: its 12 MB matrix, made and multiplied whole, took 2x the time of 1 MB bands)


def _banded_sums(feat: np.ndarray, k: np.ndarray, g: dict, band: int) -> np.ndarray:
    """`conv_sums` of one frame (GEMM kernels k), its im2col matrix made and multiplied `band` output rows at a
    time (each band stays in cache)."""
    x = np.ascontiguousarray(_padded(feat, g, k.dtype))
    oh, ow, vs = g["oh"], g["ow"], g["vs"]
    out = np.empty((oh * ow, k.shape[1]), k.dtype)
    for r0 in range(0, oh, band):
        r1 = min(oh, r0 + band)
        rows = x[r0 * vs:(r1 - 1) * vs + g["kh"]]  # the input rows of output rows r0..r1
        cols = jit.im2col(rows[None], g["kh"], g["kw"], vs, g["hs"], r1 - r0, ow)[0]
        np.matmul(cols, k, out=out[r0 * ow:r1 * ow])
    return out.reshape(oh, ow, k.shape[1])


COLUMN_INDEX_MAX = 1 << 16  # im2col matrices up to this many entries are one gather through a kept index
_COLUMN_INDEX: dict = {}  # (geometry, channels) -> index into a frame's values, then the pad value
KEEP_COLUMN_INDEX = 64  # geometries whose index is kept (int32: at most 256 KiB each)


def _columns(feat: np.ndarray, g: dict, dtype) -> np.ndarray:
    """The im2col matrices (..., oh*ow, kh*kw*C) of frames (..., h, w, C): cropped, padded with the pad value,
    in `dtype`; row (oy, ox) holds the window at that output, tap by tap, channel by channel. A small matrix
    of windows or padding is one gather (the index is `_columns` of the frame's positions, kept per geometry)."""
    n = feat.shape[-3] * feat.shape[-2] * feat.shape[-1]
    windows = g["kh"] * g["kw"] > 1 or g["lp"] or g["rp"] or g["tp"] or g["bp"]  # else a strided slice, no copy
    if windows and g["oh"] * g["ow"] * g["kh"] * g["kw"] * feat.shape[-1] <= COLUMN_INDEX_MAX \
            and np.dtype(dtype).kind == "f":
        key = (g.get("key") or _geometry_key(g), feat.shape[-3:])  # the index holds no values
        idx = _COLUMN_INDEX.get(key)
        if idx is None:
            idx = _columns_strided(np.arange(n, dtype=np.int64).reshape(feat.shape[-3:]), dict(g, pad_value=n),
                                   np.int64).astype(np.int32 if n < 1 << 31 else np.int64)
            _COLUMN_INDEX[key] = idx
            while len(_COLUMN_INDEX) > KEEP_COLUMN_INDEX:
                _COLUMN_INDEX.pop(next(iter(_COLUMN_INDEX)))
        values = np.empty(feat.shape[:-3] + (n + 1,), dtype)
        values[..., :n] = feat.reshape(feat.shape[:-3] + (n,))
        values[..., n] = g["pad_value"]
        return values[..., idx]
    return _columns_strided(feat, g, dtype)


def _padded(feat: np.ndarray, g: dict, dtype) -> np.ndarray:
    """Frames (..., h, w, C) cropped and padded with the pad value, in `dtype` (a view where neither changes them)."""
    x = feat[..., g["t0"]:g["t0"] + g["ch"], g["l0"]:g["l0"] + g["cw"], :]
    if g["lp"] or g["rp"] or g["tp"] or g["bp"]:
        xp = np.full(x.shape[:-3] + (x.shape[-3] + g["tp"] + g["bp"], x.shape[-2] + g["lp"] + g["rp"], x.shape[-1]),
                     g["pad_value"], dtype)
        xp[..., g["tp"]:g["tp"] + x.shape[-3], g["lp"]:g["lp"] + x.shape[-2], :] = x
        return xp
    return x.astype(dtype, copy=False)


def _columns_strided(feat: np.ndarray, g: dict, dtype, numba: bool = True) -> np.ndarray:
    """`_columns` through strided views of the (padded) frames; the windows of a float type copied by
    `units_jit.im2col` unless `numba` is False (the numpy formula it equals)."""
    x = _padded(feat, g, dtype)
    kh, kw, hs, vs, oh, ow = g["kh"], g["kw"], g["hs"], g["vs"], g["oh"], g["ow"]
    lead, c = x.shape[:-3], x.shape[-1]
    if kh == 1 and kw == 1:
        return x[..., :vs * (oh - 1) + 1:vs, :hs * (ow - 1) + 1:hs, :].reshape(lead + (oh * ow, c))
    if numba and np.dtype(dtype).kind == "f":  # one Numba pass (numpy's copy of the windows' view: 3-6 ns per value)
        frames = np.ascontiguousarray(x, dtype).reshape((-1,) + x.shape[-3:])
        return jit.im2col(frames, kh, kw, vs, hs, oh, ow).reshape(lead + (oh * ow, kh * kw * c))
    sv = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(-3, -2))  # (..., H', W', C, kh, kw)
    sv = sv[..., :vs * (oh - 1) + 1:vs, :hs * (ow - 1) + 1:hs, :, :, :]
    return np.moveaxis(sv, -3, -1).reshape(lead + (oh * ow, kh * kw * c))


def conv_sums_frames(feat: np.ndarray, kernels: list, g: dict) -> np.ndarray:
    """`conv_sums` of frames (F, h, w, C), frame j with `kernels[j]` (`conv_kernels` of each), as (F, oh, ow, K):
    where every frame's kernels are a GEMM and its im2col matrix is small, one batched product (each sum exact
    in either float type, so the wider one serves all); otherwise frame by frame (a large matrix per frame
    reuses the memory of the last and stays in cache)."""
    small = g["oh"] * g["ow"] * g["kh"] * g["kw"] * feat.shape[-1] <= COLUMN_INDEX_MAX
    if small and all(k[0] == "gemm" for k in kernels) and len({k[2].shape for k in kernels}) == 1:
        dtype = np.result_type(*(k[2].dtype for k in kernels))
        mats = np.stack([k[2] for k in kernels]).astype(dtype, copy=False)  # (F, kh*kw*C, K)
        return np.matmul(_columns(feat, g, dtype), mats).reshape(feat.shape[0], g["oh"], g["ow"], mats.shape[2])
    return np.stack([conv_sums(feat[j], kernels[j], g) for j in range(feat.shape[0])])


def conv_sums_repeated(feat: np.ndarray, kernels: list, g: dict) -> np.ndarray:
    """`conv_sums_frames` of frames that all equal `feat` (h, w, C), frame j with the GEMM kernels `kernels[j]` (one
    shape), as (F, oh, ow, K): one product of the frame's windows with every frame's kernel matrix side by side
    (exact in the wider float type, as there)."""
    dtype = np.result_type(*(k[2].dtype for k in kernels))
    mats = np.concatenate([k[2] for k in kernels], axis=1).astype(dtype, copy=False)
    nf, nk = len(kernels), kernels[0][2].shape[1]
    sums = conv_sums(feat.astype(dtype, copy=False), ("gemm", None, mats), g)
    return sums.reshape(-1, nf, nk).transpose(1, 0, 2).reshape(nf, g["oh"], g["ow"], nk)


DEEP_KERNEL_GROUP = 8  # deep 1x1 mode: kernels interleaved in groups of 8, channel by channel (measured)


def deep_kernels(k: np.ndarray, nk: int, depth: int) -> np.ndarray:
    """(nk, depth) kernels from the deep 1x1 mode's kernel stream: for each group of up to 8 kernels,
    channel by channel, that group's weights (the layout ST's compiler writes the weights in)."""
    out = np.empty((nk, depth), np.int64)
    pos = 0
    for g0 in range(0, nk, DEEP_KERNEL_GROUP):
        n = min(DEEP_KERNEL_GROUP, nk - g0)
        out[g0:g0 + n] = k[pos:pos + n * depth].reshape(depth, n).T
        pos += n * depth
    return out


def conv_output(acc: np.ndarray, accin: np.ndarray | None, u, accin_bits: int = 0, acc_bound: int = 0) -> np.ndarray:
    """DFORMAT: acc (+ accumulator input << INSHIFT), >> OUTSHIFT with ROUND/ORNDMODE, OBYTES with SAT; `acc`
    integers of any numeric type (a float one from `conv_sums`); the output's patterns (`patterns_of`).
    `accin`: values (int64), or with `accin_bits` the accumulator port's `accin_bits`-bit patterns (read as
    `lane_values` of its lanes). `acc_bound`: every |sum| is below it (0: unknown). One Numba pass with
    half-up rounding and shifts in range (`units_jit.conv_requantise32` for float32 sums where every value
    fits int32, `_output_int32`; else `units_jit.conv_requantise`), numpy otherwise."""
    shift_a, shift_o, rounding, mode, nbytes, sat, fused, args = _derived(u, "conv_output", lambda: _output_fields(u))
    top, signed = lane_form(accin_bits, accin_bits // 8) if accin_bits else (0, True)
    if accin is not None and accin_bits and not (_integer_patterns(accin) and 1 <= top <= 62):
        accin, accin_bits, top = lane_values(accin, accin_bits, accin_bits // 8), 0, 0
    if fused and (accin is None or (_integer_patterns(accin) and accin.size == acc.size)):
        sums = np.ascontiguousarray(acc).reshape(-1)
        # the lanes of the patterns; values (no `accin_bits`) pass as they are
        in_mask, in_sign = ((1 << top) - 1, int(signed) << (top - 1)) if top else (-1, 0)
        out = np.empty(sums.size, jit.pattern_type(nbytes))
        accin_c = np.ascontiguousarray(accin) if accin is not None else _NO_ACCUMULATOR
        args32 = () if acc.dtype != np.float32 or not 0 < acc_bound <= EXACT_FLOAT32 else _derived(
            u, ("output int32", accin is not None and top, signed, acc_bound, in_mask, in_sign),
            lambda: _int32_arguments(args, accin is not None and top, signed, acc_bound, 8 * nbytes, in_mask, in_sign))
        if args32:
            return jit.conv_requantise32(sums, accin_c, accin is not None, *args32, out).reshape(acc.shape)
        out = jit.conv_requantise(sums, accin_c, accin is not None, np.int64(in_mask), np.int64(in_sign), *args, out)
        return out.reshape(acc.shape)
    acc = acc.astype(np.int64, copy=False)
    if accin is not None:
        if accin_bits:
            accin = lane_values(accin, accin_bits, accin_bits // 8)
        acc = acc + (accin.reshape(acc.shape) << shift_a)
    return patterns_of(fit(shift_round(acc, shift_o, rounding, mode), nbytes, sat), nbytes)


_NO_ACCUMULATOR = np.zeros(1, np.uint8)


def _int32_arguments(args: tuple, top: int, signed: bool, acc_bound: int, width: int, in_mask: int, in_sign: int) -> tuple:
    """`units_jit.conv_requantise32`'s arguments after the accumulator flag (the lanes' mask and sign, then `args`
    clamped to int32) where `_output_int32` says it computes what `conv_requantise` does; () otherwise."""
    if not _output_int32(args, top, signed, acc_bound, width):
        return ()
    i32 = np.int32
    return (i32(in_mask), i32(in_sign)) + tuple(i32(min(max(int(v), INT32[0]), INT32[1])) for v in args)


def _output_int32(args: tuple, top: int, signed: bool, acc_bound: int, width: int) -> bool:
    """Whether `units_jit.conv_requantise32` computes what `conv_requantise` does for sums below `acc_bound`
    and accumulator lanes of `top` bits (0: none) with these arguments (`_output_fields`): by interval
    arithmetic, every value stays in int32, every shift is below 32, the output is at most 24 bits wide and
    the saturation bounds lie in int32 or are the int64 extremes that stand for none."""
    shift_a, lshift, rnd, rshift, sat_lo, sat_hi, lo, _ = args
    big = np.iinfo(np.int64)
    if max(shift_a, lshift, rshift) > 31 or top > 31 or width > 24 or not (
            (_fits(sat_lo, sat_lo) or sat_lo == big.min) and (_fits(sat_hi, sat_hi) or sat_hi == big.max)):
        return False
    v = (1 - acc_bound, acc_bound - 1)
    steps = [v]
    if top:
        lane = (-(1 << (top - 1)), (1 << (top - 1)) - 1) if signed else (0, (1 << top) - 1)
        steps.append((lane[0] << shift_a, lane[1] << shift_a))
        v = (v[0] + steps[-1][0], v[1] + steps[-1][1])
        steps.append(v)
    v = ((v[0] << lshift) + rnd, (v[1] << lshift) + rnd)
    steps += [(v[0] - rnd, v[1] - rnd), v]
    v = tuple(min(max(t >> rshift, sat_lo), sat_hi) for t in v)  # monotone in the value
    steps.append((v[0] - lo, v[1] - lo))
    return all(_fits(*r) for r in steps)


def _output_fields(u) -> tuple:
    """A CONVACC's output fields, whether the fused pass takes them, and its arguments after the accumulator's
    lanes (shift, left and right shifts, rounding term, saturation bounds, output low end and mask)."""
    shift_a, shift_o, rounding, mode = _f(u, "shift_a"), _f(u, "shift_o"), bool(_f(u, "rounding_o")), _f(u, "round_mode_o")
    nbytes, sat = max(_f(u, "outbytes_o"), 1), bool(_f(u, "saturation_o"))
    half_up = not rounding or ROUNDING_BY_MODE.get(mode & 1) == "half_up"
    fused = half_up and _in_range(shift_a, abs(shift_o)) and nbytes <= FUSED_MAX_BYTES
    width = 8 * nbytes
    lo, big = -(1 << (width - 1)), np.iinfo(np.int64)
    sat_lo, sat_hi = (lo, -lo - 1) if sat else (big.min, big.max)
    rnd = 1 << (shift_o - 1) if rounding and shift_o > 0 else 0
    args = (shift_a, max(-shift_o, 0), rnd, max(shift_o, 0), sat_lo, sat_hi, lo, (1 << width) - 1) if fused else ()
    return shift_a, shift_o, rounding, mode, nbytes, sat, fused, args


# ----------------------------------------------------------------------------------------------------- ARITH

ARITH_OPS = ("ARITH_AFFINE", "ARITH_MIN", "ARITH_MAX", "ARITH_MUL", "ARITH_ABS_X", "ARITH_CLIP")


def arith_check(u) -> None:
    op = _f(u, "operation")
    if op not in ARITH_OPS:
        refuse(f"ARITH{u.index} operation {op}")
    for xy in ("x", "y"):
        if _f(u, f"shift_{xy}") or _f(u, f"rounding_{xy}") or _f(u, f"saturation_{xy}"):
            refuse(f"ARITH{u.index} input shifter of {xy.upper()} (shift_{xy}={_f(u, f'shift_{xy}')})")
    if not _f(u, "scalar") and _f(u, "bcast") not in ("ARITH_BCAST_CHAN", "ARITH_BCAST_SCALAR", "ARITH_BCAST_WIDTH"):
        refuse(f"ARITH{u.index} coefficient broadcast {_f(u, 'bcast')}")


def _s16(v):
    v = np.asarray(v, dtype=np.int64) & 0xFFFF
    return np.where(v >= 0x8000, v - 0x10000, v)


def arith_coefficients(u, n: int, start: int) -> tuple:
    """((A, B, C), shape) for elements start .. start+n-1 of the unit's input: scalars, or arrays from
    the coefficient memory by the broadcast counters (BCAST_CHAN: one per channel, channels of
    `batchDepth` per frame of `fWidth * fHeight` pixels, the address back to 0 after `fChannels`;
    BCAST_WIDTH: one per run of `batchDepth` elements, `fWidth` of them), shaped to broadcast against
    the elements reshaped to `shape` (None: as they are). With COMBINEBC, B:C is one 32-bit
    coefficient (in C)."""
    comb = bool(_f(u, "combinebc"))
    if _f(u, "scalar") or _f(u, "bcast") == "ARITH_BCAST_SCALAR":
        a, b, c = int(_s16(_f(u, "A_scalar"))), int(_s16(_f(u, "B_scalar"))), int(_f(u, "C_scalar"))
        if comb:
            return (a, 0, (b << 16) | (c & 0xFFFF)), None
        return (a, b, int(_s16(c))), None
    table = _derived(u, "coefficient table", lambda: _coefficient_table(u, comb))
    depth = max(_f(u, "batchDepth"), 1)
    if _f(u, "bcast") == "ARITH_BCAST_CHAN":
        plane = max(_f(u, "fWidth") * max(_f(u, "fHeight"), 1), 1)
        chans = max(_f(u, "fChannels"), 1)
        group = depth * plane
        groups_per_period = -(-chans // depth)
        if start % group == 0 and n % group == 0:  # whole frames: one coefficient row per frame
            g = (start // group + np.arange(n // group)) % groups_per_period
            idx = g[:, None] * depth + np.arange(depth)[None, :]
            return tuple(_pick(t, idx, u)[:, None, :] for t in table), (n // group, plane, depth)
        i = (np.arange(n, dtype=np.int64) + start) % (plane * chans)
        idx = (i // group) * depth + i % depth
    else:  # ARITH_BCAST_WIDTH
        count = max(_f(u, "fWidth"), 1)
        idx = ((np.arange(n, dtype=np.int64) + start) // depth) % count
    return tuple(_pick(t, idx, u) for t in table), None


def _pick(t: np.ndarray, idx: np.ndarray, u) -> np.ndarray:
    if idx.size and int(idx.max()) >= t.size:
        raise StImportError(f"ARITH{u.index}: coefficient {int(idx.max())} needed, its memory holds {t.size}")
    return t[idx]


def _coefficient_table(u, comb: bool) -> tuple:
    """The coefficient memory as signed (A, B, C) per entry (B:C combined into C with COMBINEBC)."""
    a, b, c = (np.asarray(u.get(f"mem_{k}") or (0,), dtype=np.int64) for k in "ABC")
    m = min(a.size, b.size, c.size)
    a, b, c = a[:m], b[:m], c[:m]
    if comb:
        return _s16(a), np.zeros_like(a), (_s16(b) << 16) | (c & 0xFFFF)
    return _s16(a), _s16(b), _s16(c)


class ArithFields(NamedTuple):
    """The ARITH fields a run of elements reads (clip bounds signed 16-bit, output bytes at least 1)."""

    op: str
    ax_shift: int
    by_shift: int
    c_shift: int
    combine: bool  # COMBINEBC
    dual: bool
    shift_o: int
    rounding: bool
    round_mode: int
    clipout: bool
    clipmin: int
    clipmax: int
    nbytes: int
    saturate: bool


def arith_fields(u) -> ArithFields:
    return _derived(u, "arith", lambda: ArithFields(
        _f(u, "operation"), _f(u, "Ax_shift"), _f(u, "By_shift"), _f(u, "C_shift"), bool(_f(u, "combinebc")),
        bool(_f(u, "dualinput")), _f(u, "shift_o"), bool(_f(u, "rounding_o")), _f(u, "round_mode_o"),
        bool(_f(u, "clipout")), int(_s16(_f(u, "clipmin"))), int(_s16(_f(u, "clipmax"))),
        max(_f(u, "outbytes_o"), 1), bool(_f(u, "saturation_o"))))


def _run_coefficients(u, n: int, start: int) -> tuple:
    """The coefficients of a run as `arith_coefficients` gives them, kept when small."""
    return _derived(u, ("coefficients", n, start), lambda: arith_coefficients(u, n, start),
                    keep=lambda got: sum(np.size(t) for t in got[0]) <= MEMO_COEFFICIENTS)


MEMO_COEFFICIENTS = 1 << 14  # coefficient arrays kept per unit and run of elements up to this size


def arith_apply(u, x: np.ndarray, y: np.ndarray | None, start: int) -> np.ndarray:
    """One run of elements through the unit. AFFINE: ((A*X) >> AX) + ((B*Y) >> BY) + (C << CSHIFT)
    (with COMBINEBC: (A*X) >> AX + BC), then >> SHIFT.RES with ROUND/ORNDMODE, CLIPOUT, OBYTES with SAT."""
    f = arith_fields(u)
    (a, b, c), shape = _run_coefficients(u, x.size, start)
    if shape is not None:
        x = x.reshape(shape)
        y = None if y is None else y.reshape(shape)
    yy = y if y is not None else 0
    if f.op == "ARITH_AFFINE":
        v = ((a * x) >> f.ax_shift) + (c << f.c_shift)
        if not f.combine:
            v = v + ((b * yy) >> f.by_shift)
        elif f.dual:
            v = v + yy
    elif f.op == "ARITH_MUL":
        v = (x * yy) >> f.ax_shift
    elif f.op == "ARITH_MIN":
        v = np.minimum(x, yy)
    elif f.op == "ARITH_MAX":
        v = np.maximum(x, yy)
    elif f.op == "ARITH_ABS_X":
        v = np.abs(x)
    else:  # ARITH_CLIP
        v = x
    v = shift_round(v, f.shift_o, f.rounding, f.round_mode)
    if f.clipout or f.op == "ARITH_CLIP":
        v = np.minimum(np.maximum(v, f.clipmin), f.clipmax)
    return fit(v, f.nbytes, f.saturate).reshape(-1)


FUSED_MAX_BYTES = 7  # the fused passes wrap an output to its width with an int64 mask: at most 56 bits


def _in_range(*shifts: int) -> bool:
    """Whether every shift is one an int64 shift performs as written (0-63)."""
    return all(0 <= s <= 63 for s in shifts)


def arith_patterns(u, xp: np.ndarray, xbits: int, yp: np.ndarray | None, ybits: int, start: int) -> np.ndarray:
    """`arith_apply` on stream patterns (`lane_values` of the unit's X and Y lanes), as the output's patterns
    (`patterns_of`): AFFINE with half-up rounding and shifts in range in one Numba pass per element
    (`units_jit.arith_affine`, its arguments kept per run of elements), every other case through
    `lane_values` and `arith_apply`."""
    key = ("affine", xp.size, start, xbits, ybits if yp is not None else 0)
    got = _derived(u, key, lambda: _affine_arguments(u, xp.size, start, xbits, ybits, yp is not None),
                   keep=lambda got: not got or got[1][0].size <= MEMO_COEFFICIENTS)
    nbytes = max(_f(u, "outbytes_o"), 1)
    if not got or not _integer_patterns(xp) or not _integer_patterns(yp):
        x = lane_values(xp, xbits, max(_f(u, "inbytes_x"), 1))
        y = None if yp is None else lane_values(yp, ybits, max(_f(u, "inbytes_y"), 1))
        return patterns_of(arith_apply(u, x, y, start), nbytes)
    kernel, args = got
    return kernel(xp, xp if yp is None else yp, *args, np.empty(xp.size, jit.pattern_type(nbytes)))


def arith_chain_patterns(us: list, xp: np.ndarray, xbits: int, start: int) -> np.ndarray:
    """`arith_patterns` of the single-input units `us` in turn, each one's output the next one's X, for a run of
    elements from `start`: in one Numba pass (`units_jit.arith_chain32`) where every unit takes the int32 pass
    and their coefficients lie alike (`_chain_arguments`), else unit by unit."""
    key = ("chain", tuple(us[1:]), xp.size, start, xbits)  # the units themselves: their identities stay taken
    got = _derived(us[0], key, lambda: _chain_arguments(us, xp.size, start, xbits),
                   keep=lambda got: not got or got[0].size <= MEMO_COEFFICIENTS)
    if got and _integer_patterns(xp):
        return jit.arith_chain32(xp, *got, np.empty(xp.size, jit.pattern_type(max(_f(us[-1], "outbytes_o"), 1))))
    p, bits = xp, xbits
    for u in us:
        p = arith_patterns(u, p, bits, None, 0, start)
        bits = 8 * max(_f(u, "outbytes_o"), 1)
    return p


CHAIN_MIN_RUN = 64  # coefficients repeating over fewer elements than this are not chained (a row refilled each time)


def _chain_arguments(us: list, n: int, start: int, xbits: int) -> tuple:
    """`units_jit.arith_chain32`'s arguments after X for the units `us` over n elements from `start`, or () where one
    does not take `units_jit.arith_affine32` without Y, or two with per-channel or per-element coefficients lay them
    out differently (groups, pixels, depth)."""
    stages, bits, shape = [], xbits, None
    for u in us:
        got = _affine_arguments(u, n, start, bits, 0, False)
        if not got or got[0] is not jit.arith_affine32:
            return ()
        a, _, cc, groups, plane, depth, _, lanes, shifts, bounds = got[1]
        if a.size > 1:
            if shape not in (None, (groups, plane, depth)) or plane * depth < CHAIN_MIN_RUN:
                return ()
            shape = (groups, plane, depth)
        stages.append((a, cc, lanes, shifts, bounds))
        bits = 8 * max(_f(u, "outbytes_o"), 1)
    groups, plane, depth = shape or (1, n, 1)
    rows = max(st[0].shape[0] for st in stages)
    a, cc = (np.stack([np.broadcast_to(st[k], (rows, depth)) for st in stages]).astype(np.int32) for k in (0, 1))
    lanes, shifts, bounds = (np.array([st[k] for st in stages], np.int32) for k in (2, 3, 4))
    return a, cc, groups, plane, depth, lanes, shifts, bounds


def _affine_arguments(u, n: int, start: int, xbits: int, ybits: int, has_y: bool) -> tuple:
    """(the fused pass, its arguments after X and Y) for a run of `n` elements from `start`, or () where no
    fused pass applies: `units_jit.arith_affine32` where every intermediate value fits int32
    (`_int32_exact`), else `units_jit.arith_affine` (int64)."""
    got = affine_int64_arguments(u, n, start, xbits, ybits, has_y)
    if not got:
        return ()
    args, xform, yform, width = got
    if _int32_exact(args, xform, yform, width):
        a, b, cc, groups, plane, depth, has_y, lanes, shifts, bounds = args
        i32 = np.int32
        return jit.arith_affine32, (a.astype(i32), b.astype(i32), cc.astype(i32), groups, plane, depth, has_y,
                                    tuple(i32(v) for v in lanes), tuple(i32(v) for v in shifts),
                                    tuple(i32(min(max(int(v), INT32[0]), INT32[1])) for v in bounds))
    return jit.arith_affine, args


def affine_int64_arguments(u, n: int, start: int, xbits: int, ybits: int, has_y: bool) -> tuple:
    """(the arguments of `units_jit.arith_affine` after X and Y, X's and Y's lane forms, the output's width in
    bits) for a run of `n` elements from `start`, or () where the fused pass does not apply."""
    f = arith_fields(u)
    xform = lane_form(xbits, max(_f(u, "inbytes_x"), 1))
    yform = lane_form(ybits, max(_f(u, "inbytes_y"), 1)) if has_y else (8, False)
    if not (f.op == "ARITH_AFFINE" and (not f.rounding or ROUNDING_BY_MODE.get(f.round_mode & 1) == "half_up")
            and _in_range(f.ax_shift, f.by_shift, f.c_shift, abs(f.shift_o)) and f.nbytes <= FUSED_MAX_BYTES
            and 1 <= xform[0] <= 62 and 1 <= yform[0] <= 62):
        return ()
    (a, b, c), shape = _run_coefficients(u, n, start)
    if shape is not None:  # one coefficient row per frame of plane * depth elements
        groups, plane, depth = shape
        a, b, c = (t.reshape(groups, depth) for t in (a, b, c))
    elif np.ndim(a):  # one coefficient per element
        groups, plane, depth = n, 1, 1
        a, b, c = (t.reshape(-1, 1) for t in (a, b, c))
    else:  # scalars
        groups, plane, depth = 1, n, 1
        a, b, c = (np.full((1, 1), t, np.int64) for t in (a, b, c))
    by_shift = f.by_shift
    if f.combine:  # COMBINEBC: Y added as it is
        b, by_shift = np.ones_like(b), 0
    width = 8 * f.nbytes
    lo = -(1 << (width - 1))
    big = np.iinfo(np.int64)
    clip_lo, clip_hi = (f.clipmin, f.clipmax) if f.clipout else (big.min, big.max)
    sat_lo, sat_hi = (lo, -lo - 1) if f.saturate else (big.min, big.max)
    lanes = tuple(np.int64(v) for v in ((1 << xform[0]) - 1, xform[1] << (xform[0] - 1),
                                         (1 << yform[0]) - 1, yform[1] << (yform[0] - 1)))
    left, right = max(-f.shift_o, 0), max(f.shift_o, 0)
    rnd = 1 << (right - 1) if f.rounding and right > 0 else 0
    cc = ((c << f.c_shift) << left) + rnd  # the shifts distribute over the sum (int64, wrapping)
    shifts = tuple(np.int64(v) for v in (f.ax_shift, by_shift, left, right))
    bounds = tuple(np.int64(v) for v in (clip_lo, clip_hi, sat_lo, sat_hi, lo, (1 << width) - 1))
    return (a, b, cc, groups, plane, depth, has_y, lanes, shifts, bounds), xform, yform, width


INT32 = (-(1 << 31), (1 << 31) - 1)


def _int32_exact(args: tuple, xform: tuple, yform: tuple, width: int) -> bool:
    """Whether `units_jit.arith_affine32` computes what `arith_affine` does with these arguments: by interval
    arithmetic on the lanes' and coefficients' ranges, no value of the formula leaves int32, every shift is
    below 32, the output is at most 24 bits wide, and each clip / saturation bound lies in int32 or is the
    int64 extreme that stands for none (clamping it to int32 then changes no int32 value)."""
    a, b, cc, _, _, _, has_y, _, shifts, bounds = args
    ax, by, ls, rs = (int(v) for v in shifts)
    if max(xform[0], yform[0]) > 31 or width > 24 or max(ax, by, ls, rs) > 31 or not a.size:
        return False
    big = np.iinfo(np.int64)
    lc, hc, sl, sh, lo, _ = (int(v) for v in bounds)
    if not all(_fits(t, t) or t == e for t, e in ((lc, big.min), (hc, big.max), (sl, big.min), (sh, big.max))):
        return False

    def lane(form):
        t, signed = form
        return (-(1 << (t - 1)), (1 << (t - 1)) - 1) if signed else (0, (1 << t) - 1)

    def times(coef, r):
        ends = [c * v for c in (int(coef.min()), int(coef.max())) for v in r]
        return min(ends), max(ends)

    if not (_fits(int(b.min()), int(b.max())) and _fits(int(cc.min()), int(cc.max()))):
        return False
    p = times(a, lane(xform))
    steps = [p, (p[0] >> ax, p[1] >> ax)]
    v = steps[-1]
    if has_y:
        q = times(b, lane(yform))
        steps += [q, (q[0] >> by, q[1] >> by)]
        v = (v[0] + steps[-1][0], v[1] + steps[-1][1])
        steps.append(v)
    v = (v[0] << ls, v[1] << ls)
    steps.append(v)
    v = (v[0] + int(cc.min()), v[1] + int(cc.max()))
    steps.append(v)
    v = tuple(min(max(min(max(t >> rs, lc), hc), sl), sh) for t in v)  # monotone in the value
    steps.append((v[0] - lo, v[1] - lo))
    return all(_fits(*r) for r in steps)


def _fits(lo: int, hi: int) -> bool:
    return INT32[0] <= lo and hi <= INT32[1]


# ------------------------------------------------------------------------------------------------------ POOL

POOL_OPS = ("POOL_MAX", "POOL_MIN", "POOL_AVG", "POOL_GMAX", "POOL_GMIN", "POOL_GAVG")


def pool_check(u) -> None:
    op = _f(u, "operation")
    if op not in POOL_OPS:
        refuse(f"POOL{u.index} operation {op}")
    if _f(u, "shift_f") or _f(u, "rounding_f") or _f(u, "saturation_f"):
        refuse(f"POOL{u.index} input feature shifter (shift_f={_f(u, 'shift_f')})")
    if op == "POOL_AVG" and any(_f(u, k) for k in ("topPad", "bottomPad", "leftPad", "rightPad")):
        refuse(f"POOL{u.index} average pooling over padding (the divisor per window is not public)")


def pool_frame_size(u) -> int:
    return max(_f(u, "inputX"), 1) * max(_f(u, "inputY"), 1) * max(_f(u, "batchSize"), 1)


def _pool_fields(u) -> dict:
    w, h, d = max(_f(u, "inputX"), 1), max(_f(u, "inputY"), 1), max(_f(u, "batchSize"), 1)
    return dict(op=_f(u, "operation"), w=w, h=h, d=d, l0=_f(u, "leftCrop"), r0=_f(u, "rightCrop") or w - 1,
                t0=_f(u, "topCrop"), b0=_f(u, "bottomCrop") or h - 1, kx=max(_f(u, "poolWinX"), 1),
                ky=max(_f(u, "poolWinY"), 1), sx=max(_f(u, "strideX"), 1), sy=max(_f(u, "strideY"), 1),
                pads=(_f(u, "topPad"), _f(u, "bottomPad"), _f(u, "leftPad"), _f(u, "rightPad")),
                mulval=int(_f(u, "mulval")), shift_o=_f(u, "shift_o"), rounding=bool(_f(u, "rounding_o")),
                mode=_f(u, "round_mode_o"), nbytes=max(_f(u, "outbytes_o"), 1), sat=bool(_f(u, "saturation_o")))


def pool_frame(u, x: np.ndarray, frames: int = 1) -> np.ndarray:
    """`frames` frames (inputY, inputX, batchSize) -> the pooled frames, each flattened in raster order.
    MAX/MIN over the window (padding never wins); AVG: (sum * MULVAL) >> OUTSHIFT with ROUND/ORNDMODE,
    OBYTES with SAT; the global kinds take the whole cropped frame as one window."""
    p = _derived(u, "pool", lambda: _pool_fields(u))
    op, d = p["op"], p["d"]
    f = x.reshape(frames, p["h"], p["w"], d)[:, p["t0"]:p["b0"] + 1, p["l0"]:p["r0"] + 1]
    if op.startswith("POOL_G"):
        win = f.reshape(frames, 1, 1, -1, d)
    else:
        kx, ky, sx, sy = p["kx"], p["ky"], p["sx"], p["sy"]
        top, bottom, left, right = p["pads"]
        if top or bottom or left or right:
            fill = {"POOL_MAX": np.iinfo(np.int64).min // 4, "POOL_MIN": np.iinfo(np.int64).max // 4}.get(op, 0)
            padded = np.full((frames, f.shape[1] + top + bottom, f.shape[2] + left + right, d), fill, np.int64)
            padded[:, top:top + f.shape[1], left:left + f.shape[2]] = f
            f = padded
        oh, ow = (f.shape[1] - ky) // sy + 1, (f.shape[2] - kx) // sx + 1
        # the window reduced row by row, then column by column (max, min and integer sums are separable)
        red = {"POOL_MAX": np.maximum, "POOL_MIN": np.minimum}.get(op, np.add)
        r = f[:, :sy * (oh - 1) + 1:sy]
        for dy in range(1, ky):
            r = red(r, f[:, dy:dy + sy * (oh - 1) + 1:sy])
        v = r[:, :, :sx * (ow - 1) + 1:sx]
        for dx in range(1, kx):
            v = red(v, r[:, :, dx:dx + sx * (ow - 1) + 1:sx])
        if red is np.add:
            v = fit(shift_round(v * p["mulval"], p["shift_o"], p["rounding"], p["mode"]), p["nbytes"], p["sat"])
        return np.ascontiguousarray(v).reshape(-1)
    if op in ("POOL_MAX", "POOL_GMAX"):
        v = win.max(axis=3)
    elif op in ("POOL_MIN", "POOL_GMIN"):
        v = win.min(axis=3)
    else:
        v = shift_round(win.sum(axis=3) * p["mulval"], p["shift_o"], p["rounding"], p["mode"])
        v = fit(v, p["nbytes"], p["sat"])
    return v.reshape(-1)


# ----------------------------------------------------------------------------------------------------- ACTIV

def activ_check(u) -> None:
    """ACTIV: the function evaluator (ACTIV_FUNC) and the thresholded ReLU on 8-bit inputs; the other
    ReLU kinds and wider inputs refused."""
    op = _f(u, "operation")
    if op not in ("ACTIV_FUNC", "ACTIV_TRELU"):
        refuse(f"ACTIV{u.index} operation {op}")
    if op == "ACTIV_TRELU":
        if _f(u, "inbytes_f") != 1 or _f(u, "shift_f") or _f(u, "fsub"):
            refuse(f"ACTIV{u.index} thresholded ReLU on {_f(u, 'inbytes_f')}-byte inputs")
        return
    if _f(u, "inbytes_f") != 1 or _f(u, "shift_norm") != 8 or _f(u, "shift_f") or _f(u, "fsub"):
        refuse(f"ACTIV{u.index} function on {_f(u, 'inbytes_f')}-byte inputs (shift_norm {_f(u, 'shift_norm')}, "
               f"shift_f {_f(u, 'shift_f')}, fsub {_f(u, 'fsub')})")
    if not u.get("mem_rom0") or not u.get("mem_rom1"):
        refuse(f"ACTIV{u.index} function without its ROM0 / ROM1 tables")


def activ_table(u) -> np.ndarray:
    """The 256 outputs of an 8-bit ACTIV_FUNC, indexed by the input byte. Outer segment: the top `bwidth`
    bits of the input (offset to unsigned with `signedop`); its ROM0 byte gives the inner bits (7:6) and
    the first ROM1 row (5:0); the next inner bits pick the row (A, B, C, signed 16-bit); the value is
    A*x^2 + (B << shift_b)*x + (C << shift_c) on the input value x, >> shift_o rounded, saturated to
    `outbytes_o`. Inferred (the table format is not public): on the 65 function units of
    fallguard_pe_yolov8n_pose256 it equals TFLite's SiLU / sigmoid LUTs within 2 steps (51 within 1)."""
    return _derived(u, "activ table", lambda: _trelu_table(u) if _f(u, "operation") == "ACTIV_TRELU"
                    else _function_table(u))


def _function_table(u) -> np.ndarray:
    """ACTIV_FUNC's table from its ROM0 / ROM1 (see `activ_table`)."""
    rom0 = np.asarray(u.get("mem_rom0"), np.int64)
    rom1 = _s16(np.asarray(u.get("mem_rom1"), np.int64))
    rows = rom1[:rom1.size // 3 * 3].reshape(-1, 3)
    byte = np.arange(256, dtype=np.int64)
    signed = bool(_f(u, "signedop"))
    x = np.where(byte >= 128, byte - 256, byte) if signed else byte
    code = x + 128 if signed else x  # 0..255, ordered as the inputs
    bw = _f(u, "bwidth")
    outer = code >> (8 - bw)
    if outer.max() >= rom0.size:
        raise StImportError(f"ACTIV{u.index}: {1 << bw} outer segments, ROM0 holds {rom0.size}")
    entry = rom0[outer]
    inner_bits, base = entry >> 6, entry & 63
    inner = (code >> np.maximum(8 - bw - inner_bits, 0)) & ((1 << inner_bits) - 1)
    row = base + inner
    if row.max() >= rows.shape[0]:
        raise StImportError(f"ACTIV{u.index}: ROM1 row {int(row.max())} needed, it holds {rows.shape[0]}")
    a, b, c = rows[row, 0], rows[row, 1], rows[row, 2]
    y = a * x * x + (b << _f(u, "shift_b")) * x + (c << _f(u, "shift_c"))
    y = shift_round(y, _f(u, "shift_o"), bool(_f(u, "rounding_o")), _f(u, "round_mode_o"))
    return fit(y, max(_f(u, "outbytes_o"), 1), bool(_f(u, "saturation_o")))


def _trelu_table(u) -> np.ndarray:
    """Thresholded ReLU: x where x > PARAM (the threshold), else PARAM2 (the zero's offset), as the
    fields' descriptions read (signed 16-bit parameters)."""
    byte = np.arange(256, dtype=np.int64)
    x = np.where(byte >= 128, byte - 256, byte) if _f(u, "signedop", 1) else byte
    y = np.where(x > int(_s16(_f(u, "parameter"))), x, int(_s16(_f(u, "parameter_2"))))
    return fit(y, max(_f(u, "outbytes_o"), 1), bool(_f(u, "saturation_o")))
