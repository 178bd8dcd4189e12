"""Exact integer sums of the int8 convolution from float32 BLAS: results that are the same on every machine.

`exact_gemm_f32(cols, wt, chunk, out)`: cols [M][K] @ wt [K][N] for float32 holding integers, over K
chunks short enough that every partial sum is an exact integer (below 2^24), so any summation order
(BLAS blocking, SIMD, FMA) gives the same integers; several chunks are summed in float64. `row_sums_abs`:
the per-output-channel sums of int8 weights and of their magnitudes, which size those chunks.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def row_sums_abs(b):
    """(sum, sum of absolute values) of each row of b (int8 [N][K]), int64."""
    out = np.zeros(b.shape[0], dtype=np.int64)
    mag = np.zeros(b.shape[0], dtype=np.int64)
    for n in range(b.shape[0]):
        for k0 in range(0, b.shape[1], 1 << 23):  # int32 sums of < 2^23 terms of |v| <= 128 are exact
            s = np.int32(0)
            m = np.int32(0)
            for k in range(k0, min(b.shape[1], k0 + (1 << 23))):
                v = np.int32(b[n, k])
                s += v
                m += abs(v)
            out[n] += s
            mag[n] += m
    return out, mag


def k_chunks(k_all: int, chunk: int) -> list[tuple[int, int]]:
    """[k0, k1) chunks of K, as few as `chunk` allows and of near-equal size (multiples of 16
    where possible: BLAS runs short tails slowly)."""
    n = -(-k_all // chunk)
    size = -(-k_all // n)
    if n > 1 and -(-size // 16) * 16 <= chunk:
        size = -(-size // 16) * 16
    return [(k0, min(k_all, k0 + size)) for k0 in range(0, k_all, size)]


def exact_gemm_f32(cols, wt, chunk: int, out, chunks=None) -> None:
    """out[:] = cols [M][K] @ wt [K][N] for float32 holding integers, exactly: float32 GEMMs over K
    chunks of at most `chunk` terms (each an exact integer, whatever the summation order); one
    chunk goes straight into `out` (float32), several are summed in float64 `out` (exact below 2^53).
    `chunks`: `k_chunks(K, chunk)`, when the caller kept it."""
    if chunks is None:
        chunks = k_chunks(cols.shape[1], chunk)
    if len(chunks) == 1:
        if out.flags.c_contiguous and out.dtype == np.float32:
            np.matmul(cols, wt, out=out)
        else:
            out[...] = cols @ wt
        return
    tmp = np.empty((cols.shape[0], wt.shape[1]), dtype=np.float32)
    for i, (k0, k1) in enumerate(chunks):
        np.matmul(cols[:, k0:k1], wt[k0:k1], out=tmp)
        if i:
            out += tmp
        else:
            out[...] = tmp
