"""Layout pack/unpack round trips and the rounding edge cases of the quantization helpers."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from npusim.errors import NpusimError, UsageError
from npusim.kernels import (dequantize, from_fp16_bits, fp16_bits, hwc_to_nchw, int8_bits, int8_from_bits,
                            nchw_to_hwc, pack, pack_strided, quantize, quantize_multiplier, rshift_round,
                            unpack, unpack_strided)
from npusim.kernels.layout import PlanesReader, pack_strided_into, planes_view
from npusim.kernels.quant import round_half_up_div
from npusim.program.layouts import geometry

DTYPES = {"int8": np.int8, "fp16": np.float16, "fp32": np.float32}


def _rand(rng, shape, dtype):
    if dtype == "int8":
        return rng.integers(-128, 128, shape, dtype=np.int8)
    return rng.standard_normal(shape).astype(DTYPES[dtype])


@pytest.mark.parametrize("layout", ["linear", "image", "blocked16"])
@pytest.mark.parametrize("dtype", ["int8", "fp16", "fp32"])
def test_pack_unpack_round_trip(layout, dtype):
    rng = np.random.default_rng(1)
    for h, w, c in [(1, 1, 7), (3, 5, 3), (4, 2, 16), (2, 3, 33)]:
        x = _rand(rng, (h, w, c), dtype)
        s = pack(x, layout)
        assert s.dtype == np.uint8
        g = geometry(h, w, c, np.dtype(DTYPES[dtype]).itemsize, layout)
        assert s.size == g.stream_bytes
        np.testing.assert_array_equal(unpack(s, layout, h, w, c, dtype), x)


def test_blocked16_order_and_zero_padding():
    x = np.arange(2 * 3 * 20, dtype=np.int32).reshape(2, 3, 20).astype(np.int8)
    s = pack(x, "blocked16").view(np.int8).reshape(2, 2, 3, 16)  # [plane][h][w][16]
    np.testing.assert_array_equal(s[0], x[:, :, :16])
    np.testing.assert_array_equal(s[1, :, :, :4], x[:, :, 16:])
    assert not s[1, :, :, 4:].any()
    # image and linear are dense HWC, little-endian elements
    f = np.array([[[1.0, -2.0]]], dtype=np.float16)
    assert pack(f, "image").tobytes() == f.astype("<f2").tobytes()


def test_unpack_ignores_garbage_in_padding_channels():
    x = np.ones((2, 2, 5), dtype=np.int8)
    s = pack(x, "blocked16")
    s[5::16] = 99  # channel 5 of each pixel is padding
    np.testing.assert_array_equal(unpack(s, "blocked16", 2, 2, 5, "int8"), x)


def test_unpack_size_mismatch_raises():
    with pytest.raises(UsageError, match="needs 64 stream bytes"):
        unpack(np.zeros(63, np.uint8), "blocked16", 2, 2, 5, "int8")
    with pytest.raises(UsageError, match="layout"):
        pack(np.zeros((1, 1, 1), np.int8), "tiled")
    with pytest.raises(UsageError, match="dtype"):
        unpack(np.zeros(4, np.uint8), "linear", 1, 1, 4, "float64")
    with pytest.raises(UsageError, match="dtype"):
        pack(np.zeros((1, 1, 1), np.float64), "linear")


@pytest.mark.parametrize("layout,ls,ps", [("image", 24, 0), ("image", 16, 0), ("blocked16", 128, 512),
                                          ("blocked16", 96, 300), ("linear", 0, 0)])
@pytest.mark.parametrize("dtype", ["int8", "fp16"])
def test_strided_round_trip_and_offsets(layout, ls, ps, dtype):
    rng = np.random.default_rng(2)
    c = 3 if layout == "image" else 20
    h, w = 3, 2
    x = _rand(rng, (h, w, c), dtype)
    es = np.dtype(DTYPES[dtype]).itemsize
    buf = pack_strided(x, layout, ls, ps, size=4096)
    assert len(buf) == 4096
    np.testing.assert_array_equal(unpack_strided(buf, layout, h, w, c, dtype, ls, ps), x)
    b = np.frombuffer(buf, np.uint8)
    dense = pack(x, layout)
    if layout == "blocked16":  # line 1 of plane 1 sits at ps + ls
        run = w * 16 * es
        np.testing.assert_array_equal(b[ps + ls:ps + ls + run], dense[(h + 1) * run:(h + 2) * run])
        assert not b[run:ls].any()  # the gap after line 0 is zero
    elif layout == "image":
        run = w * c * es
        np.testing.assert_array_equal(b[2 * ls:2 * ls + run], dense[2 * run:3 * run])
    else:
        np.testing.assert_array_equal(b[:dense.size], dense)


def test_strided_pack_of_any_view_places_each_line_of_the_dense_stream():
    """`pack_strided` writes the tensor straight into its strides, from a transposed view (as the
    runtime binds an NCHW input) or a contiguous array: the same bytes as the dense stream (`pack`)
    placed line by line at p * plane_stride + l * line_stride, zeros elsewhere."""
    rng = np.random.default_rng(7)
    for _ in range(30):
        layout = ["image", "blocked16", "linear"][int(rng.integers(0, 3))]
        dtype = ["int8", "fp16", "fp32"][int(rng.integers(0, 3))]
        h, w, c = (int(v) for v in rng.integers(1, 7, 3))
        if layout != "image":
            c = int(rng.integers(1, 40))
        es = np.dtype(DTYPES[dtype]).itemsize
        run = w * (16 if layout == "blocked16" else c) * es
        ls = run + int(rng.integers(0, 3)) * es * 8
        planes = -(-c // 16) if layout == "blocked16" else 1
        ps = (h - 1) * ls + run + int(rng.integers(0, 3)) * 64
        x = _rand(rng, (c, h, w), dtype)  # NCHW, viewed as [H][W][C]
        for hwc in (x.transpose(1, 2, 0), np.ascontiguousarray(x.transpose(1, 2, 0))):
            got = np.frombuffer(pack_strided(hwc, layout, ls, ps, size=planes * ps + 100), np.uint8)
            want = np.zeros(planes * ps + 100, np.uint8)
            dense = pack(np.ascontiguousarray(hwc), layout)
            if layout == "linear":
                want[:dense.size] = dense
            else:
                d = dense.reshape(planes, h, run)
                for p in range(planes):
                    for li in range(h):
                        want[p * ps + li * ls:p * ps + li * ls + run] = d[p, li]
            np.testing.assert_array_equal(got, want)


def test_pack_strided_into_a_dirty_view_gives_the_bytes_of_pack_strided():
    """`pack_strided_into` (the runtime lays inputs straight into memory with it) writes every byte of its
    buffer: the bytes `pack_strided` returns, whatever the buffer held before, and nothing around it."""
    rng = np.random.default_rng(11)
    for layout, (h, w, c), ls, ps in (("image", (3, 5, 3), 24, 0), ("blocked16", (4, 3, 20), 64, 320),
                                      ("linear", (2, 2, 7), 0, 0)):
        x = _rand(rng, (h, w, c), "int8")
        want = np.frombuffer(pack_strided(x, layout, ls, ps, size=700), np.uint8)
        mem = rng.integers(0, 256, 1000).astype(np.uint8)
        before = mem.copy()
        pack_strided_into(x.transpose(1, 0, 2).transpose(1, 0, 2), layout, ls, ps, mem[100:800])
        np.testing.assert_array_equal(mem[100:800], want)
        np.testing.assert_array_equal(mem[:100], before[:100])
        np.testing.assert_array_equal(mem[800:], before[800:])
    with pytest.raises(UsageError, match="cannot hold"):
        pack_strided_into(np.zeros((2, 2, 16), np.int8), "blocked16", 32, 64, np.zeros(63, np.uint8))


@pytest.mark.parametrize("dtype", ["int8", "fp16"])
def test_planes_reader_gives_what_planes_view_gives(dtype):
    """`PlanesReader` (a replay's kept conv input) equals `planes_view` on every kind of stream: flat, a
    strided view of memory, a non-contiguous one, bytes; and refuses a wrong size as it does."""
    rng = np.random.default_rng(3)
    es = np.dtype(DTYPES[dtype]).itemsize
    for layout, (h, w, c) in (("blocked16", (3, 4, 20)), ("image", (2, 3, 3)), ("linear", (1, 1, 9))):
        read = PlanesReader(layout, h, w, c, dtype)
        dense = pack(_rand(rng, (h, w, c), dtype), layout)
        planes, run = (-(-c // 16), w * 16 * es) if layout == "blocked16" else (1, h * w * c * es // h)
        rows = dense.size // run
        mem = np.zeros(rows * (run + 32), np.uint8)
        strided = np.ndarray((1, 1, rows, run), np.uint8, mem, 0, (0, 0, run + 32, 1))
        strided[...] = dense.reshape(1, 1, rows, run)
        gappy = np.zeros(2 * dense.size, np.uint8)
        gappy[::2] = dense
        for stream in (dense, strided, gappy[::2], dense.tobytes()):
            want = planes_view(stream, layout, h, w, c, dtype)
            got = read(stream)
            assert got.c == want.c and got.planes.dtype == want.planes.dtype
            np.testing.assert_array_equal(got.planes, want.planes)
            np.testing.assert_array_equal(got.hwc(), want.hwc())
        with pytest.raises(UsageError, match="stream bytes"):
            read(dense[:-1])


def test_strided_bad_strides_and_small_buffer():
    x = np.zeros((2, 2, 20), np.int8)
    with pytest.raises(UsageError, match="line stride 16 B is smaller than a line"):
        pack_strided(x, "blocked16", 16, 1024)
    with pytest.raises(UsageError, match="plane stride"):
        pack_strided(x, "blocked16", 32, 48)
    x = np.zeros((2, 2, 16), np.int8)
    with pytest.raises(UsageError, match="cannot hold"):
        pack_strided(x, "blocked16", 32, 64, size=63)
    with pytest.raises(UsageError, match="needs"):
        unpack_strided(b"\0" * 40, "blocked16", 2, 2, 16, "int8", 32, 64)


def test_nchw_hwc():
    x = np.arange(24).reshape(1, 2, 3, 4)
    y = nchw_to_hwc(x)
    assert y.shape == (3, 4, 2) and y[1, 2, 1] == x[0, 1, 1, 2]
    np.testing.assert_array_equal(hwc_to_nchw(y), x)
    with pytest.raises(UsageError, match="batch"):
        nchw_to_hwc(np.zeros((2, 1, 1, 1)))


# ---------------------------------------------------------------- quantization


def test_rshift_round_edges():
    assert rshift_round(5, 0) == 5
    assert rshift_round(-5, 0) == -5
    assert rshift_round(1, 1) == 1      # 0.5 -> 1 (half up)
    assert rshift_round(-1, 1) == 0     # -0.5 -> 0 (half up, toward +inf)
    assert rshift_round(3, 1) == 2      # 1.5 -> 2
    assert rshift_round(-3, 1) == -1    # -1.5 -> -1
    assert rshift_round(-6, 2) == -1    # -1.5 -> -1
    assert rshift_round(-7, 2) == -2    # -1.75 -> -2
    assert rshift_round(2**62, 63) == 1  # 0.5 -> 1, no overflow
    assert rshift_round(-(2**62), 63) == 0
    big = np.array([2**62 - 1, -(2**62), 2**62], dtype=np.int64)
    np.testing.assert_array_equal(rshift_round(big, 62), [1, -1, 1])
    np.testing.assert_array_equal(rshift_round(np.array([3, 3, 3]), np.array([0, 1, 2])), [3, 2, 1])
    with pytest.raises(UsageError):
        rshift_round(1, -1)


@given(st.integers(-(2**62), 2**62), st.integers(0, 63))
@settings(max_examples=300, deadline=None)
def test_rshift_round_matches_floor_formula(x, s):
    want = math.floor(Fraction(x, 2**s) + Fraction(1, 2))
    assert rshift_round(x, s) == want
    assert int(rshift_round(np.array([x], dtype=np.int64), s)[0]) == want


def test_round_half_up_div():
    assert round_half_up_div(5, 2) == 3 and round_half_up_div(-5, 2) == -2 and round_half_up_div(7, 3) == 2


@given(st.floats(min_value=2**-30, max_value=2**30, allow_nan=False))
@settings(max_examples=300, deadline=None)
def test_quantize_multiplier_range_and_accuracy(real):
    m, s = quantize_multiplier(real)
    assert 2**30 <= m < 2**31 and 0 <= s <= 63
    assert abs(m * 2.0**-s - real) <= real * 2**-30


def test_quantize_multiplier_edges():
    assert quantize_multiplier(0.0) == (0, 0)
    assert quantize_multiplier(1.0) == (2**30, 30)
    assert quantize_multiplier(0.5) == (2**30, 31)
    m, s = quantize_multiplier(1 - 2**-40)  # rounds up to 2^31 -> renormalised
    assert (m, s) == (2**30, 30)
    m, s = quantize_multiplier(2**-40)  # tiny: shift saturates at 63, mult shrinks
    assert s == 63 and m == 2**23
    assert quantize_multiplier(2**-70) == (0, 63)
    assert quantize_multiplier(2**30) == (2**30, 0)
    for bad in (2.0**31, -1.0, float("nan"), float("inf")):
        with pytest.raises(NpusimError):
            quantize_multiplier(bad)


def test_quantize_dequantize():
    q = quantize(np.array([0.5, 1.5, 2.5, -0.5, -1.5, 1000.0, -1000.0]), 1.0, 0)
    np.testing.assert_array_equal(q, [0, 2, 2, 0, -2, 127, -128])  # half to even, clamp
    assert q.dtype == np.int8
    np.testing.assert_array_equal(quantize(np.array([0.26]), 0.1, 5), [8])
    d = dequantize(np.array([-128, 0, 127], np.int8), 0.5, -3)
    assert d.dtype == np.float32
    np.testing.assert_array_equal(d, [-62.5, 1.5, 65.0])
    with pytest.raises(UsageError, match="scale"):
        quantize(np.zeros(1), 0.0, 0)


def test_bit_helpers():
    assert fp16_bits(1.0) == 0x3C00 and fp16_bits(-2.0) == 0xC000 and fp16_bits(6.0) == 0x4600
    assert from_fp16_bits(0x3C00) == 1.0 and from_fp16_bits(fp16_bits(0.1)) == float(np.float16(0.1))
    assert int8_bits(-1) == 0xFFFF and int8_bits(127) == 0x7F and int8_bits(-128) == 0xFF80
    assert [int8_from_bits(int8_bits(v)) for v in (-128, -1, 0, 5, 127)] == [-128, -1, 0, 5, 127]
    with pytest.raises(UsageError):
        int8_bits(128)


def test_public_names_resolve_and_layout_does_not_import_numba():
    import subprocess
    import sys

    import npusim.kernels as k

    for name in k.__all__:
        assert callable(getattr(k, name)), name
    with pytest.raises(AttributeError):
        k.no_such_kernel  # noqa: B018
    code = "import sys, npusim.kernels.layout, npusim.kernels.quant; print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize("layout", ["linear", "image", "blocked16"])
def test_pack_matches_elementwise_reference(layout):
    from npusim.kernels.reference import pack_ref

    rng = np.random.default_rng(3)
    for dtype in ("int8", "fp16", "fp32"):
        x = _rand(rng, (2, 3, 18 if layout == "blocked16" else 3), dtype)
        np.testing.assert_array_equal(pack(x, layout), pack_ref(x, layout))


@pytest.mark.parametrize("block", [4, 8, 16])
def test_block_keyword_round_trips_and_matches_geometry(block):
    rng = np.random.default_rng(5)
    h, w, c = 2, 3, 19
    x = _rand(rng, (h, w, c), "int8")
    s = pack(x, "blocked16", block=block)
    planes = -(-c // block)
    assert s.size == planes * h * w * block
    v = s.view(np.int8).reshape(planes, h, w, block)
    np.testing.assert_array_equal(v[0], x[:, :, :block])
    np.testing.assert_array_equal(unpack(s, "blocked16", h, w, c, "int8", block=block), x)
    g = geometry(h, w, c, 1, "blocked16")
    g = type(g)(g.layout, h, w, c, 1, block)
    assert (g.planes, g.block, g.stream_bytes) == (planes, block, s.size)
    ls, ps = 128 * -(-(w * block) // 128), 0
    ps = 128 * -(-(h * ls) // 128)
    b = pack_strided(x, "blocked16", ls, ps, block=block)
    assert len(b) == (planes - 1) * ps + (h - 1) * ls + w * block
    np.testing.assert_array_equal(unpack_strided(b, "blocked16", h, w, c, "int8", ls, ps, block=block), x)
    assert np.array_equal(pack(x, "blocked16"), pack(x, "blocked16", block=16))  # default: the n657 block


def test_block_keyword_must_be_positive():
    with pytest.raises(UsageError, match="block"):
        pack(np.zeros((1, 2, 8), np.int8), "blocked16", block=0)


def test_a_timing_only_run_of_a_blob_imports_no_numba(tmp_path):
    """A fresh `npusim run --timing-only` stays a fraction of a second: Numba is imported only by
    functional kernels."""
    import subprocess
    import sys

    import onnx

    from npusim import zoo
    from npusim.cli import main

    model, blob = tmp_path / "m.onnx", tmp_path / "m.npu"

    onnx.save(zoo.resnet_style(size=16), model)
    assert main(["compile", str(model), "-o", str(blob)]) == 0
    code = (f"import sys; from npusim.cli import main; code = main(['run', {str(blob)!r}, '--timing-only']); "
            "print('numba' in sys.modules, code)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split()[-2:] == ["False", "0"]
