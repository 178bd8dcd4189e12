"""TFLite's integer arithmetic (gemmlowp-style fixed point), as the interpreter's kernels define it.

The slow, obvious definitions of the rounding helpers TFLite's int8 kernels use, and the 256-entry
tables of its int8 -> int8 operators (activations and requantization), which the compiler writes
into the ACT unit's LUT so those operators come out exactly as the interpreter computes them:

  quantize_multiplier(real)  (mult, exp): real ~= mult * 2^(exp - 31), mult in [2^30, 2^31), by
                             frexp and round half away from zero (TFLite's QuantizeMultiplier)
  srdhm(a, b)                SaturatingRoundingDoublingHighMul: round(a * b / 2^31), ties away from 0
  rdpot(x, e)                RoundingDivideByPOT: round(x / 2^e), ties away from zero
  mbqm(x, mult, exp)         MultiplyByQuantizedMultiplier with TFLite's default double rounding:
                             rdpot(srdhm(x * 2^max(exp, 0), mult), max(-exp, 0))

Which kernel the tables follow is stated per function (the default interpreter runs XNNPACK where it
takes an operator, TFLite's builtin kernels elsewhere); tests check each against ai-edge-litert.
"""

from __future__ import annotations

import math

import numpy as np

Q = np.arange(-128, 128, dtype=np.int64)  # every int8 input, in LUT order


def quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite's QuantizeMultiplier: (mult, exp) with real ~= mult * 2^(exp - 31); 0 -> (0, 0)."""
    if real == 0.0:
        return 0, 0
    m, e = math.frexp(float(real))
    q = int(math.floor(abs(m) * (1 << 31) + 0.5)) * (1 if m > 0 else -1)  # std::round: ties away from zero
    if q == 1 << 31:
        q //= 2
        e += 1
    if e < -31:
        e, q = 0, 0
    return q, e


def _div_trunc(a, b):
    """C++ integer division (truncates toward zero)."""
    q = np.abs(a) // b
    return np.where(a < 0, -q, q)


def srdhm(a, b, bits: int = 32):
    """SaturatingRoundingDoublingHighMul of `bits`-bit integers (32 or 16)."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    lo = -(1 << (bits - 1))
    ab = a * b
    nudge = np.where(ab >= 0, 1 << (bits - 2), 1 - (1 << (bits - 2)))
    out = _div_trunc(ab + nudge, 1 << (bits - 1))
    return np.where((a == lo) & (b == lo), (1 << (bits - 1)) - 1, out)


def rdpot(x, e):
    """RoundingDivideByPOT: x / 2^e rounded to nearest, ties away from zero."""
    x = np.asarray(x, np.int64)
    mask = (1 << e) - 1
    rem = x & mask
    thr = (mask >> 1) + (x < 0)
    return (x >> e) + (rem > thr)


def mbqm(x, mult: int, exp: int):
    """MultiplyByQuantizedMultiplier (TFLite's default double rounding)."""
    left, right = max(exp, 0), max(-exp, 0)
    return rdpot(srdhm(np.asarray(x, np.int64) * (1 << left), mult), right)


def _round_away(v: float) -> int:
    return int(math.floor(abs(v) + 0.5)) * (1 if v >= 0 else -1)


def _clamp8(v) -> np.ndarray:
    return np.clip(v, -128, 127).astype(np.int8)


def act_range(scale: float, zp: int, lo: float | None, hi: float | None) -> tuple[int, int]:
    """TFLite's CalculateActivationRangeQuantized: the int8 bounds of a float range [lo, hi]."""
    qlo = -128 if lo is None else max(-128, zp + _round_away(float(np.float32(lo) / np.float32(scale))))
    qhi = 127 if hi is None else min(127, zp + _round_away(float(np.float32(hi) / np.float32(scale))))
    return qlo, qhi


def _f32(v) -> float:
    return float(np.float32(v))


def _xnn_multiplier8(scale: float) -> int:
    """XNNPACK's 8-bit fixed-point multiplier of a float scale: lrintf(256 * scale) (ties to even)."""
    return int(np.rint(np.float32(256.0) * np.float32(scale)))


def relu_table(s_in, z_in, s_out, z_out, lo: float | None = 0.0, hi: float | None = None) -> np.ndarray:
    """RELU / RELU6 / RELU_N1_TO_1 / RELU_0_TO_1 (every kernel set): requantize, clamp to [lo, hi]."""
    m, e = quantize_multiplier(_f32(s_in) / _f32(s_out))
    a, b = act_range(s_out, z_out, lo, hi)
    return _clamp8(np.clip(z_out + mbqm(Q - z_in, m, e), a, b))


def leaky_relu_table(s_in, z_in, s_out, z_out, alpha: float, kernels: str = "auto") -> np.ndarray:
    """LEAKY_RELU. auto (XNNPACK): ((x - z_in) * lrintf(256 * s) + 128 + (z_out << 8)) >> 8 with
    s = s_in / s_out, times alpha below zero; builtin/reference: two MultiplyByQuantizedMultiplier."""
    v = Q - z_in
    if kernels == "auto":
        pos = np.float32(s_in) / np.float32(s_out)
        pm, nm = _xnn_multiplier8(pos), _xnn_multiplier8(pos * np.float32(alpha))
        return _clamp8(((z_out << 8) + 0x80 + v * np.where(v >= 0, pm, nm)) >> 8)
    mi, ei = quantize_multiplier(_f32(s_in) / _f32(s_out))
    ma, ea = quantize_multiplier(_f32(s_in) * _f32(alpha) / _f32(s_out))
    return _clamp8(z_out + np.where(v >= 0, mbqm(v, mi, ei), mbqm(v, ma, ea)))


def requantize_table(s_in, z_in, s_out, z_out, kernels: str = "auto") -> np.ndarray:
    """QUANTIZE int8 -> int8. auto (XNNPACK convert): ((x - z_in) * lrintf(256 * s_in / s_out) + 128
    + (z_out << 8)) >> 8; reference: MultiplyByQuantizedMultiplier."""
    if kernels == "auto":
        m = _xnn_multiplier8(np.float32(s_in) / np.float32(s_out))
        return _clamp8(((z_out << 8) + 0x80 + (Q - z_in) * m) >> 8)
    m, e = quantize_multiplier(_f32(s_in) / _f32(s_out))
    return _clamp8(z_out + mbqm(Q - z_in, m, e))


def _sat16(v):
    return np.clip(v, -(1 << 15), (1 << 15) - 1)


def _down16(mult: int) -> int:
    """DownScaleInt32ToInt16Multiplier."""
    if mult >= (1 << 31) - 1 - (1 << 15):
        return (1 << 15) - 1
    return (mult + (1 << 15)) >> 16


def hard_swish_table(s_in, z_in, s_out, z_out) -> np.ndarray:
    """HARD_SWISH (every kernel set): TFLite's int16 fixed-point algorithm (reference_ops::HardSwish)."""
    hires = np.float32(1.0 / 128.0) * np.float32(s_in)
    om, oe = quantize_multiplier(float(np.float32(hires / np.float32(s_out))))
    rm, re_ = quantize_multiplier(float(np.float32(hires / np.float32(3.0 / 32768.0))))
    om16, rm16 = _down16(om), _down16(rm)
    x = _sat16((Q - z_in) * (1 << 7))
    pre_out = srdhm(x, om16, 16)
    r = x
    if re_ > 0:
        r = _sat16(r * (1 << (re_ - 1)))
    r = srdhm(r, rm16, 16)
    if re_ > 0:
        r = _sat16(r * 2)
    if re_ < 0:
        r = rdpot(r, -re_)
    r = (r + (1 << 15)) >> 1
    ab = r * pre_out  # SaturatingDoublingHighMul: (a * b) / 2^15, truncated
    pre = np.where((r == -(1 << 15)) & (pre_out == -(1 << 15)), (1 << 15) - 1, _div_trunc(ab, 1 << 15))
    return _clamp8(rdpot(pre, -oe) + z_out)
