"""The exact int8 GEMM (kernels.gemm): int32 sums modulo 2^32, any shape, any thread count."""

import numpy as np

from npusim.kernels import conv2d_int8
from npusim.kernels.gemm import gemm_int8, row_sums, thread_limit
from npusim.kernels.reference import conv2d_int8_ref


def _wrapped(a, b):
    exact = a.astype(np.int64) @ b.astype(np.int64).T
    return (((exact + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)).astype(np.int32)


def test_gemm_int8_edges_and_threads():
    rng = np.random.default_rng(3)
    for m, k, n in [(1, 1, 1), (7, 37, 6), (9, 5, 4), (130, 64, 11), (4, 300, 8)]:
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
        b = rng.integers(-128, 128, (n, k), dtype=np.int8)
        for threads in (1, 2):
            out = np.full((m, n), 99, dtype=np.int32)
            gemm_int8(a, b, out, threads)
            np.testing.assert_array_equal(out, _wrapped(a, b), err_msg=str((m, k, n, threads)))
        np.testing.assert_array_equal(row_sums(b), b.astype(np.int64).sum(axis=1))


def test_gemm_int8_wraps_like_an_int32_accumulator():
    k = (1 << 17) + 3  # 16384 * k > 2^31: the sums leave the int32 range
    a = np.full((5, k), -128, dtype=np.int8)
    b = np.full((5, k), -128, dtype=np.int8)
    b[2] = 127
    out = np.empty((5, 5), dtype=np.int32)
    gemm_int8(a, b, out)
    np.testing.assert_array_equal(out, _wrapped(a, b))
    assert out[0, 0] < 0  # 16384 * k > 2^31 - 1 wraps negative


def test_conv_int8_same_for_any_thread_count_and_float_path_zero_point():
    """A big enough conv to split its rows over threads; an in_zp outside int8 takes the chunked
    float32 path; both equal the reference."""
    rng = np.random.default_rng(4)
    x = rng.integers(-128, 128, (20, 20, 24), dtype=np.int8)
    w = rng.integers(-128, 128, (10, 3, 3, 24), dtype=np.int8)
    args = dict(in_zp=-3, out_zp=2, pads=(1, 1, 1, 1))
    want = conv2d_int8_ref(x, w, 7, 1 << 30, 44, **args)
    with thread_limit(2):
        np.testing.assert_array_equal(conv2d_int8(x, w, 7, 1 << 30, 44, **args), want)
    np.testing.assert_array_equal(conv2d_int8(x, w, 7, 1 << 30, 44, **args), want)
    args["in_zp"] = 200
    np.testing.assert_array_equal(conv2d_int8(x, w, 7, 1 << 30, 44, **args),
                                  conv2d_int8_ref(x, w, 7, 1 << 30, 44, **args))


def test_a_forked_process_runs_a_threaded_gemm():
    """Dask's local workers are forked from the client: the client's GEMM thread pools, whose threads a
    child does not inherit, must not be reused there (the child's threaded GEMM would wait forever)."""
    import multiprocessing as mp
    import sys

    import pytest

    if not sys.platform.startswith("linux"):
        pytest.skip("fork is used on Linux only")
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (256, 32), dtype=np.int8)
    b = rng.integers(-128, 128, (8, 32), dtype=np.int8)
    out = np.empty((256, 8), dtype=np.int32)
    gemm_int8(a, b, out, 2)  # this process now holds a 2-thread pool
    with mp.get_context("fork").Pool(1) as pool:
        got = pool.apply_async(_threaded_gemm, (a, b)).get(timeout=60)
    np.testing.assert_array_equal(got, _wrapped(a, b))


def _threaded_gemm(a, b):
    out = np.empty((a.shape[0], b.shape[0]), dtype=np.int32)
    gemm_int8(a, b, out, 2)
    return out
