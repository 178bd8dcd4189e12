"""Every unit through hand-assembled programs, values checked against independent numpy math."""

from __future__ import annotations

import numpy as np
import pytest

import npusim
from test_engine_build import PROFILE, Builder, arith_cmd, conv_cmd

from npusim.program.model import Buffer

RNG = np.random.default_rng(42)


def ints(shape, lo=-128, hi=127):
    return RNG.integers(lo, hi + 1, size=shape)


def i32_table(rows) -> bytes:
    return np.asarray(rows, dtype="<i4").tobytes()


def rshift_round(v, s):
    return (v + (1 << (s - 1))) >> s if s > 0 else v


def ref_conv(x, w, bias, mult, shift, in_zp, out_zp, stride, pad, groups, lo=-128, hi=127):
    """Independent int64 conv: x [H][W][C], w [OC][KH][KW][C/g]."""
    h, wd, c = x.shape
    oc, kh, kw, icg = w.shape
    ocg = oc // groups
    xp = np.pad(x.astype(np.int64) - in_zp, ((pad, pad), (pad, pad), (0, 0)))
    oh = (h + 2 * pad - kh) // stride + 1
    ow = (wd + 2 * pad - kw) // stride + 1
    acc = np.zeros((oh, ow, oc), dtype=np.int64)
    for ky in range(kh):
        for kx in range(kw):
            patch = xp[ky:ky + stride * oh:stride, kx:kx + stride * ow:stride, :]
            for g in range(groups):
                acc[..., g * ocg:(g + 1) * ocg] += patch[..., g * icg:(g + 1) * icg] @ \
                    w[g * ocg:(g + 1) * ocg, ky, kx, :].astype(np.int64).T
    acc += np.asarray(bias, dtype=np.int64)
    y = out_zp + np.array([[[rshift_round(int(acc[i, j, k]) * int(mult[k]), int(shift[k])) for k in range(oc)]
                            for j in range(ow)] for i in range(oh)], dtype=np.int64)
    return np.clip(y, lo, hi)


def assert_varied(y):
    """Guard against a test whose expected values are all clipped."""
    y = np.asarray(y)
    assert np.unique(y).size > 20 and np.mean((y == 127) | (y == -128)) < 0.3


def hwc(nchw):
    return np.asarray(nchw)[0].transpose(1, 2, 0)


def conv_program(h, w, c, oc, k, stride, pad, groups, act_unit=False, lut=None):
    b = Builder()
    x = b.fm("x", "input", h, w, c)
    icg = c // groups
    wts = ints((oc, k, k, icg))
    bias, mult, shift = ints(oc, -500, 500), ints(oc, 1 << 30, (1 << 31) - 1), ints(oc, 0, 2) + 30 + int(np.log2(np.sqrt(k * k * icg) * 9000 / 50))
    waddr = b.const("w", wts.astype(np.int8).tobytes())
    qaddr = b.const("q", i32_table(np.stack([bias, mult, shift], 1)))
    oh = (h + 2 * pad - k) // stride + 1
    ow = (w + 2 * pad - k) // stride + 1
    y = b.fm("y", "output", oh, ow, oc, pool="npuRAM4")
    b.epoch(0, "conv")
    b.se_buf(0, "read", x)
    b.se_const(1, waddr, wts.size)
    conv_cmd(b, 0, x, oc, k, k, stride=stride, pad=pad, groups=groups, qparams=qaddr, in_zp=3, out_zp=-2)
    b.se_buf(5, "write", y)
    b.link("SE0", "CA0", 0)
    b.link("SE1", "CA0", 1)
    if act_unit:
        laddr = b.const("lut", lut.astype(np.int8).tobytes())
        b.cmd("ACT", unit=1, dtype="int8", layout="blocked16", func="lut", h=oh, w=ow, c=oc, alpha=0, lo=0, hi=0,
              lut=laddr)
        b.link("CA0", "ACT1")
        b.link("ACT1", "SE5")
    else:
        b.link("CA0", "SE5")
    b.run_wait()
    return b, wts, bias, mult, shift


@pytest.mark.parametrize("c,oc,k,stride,pad,groups", [(16, 16, 3, 1, 1, 1), (3, 16, 3, 2, 1, 1),
                                                       (32, 32, 3, 1, 1, 32), (20, 24, 1, 1, 0, 1)])
def test_conv_int8_bit_exact(c, oc, k, stride, pad, groups):
    h = w = 7
    b, wts, bias, mult, shift = conv_program(h, w, c, oc, k, stride, pad, groups)
    x = ints((1, c, h, w)).astype(np.float32)
    res = npusim.run(b.program(), {"x": x})
    assert res.status == "ok", res.report_text()
    want = ref_conv(hwc(x).astype(np.int64), wts, bias, mult, shift, 3, -2, stride, pad, groups)
    np.testing.assert_array_equal(hwc(res.raw_outputs["y"]), want)
    assert_varied(want)
    assert res.stats.macs == want.size * k * k * (c // groups)
    assert 0 < res.stats.epochs[0].mac_utilisation <= 1


def test_conv_then_act_lut_chain():
    lut = ints(256)
    b, wts, bias, mult, shift = conv_program(6, 6, 16, 16, 3, 1, 1, 1, act_unit=True, lut=lut)
    x = ints((1, 16, 6, 6)).astype(np.float32)
    res = npusim.run(b.program(), {"x": x})
    assert res.status == "ok", res.report_text()
    conv = ref_conv(hwc(x).astype(np.int64), wts, bias, mult, shift, 3, -2, 1, 1, 1)
    np.testing.assert_array_equal(hwc(res.raw_outputs["y"]), lut[conv + 128])


def single_unit(h, w, c, unit_cmd, out_shape, dtype="int8", second=None, setup=None):
    """x (and b) -> unit -> y, for POOL/RESIZE/ARITH/ACT tests."""
    b = Builder()
    x = b.fm("x", "input", h, w, c, dtype)
    xb = b.fm("b", "input", h, w, second, dtype, pool="npuRAM5") if second else None
    oh, ow, oc = out_shape
    y = b.fm("y", "output", oh, ow, oc, dtype, pool="npuRAM4")
    extra = setup(b) if setup else {}
    b.epoch(0, "unit")
    b.se_buf(0, "read", x)
    if xb is not None:
        b.se_buf(1, "read", xb)
    name = unit_cmd(b, **extra)
    b.se_buf(5, "write", y)
    b.link("SE0", name, 0)
    if xb is not None:
        b.link("SE1", name, 1)
    b.link(name, "SE5")
    b.run_wait()
    return b


def pool_cmd(mode, k, s, pad=0, mult=0, shift=0, include_pad=0, dtype="int8", in_zp=0, out_zp=0, rounding="half_up"):
    def make(b, h=8, w=8, c=16):
        b.cmd("POOL", unit=1, dtype=dtype, layout="blocked16", mode=mode, in_h=h, in_w=w, c=c, kh=k, kw=k, sh=s,
              sw=s, pad_t=pad, pad_l=pad, pad_b=pad, pad_r=pad, include_pad=include_pad, in_zp=in_zp,
              out_zp=out_zp, mult=mult, shift=shift, rounding=rounding)
        return "POOL1"
    return make


def test_maxpool_int8():
    b = single_unit(8, 8, 16, pool_cmd("max", 2, 2), (4, 4, 16))
    x = ints((1, 16, 8, 8)).astype(np.float32)
    res = npusim.run(b.program(), {"x": x})
    want = hwc(x).reshape(4, 2, 4, 2, 16).max(axis=(1, 3))
    np.testing.assert_array_equal(hwc(res.raw_outputs["y"]), want)


def test_global_avg_int8():
    mult, shift = 1 << 20, 20
    b = single_unit(8, 8, 16, pool_cmd("global_avg", 1, 1, mult=mult, shift=shift, in_zp=1, out_zp=2), (1, 1, 16))
    x = ints((1, 16, 8, 8)).astype(np.float32)
    res = npusim.run(b.program(), {"x": x})
    s = (hwc(x).astype(np.int64) - 1).sum(axis=(0, 1))
    d = 64 << shift
    want = np.clip(2 + np.floor((2 * s * mult + d) / (2 * d)).astype(np.int64), -128, 127)
    np.testing.assert_array_equal(res.raw_outputs["y"].reshape(-1), want)


@pytest.mark.parametrize("rounding", ["half_up", "half_away"])
def test_avg_int8_rounding_field(rounding):
    """POOL `rounding` rounds the average with its zero point: half_away as TFLite's AVERAGE_POOL_2D (the raw
    2x2 window sum, zero point -128 included, half away from zero), half_up toward +inf."""
    b = single_unit(8, 8, 16, pool_cmd("avg", 2, 2, mult=1 << 20, shift=20, in_zp=-128, out_zp=-128,
                                       rounding=rounding), (4, 4, 16))
    x = ints((1, 16, 8, 8)).astype(np.float32)
    res = npusim.run(b.program(), {"x": x})
    raw = hwc(x).astype(np.int64).reshape(4, 2, 4, 2, 16).sum(axis=(1, 3))
    if rounding == "half_away":
        want = np.sign(raw) * ((2 * np.abs(raw) + 4) // 8)
    else:
        want = (2 * raw + 4) // 8
    assert np.any(raw % 4 == 2) and np.any((raw < 0) & (raw % 4 == 2))  # ties on both sides of zero
    np.testing.assert_array_equal(hwc(res.raw_outputs["y"]), np.clip(want, -128, 127))


def test_resize_nearest_int8():
    def make(b):
        b.cmd("RESIZE", unit=0, dtype="int8", layout="blocked16", mode="nearest", coord="asymmetric", in_h=4,
              in_w=4, c=16, out_h=8, out_w=8)
        return "POOL0"
    b = single_unit(4, 4, 16, make, (8, 8, 16))
    x = ints((1, 16, 4, 4)).astype(np.float32)
    res = npusim.run(b.program(), {"x": x})
    want = hwc(x).repeat(2, axis=0).repeat(2, axis=1)
    np.testing.assert_array_equal(hwc(res.raw_outputs["y"]), want)


def test_arith_add_int8_per_channel():
    c = 16
    ma, mb, sh = ints(c, 1000, 3000), ints(c, 1000, 3000), np.full(c, 12)

    def setup(b):
        return {"params": b.const("p", i32_table(np.stack([ma, mb, sh, np.zeros(c)], 1)))}

    def make(b, params):
        arith_cmd(b, 2, "add", 8, 8, c, params=params, per_channel=1, a_zp=1, b_zp=-1, out_zp=3)
        return "ARITH2"
    b = single_unit(8, 8, c, make, (8, 8, c), second=c, setup=setup)
    xa, xb = ints((1, c, 8, 8)).astype(np.float32), ints((1, c, 8, 8)).astype(np.float32)
    res = npusim.run(b.program(), {"x": xa, "b": xb})
    t = (hwc(xa).astype(np.int64) - 1) * ma + (hwc(xb).astype(np.int64) + 1) * mb
    want = np.clip(3 + ((t + (1 << 11)) >> 12), -128, 127)
    assert_varied(want)
    np.testing.assert_array_equal(hwc(res.raw_outputs["y"]), want)


def test_arith_mul_int8_broadcast_params():
    def setup(b):
        return {"params": b.const("p", i32_table([[100, 0, 14, 0]]))}

    def make(b, params):
        arith_cmd(b, 1, "mul", 8, 8, 16, params=params)
        return "ARITH1"
    b = single_unit(8, 8, 16, make, (8, 8, 16), second=16, setup=setup)
    xa, xb = ints((1, 16, 8, 8)).astype(np.float32), ints((1, 16, 8, 8)).astype(np.float32)
    res = npusim.run(b.program(), {"x": xa, "b": xb})
    t = hwc(xa).astype(np.int64) * hwc(xb).astype(np.int64) * 100
    want = np.clip((t + (1 << 13)) >> 14, -128, 127)
    assert_varied(want)
    np.testing.assert_array_equal(hwc(res.raw_outputs["y"]), want)


def test_arith_concat():
    def make(b):
        arith_cmd(b, 0, "concat", 8, 8, 16, c2=16)
        return "ARITH0"
    b = single_unit(8, 8, 16, make, (8, 8, 32), second=16)
    xa, xb = ints((1, 16, 8, 8)).astype(np.float32), ints((1, 16, 8, 8)).astype(np.float32)
    res = npusim.run(b.program(), {"x": xa, "b": xb})
    np.testing.assert_array_equal(res.raw_outputs["y"], np.concatenate([xa, xb], axis=1).astype(np.int8))


def test_act_sigmoid_fp16():
    def make(b):
        b.cmd("ACT", unit=0, dtype="fp16", layout="blocked16", func="sigmoid", h=8, w=8, c=16, alpha=0, lo=0, hi=0,
              lut=0)
        return "ACT0"
    b = single_unit(8, 8, 16, make, (8, 8, 16), dtype="fp16")
    x = RNG.standard_normal((1, 16, 8, 8)).astype(np.float32) * 3
    res = npusim.run(b.program(), {"x": x})
    want = 1 / (1 + np.exp(-x.astype(np.float16).astype(np.float64)))
    np.testing.assert_allclose(res.outputs["y"], want, atol=2e-3)
    assert res.raw_outputs["y"].dtype == np.float16 and res.stats.native


def test_conv_fp32_is_flagged_non_native():
    b = Builder()
    x = b.fm("x", "input", 5, 5, 16, "fp32")
    wts = RNG.standard_normal((16, 1, 1, 16)).astype(np.float32)
    bias = RNG.standard_normal(16).astype(np.float32)
    waddr = b.const("w", wts.tobytes())
    qaddr = b.const("q", bias.astype("<f4").tobytes())
    y = b.fm("y", "output", 5, 5, 16, "fp32", pool="npuRAM4")
    b.epoch(0, "conv")
    b.se_buf(0, "read", x)
    b.se_const(1, waddr, wts.nbytes, dtype="fp32")
    conv_cmd(b, 0, x, 16, 1, 1, dtype="fp32", qparams=qaddr, act="relu")
    b.se_buf(5, "write", y)
    b.link("SE0", "CA0", 0)
    b.link("SE1", "CA0", 1)
    b.link("CA0", "SE5")
    b.run_wait()
    xin = RNG.standard_normal((1, 16, 5, 5)).astype(np.float32)
    res = npusim.run(b.program(), {"x": xin})
    want = np.maximum(np.einsum("hwc,oc->how", hwc(xin), wts[:, 0, 0, :]) + bias[None, :, None], 0)
    np.testing.assert_allclose(res.outputs["y"][0], want.transpose(1, 0, 2), rtol=1e-5, atol=1e-5)
    assert res.stats.native is False and "not native" in res.summary()


def test_host_softmax_between_epochs():
    """A software epoch reads the NPU's output from memory, runs ONNX Softmax on the host and
    writes its buffer; it is timed by the profile's [host] model (transcendental per element)."""
    b = Builder()
    rows, n = 2, 10
    x = b.fm("x", "input", 1, 1, rows * n, "fp32")
    mid = b.fm("mid", "activation", 1, 1, rows * n, "fp32", pool="npuRAM4")
    y = Buffer("y", "output", "npuRAM5", 0, rows * n * 4, 128, shape=(rows, n), dtype="fp32", layout="linear")
    b.buffers.append(y)
    b.epoch(0, "copy")
    b.se_buf(0, "read", x)
    arith_cmd(b, 0, "copy", 1, 1, rows * n, dtype="fp32")
    b.se_buf(5, "write", mid)
    b.link("SE0", "ARITH0")
    b.link("ARITH0", "SE5")
    b.run_wait()
    flat = Buffer("mid2", "activation", "npuRAM4", mid.offset, mid.size, 128, shape=(rows, n), dtype="fp32")
    b.host("Softmax", [flat], [y], layer="softmax", axis=-1)
    xin = RNG.standard_normal((1, rows * n, 1, 1)).astype(np.float32)
    res = npusim.run(b.program(), {"x": xin})
    assert res.status == "ok", res.report_text()
    v = xin.reshape(rows, n).astype(np.float64)
    want = np.exp(v - v.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    np.testing.assert_allclose(res.outputs["y"], want, rtol=1e-6)
    host = [e for e in res.stats.epochs if e.kind == "host"][0]
    h = PROFILE.host
    assert host.layer == "softmax"
    assert host.cycles == (h.call_cycles + h.cycles["transcendental"] * rows * n) * PROFILE.clock / h.clock


def test_one_weight_constant_read_as_two_conv_shapes():
    """Two convs stream the same constant bytes as weights of different shapes (3x3x16 -> 16 and
    1x1x16 -> 144): each computes with its own reading, also in repeated runs (the float32 weight
    copies a Program keeps are keyed by the bytes and the shape they are read as)."""
    h = w = 6
    b = Builder()
    x = b.fm("x", "input", h, w, 16)
    wts = ints((16, 3, 3, 16))
    waddr = b.const("w", wts.astype(np.int8).tobytes())
    convs = []
    for eid, (oc, k, pad) in enumerate([(16, 3, 1), (144, 1, 0)]):
        bias, mult = ints(oc, -500, 500), ints(oc, 1 << 30, (1 << 31) - 1)
        shift = ints(oc, 0, 2) + 30 + int(np.log2(np.sqrt(k * k * 16) * 9000 / 50))
        qaddr = b.const(f"q{eid}", i32_table(np.stack([bias, mult, shift], 1)))
        y = b.fm(f"y{eid}", "output", h, w, oc, pool="npuRAM4")
        b.epoch(eid, f"conv{eid}")
        b.se_buf(0, "read", x)
        b.se_const(1, waddr, wts.size)
        conv_cmd(b, 0, x, oc, k, k, pad=pad, qparams=qaddr, in_zp=3, out_zp=-2)
        b.se_buf(5, "write", y)
        b.link("SE0", "CA0", 0)
        b.link("SE1", "CA0", 1)
        b.link("CA0", "SE5")
        b.run_wait()
        convs.append((wts.reshape(oc, k, k, 16), bias, mult, shift, pad))
    prog = b.program()
    for seed in (1, 2, 3):
        xv = np.random.default_rng(seed).integers(-128, 128, (1, 16, h, w)).astype(np.float32)
        res = npusim.run(prog, {"x": xv}, npusim.RunOptions(trace=False))
        assert res.status == "ok", res.report_text()
        for eid, (wk, bias, mult, shift, pad) in enumerate(convs):
            want = ref_conv(hwc(xv).astype(np.int64), wk, bias, mult, shift, 3, -2, 1, pad, 1)
            np.testing.assert_array_equal(hwc(res.raw_outputs[f"y{eid}"]), want)
            assert_varied(want)
