"""A stream read in place as a strided view of memory (`EpochValues._read_in_place` of a band of rows over
blocked16 planes: [n3][n2][n1][run]) is the same stream as its flat copy for every unpacking, and
`layout.planes_view` keeps it a view (no copy) where the strides allow."""

from __future__ import annotations

import numpy as np
import pytest

from npusim.kernels import layout as L
from npusim.kernels.conv import Int8Conv


def _band(rng, planes, rows, w, full_rows):
    """A [1][planes][1][rows*w*16] view of a band of rows of `planes` blocked16 planes of full_rows rows."""
    mem = rng.integers(0, 256, planes * full_rows * w * 16 + 64, dtype=np.uint8)
    plane = full_rows * w * 16
    view = np.ndarray((1, planes, 1, rows * w * 16), np.uint8, mem, 32 + 2 * w * 16, (0, plane, 0, 1))
    return mem, view


@pytest.mark.parametrize("c", [16, 40, 48])
def test_a_strided_stream_unpacks_as_its_flat_copy(c):
    rng = np.random.default_rng(c)
    p, rows, w = -(-c // 16), 5, 7
    mem, view = _band(rng, p, rows, w, 12)
    flat = np.ascontiguousarray(view).reshape(-1)
    got = L.planes_view(view, "blocked16", rows, w, c, "int8")
    want = L.planes_view(flat, "blocked16", rows, w, c, "int8")
    np.testing.assert_array_equal(got.planes, want.planes)
    np.testing.assert_array_equal(got.hwc(), want.hwc())
    assert np.shares_memory(got.planes, mem)  # a view of memory, not a copy
    np.testing.assert_array_equal(L.unpack(view, "blocked16", rows, w, c, "int8"),
                                  L.unpack(flat, "blocked16", rows, w, c, "int8"))
    with pytest.raises(Exception):
        L.planes_view(view, "blocked16", rows + 1, w, c, "int8")  # the size is checked as for a flat stream


@pytest.mark.parametrize("k,groups", [(1, 1), (3, 1), (3, 32)])
def test_an_int8_conv_of_a_strided_stream_equals_that_of_its_copy(k, groups):
    """Pointwise (planes cast in place), 3x3 (im2col of the unpacked map) and depthwise convs."""
    rng = np.random.default_rng(k + groups)
    c, oc, rows, w = 32, 32, 6, 9
    mem, view = _band(rng, 2, rows, w, 10)
    flat = np.ascontiguousarray(view).reshape(-1)
    wt = rng.integers(-128, 128, (oc, k, k, c // groups), dtype=np.int8)
    part = (wt, rng.integers(-5000, 5000, oc), np.full(oc, 1 << 30), np.full(oc, 36), 3, -128, 127)
    conv = Int8Conv((rows, w, c), np.dtype(np.int8), [part], in_zp=-2, pads=(k // 2,) * 4, groups=groups,
                    out_layouts=["blocked16"])
    got = conv.run(L.planes_view(view, "blocked16", rows, w, c, "int8"))[0]
    want = conv.run(L.planes_view(flat, "blocked16", rows, w, c, "int8"))[0]
    assert len(np.unique(want)) > 8
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("k,groups,strided", [(1, 1, True), (3, 1, False), (3, 32, False), (3, 32, True)])
def test_an_int8_conv_writes_its_output_into_a_callers_array(k, groups, strided):
    """`Int8Conv.run(dests=...)`: the planes written into the caller's array (contiguous, or planes apart
    in memory) equal the output it makes itself (a depthwise conv writes its own contiguous planes and
    copies them into strided ones)."""
    rng = np.random.default_rng(10 * k + groups)
    c, rows, w = 32, 6, 9
    x = L.planes_view(L.pack(rng.integers(-128, 128, (rows, w, c), dtype=np.int8), "blocked16"), "blocked16",
                      rows, w, c, "int8")
    wt = rng.integers(-128, 128, (c, k, k, c // groups), dtype=np.int8)
    part = (wt, rng.integers(-5000, 5000, c), np.full(c, 1 << 30), np.full(c, 36), 3, -128, 127)
    conv = Int8Conv((rows, w, c), np.dtype(np.int8), [part], in_zp=-2, pads=(k // 2,) * 4, groups=groups,
                    out_layouts=["blocked16"])
    shape = conv.dest_shape(0)
    mem = np.zeros(3 * shape[1] * shape[2] * shape[0], np.int8)
    dest = mem[:shape[0] * shape[1] * shape[2]].reshape(shape) if not strided else \
        np.ndarray(shape, np.int8, mem, 8, (3 * shape[1] * shape[2], shape[2], 1))
    want = conv.run(x)[0]
    got = conv.run(x, dests=[dest])[0]
    assert got is dest
    assert len(np.unique(want)) > 8
    np.testing.assert_array_equal(np.ascontiguousarray(dest).view(np.uint8).reshape(-1), want)


@pytest.mark.parametrize("consecutive", [True, False])
def test_a_fused_split_conv_writes_its_parts_into_the_callers_arrays(consecutive):
    """The parts of a split conv share one requantization: into the callers' arrays when they are
    consecutive planes of one strided array (planes apart in memory), else copied into them."""
    rng = np.random.default_rng(3)
    c, rows, w = 32, 5, 6
    x = L.planes_view(L.pack(rng.integers(-128, 128, (rows, w, c), dtype=np.int8), "blocked16"), "blocked16",
                      rows, w, c, "int8")
    parts = [(rng.integers(-128, 128, (oc, 1, 1, c), dtype=np.int8), rng.integers(-5000, 5000, oc),
              np.full(oc, 1 << 30), np.full(oc, 36), 3, -128, 127) for oc in (32, 16)]
    conv = Int8Conv((rows, w, c), np.dtype(np.int8), parts, in_zp=-2, out_layouts=["blocked16"] * 2)
    assert conv.fused
    m, stride = rows * w, rows * w * 16 + 48  # planes 48 bytes apart
    mem = np.zeros(4 * stride, np.int8)
    shapes = [conv.dest_shape(i) for i in range(2)]
    first = 0 if consecutive else stride  # not consecutive: a gap of one plane between the parts
    dests = [np.ndarray(shapes[0], np.int8, mem, 0, (stride, 16, 1)),
             np.ndarray(shapes[1], np.int8, mem, 2 * stride + first, (stride, 16, 1))]
    want = conv.run(x)
    got = conv.run(x, dests=dests)
    for g, d, wnt in zip(got, dests, want):
        assert g is d
        np.testing.assert_array_equal(np.ascontiguousarray(d).view(np.uint8).reshape(-1), wnt)
    assert len(np.unique(want[0])) > 8 and m == shapes[0][1]
