"""The fused int8 depthwise kernel (`kernels.depthwise`) and the 32-bit requantization loops
(`kernels.requant`) against the slow reference, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from npusim.errors import UsageError
from npusim.kernels import conv2d_int8, conv2d_int8_parts, layout as L, quantize_multiplier
from npusim.kernels.reference import conv2d_int8_ref


def _params(rng, c, taps):
    spread = np.sqrt(taps * 5476.0**2 + 11547.0**2)
    mults = [quantize_multiplier(s) for s in rng.uniform(20, 80, c) / spread]
    return (rng.integers(-2**31, 2**31, c) if rng.random() < 0.2 else rng.integers(-20000, 20000, c),
            np.array([m for m, _ in mults]), np.array([s for _, s in mults]))


@pytest.mark.parametrize("seed", range(3))
def test_depthwise_any_window_layout_and_stride_matches_reference(seed):
    """Windows up to 7 x 7 (past the old narrow-group limit), strides 1-3, dilation, asymmetric
    pads, channel counts off the 16-channel block, blocked16 or [H][W][C] input, every output layout."""
    rng = np.random.default_rng(seed)
    seen = set()
    for _ in range(7):
        c = int(rng.choice([1, 5, 16, 21, 33]))
        kh, kw = int(rng.integers(1, 8)), int(rng.integers(1, 8))
        sh, sw, dh, dw = (int(v) for v in rng.integers(1, 4, 4))
        pads = tuple(int(v) for v in rng.integers(0, 4, 4))
        h = dh * (kh - 1) + int(rng.integers(1, 10))
        w = dw * (kw - 1) + int(rng.integers(1, 10))
        x = rng.integers(-128, 128, (h, w, c), dtype=np.int8)
        wt = rng.integers(-128, 128, (c, kh, kw, 1), dtype=np.int8)
        bias, mult, shift = _params(rng, c, kh * kw)
        q = dict(in_zp=int(rng.choice([0, -128, 17, 200])), stride=(sh, sw), dilation=(dh, dw), pads=pads, groups=c)
        lo, hi = (int(rng.integers(-128, 0)), int(rng.integers(0, 128))) if rng.random() < 0.4 else (-128, 127)
        out_zp = int(rng.integers(-10, 10))
        want = conv2d_int8_ref(x, wt, bias, mult, shift, out_zp=out_zp, act_lo=lo, act_hi=hi, **q)
        got = conv2d_int8(x, wt, bias, mult, shift, out_zp=out_zp, act_lo=lo, act_hi=hi, **q)
        np.testing.assert_array_equal(got, want)
        planes = L.planes_view(L.pack(x, "blocked16"), "blocked16", h, w, c, "int8")
        part = [(wt, bias, mult, shift, out_zp, lo, hi)]
        for lay in ("blocked16", "image", "linear"):
            stream, = conv2d_int8_parts(planes, part, out_layouts=[lay], **q)
            np.testing.assert_array_equal(stream, L.pack(want, lay), err_msg=lay)
        seen.update(np.unique(want).tolist())
    assert len(seen) > 60  # the scales keep values off the rails


def test_requant_float32_sums_and_mult_range():
    """float32 sums (the one-chunk GEMM) take the int32 convert; a mult outside int32 is refused."""
    from npusim.kernels import conv as C

    rng = np.random.default_rng(2)
    acc = rng.integers(-2**24, 2**24, (37, 40)).astype(np.float32)
    bias = rng.integers(-2**31, 2**31, 40)
    mult = rng.integers(-2**31, 2**31, 40)
    shift = rng.integers(0, 64, 40)
    out = np.empty((3, 37, 16), np.int8)
    C._requantize_planes(acc, 0, 40, bias, mult, shift, -3, -100, 90, out)
    ref = C.requantize(acc.astype(np.int64), bias, mult, shift, -3, -100, 90)
    np.testing.assert_array_equal(out.reshape(-1).view(np.uint8), L.pack(ref.reshape(1, 37, 40), "blocked16"))
    x = np.zeros((2, 2, 1), np.int8)
    w = np.ones((1, 1, 1, 1), np.int8)
    with pytest.raises(UsageError, match="mult"):
        conv2d_int8(x, w, [0], [1 << 31], [31], in_zp=0, out_zp=0)
