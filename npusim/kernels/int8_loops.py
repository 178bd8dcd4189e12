"""One-pass Numba loops over int8 tensors, for the functional run's hot element-wise steps.

`lut(x, table)`: out = table[x + 128], the int8 activation unit (`activation.lut_int8` checks its
arguments and calls it). `quantize_finite(x, scale, zp)`: `quant.quantize` of finite values (an
input being bound), without its float64 temporaries. Both give the same bits as their numpy forms
(tests/test_kernels_ops.py); imported only where values are computed (the compiler and timing-only
runs import no Numba).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _lut_bytes(x, table, out):
    """out[i] = table[x[i]] over flat uint8 bytes (table: 256 int8, indexed by the byte)."""
    for i in range(x.size):
        out[i] = table[x[i]]


def lut(x: np.ndarray, table: np.ndarray) -> np.ndarray:
    """int8 table[x + 128] of int8 x (table: 256 int8 entries), in x's shape."""
    by_byte = np.concatenate([table[128:], table[:128]])  # x >= 0 is byte x; x < 0 is byte x + 256
    flat = np.ascontiguousarray(x).reshape(-1).view(np.uint8)
    out = np.empty(flat.size, dtype=np.int8)
    _lut_bytes(flat, by_byte, out)
    return out.reshape(np.shape(x))


@njit(cache=True, nogil=True)
def _quantize(x, scale, zp, out):
    """out[i] = clamp(rint(float64(x[i]) / scale) + zp, -128, 127): round half to even in float64."""
    for i in range(x.size):
        q = np.rint(np.float64(x[i]) / scale) + zp
        out[i] = -128 if q < -128 else (127 if q > 127 else np.int8(q))


def quantize_finite(x: np.ndarray, scale: float, zp: int) -> np.ndarray:
    """`quant.quantize(x, scale, zp)` of a float array without NaN (the caller checks; +-inf clamps),
    in one pass."""
    from ..errors import UsageError

    if not scale > 0:
        raise UsageError(f"quantize: scale must be > 0, got {scale!r}")
    flat = np.ascontiguousarray(x).reshape(-1)
    if flat.dtype not in (np.float32, np.float64):  # float16, integers, booleans: exact in float64
        flat = flat.astype(np.float64)
    out = np.empty(flat.size, dtype=np.int8)
    _quantize(flat, float(scale), float(int(zp)), out)
    return out.reshape(np.shape(x))
