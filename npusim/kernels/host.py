"""HOST (CPU fallback) functions: softmax over the last axis of a [rows][n] tensor.

float: max-subtracted exponentials and their sum in float64, rounded once to the input dtype
(machine-independent: no SIMD-variant exp or pairwise float32 sums decide the last bit).
int8: dequantize, float64 softmax, quantize (round half to even, clamp), like an ONNX
DequantizeLinear -> Softmax -> QuantizeLinear chain.
"""

from __future__ import annotations

import numpy as np

from ..errors import UsageError
from .quant import dequantize, quantize


def _softmax64(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _rows(x, kind):
    x = np.asarray(x)
    if x.ndim != 2:
        raise UsageError(f"softmax: x must be [rows][n], got shape {x.shape}")
    if (kind == "i") != (x.dtype == np.int8) or (kind == "f" and x.dtype.kind != "f"):
        raise UsageError(f"softmax: unsupported dtype {x.dtype}")
    return x


def softmax_float(x) -> np.ndarray:
    """Softmax of each row (float64 math), in x's dtype."""
    x = _rows(x, "f")
    return _softmax64(x).astype(x.dtype)


def softmax_int8(x, in_scale, in_zp, out_scale, out_zp) -> np.ndarray:
    """int8 softmax of each row: dequantize, float64 softmax, requantize."""
    x = _rows(x, "i")
    return quantize(_softmax64(dequantize(x, in_scale, in_zp)), out_scale, out_zp)
