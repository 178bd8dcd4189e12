"""Integer requantization and bit-pattern helpers shared by the kernels and the compiler.

Rounding rules (the hardware contract, see isa/n657.toml):
  rshift_round(x, s) = (x + 2^(s-1)) >> s   arithmetic shift, round half up (toward +inf)
  round_div(n, d, rounding)                 n / d rounded half up or half away from zero (POOL `rounding`)
  quantize(x)        = clamp(rint(x / scale) + zp)   round half to even (ONNX QuantizeLinear)
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import UsageError

MULT_MIN = 1 << 30
MULT_MAX = (1 << 31) - 1
SHIFT_MAX = 63

# ISA element types (isa/n657.toml [enums.elem]); the NPU units use the first three
_DTYPES = {"int8": np.int8, "fp16": np.float16, "fp32": np.float32, "uint8": np.uint8, "int16": np.int16,
           "uint16": np.uint16, "int32": np.int32, "uint32": np.uint32, "int64": np.int64, "uint64": np.uint64,
           "bool": np.bool_}


def np_dtype(name: str) -> type:
    """numpy dtype of an ISA element type name ("int8", "fp16", "fp32", "int64", "bool", ...)."""
    try:
        return _DTYPES[name]
    except (KeyError, TypeError):
        raise UsageError(f"unknown dtype {name!r} (expected one of {', '.join(_DTYPES)})") from None


def dtype_name(dtype) -> str:
    """ISA element type name of a numpy dtype."""
    dt = np.dtype(dtype)
    for name, t in _DTYPES.items():
        if dt == np.dtype(t):
            return name
    raise UsageError(f"unsupported array dtype {dt} (expected one of {', '.join(_DTYPES)})")


def quantize_multiplier(real: float) -> tuple[int, int]:
    """(mult, shift) with real ~= mult * 2^-shift, mult in [2^30, 2^31), shift in [0, 63].

    mult = round-half-even(m * 2^31) where real = m * 2^e, m in [0.5, 1) (frexp), shift = 31 - e.
    Tiny reals (shift would exceed 63) keep shift = 63 and a smaller mult = round(real * 2^63),
    which may fall below 2^30 or reach 0 (real < 2^-64 gives (0, 63)); real == 0 gives (0, 0).
    Reals that would need shift < 0 (real >= 2^31 - 0.5) and negative or non-finite reals raise.
    """
    real = float(real)
    if not math.isfinite(real) or real < 0:
        raise UsageError(f"quantize_multiplier: real must be finite and >= 0, got {real!r}")
    if real == 0.0:
        return 0, 0
    m, e = math.frexp(real)
    mult = round(m * (1 << 31))
    shift = 31 - e
    if mult == 1 << 31:
        mult //= 2
        shift -= 1
    if shift < 0:
        raise UsageError(f"quantize_multiplier: {real!r} is too large (needs shift < 0)")
    if shift > SHIFT_MAX:
        shift = SHIFT_MAX
        mult = round(math.ldexp(real, SHIFT_MAX))
    return int(mult), int(shift)


def quantize_multipliers(reals) -> tuple[np.ndarray, np.ndarray]:
    """`quantize_multiplier` of each real in an array, as (int64 mults, int64 shifts), the same
    values as the scalar one (frexp and scaling by powers of two are exact, np.rint rounds half to
    even as round() does); raises the scalar one's error for the first real it refuses."""
    r = np.asarray(reals, np.float64).reshape(-1)
    m, e = np.frexp(r)
    mult = np.rint(m * float(1 << 31))
    shift = 31 - e.astype(np.int64)
    top = mult == float(1 << 31)
    mult[top] /= 2
    shift[top] -= 1
    bad = ~np.isfinite(r) | (r < 0) | ((shift < 0) & (r != 0))
    if bad.any():
        quantize_multiplier(float(r[np.argmax(bad)]))  # raises
    tiny = shift > SHIFT_MAX
    mult[tiny] = np.rint(np.ldexp(r[tiny], SHIFT_MAX))
    shift[tiny] = SHIFT_MAX
    zero = r == 0
    mult[zero], shift[zero] = 0, 0
    return mult.astype(np.int64), shift


def rshift_round(x, shift):
    """(x + 2^(shift-1)) >> shift with an arithmetic shift; shift 0 returns x.

    Works on Python ints and on numpy integer (or object) arrays, with scalar or array shifts.
    Computed as ((x >> (s-1)) + 1) >> 1, which is equal and cannot overflow int64.
    """
    if isinstance(x, (int, np.integer)) and isinstance(shift, (int, np.integer)):
        x, s = int(x), int(shift)
        if s < 0:
            raise UsageError(f"rshift_round: negative shift {s}")
        return x if s == 0 else ((x >> (s - 1)) + 1) >> 1
    x = np.asarray(x)
    s = np.asarray(shift)
    if s.dtype != object:
        s = s.astype(np.int64)
    if np.any(s < 0):
        raise UsageError("rshift_round: negative shift")
    sm1 = np.maximum(s - 1, 0)
    shifted = ((x >> sm1) + 1) >> 1
    return np.where(s == 0, x, shifted)


def round_half_up_div(n, d):
    """round_half_up(n / d) = floor((2n + d) / (2d)) for d > 0, exact on ints/int64/object arrays."""
    return (2 * n + d) // (2 * d)


def round_half_away_div(n, d):
    """round_half_away(n / d) = sign(n) * floor((2|n| + d) / (2d)) for d > 0 (ties away from zero), exact on
    ints/int64/object arrays."""
    if isinstance(n, (int, np.integer)):
        q = (2 * abs(int(n)) + d) // (2 * d)
        return -q if n < 0 else q
    n = np.asarray(n)
    q = (2 * np.abs(n) + d) // (2 * d)
    return np.where(n < 0, -q, q)


ROUNDINGS = {"half_up": round_half_up_div, "half_away": round_half_away_div}  # isa [enums.pool_round]


def round_div(n, d, rounding: str = "half_up"):
    """n / d (d > 0) rounded to an integer by `rounding` (a name of isa [enums.pool_round])."""
    try:
        fn = ROUNDINGS[rounding]
    except KeyError:
        raise UsageError(f"unknown rounding {rounding!r} (expected one of {', '.join(ROUNDINGS)})") from None
    return fn(n, d)


def quantize(x, scale: float, zp: int) -> np.ndarray:
    """int8 of x / scale + zp, rounded half to even, clamped to [-128, 127] (computed in float64)."""
    if not scale > 0:
        raise UsageError(f"quantize: scale must be > 0, got {scale!r}")
    q = np.rint(np.asarray(x, dtype=np.float64) / float(scale)) + int(zp)
    return np.clip(q, -128, 127).astype(np.int8)


def dequantize(q, scale: float, zp: int) -> np.ndarray:
    """float32 of (q - zp) * scale."""
    return ((np.asarray(q, dtype=np.int32) - int(zp)).astype(np.float64) * float(scale)).astype(np.float32)


FP16_MAX = 65504.0


def store_float(r, dtype) -> np.ndarray:
    """A unit's float result rounded to its storage type `dtype` (float16 or float32). fp16 SATURATES: a finite
    result beyond +-65504 is stored as +-65504, not inf (ASSUMED: the N657's units saturate what they store, as
    its integer datapaths do; an inf would turn every later softmax into NaN where the fp32 model is finite).
    A result that is already inf or NaN (1/0 of a reciprocal) stays so."""
    r = np.asarray(r)
    with np.errstate(over="ignore"):
        out = r.astype(dtype)
        if out.dtype != np.float16 or not np.isinf(out).any():  # the common case: one pass over the result
            return out
        return np.where(np.isfinite(r), np.clip(r, -FP16_MAX, FP16_MAX), r).astype(dtype)


def fp16_bits(value) -> int:
    """IEEE half bit pattern of value (rounded to nearest even), as an int in [0, 65535]."""
    return int(np.array(value, dtype=np.float16).view(np.uint16))


def from_fp16_bits(bits: int) -> float:
    """float value of an IEEE half bit pattern."""
    return float(np.array(int(bits) & 0xFFFF, dtype=np.uint16).view(np.float16))


def int8_bits(v: int) -> int:
    """16-bit field value of an int8 (sign-extended two's complement: -1 -> 0xFFFF)."""
    v = int(v)
    if not -128 <= v <= 127:
        raise UsageError(f"int8_bits: {v} is not an int8")
    return v & 0xFFFF


def int8_from_bits(bits: int) -> int:
    """int8 value of a 16-bit raw field (low byte, sign-extended)."""
    b = int(bits) & 0xFF
    return b - 256 if b >= 128 else b
