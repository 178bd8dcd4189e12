"""Activation unit: int8 LUT, float functions (ONNX semantics) and the LUT builder.

int8 always goes through a 256-entry table: out = lut[x + 128]. The compiler bakes the float
function and the requantization into the table with make_lut (function in float64, then
quantize: round half to even, clamp).
float functions are evaluated in float64 and rounded once to the input dtype (so the result does
not depend on which SIMD variant of exp/tanh a machine's numpy picks):
  relu max(x, 0); clip min(max(x, lo), hi); leaky x<0 ? alpha*x : x; sigmoid 1/(1+e^-x);
  silu x*sigmoid(x); hardswish x*max(0, min(1, x/6 + 1/2)); tanh; identity x;
  hardsigmoid max(0, min(1, alpha*x + beta)) (beta = lo); elu x<0 ? alpha*(e^x - 1) : x;
  softplus log(1 + e^x); gelu x*(1 + erf(x/sqrt 2))/2; gelu_tanh x*(1 + tanh(sqrt(2/pi)*(x + 0.044715 x^3)))/2;
  mish x*tanh(softplus(x)); reciprocal 1/x (1/0 = inf); exp e^x.
softplus is evaluated as max(x, 0) + log1p(e^-|x|) (no overflow); erf is libm's (math.erf, in Numba).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..errors import UsageError
from .quant import quantize, store_float

FUNCS = ("relu", "clip", "leaky", "sigmoid", "silu", "hardswish", "tanh", "identity", "hardsigmoid", "elu",
         "softplus", "gelu", "gelu_tanh", "mish", "reciprocal", "exp")


def _erf_scalar(x):
    return math.erf(x)


@functools.cache
def _erf():
    """erf as a float64 ufunc, built by Numba on first use (importing this module stays Numba-free)."""
    import numba

    return numba.vectorize(["float64(float64)"], cache=True)(_erf_scalar)


def _softplus(v):
    return np.maximum(v, 0) + np.log1p(np.exp(-np.abs(v)))


def lut_int8(x, lut) -> np.ndarray:
    """int8 out = lut[x + 128] (lut: 256 entries, uint8 or int8 bytes)."""
    x = np.asarray(x)
    t = np.asarray(lut)
    if x.dtype != np.int8:
        raise UsageError(f"lut_int8: x must be int8, got {x.dtype}")
    if t.size != 256 or t.dtype not in (np.int8, np.uint8):
        raise UsageError(f"lut_int8: lut must be 256 int8/uint8 entries, got {t.size} {t.dtype}")
    from .int8_loops import lut

    return lut(x, t.reshape(256).view(np.int8))


def _apply(func, v, alpha, lo, hi, one):
    """func on array v in v's float type (`one` is 1 in that type)."""
    if func == "relu":
        return np.maximum(v, 0)
    if func == "clip":
        r = v
        if lo is not None:
            r = np.maximum(r, type(one)(lo))
        if hi is not None:
            r = np.minimum(r, type(one)(hi))
        return r
    if func == "leaky":
        return np.where(v < 0, v * type(one)(alpha), v)
    if func == "sigmoid":
        return one / (one + np.exp(-v))
    if func == "silu":
        return v * (one / (one + np.exp(-v)))
    if func == "hardswish":
        return v * np.clip(v / type(one)(6) + type(one)(0.5), 0, one)
    if func == "tanh":
        return np.tanh(v)
    if func == "identity":
        return v
    if func == "hardsigmoid":
        return np.clip(v * type(one)(alpha) + type(one)(0.0 if lo is None else lo), 0, one)
    if func == "elu":
        return np.where(v < 0, type(one)(alpha) * np.expm1(np.minimum(v, 0)), v)
    if func == "softplus":
        return _softplus(v)
    if func == "gelu":
        return v * (one + _erf()(v / np.sqrt(2.0))) / 2
    if func == "gelu_tanh":
        return v * (one + np.tanh(np.sqrt(2.0 / np.pi) * (v + 0.044715 * v ** 3))) / 2
    if func == "mish":
        return v * np.tanh(_softplus(v))
    if func == "reciprocal":
        with np.errstate(divide="ignore"):
            return one / v
    if func == "exp":
        return np.exp(v)
    raise UsageError(f"activation: unknown function {func!r} (expected {', '.join(FUNCS)})")


def act_float(func, x, alpha=0.01, lo=None, hi=None) -> np.ndarray:
    """Float activation in float64, rounded once to x's dtype (fp16 or fp32)."""
    x = np.asarray(x)
    if x.dtype.kind != "f":
        raise UsageError(f"act_float: x must be float, got {x.dtype}")
    with np.errstate(over="ignore"):
        r = _apply(func, x.astype(np.float64), alpha, lo, hi, np.float64(1))
    return store_float(r, x.dtype)


def make_lut(func, in_scale, in_zp, out_scale, out_zp, alpha=0.01, lo=None, hi=None) -> np.ndarray:
    """int8[256] table: entry q+128 = quantize(func((q - in_zp) * in_scale), out_scale, out_zp)."""
    q = np.arange(-128, 128, dtype=np.float64)
    with np.errstate(over="ignore"):
        y = _apply(func, (q - int(in_zp)) * float(in_scale), alpha, lo, hi, np.float64(1))
    return quantize(y, out_scale, out_zp)
