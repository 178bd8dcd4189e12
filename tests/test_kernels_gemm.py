"""The exact int8 sums (kernels.gemm): float32 BLAS over K chunks whose partial sums are exact integers,
the same for any chunking and any BLAS thread count."""

import numpy as np
from threadpoolctl import threadpool_limits

from npusim.kernels import conv2d_int8
from npusim.kernels.gemm import exact_gemm_f32, k_chunks, row_sums_abs
from npusim.kernels.reference import conv2d_int8_ref


def test_exact_gemm_equals_integer_sums_over_any_chunking():
    rng = np.random.default_rng(3)
    for m, k, n in [(1, 1, 1), (7, 37, 6), (9, 5000, 4), (130, 2100, 11)]:
        a = rng.integers(-128, 128, (m, k)).astype(np.float32)
        b = rng.integers(-128, 128, (k, n)).astype(np.float32)
        want = a.astype(np.int64) @ b.astype(np.int64)
        for chunk in (1024, 500, k):
            chunks = k_chunks(k, chunk)
            assert chunks[0][0] == 0 and chunks[-1][1] == k and all(k1 - k0 <= chunk for k0, k1 in chunks)
            out = np.empty((m, n), np.float32 if len(chunks) == 1 else np.float64)
            if len(chunks) == 1 and k * 128 * 128 > 1 << 24:
                continue  # one chunk of that many terms is not exact: not a use the caller makes
            exact_gemm_f32(a, b, chunk, out)
            np.testing.assert_array_equal(out.astype(np.int64), want, err_msg=str((m, k, n, chunk)))


def test_row_sums_abs():
    b = np.random.default_rng(1).integers(-128, 128, (5, 300), dtype=np.int8)
    s, mag = row_sums_abs(b)
    np.testing.assert_array_equal(s, b.astype(np.int64).sum(axis=1))
    np.testing.assert_array_equal(mag, np.abs(b.astype(np.int64)).sum(axis=1))


def test_conv_int8_same_for_any_thread_count_and_float_path_zero_point():
    """A conv under 2 BLAS threads and under 1; an in_zp outside int8; all equal the reference."""
    rng = np.random.default_rng(4)
    x = rng.integers(-128, 128, (20, 20, 24), dtype=np.int8)
    w = rng.integers(-128, 128, (10, 3, 3, 24), dtype=np.int8)
    args = dict(in_zp=-3, out_zp=2, pads=(1, 1, 1, 1))
    want = conv2d_int8_ref(x, w, 7, 1 << 30, 44, **args)
    with threadpool_limits(limits=2, user_api="blas"):
        np.testing.assert_array_equal(conv2d_int8(x, w, 7, 1 << 30, 44, **args), want)
    np.testing.assert_array_equal(conv2d_int8(x, w, 7, 1 << 30, 44, **args), want)
    args["in_zp"] = 200
    np.testing.assert_array_equal(conv2d_int8(x, w, 7, 1 << 30, 44, **args),
                                  conv2d_int8_ref(x, w, 7, 1 << 30, 44, **args))
