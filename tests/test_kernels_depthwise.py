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


def _float_form_bound(mult) -> int:
    """The float64 requantization's bound L on |acc + bias| (`kernels.requant` module doc)."""
    return min(2**31 - 1, (2**52 - 1) // max(1, int(np.abs(np.asarray(mult, np.int64)).max())))


@pytest.mark.parametrize("shift", [0, 1, 2, 31, 52, 53, 54, 62, 63])
def test_requant_float_form_is_exact_across_its_bound(shift):
    """Sums around the float64 form's bound (|v| = L, L + 1, the int32 rails), its largest products
    (|v * mult| just below and above 2^52 and 2^53), exact ties of the rounding (P * 2^-s = k + 1/2,
    both signs) and values in range: the requantized bits equal `conv.requantize`'s for float32, float64
    and int64 sums, one plane of B = 1 (the bound of that one channel) and blocked16 planes."""
    from npusim.kernels import conv as C

    for mult in (2**31 - 1, -2**31, 2**30 + 12345, 3, 1, -1, 0):
        bound = _float_form_bound([mult])
        m = max(1, abs(mult))
        vs = {bound, bound + 1, bound - 1, 2**31 - 1, -2**31, 0, 1, -1,
              (2**52 - 1) // m, 2**52 // m + 1, (2**53 - 1) // m, 2**53 // m + 1}
        if shift:  # P = v * mult with P * 2^-s = k + 1/2: v = (2k + 1) * 2^(s-1) / mult when that divides
            for k in (-3, -1, 0, 2, 40):
                p = (2 * k + 1) << (shift - 1)
                if p % m == 0:
                    vs.add(p // m * (1 if mult >= 0 else -1))
        scale = 2.0 ** shift / m  # values whose requantized output lies within int8
        vs.update(int(round(t * scale)) + d for t in (-100.5, -3.5, 0.5, 60.5) for d in (-1, 0, 1))
        vs = sorted(v for s in (1, -1) for v in {s * v for v in vs} if -2**31 <= v < 2**31)
        v = np.array(vs, np.int64)
        for bias in (0, 77, -2**31):
            acc_int = ((v - bias + 2**31) % 2**32) - 2**31  # acc + bias wraps back to v
            want = C.requantize(acc_int.reshape(-1, 1), np.array([bias]), np.array([mult]), np.array([shift]),
                                -5, -128, 127)
            for acc in (acc_int, acc_int.astype(np.float64), acc_int.astype(np.float32)):
                if acc.dtype == np.float32 and np.abs(acc_int).max() >= 2**24:
                    acc = acc_int[np.abs(acc_int) < 2**24].astype(np.float32)  # float32 sums stay below 2^24
                ref = want if acc.size == acc_int.size else want[np.abs(acc_int) < 2**24]
                got = np.empty((1, acc.size, 1), np.int8)
                C._requantize_planes(acc.reshape(-1, 1), 0, 1, np.array([bias]), np.array([mult]), np.array([shift]),
                                     -5, -128, 127, got)
                np.testing.assert_array_equal(got.reshape(-1, 1), ref, err_msg=f"{acc.dtype} bias {bias} mult {mult}")
                # 16 lanes of one blocked16 plane: the channel beside 15 others of the same parameters
                lanes = np.repeat(acc.reshape(-1, 1), 16, axis=1)
                got16 = np.empty((1, acc.size, 16), np.int8)
                C._requantize_planes(lanes, 0, 16, np.full(16, bias), np.full(16, mult), np.full(16, shift),
                                     -5, -128, 127, got16)
                np.testing.assert_array_equal(got16[0], np.repeat(ref, 16, axis=1))


# (shift, v, mult): v * mult = (2k + 1) * 2^(shift-1) -+ 1, a product past 2^53 just beside a rounding tie,
# whose float64 rounding moves the result by one (v * mult factored into two int32 values)
PAST_THE_BOUND = [(53, 95230081, 141875327), (53, 16625971, 1354386949), (54, 337974727, 239854601),
                  (54, 383293849, 587486551), (55, 178885933, 906329435), (55, 119952543, 1952331937)]


@pytest.mark.parametrize("shift, v, mult", PAST_THE_BOUND)
def test_requant_products_past_the_bound_take_the_integer_form(shift, v, mult):
    """Sums past the float64 form's bound whose float64 value would be one off (products beyond 2^53
    next to a tie): the integer form gives them, alone in a run and beside in-bound lanes."""
    from npusim.kernels import conv as C

    assert v > _float_form_bound([mult])
    vs = np.array([v, -v, v - 1, 3, -3], np.int64)
    assert np.floor(v * (mult * 2.0 ** -shift) + 0.5) != C.requantize(vs[:1], 0, mult, shift, 0)[0]  # the trap
    for acc in (vs.astype(np.float64), vs):
        for c in (1, 16):
            got = np.empty((1, vs.size, c), np.int8)
            C._requantize_planes(np.repeat(acc.reshape(-1, 1), c, axis=1), 0, c, np.zeros(c, np.int64),
                                 np.full(c, mult), np.full(c, shift), 0, -128, 127, got)
            want = C.requantize(vs.reshape(-1, 1), 0, mult, shift, 0)
            np.testing.assert_array_equal(got[0], np.repeat(want, c, axis=1))


def test_requant_clamp_with_lo_above_hi_matches_integer_form():
    """lo > hi (a clamp no real program sets): both forms clamp as `conv.requantize` (np.clip's
    min(max(y, lo), hi)), the float64 form's sums and the integer form's alike."""
    from npusim.kernels import conv as C

    for big in (0, 2**30):  # float64 form; past its bound, the integer form
        acc = np.arange(-40, 40, dtype=np.float64).reshape(-1, 1) * 1000 + big
        args = (np.array([0]), np.array([2**30]), np.array([35]), 0, 20, -20)
        got = np.empty((1, acc.shape[0], 1), np.int8)
        C._requantize_planes(acc, 0, 1, *args, got)
        np.testing.assert_array_equal(got[0], C.requantize(acc.astype(np.int64), *args))


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_3x3_planes_match_reference(stride):
    """The one-pass 3 x 3 form (`depthwise._mac9`) in blocked16 planes, stride 1 and 2, every padding,
    in_zp of both signs, against the slow reference; a 4 x 3 window beside it takes the tap-by-tap form."""
    rng = np.random.default_rng(stride)
    for kh, kw, pads in ((3, 3, (1, 1, 1, 1)), (3, 3, (0, 0, 0, 0)), (3, 3, (0, 1, 1, 0)), (3, 3, (2, 0, 0, 2)),
                         (4, 3, (1, 1, 2, 1))):
        c, h, w = 37, 11, 13
        x = rng.integers(-128, 128, (h, w, c), dtype=np.int8)
        wt = rng.integers(-128, 128, (c, kh, kw, 1), dtype=np.int8)
        bias, mult, shift = _params(rng, c, kh * kw)
        for zp in (-128, 5, 127):
            q = dict(in_zp=zp, stride=(stride, stride), pads=pads, groups=c)
            want = conv2d_int8_ref(x, wt, bias, mult, shift, out_zp=3, **q)
            planes = L.planes_view(L.pack(x, "blocked16"), "blocked16", h, w, c, "int8")
            stream, = conv2d_int8_parts(planes, [(wt, bias, mult, shift, 3, -128, 127)], out_layouts=["blocked16"], **q)
            np.testing.assert_array_equal(stream, L.pack(want, "blocked16"), err_msg=f"{kh}x{kw} {pads} zp {zp}")


@pytest.mark.parametrize("lay", ["blocked16", "image"])
def test_int8_conv_writes_its_planes_at_any_plane_and_line_stride(lay):
    """`Int8Conv.run(into=...)` (`requant.requantize_kept`, `depthwise.depthwise_into`): a part's planes
    written at a plane and line stride with gaps between lines and planes (a write SE's bytes in a pool)
    hold exactly the stream bytes of the part's new array, and no byte of the gaps changes; dense (one GEMM
    for a split conv, 1x1 and 3x3) and depthwise (output planes as the input's, and one [H][W][C] plane)."""
    from npusim.kernels import Int8Conv

    rng = np.random.default_rng(7)
    h, w = 9, 7
    for kind, c, ocs, k in (("dense", 24, (16, 40), 1), ("dense", 5, (16, 16), 3), ("depthwise", 21, (21,), 3),
                            ("depthwise", 16, (16, 16), 3)):
        x = rng.integers(-128, 128, (h, w, c), dtype=np.int8)
        planes = L.planes_view(L.pack(x, "blocked16"), "blocked16", h, w, c, "int8")
        parts = []
        for oc in ocs:  # depthwise: each part a depthwise conv of the whole input (c = its oc)
            wt = rng.integers(-128, 128, (oc, k, k, 1 if kind == "depthwise" else c), dtype=np.int8)
            parts.append((wt, *_params(rng, oc, k * k), int(rng.integers(-10, 10)), -128, 127))
        args = dict(in_zp=int(rng.integers(-20, 20)), pads=(1, 1, 1, 1) if k == 3 else (0, 0, 0, 0),
                    groups=c if kind == "depthwise" else 1)
        conv = Int8Conv(planes.shape, np.int8, parts, out_layouts=[lay] * len(parts), **args)
        want = conv.run(planes)
        targets, pools = [], []
        for j in range(len(parts)):
            p, oh, ow, b = conv.out_planes(j)
            line = ow * b + 5  # gaps after every line and plane
            plane = oh * line + 11
            pool = rng.integers(0, 256, 13 + p * plane, dtype=np.uint8)
            pools.append((pool, pool.copy(), (p, oh, ow, b), plane, line))
            targets.append((pool.view(np.int8), 13, plane, line))
        got = conv.run(planes, into=targets)
        assert got == [None] * len(parts)
        for j, (pool, before, (p, oh, ow, b), plane, line) in enumerate(pools):
            view = np.lib.stride_tricks.as_strided(pool[13:], (p, oh, ow * b), (plane, line, 1))
            np.testing.assert_array_equal(view.reshape(-1), want[j], err_msg=f"{kind} {lay} part {j}")
            mask = np.ones(pool.size, bool)
            np.lib.stride_tricks.as_strided(mask[13:], (p, oh, ow * b), (plane, line, 1))[...] = False
            np.testing.assert_array_equal(pool[mask], before[mask])  # the gaps are untouched
