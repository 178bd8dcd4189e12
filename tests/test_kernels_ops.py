"""Pooling, resize, eltwise, activation and host kernels: fast == reference, float vs numpy/ORT."""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from npusim.errors import UsageError
from npusim.kernels import (act_float, avgpool_float, avgpool_int8, concat, dequantize, eltwise_float,
                            eltwise_int8, global_avg_float, global_avg_int8, lut_int8, make_lut, maxpool,
                            quantize, quantize_multiplier, resize)
from npusim.kernels import reference as R


def _ort(node, x_nchw, inits=(), opset=17):
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_nchw.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x_nchw})[0][0].transpose(1, 2, 0)


def _nchw(x):
    return np.ascontiguousarray(x.astype(np.float32).transpose(2, 0, 1)[None])


def _pool_case(rng):
    k = (int(rng.integers(1, 5)), int(rng.integers(1, 5)))
    s = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    pads = (int(rng.integers(0, k[0])), int(rng.integers(0, k[1])), int(rng.integers(0, k[0])),
            int(rng.integers(0, k[1])))
    shape = (int(rng.integers(k[0], 10)), int(rng.integers(k[1], 10)), int(rng.integers(1, 6)))
    return k, s, pads, shape


# ---------------------------------------------------------------- pooling


def test_pool_int8_matches_reference():
    rng = np.random.default_rng(20)
    for _ in range(30):
        k, s, pads, shape = _pool_case(rng)
        x = rng.integers(-128, 128, shape, dtype=np.int8)
        np.testing.assert_array_equal(maxpool(x, k, s, pads), R.maxpool_ref(x, k, s, pads))
        inc = bool(rng.integers(0, 2))
        m, sh = quantize_multiplier(rng.uniform(0.5, 2.0))
        rounding = ("half_up", "half_away")[int(rng.integers(0, 2))]
        args = (k, s, pads, inc, int(rng.integers(-10, 10)), int(rng.integers(-10, 10)), m, sh, rounding)
        got = avgpool_int8(x, *args)
        np.testing.assert_array_equal(got, R.avgpool_int8_ref(x, *args))
    m, sh = quantize_multiplier(0.7)
    np.testing.assert_array_equal(global_avg_int8(x, 3, -2, m, sh), R.global_avg_int8_ref(x, 3, -2, m, sh))
    for zp in (-128, 5):
        np.testing.assert_array_equal(global_avg_int8(x, zp, zp, 1 << 20, 20, "half_away"),
                                      R.global_avg_int8_ref(x, zp, zp, 1 << 20, 20, "half_away"))
    assert global_avg_int8(x, 3, -2, m, sh).shape == (1, 1, x.shape[2])


def test_avg_int8_rounding_half_up_and_huge_shift():
    x = np.array([[[1], [2]]], dtype=np.int8)  # mean 1.5 -> 2; negative -1.5 -> -1
    assert avgpool_int8(x, (1, 2), 1, (0, 0, 0, 0), True, 0, 0, 1, 0)[0, 0, 0] == 2
    assert avgpool_int8(-x, (1, 2), 1, (0, 0, 0, 0), True, 0, 0, 1, 0)[0, 0, 0] == -1
    # mult/shift large enough to leave int64: falls back to exact Python ints
    got = global_avg_int8(np.full((4, 4, 2), 100, np.int8), 0, 0, 2**32 - 1, 63)
    np.testing.assert_array_equal(got, R.global_avg_int8_ref(np.full((4, 4, 2), 100, np.int8), 0, 0, 2**32 - 1, 63))
    got = global_avg_int8(np.full((4, 4, 2), 100, np.int8), 0, 0, 2**32 - 1, 31)
    assert got[0, 0, 0] == 127  # 100 * (2^32-1) / 2^31 ~ 200 -> clamps
    for rounding in ("half_up", "half_away"):  # the exact fallback rounds as the int64 path
        x = np.array([[[-3], [-2]]], dtype=np.int8)
        big = avgpool_int8(x, (1, 2), 1, (0, 0, 0, 0), True, 0, 0, 1 << 62, 62, rounding)[0, 0, 0]
        assert big == avgpool_int8(x, (1, 2), 1, (0, 0, 0, 0), True, 0, 0, 1, 0, rounding)[0, 0, 0]


def test_avg_int8_rounding_half_away_rounds_the_value_with_its_zero_point():
    """half_away (TFLite's AVERAGE_POOL_2D): ties of out_zp + mean go away from zero, so with zero point -128 a
    mean of the raw values -100.5 gives -101 where half_up gives -100."""
    x = np.array([[[-100], [-101]]], dtype=np.int8)
    args = ((1, 2), 1, (0, 0, 0, 0), True, -128, -128, 1 << 20, 20)
    assert avgpool_int8(x, *args, "half_up")[0, 0, 0] == -100
    assert avgpool_int8(x, *args, "half_away")[0, 0, 0] == -101
    assert avgpool_int8(-x - 1, *args, "half_away")[0, 0, 0] == 100  # 99.5 -> 100 either way
    with pytest.raises(UsageError, match="rounding"):
        avgpool_int8(x, *args, "half_even")


def test_pool_float_matches_reference_and_onnxruntime():
    rng = np.random.default_rng(21)
    for i in range(12):
        k, s, pads, shape = _pool_case(rng)
        x = rng.standard_normal(shape).astype(np.float32 if i % 2 else np.float16)
        np.testing.assert_array_equal(maxpool(x, k, s, pads), R.maxpool_ref(x, k, s, pads))
        inc = bool(i % 3 == 0)
        got = avgpool_float(x, k, s, pads, inc)
        assert got.dtype == x.dtype
        np.testing.assert_allclose(got.astype(np.float64), R.avgpool_float_ref(x, k, s, pads, inc).astype(np.float64),
                                   rtol=2e-3, atol=2e-3)
        if x.dtype == np.float32:
            onnx_pads = [pads[0], pads[1], pads[2], pads[3]]
            mp = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=list(k), strides=list(s), pads=onnx_pads)
            np.testing.assert_array_equal(maxpool(x, k, s, pads), _ort(mp, _nchw(x)))
            ap = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=list(k), strides=list(s),
                                  pads=onnx_pads, count_include_pad=int(inc))
            np.testing.assert_allclose(got, _ort(ap, _nchw(x)), rtol=1e-5, atol=1e-6)
    x = rng.standard_normal((5, 7, 3)).astype(np.float32)
    np.testing.assert_allclose(global_avg_float(x)[0, 0], x.mean(axis=(0, 1)), rtol=1e-6)


# ---------------------------------------------------------------- resize


@pytest.mark.parametrize("coord", ["asymmetric", "half_pixel", "align_corners"])
@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_resize_matches_reference_and_onnxruntime(mode, coord):
    rng = np.random.default_rng(22)
    for h, w, oh, ow in [(3, 4, 6, 8), (5, 5, 3, 7), (4, 3, 9, 5), (2, 2, 1, 1), (1, 3, 2, 5)]:
        xi = rng.integers(-128, 128, (h, w, 3), dtype=np.int8)
        np.testing.assert_array_equal(resize(xi, oh, ow, mode, coord), R.resize_ref(xi, oh, ow, mode, coord))
        xf = rng.standard_normal((h, w, 3)).astype(np.float32)
        got = resize(xf, oh, ow, mode, coord)
        np.testing.assert_allclose(got, R.resize_ref(xf, oh, ow, mode, coord), rtol=1e-5, atol=1e-5)
        sizes = numpy_helper.from_array(np.array([1, 3, oh, ow], dtype=np.int64), "sizes")
        node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="nearest" if mode == "nearest" else "linear",
                                coordinate_transformation_mode=coord, nearest_mode="floor")
        np.testing.assert_allclose(got, _ort(node, _nchw(xf), [sizes]), rtol=1e-5, atol=1e-5)
        # int8 bilinear = float result rounded, up to the 11-bit coordinate error (255 / 2^11)
        fi = resize(xi.astype(np.float32), oh, ow, mode, coord)
        assert np.abs(resize(xi, oh, ow, mode, coord).astype(np.float32) - fi).max() <= 0.5 + 255 / 2048


@pytest.mark.parametrize("coord", ["asymmetric", "half_pixel", "align_corners"])
def test_int8_bilinear_kernel_matches_reference_over_its_row_cache(coord):
    """`resample_int8._bilinear_int8` (two source rows interpolated along x kept while output rows read them):
    up- and downsampling, 1 to 3 output rows per source row and source rows skipped, wide and narrow
    channels, equal the slow reference bit for bit."""
    rng = np.random.default_rng(23)
    for h, w, c, oh, ow in [(6, 6, 64, 12, 12), (12, 12, 32, 24, 24), (7, 5, 24, 20, 9), (9, 8, 5, 4, 3),
                            (13, 3, 1, 5, 7), (3, 7, 17, 10, 2), (2, 9, 3, 7, 1), (1, 4, 2, 3, 8)]:
        x = rng.integers(-128, 128, (h, w, c), dtype=np.int8)
        np.testing.assert_array_equal(resize(x, oh, ow, "bilinear", coord), R.resize_ref(x, oh, ow, "bilinear", coord),
                                      err_msg=f"{h}x{w}x{c} -> {oh}x{ow}")


def test_resize_fp16_and_errors():
    x = np.arange(12, dtype=np.float16).reshape(2, 2, 3)
    y = resize(x, 4, 4, "bilinear", "align_corners")
    assert y.dtype == np.float16 and y[0, 0, 0] == 0 and y[-1, -1, -1] == 11
    with pytest.raises(UsageError, match="mode"):
        resize(x, 4, 4, "cubic")
    with pytest.raises(UsageError, match="coordinate"):
        resize(x, 4, 4, "nearest", "tf_crop")


# ---------------------------------------------------------------- eltwise


@pytest.mark.parametrize("op", ["add", "mul", "add_const", "mul_const", "copy", "sub", "max", "min", "prelu"])
def test_eltwise_int8_matches_reference(op):
    rng = np.random.default_rng(23)
    for per_channel in (False, True):
        c = 5
        n = c if per_channel else 1
        a = rng.integers(-128, 128, (3, 4, c), dtype=np.int8)
        b = rng.integers(-128, 128, (3, 4, c), dtype=np.int8)
        ma = rng.integers(2**29, 2**30, n)
        mb = rng.integers(2**29, 2**30, n) * (-1 if op == "sub" else 1)
        sh = rng.integers(30, 33, n) + (6 if op in ("mul", "mul_const") else 0)
        bc = rng.choice([-1, 1], n) * rng.integers(60, 100, n)
        kw = dict(a_zp=int(rng.integers(-5, 5)), b_zp=int(rng.integers(-5, 5)), out_zp=3, lo=-100, hi=120)
        got = eltwise_int8(op, a, b, ma, mb, sh, bc, **kw)
        np.testing.assert_array_equal(got, R.eltwise_int8_ref(op, a, b, ma, mb, sh, bc, **kw))
        if op != "copy":
            assert got.min() >= -100 and got.max() <= 120 and len(np.unique(got)) > 20


@pytest.mark.parametrize("op", ["add", "mul_channel", "max", "prelu"])
def test_eltwise_int8_zero_shift_and_channel_broadcast(op):
    """shift 0 (no rounding) next to per-channel shifts, and mul_channel's [1][1][C] b."""
    rng = np.random.default_rng(25)
    a = rng.integers(-128, 128, (4, 3, 6), dtype=np.int8)
    b = rng.integers(-128, 128, (1, 1, 6) if op == "mul_channel" else (4, 3, 6), dtype=np.int8)
    ma, mb = rng.integers(-3, 4, 6), rng.integers(-3, 4, 6)
    sh = np.array([0, 0, 1, 2, 0, 3])
    kw = dict(a_zp=-7, b_zp=4, out_zp=-2, lo=-128, hi=127)
    got = eltwise_int8(op, a, b, ma, mb, sh, 0, **kw)
    np.testing.assert_array_equal(got, R.eltwise_int8_ref(op, a, b, ma, mb, sh, 0, **kw))


@pytest.mark.parametrize("op", ["add", "mul", "sub", "max", "min"])
def test_eltwise_int8_planes_is_pack_of_eltwise_int8(op):
    """Two maps held as blocked16 planes (`layout.Planes`: whole, partial and one plane; per-tensor
    and per-channel parameters; multipliers past the int64 bound) give the stream bytes of
    `layout.pack(eltwise_int8(...))`, padding channels 0."""
    from npusim.kernels import layout as L
    from npusim.kernels.eltwise import eltwise_int8_planes

    rng = np.random.default_rng(31)
    for c in (5, 16, 37, 64):
        for per_channel, big in ((False, False), (True, False), (True, True)):
            n = c if per_channel else 1
            a = rng.integers(-128, 128, (3, 4, c), dtype=np.int8)
            b = rng.integers(-128, 128, (3, 4, c), dtype=np.int8)
            ma = rng.integers(2**29, 2**30, n) * (2**33 if big else 1)
            mb = rng.integers(2**29, 2**30, n) * (-1 if op == "sub" else 1)
            sh = rng.integers(30, 33, n) + (6 if op == "mul" else 0) + (33 if big else 0)
            sh = np.minimum(sh, 63)
            kw = dict(a_zp=int(rng.integers(-5, 5)), b_zp=int(rng.integers(-5, 5)), out_zp=3, lo=-100, hi=120)
            pa, pb = (L.planes_view(L.pack(v, "blocked16"), "blocked16", 3, 4, c, "int8") for v in (a, b))
            got = eltwise_int8_planes(op, pa, pb, ma, mb, sh, **kw)
            want = L.pack(eltwise_int8(op, a, b, ma, mb, sh, 0, **kw), "blocked16")
            np.testing.assert_array_equal(got, want, err_msg=f"c={c} per_channel={per_channel} big={big}")
    with pytest.raises(UsageError, match="shift"):
        eltwise_int8_planes(op, pa, pb, 1, 1, 64)


def test_eltwise_int8_exact_when_int64_would_overflow():
    a = np.array([[[127, -128]]], dtype=np.int8)
    args = ("mul_const", a, None, 2**31 - 1, 0, 63, -(2**31))
    got = eltwise_int8(*args, a_zp=-128, b_zp=0, out_zp=0)
    np.testing.assert_array_equal(got, R.eltwise_int8_ref(*args, a_zp=-128, b_zp=0, out_zp=0))
    assert got[0, 0, 0] == -127 and got[0, 0, 1] == 0  # 255 * -2^31 * (2^31-1) / 2^63 ~ -127.5 + tiny


def test_eltwise_float_and_concat():
    rng = np.random.default_rng(24)
    for dt in (np.float16, np.float32):
        a = rng.standard_normal((2, 3, 4)).astype(dt)
        b = rng.standard_normal((2, 3, 4)).astype(dt)
        bc = rng.standard_normal(4).astype(np.float32)
        np.testing.assert_array_equal(eltwise_float("add", a, b), (a.astype(np.float64) + b).astype(dt))
        np.testing.assert_array_equal(eltwise_float("mul", a, b), (a.astype(np.float64) * b).astype(dt))
        np.testing.assert_allclose(eltwise_float("add_const", a, bconst=bc), a + bc.astype(dt), rtol=1e-3)
        np.testing.assert_allclose(eltwise_float("mul_const", a, bconst=bc, lo=-0.5, hi=0.5),
                                   np.clip(a.astype(np.float32) * bc, -0.5, 0.5), rtol=1e-3)
        assert eltwise_float("add", a, b).dtype == dt
    c = concat(a, b[:, :, :1])
    assert c.shape == (2, 3, 5) and (c[:, :, 4] == b[:, :, 0]).all()
    with pytest.raises(UsageError, match="concat"):
        concat(a, b[:1])
    with pytest.raises(UsageError, match="needs an int8 b"):
        eltwise_int8("add", a.astype(np.int8), None)
    with pytest.raises(UsageError, match="unknown op"):
        eltwise_float("div", a, b)


# ---------------------------------------------------------------- activation and host


def _np_act(func, x, alpha=0.01, lo=None, hi=None):
    x = x.astype(np.float64)
    sig = 1 / (1 + np.exp(-x))
    return {"relu": np.maximum(x, 0), "clip": np.clip(x, lo, hi), "leaky": np.where(x >= 0, x, alpha * x),
            "sigmoid": sig, "silu": x * sig, "hardswish": x * np.clip(x / 6 + 0.5, 0, 1), "tanh": np.tanh(x),
            "hardsigmoid": np.clip(alpha * x + lo, 0, 1), "elu": np.where(x >= 0, x, alpha * np.expm1(x)),
            "softplus": np.log1p(np.exp(x)), "mish": x * np.tanh(np.log1p(np.exp(x))),
            "gelu": x * (1 + np.vectorize(math.erf)(x / np.sqrt(2))) / 2,
            "gelu_tanh": x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))) / 2}[func]


@pytest.mark.parametrize("func", ["relu", "clip", "leaky", "sigmoid", "silu", "hardswish", "tanh", "hardsigmoid",
                                  "elu", "softplus", "gelu", "gelu_tanh", "mish"])
def test_act_float_and_lut(func):
    rng = np.random.default_rng(25)
    x = (rng.standard_normal((3, 4, 6)) * 4).astype(np.float32)
    want = _np_act(func, x, 0.1, 0.0, 6.0)
    np.testing.assert_allclose(act_float(func, x, 0.1, 0.0, 6.0), want, rtol=1e-5, atol=1e-6)
    h = act_float(func, x.astype(np.float16), 0.1, 0.0, 6.0)
    assert h.dtype == np.float16
    np.testing.assert_allclose(h.astype(np.float64), want, rtol=2e-3, atol=3e-3)
    lut = make_lut(func, 0.05, 3, 0.04, -10, alpha=0.1, lo=0.0, hi=6.0)
    assert lut.dtype == np.int8 and lut.shape == (256,)
    np.testing.assert_array_equal(lut, R.make_lut_ref(func, 0.05, 3, 0.04, -10, 0.1, 0.0, 6.0))
    q = rng.integers(-128, 128, (3, 4, 6), dtype=np.int8)
    y = lut_int8(q, lut)
    np.testing.assert_array_equal(y, lut[q.astype(np.int32) + 128])
    np.testing.assert_array_equal(lut_int8(q, lut.view(np.uint8)), y)
    # the LUT is the quantized float function of the dequantized input
    ref = quantize(_np_act(func, dequantize(q, 0.05, 3), 0.1, 0.0, 6.0), 0.04, -10)
    assert np.abs(y.astype(np.int32) - ref).max() <= 1


def test_kernel_argument_errors():
    rng = np.random.default_rng(26)
    x = (rng.standard_normal((3, 10)) * 3).astype(np.float32)
    q = rng.integers(-128, 128, (3, 10), dtype=np.int8)
    with pytest.raises(UsageError, match="lut"):
        lut_int8(q, np.zeros(10, np.int8))
    with pytest.raises(UsageError, match="unknown function"):
        act_float("swish2", x)


def test_remaining_kernels_against_references():
    rng = np.random.default_rng(27)
    q = rng.integers(-128, 128, (2, 3, 4), dtype=np.int8)
    lut = rng.integers(0, 256, 256).astype(np.uint8)
    np.testing.assert_array_equal(lut_int8(q, lut), R.lut_int8_ref(q, lut))
    for dt in (np.float16, np.float32):
        a = rng.standard_normal((2, 3, 4)).astype(dt)
        b = rng.standard_normal((2, 3, 4)).astype(dt)
        np.testing.assert_allclose(global_avg_float(a).astype(np.float64),
                                   R.global_avg_float_ref(a).astype(np.float64), rtol=1e-3, atol=1e-3)
        for op in ("add", "mul", "add_const", "mul_const", "copy", "sub", "max", "min", "prelu"):
            bc = rng.standard_normal(4).astype(dt).astype(np.float32)
            np.testing.assert_array_equal(eltwise_float(op, a, b, bc, lo=-1.0, hi=1.5),
                                          R.eltwise_float_ref(op, a, b, bc, lo=-1.0, hi=1.5))
    # fp16 overflow saturates at 65504 (ASSUMED, kernels/quant.store_float), without warnings
    big = np.full((1, 1, 1), 60000, np.float16)
    assert (eltwise_float("add", big, big) == 65504).all()


def test_lut_int8_reads_every_byte_and_keeps_the_shape():
    """The one-pass LUT equals table[x + 128] for all 256 values, in any shape and memory order."""
    table = np.random.default_rng(3).integers(-128, 128, 256).astype(np.int8)
    every = np.arange(-128, 128, dtype=np.int8)
    np.testing.assert_array_equal(lut_int8(every, table), table)
    x = np.random.default_rng(4).integers(-128, 128, (3, 5, 7)).astype(np.int8).transpose(2, 0, 1)
    y = lut_int8(x, table)
    assert y.shape == x.shape and y.dtype == np.int8
    np.testing.assert_array_equal(y, table[x.astype(np.int32) + 128])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.bool_])
def test_quantize_finite_has_the_bits_of_quantize(dtype):
    """Ties round to even, values past the int8 range and +-inf clamp, as `quant.quantize` does."""
    from npusim.kernels.int8_loops import quantize_finite
    from npusim.kernels.quant import quantize

    rng = np.random.default_rng(5)
    scale, zp = 0.25, -3
    ties = (np.arange(-600, 600) + 0.5) * scale  # x / scale lands exactly on .5
    x = np.concatenate([ties, rng.standard_normal(3000) * 50, [np.inf, -np.inf, 0.0, -0.0]])
    if dtype is np.int32:
        x = np.clip(x, -1000, 1000)  # integers: no inf
    x = (x > 0 if dtype is np.bool_ else x.astype(dtype)).reshape(-1, 2)
    got = quantize_finite(x, scale, zp)
    assert got.shape == x.shape and got.dtype == np.int8
    np.testing.assert_array_equal(got, quantize(np.asarray(x, dtype=np.float64), scale, zp))
    with pytest.raises(UsageError, match="scale"):
        quantize_finite(x, 0.0, 0)


def test_int8_maxpool_on_blocked16_planes_equals_the_reference_packed():
    """`pool.maxpool_planes` on the planes of a blocked16 stream (a partial last plane, any window,
    stride and padding) is the stream of `reference.maxpool_ref`, and of `maxpool` on [H][W][C] where
    padding wider than the window gives windows without a valid cell (the reference has no value for them)."""
    from npusim.kernels import layout as L
    from npusim.kernels.pool import maxpool_planes

    rng = np.random.default_rng(11)
    for _ in range(40):
        h, w, c = int(rng.integers(1, 12)), int(rng.integers(1, 12)), int(rng.integers(1, 40))
        k = (int(rng.integers(1, 5)), int(rng.integers(1, 5)))
        s = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        pads = tuple(int(v) for v in rng.integers(0, 4, 4))
        if (h + pads[0] + pads[2] - k[0]) < 0 or (w + pads[1] + pads[3] - k[1]) < 0:
            continue
        x = rng.integers(-128, 128, (h, w, c), dtype=np.int8)
        stream = L.pack(x, "blocked16")
        got = maxpool_planes(L.planes_view(stream, "blocked16", h, w, c, "int8"), k, s, pads)
        want = maxpool(x, k, s, pads) if max(pads[0], pads[2]) >= k[0] or max(pads[1], pads[3]) >= k[1] \
            else R.maxpool_ref(x, k, s, pads)
        np.testing.assert_array_equal(got.view(np.uint8).reshape(-1), L.pack(want, "blocked16"))
        np.testing.assert_array_equal(stream, L.pack(x, "blocked16"))  # the input planes are never written


def test_eltwise_add_f64_lanes_equal_the_int64_loop():
    """`eltwise_i64._add_f64` (add / sub on planes within 2^52) gives `_eltwise_i64`'s bits: multipliers up to
    the bound, every shift 0..63 (the ties of the rounding, 53 and past it), zero points of both signs, a clamp
    with lo > hi; `Int8PlanesEltwise` takes it within the bound and the int64 loop past it."""
    from npusim.kernels import layout as L
    from npusim.kernels.eltwise import Int8PlanesEltwise
    from npusim.kernels.eltwise_i64 import _add_f64, _eltwise_i64

    rng = np.random.default_rng(31)
    a = rng.integers(-128, 128, (300, 16), dtype=np.int8)
    b = rng.integers(-128, 128, (300, 16), dtype=np.int8)
    a[:2], b[:2] = -128, 127  # the extremes of A and B
    for shift in range(64):
        for a_zp, b_zp in ((0, 0), (-128, 127), (5, -3), (1000, -999)):
            room = (2**52 - 1) // (2 * (128 + max(abs(a_zp), abs(b_zp))))
            spread = min(room, max(1, 2**shift // 64))  # outputs spread over int8
            ma = rng.integers(-spread, spread + 1, 16)
            mb = rng.integers(-spread, spread + 1, 16)
            ma[0], mb[0] = room, room  # the largest sums
            ma[1], mb[1] = min(room, 2**max(0, shift - 1)), 0  # t = A * 2^(s-1): a tie for every odd A
            ma[2], mb[2] = -ma[1], ma[1]
            for out_zp, lo, hi in ((0, -128, 127), (7, -100, 90), (-3, 20, -20)):
                want = np.empty_like(a)
                _eltwise_i64(0, a, b, ma, mb, np.full(16, shift), np.zeros(16, np.int64), a_zp, b_zp, out_zp, lo, hi,
                             want)
                got = np.empty_like(a)
                _add_f64(a, b, ma.astype(np.float64), mb.astype(np.float64), np.full(16, 2.0 ** -shift), a_zp, b_zp,
                         out_zp, lo, hi, got)
                np.testing.assert_array_equal(got, want, err_msg=f"shift {shift} zps {a_zp} {b_zp} clamp {lo} {hi}")
    planes = (2, 5, 6, 16)
    pa = L.planes_view(rng.integers(0, 256, 2 * 5 * 6 * 16, dtype=np.uint8), "blocked16", 5, 6, 32, "int8")
    pb = L.planes_view(rng.integers(0, 256, 2 * 5 * 6 * 16, dtype=np.uint8), "blocked16", 5, 6, 32, "int8")
    for m, f64 in ((1 << 30, True), (1 << 45, False)):  # within the bound, past it
        for per_channel in (False, True):
            mm = np.full(32, m) if per_channel else m
            k = Int8PlanesEltwise("add", planes, 32, mm, -mm // 3, 40, a_zp=3, b_zp=-2, out_zp=1)
            assert k.f64 is f64
            want = L.pack(eltwise_int8("add", pa.hwc(), pb.hwc(), mm, -mm // 3, 40, a_zp=3, b_zp=-2, out_zp=1),
                          "blocked16")
            np.testing.assert_array_equal(k.run(pa, pb), want)
