"""conv2d kernels: int8 bit-exact against the slow reference, float against numpy and ONNX Runtime."""

from __future__ import annotations


import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from npusim.errors import UsageError
from npusim.kernels import conv2d_float, conv2d_int8, conv2d_int8_parts, quantize_multiplier
from npusim.kernels.reference import conv2d_float_ref, conv2d_int8_ref


def _case(rng):
    """Random conv geometry: kernel, stride, dilation, asymmetric pads, groups."""
    groups = int(rng.choice([1, 1, 2, 3, 4]))
    icg, ocg = int(rng.integers(1, 6)), int(rng.integers(1, 5))
    if rng.random() < 0.25:  # depthwise
        groups, icg, ocg = int(rng.integers(2, 9)), 1, int(rng.choice([1, 2]))
    if rng.random() < 0.2:  # many channels per group: the BLAS path of grouped convs
        groups, icg, ocg = 2, 12, 3
    kh, kw = int(rng.integers(1, 5)), int(rng.integers(1, 5))
    sh, sw, dh, dw = (int(v) for v in rng.integers(1, 4, 4))
    pads = tuple(int(v) for v in rng.integers(0, 4, 4))
    h = int(rng.integers(dh * (kh - 1) + 1, 12))
    w = int(rng.integers(dw * (kw - 1) + 1, 12))
    return dict(h=h, w=w, c=groups * icg, oc=groups * ocg, kh=kh, kw=kw, icg=icg,
                kw_args=dict(stride=(sh, sw), dilation=(dh, dw), pads=pads, groups=groups))


def test_int8_matches_reference_on_random_shapes():
    rng = np.random.default_rng(10)
    seen = set()
    for _ in range(40):
        k = _case(rng)
        x = rng.integers(-128, 128, (k["h"], k["w"], k["c"]), dtype=np.int8)
        w = rng.integers(-128, 128, (k["oc"], k["kh"], k["kw"], k["icg"]), dtype=np.int8)
        bias = rng.integers(-20000, 20000, k["oc"])
        spread = np.sqrt(k["kh"] * k["kw"] * k["icg"] * 5476.0**2 + 11547.0**2)  # std of acc
        mults = [quantize_multiplier(s) for s in rng.uniform(20, 80, k["oc"]) / spread]
        mult = np.array([m for m, _ in mults])
        shift = np.array([s for _, s in mults])
        q = dict(in_zp=int(rng.integers(-20, 20)), out_zp=int(rng.integers(-10, 10)), **k["kw_args"])
        lo, hi = (0, 127) if rng.random() < 0.3 else (-128, 127)
        got = conv2d_int8(x, w, bias, mult, shift, act_lo=lo, act_hi=hi, **q)
        want = conv2d_int8_ref(x, w, bias, mult, shift, act_lo=lo, act_hi=hi, **q)
        assert got.dtype == np.int8 and got.shape == want.shape
        np.testing.assert_array_equal(got, want, err_msg=str(k))
        seen.update(np.unique(got).tolist())
    assert len(seen) > 200  # the scales keep values off the rails


def test_int8_parts_are_each_part_alone():
    """One GEMM over the output channels of several parts (a conv split over CAs, each with its own
    requantization, zero point and clamp) gives every part's own conv, bit for bit, also for K past
    one exact float32 chunk and an input zero point outside int8."""
    rng = np.random.default_rng(3)
    for _ in range(12):
        k = _case(rng)
        if rng.random() < 0.3:
            k.update(h=14, w=14, c=80, icg=80, kh=3, kw=5, kw_args={**k["kw_args"], "groups": 1})  # K = 1200 > 1024
        x = rng.integers(-128, 128, (k["h"], k["w"], k["c"]), dtype=np.int8)
        parts = []
        shared = rng.random() < 0.5  # one zero point and clamp for every part, as a split conv has
        for _p in range(int(rng.integers(1, 5))):
            oc = k["oc"] if k["kw_args"]["groups"] > 1 else int(rng.integers(1, 7))
            w = rng.integers(-128, 128, (oc, k["kh"], k["kw"], k["icg"]), dtype=np.int8)
            mults = [quantize_multiplier(s) for s in rng.uniform(1e-4, 1e-2, oc)]
            lo, hi = (int(rng.integers(-128, 0)), int(rng.integers(0, 128))) if rng.random() < 0.5 else (-128, 127)
            parts.append((w, rng.integers(-20000, 20000, oc), np.array([m for m, _ in mults]),
                          np.array([s for _, s in mults]), int(rng.integers(-10, 10)), lo, hi))
            if shared and len(parts) > 1:
                parts[-1] = parts[-1][:4] + parts[0][4:]
        zp = int(rng.choice([0, -128, 17, 200]))
        got = conv2d_int8_parts(x, parts, in_zp=zp, **k["kw_args"])
        for y, (w, b, m, sh, ozp, lo, hi) in zip(got, parts):
            want = conv2d_int8_ref(x, w, b, m, sh, in_zp=zp, out_zp=ozp, act_lo=lo, act_hi=hi, **k["kw_args"])
            np.testing.assert_array_equal(y, want, err_msg=str(k))


def test_int8_requant_extremes_and_accumulator_wrap():
    x = np.full((1, 1, 4), 127, dtype=np.int8)
    w = np.full((3, 1, 1, 4), -128, dtype=np.int8)
    w[1] = 127
    # acc = 4*255*w + bias; bias near the int32 rails wraps like a 32-bit accumulator
    bias = np.array([-(2**31) + 130560, 2**31 - 1, 0])
    mult = np.array([2**31 - 1, 2**30, 2**31 - 1])
    shift = np.array([63, 0, 32])
    args = dict(in_zp=-128, out_zp=0)
    got = conv2d_int8(x, w, bias, mult, shift, **args)
    np.testing.assert_array_equal(got, conv2d_int8_ref(x, w, bias, mult, shift, **args))
    assert got[0, 0, 0] == 0 and got[0, 0, 1] == -128  # -2^31*(2^31-1) >> 63 rounds to 0; ch 1 wraps negative


def test_float_matches_reference_fp32_fp16():
    rng = np.random.default_rng(11)
    for i in range(16):
        k = _case(rng)
        dt = np.float32 if i % 2 else np.float16
        x = rng.standard_normal((k["h"], k["w"], k["c"])).astype(dt)
        w = (rng.standard_normal((k["oc"], k["kh"], k["kw"], k["icg"])) * 0.3).astype(dt)
        b = rng.standard_normal(k["oc"]).astype(np.float32)
        got = conv2d_float(x, w, b, act_lo=0.0, **k["kw_args"])
        want = conv2d_float_ref(x, w, b, act_lo=0.0, **k["kw_args"])
        assert got.dtype == dt and got.shape == want.shape
        tol = 1e-5 if dt == np.float32 else 4e-3
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol * 4)
        assert got.min() >= 0


def _window_order_f32(x, w, stride, pads, groups):
    """float32 conv summed one term at a time in window order (kernel row, column, input channel),
    padded cells included as zeros: the order conv2d_float's module doc promises."""
    xp = np.pad(x.astype(np.float32), ((pads[0], pads[2]), (pads[1], pads[3]), (0, 0)))
    oc, kh, kw, icg = w.shape
    ocg = oc // groups
    oh = (xp.shape[0] - kh) // stride + 1
    ow = (xp.shape[1] - kw) // stride + 1
    y = np.zeros((oh, ow, oc), np.float32)
    for o in range(oc):
        c0 = (o // ocg) * icg
        for r in range(oh):
            for q in range(ow):
                acc = np.float32(0)
                for i in range(kh):
                    for j in range(kw):
                        for k in range(icg):
                            acc = np.float32(acc + np.float32(xp[r * stride + i, q * stride + j, c0 + k] * w[o, i, j, k]))
                y[r, q, o] = acc
    return y


@pytest.mark.parametrize("groups,icg,ocg", [(24, 1, 1), (8, 1, 2), (4, 3, 2)])
def test_float_grouped_conv_adds_each_window_in_order(groups, icg, ocg):
    """Narrow groups (depthwise, channel multiplier 2, 3 channels a group) are bit-identical to the
    one-term-at-a-time float32 sum in window order, whatever loop order the kernel uses inside."""
    rng = np.random.default_rng(groups)
    x = (rng.standard_normal((9, 10, groups * icg)) * 10).astype(np.float32)
    w = rng.standard_normal((groups * ocg, 3, 3, icg)).astype(np.float32)
    pads = (1, 0, 2, 1)
    got = conv2d_float(x, w, stride=2, pads=pads, groups=groups)
    want = _window_order_f32(x, w, 2, pads, groups)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def _ort_conv(x_nchw, w_oihw, b, stride, dilation, pads, groups):
    t, l, bo, r = pads
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=list(stride), dilations=list(dilation),
                            pads=[t, l, bo, r], group=groups)
    g = helper.make_graph([node], "c", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_nchw.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [onnx.numpy_helper.from_array(w_oihw, "w"), onnx.numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x_nchw})[0]


def test_float_conv_matches_onnxruntime():
    rng = np.random.default_rng(12)
    for _ in range(6):
        k = _case(rng)
        x = rng.standard_normal((k["h"], k["w"], k["c"])).astype(np.float32)
        w = rng.standard_normal((k["oc"], k["kh"], k["kw"], k["icg"])).astype(np.float32)
        b = rng.standard_normal(k["oc"]).astype(np.float32)
        got = conv2d_float(x, w, b, **k["kw_args"])
        a = k["kw_args"]
        want = _ort_conv(x.transpose(2, 0, 1)[None].copy(), w.transpose(0, 3, 1, 2).copy(), b,
                         a["stride"], a["dilation"], a["pads"], a["groups"])
        np.testing.assert_allclose(got, want[0].transpose(1, 2, 0), rtol=1e-5, atol=1e-4)


def test_resnet_sized_conv_is_exact_on_a_probe():
    rng = np.random.default_rng(13)
    x = rng.integers(-128, 128, (56, 56, 64), dtype=np.int8)
    w = rng.integers(-128, 128, (64, 3, 3, 64), dtype=np.int8)
    args = dict(in_zp=5, out_zp=-3, pads=(1, 1, 1, 1))
    y = conv2d_int8(x, w, 0, 2**30, 44, **args)
    probe = conv2d_int8_ref(x[:4, :4, :], w[:2], 0, 2**30, 44, in_zp=5, out_zp=-3, pads=(1, 1, 1, 1))
    np.testing.assert_array_equal(y[:3, :3, :2], probe[:3, :3])  # top-left corner, inside the probe
    dw = rng.integers(-128, 128, (64, 3, 3, 1), dtype=np.int8)
    ydw = conv2d_int8(x, dw, 0, 2**30, 40, groups=64, **args)
    probe = conv2d_int8_ref(x[:4, :4, :2], dw[:2], 0, 2**30, 40, groups=2, in_zp=5, out_zp=-3, pads=(1, 1, 1, 1))
    np.testing.assert_array_equal(ydw[:3, :3, :2], probe[:3, :3])


def test_conv_argument_errors():
    x = np.zeros((4, 4, 4), np.int8)
    w = np.zeros((4, 3, 3, 4), np.int8)
    with pytest.raises(UsageError, match="groups"):
        conv2d_int8(x, w, 0, 1, 0, in_zp=0, out_zp=0, groups=2)
    with pytest.raises(UsageError, match="empty output"):
        conv2d_int8(x, np.zeros((4, 5, 5, 4), np.int8), 0, 1, 0, in_zp=0, out_zp=0)
    with pytest.raises(UsageError, match="int8"):
        conv2d_int8(x.astype(np.float32), w, 0, 1, 0, in_zp=0, out_zp=0)
    with pytest.raises(UsageError, match="mult has 3"):
        conv2d_int8(x, w, 0, [1, 1, 1], 0, in_zp=0, out_zp=0)
    with pytest.raises(UsageError, match="shift"):
        conv2d_int8(x, w, 0, 1, 64, in_zp=0, out_zp=0)
    with pytest.raises(UsageError, match="stride"):
        conv2d_float(x.astype(np.float32), w.astype(np.float32), stride=0)


def test_deterministic_repeated_calls():
    rng = np.random.default_rng(14)
    x = rng.standard_normal((20, 20, 24)).astype(np.float32)
    w = rng.standard_normal((32, 3, 3, 24)).astype(np.float32)
    a = conv2d_float(x, w, None, pads=(1, 1, 1, 1))
    b = conv2d_float(x.copy(), w.copy(), None, pads=(1, 1, 1, 1))
    assert a.tobytes() == b.tobytes()


def _parts(rng, k, n_parts, oc_choices=(1, 5, 16, 32, 7)):
    parts = []
    for _p in range(n_parts):
        oc = k["oc"] if k["kw_args"]["groups"] > 1 else int(rng.choice(oc_choices))
        w = rng.integers(-128, 128, (oc, k["kh"], k["kw"], k["icg"]), dtype=np.int8)
        mults = [quantize_multiplier(s) for s in rng.uniform(1e-4, 1e-2, oc)]
        parts.append((w, rng.integers(-20000, 20000, oc), np.array([m for m, _ in mults]),
                      np.array([s for _, s in mults]), int(rng.integers(-10, 10)), -128, 127))
    return parts


def test_int8_reads_blocked16_planes_in_place_and_writes_stream_layouts():
    """An input given as `layout.Planes` of blocked16 stream bytes (odd channel counts, padding,
    stride 2, groups, 1x1 over whole planes) and outputs requantized straight into a stream layout
    (blocked16 of whole and partial planes, image, linear; one shared clamp or not) are every bit
    `layout.pack` of the [H][W][C] path."""
    from npusim.kernels import layout as L

    rng = np.random.default_rng(21)
    cases = [dict(h=9, w=7, c=c, oc=2 * g, kh=kh, kw=kw, icg=c // g,
                  kw_args=dict(stride=(s, s), dilation=(1, 1), pads=p, groups=g))
             for c, kh, kw, s, p, g in [(48, 1, 1, 1, (0, 0, 0, 0), 1), (32, 1, 1, 2, (0, 0, 0, 0), 1),
                                        (21, 3, 3, 1, (1, 1, 1, 1), 1), (35, 3, 3, 2, (0, 1, 2, 1), 1),
                                        (64, 3, 3, 2, (1, 1, 1, 1), 1), (24, 3, 3, 1, (1, 1, 1, 1), 3),
                                        (16, 3, 3, 1, (1, 0, 1, 2), 16), (17, 1, 1, 1, (0, 0, 0, 0), 1)]]
    cases += [_case(rng) for _ in range(16)]
    for k in cases:
        x = rng.integers(-128, 128, (k["h"], k["w"], k["c"]), dtype=np.int8)
        stream = L.pack(x, "blocked16")
        planes = L.planes_view(stream, "blocked16", k["h"], k["w"], k["c"], "int8")
        parts = _parts(rng, k, int(rng.integers(1, 5)))
        if rng.random() < 0.5:  # one zero point and clamp: a split conv
            parts = [p[:4] + parts[0][4:] for p in parts]
        zp = int(rng.choice([0, -128, 17]))
        want = conv2d_int8_parts(x, parts, in_zp=zp, **k["kw_args"])
        for lays in (["blocked16"] * len(parts), [str(rng.choice(["blocked16", "image", "linear"])) for _ in parts]):
            got = conv2d_int8_parts(planes, parts, in_zp=zp, out_layouts=lays, **k["kw_args"])
            for g, y, lay in zip(got, want, lays):
                assert g.dtype == np.uint8
                np.testing.assert_array_equal(g, L.pack(y, lay), err_msg=f"{k} {lay}")
        got = conv2d_int8_parts(planes, parts, in_zp=zp, **k["kw_args"])
        for g, y in zip(got, want):
            np.testing.assert_array_equal(g, y, err_msg=str(k))
    assert np.array_equal(planes.hwc(), x)


def test_im2col_and_requantize_kernels_match_numpy():
    """`_im2col_int8` equals slicing a padded copy; `_requantize_planes` equals `requantize` laid
    out as blocked16 planes (odd channel counts: zero padding channels) or as one plane."""
    from npusim.kernels import conv as C
    from npusim.kernels import layout as L

    rng = np.random.default_rng(5)
    for _ in range(20):
        h, w, c = int(rng.integers(1, 10)), int(rng.integers(1, 10)), int(rng.integers(1, 40))
        kh, kw, sh, sw, dh, dw = (int(v) for v in rng.integers(1, 4, 6))
        pt, pl, pb, pr = (int(v) for v in rng.integers(0, 3, 4))
        oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
        ow = (w + pl + pr - dw * (kw - 1) - 1) // sw + 1
        if oh < 1 or ow < 1:
            continue
        x = rng.integers(-128, 128, (h, w, c), dtype=np.int8)
        c0 = int(rng.integers(0, c))
        cg = int(rng.integers(1, c - c0 + 1))
        zp = np.float32(rng.integers(-128, 128))
        xp = np.pad(x[:, :, c0:c0 + cg].astype(np.float32), ((pt, pb), (pl, pr), (0, 0)), constant_values=zp)
        want = np.stack([xp[i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
                         for i in range(kh) for j in range(kw)], axis=2).reshape(oh * ow, -1)
        y0 = int(rng.integers(0, oh))
        got = np.empty(((oh - y0) * ow, kh * kw * cg), np.float32)
        C._im2col_int8(x, c0, cg, zp, kh, kw, sh, sw, dh, dw, pt, pl, y0, oh, ow, got)
        np.testing.assert_array_equal(got, want[y0 * ow:])

        n_all = int(rng.integers(1, 50))
        n0 = int(rng.integers(0, n_all))
        oc = int(rng.integers(1, n_all - n0 + 1))
        acc = rng.integers(-2**40, 2**40, (int(rng.integers(1, 30)), n_all))
        acc = acc.astype(np.float64) if rng.random() < 0.5 else acc
        bias = rng.integers(-2**31, 2**31, oc)
        mult = rng.integers(0, 2**31, oc)
        shift = rng.integers(0, 64, oc)
        lo, hi = int(rng.integers(-128, 0)), int(rng.integers(0, 128))
        ref = C.requantize(acc[:, n0:n0 + oc], bias, mult, shift, 3, lo, hi)
        blocked = np.empty((-(-oc // 16), acc.shape[0], 16), np.int8)
        C._requantize_planes(acc, n0, oc, bias, mult, shift, 3, lo, hi, blocked)
        np.testing.assert_array_equal(blocked.reshape(-1).view(np.uint8),
                                      L.pack(ref.reshape(1, -1, oc), "blocked16"))
        one = np.empty((1, acc.shape[0], oc), np.int8)
        C._requantize_planes(acc, n0, oc, bias, mult, shift, 3, lo, hi, one)
        np.testing.assert_array_equal(one[0], ref)
