"""Exact integer GEMMs of the int8 convolution: results that are the same on every machine.

`gemm_int8(a, b, out)`: out [M][N] int32 = a [M][K] int8 @ b [N][K].T, every sum taken modulo
2^32 (int32 wrap-around; the hardware's accumulator is int32, and a sum modulo 2^32 plus a bias,
wrapped, equals the wrapped exact sum plus that bias). Integer sums are exact in any order, so the
result does not depend on how the compiler vectorises the loops. A Numba kernel, register-blocked
4 x 4 (16 dot products share their loads), vectorised over K; it releases the GIL, so more than
one thread (`thread_limit(n)` around a run, as `RunOptions.threads` does) splits the rows.

`exact_gemm_f32(cols, wt, chunk, out)`: the same sums from float32 BLAS over K chunks short
enough that every partial sum is an exact integer (for operands outside int8, e.g. a zero point
beyond [-128, 127]).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

_MIN_ROWS_PER_THREAD = 64
_POOLS: dict[int, ThreadPoolExecutor] = {}  # one per thread count, kept for the process
os.register_at_fork(after_in_child=_POOLS.clear)  # a forked worker has none of the pools' threads
_THREADS = contextvars.ContextVar("npusim_gemm_threads", default=1)


@contextlib.contextmanager
def thread_limit(n: int):
    """Threads of `gemm_int8` within the block (1 by default; results never depend on it)."""
    token = _THREADS.set(max(1, int(n)))
    try:
        yield
    finally:
        _THREADS.reset(token)


@njit(cache=True, nogil=True, boundscheck=False)
def _gemm_i8(a, b, out):
    """out[m, n] = sum_k a[m, k] * b[n, k] modulo 2^32 (int32), 4 x 4 outputs at a time."""
    m_all, k_all = a.shape
    n_all = b.shape[0]
    m4 = m_all - m_all % 4
    n4 = n_all - n_all % 4
    for m0 in range(0, m4, 4):
        a0, a1, a2, a3 = a[m0], a[m0 + 1], a[m0 + 2], a[m0 + 3]
        for n0 in range(0, n4, 4):
            b0, b1, b2, b3 = b[n0], b[n0 + 1], b[n0 + 2], b[n0 + 3]
            c00 = c01 = c02 = c03 = c10 = c11 = c12 = c13 = np.int32(0)
            c20 = c21 = c22 = c23 = c30 = c31 = c32 = c33 = np.int32(0)
            for k in range(k_all):
                x0, x1, x2, x3 = np.int32(a0[k]), np.int32(a1[k]), np.int32(a2[k]), np.int32(a3[k])
                y0, y1, y2, y3 = np.int32(b0[k]), np.int32(b1[k]), np.int32(b2[k]), np.int32(b3[k])
                # np.int32(...) keeps the arithmetic in 32 bits (wrap-around), so it vectorises
                c00 = np.int32(c00 + np.int32(x0 * y0))
                c01 = np.int32(c01 + np.int32(x0 * y1))
                c02 = np.int32(c02 + np.int32(x0 * y2))
                c03 = np.int32(c03 + np.int32(x0 * y3))
                c10 = np.int32(c10 + np.int32(x1 * y0))
                c11 = np.int32(c11 + np.int32(x1 * y1))
                c12 = np.int32(c12 + np.int32(x1 * y2))
                c13 = np.int32(c13 + np.int32(x1 * y3))
                c20 = np.int32(c20 + np.int32(x2 * y0))
                c21 = np.int32(c21 + np.int32(x2 * y1))
                c22 = np.int32(c22 + np.int32(x2 * y2))
                c23 = np.int32(c23 + np.int32(x2 * y3))
                c30 = np.int32(c30 + np.int32(x3 * y0))
                c31 = np.int32(c31 + np.int32(x3 * y1))
                c32 = np.int32(c32 + np.int32(x3 * y2))
                c33 = np.int32(c33 + np.int32(x3 * y3))
            out[m0, n0], out[m0, n0 + 1], out[m0, n0 + 2], out[m0, n0 + 3] = c00, c01, c02, c03
            out[m0 + 1, n0], out[m0 + 1, n0 + 1], out[m0 + 1, n0 + 2], out[m0 + 1, n0 + 3] = c10, c11, c12, c13
            out[m0 + 2, n0], out[m0 + 2, n0 + 1], out[m0 + 2, n0 + 2], out[m0 + 2, n0 + 3] = c20, c21, c22, c23
            out[m0 + 3, n0], out[m0 + 3, n0 + 1], out[m0 + 3, n0 + 2], out[m0 + 3, n0 + 3] = c30, c31, c32, c33
    # the edges: rows past m4 (all columns), columns past n4 (rows before m4), one dot product each
    for m in range(m_all):
        for n in range(n4 if m < m4 else 0, n_all):
            c = np.int32(0)
            for k in range(k_all):
                c = np.int32(c + np.int32(np.int32(a[m, k]) * np.int32(b[n, k])))
            out[m, n] = c


@njit(cache=True, nogil=True)
def row_sums(b):
    """sum of each row of b (int8 [N][K]) as int64."""
    out = np.zeros(b.shape[0], dtype=np.int64)
    for n in range(b.shape[0]):
        s = np.int64(0)
        for k in range(b.shape[1]):
            s += b[n, k]
        out[n] = s
    return out


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


def gemm_int8(a: np.ndarray, b: np.ndarray, out: np.ndarray, threads: int | None = None) -> None:
    """out [M][N] int32 = a [M][K] @ b [N][K].T modulo 2^32 (module doc); `threads` (default: the
    `thread_limit`) split the rows."""
    m = a.shape[0]
    threads = _THREADS.get() if threads is None else threads
    parts = max(1, min(int(threads), m // _MIN_ROWS_PER_THREAD))
    if parts == 1:
        _gemm_i8(a, b, out)
        return
    step = -(-m // parts)
    step += -step % 4  # whole 4-row blocks per thread
    pool = _POOLS.get(parts)
    if pool is None:
        pool = _POOLS[parts] = ThreadPoolExecutor(parts, thread_name_prefix="npusim-gemm")
    list(pool.map(lambda r: _gemm_i8(a[r:r + step], b, out[r:r + step]), range(0, m, step)))


def k_chunks(k_all: int, chunk: int) -> list[tuple[int, int]]:
    """[k0, k1) chunks of K, as few as `chunk` allows and of near-equal size (multiples of 16
    where possible: BLAS runs short tails slowly)."""
    n = -(-k_all // chunk)
    size = -(-k_all // n)
    if n > 1 and -(-size // 16) * 16 <= chunk:
        size = -(-size // 16) * 16
    return [(k0, min(k_all, k0 + size)) for k0 in range(0, k_all, size)]


def exact_gemm_f32(cols, wt, chunk: int, out) -> None:
    """out[:] = cols [M][K] @ wt [K][N] for float32 holding integers, exactly: float32 GEMMs over K
    chunks of at most `chunk` terms (each an exact integer, whatever the summation order); one
    chunk goes straight into `out` (float32), several are summed in float64 `out` (exact below 2^53)."""
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
