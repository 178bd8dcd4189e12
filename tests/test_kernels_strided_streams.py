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
