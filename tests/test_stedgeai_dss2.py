"""CONVACC's depthwise stride-2 mode (CTRL.DSS2MODE): a stream element wider than the unit's features carries
several features, low bytes first, on synthetic epochs laid out as ST's compiler lays them out (an 8-bit
channels-last map read as 16-bit elements, a channel pair or two per element, one frame per channel group)."""

from __future__ import annotations

import numpy as np
import pytest

from npusim.errors import EXIT_INVALID_INPUT, StImportError
from npusim.importers.stedgeai import dss2
from npusim.importers.stedgeai import exec_plan as xp
from npusim.importers.stedgeai import execute as ex
from npusim.importers.stedgeai.model import HwEpoch, Link, Streng, Unit
from test_stedgeai_ecblob import SHARED, needs_shared

RAM, FLASH = 0x34200000, 0x70000000
H = W = 6  # the feature map; a 3x3 depthwise kernel at stride 2, padded right and bottom (TF's SAME)
OH = OW = 3


def _epoch(channels: int, per_frame: int, raw: bool = False, **unit_fields) -> HwEpoch:
    """Engine 0 reads the `channels`-deep uint8 map as 16-bit elements, `per_frame` channels a frame (one frame
    per channel group): channels last, each frame 2 bytes further (the compiler's loop offset), or with `raw`
    the map stored in blocks of `per_frame` channels, one raw frame a block. Engine 1 reads the kernels (raw,
    8-bit), engine 2 writes the unit's 16-bit outputs frame after frame."""
    frames = channels // per_frame
    if raw:
        read = Streng(engine=0, dir=0, addr=RAM, raw=True, frame_count=H * W * per_frame // 2, frame_loop_cnt=1,
                      loop_offset=H * W * per_frame, frame_tot_cnt=frames, nbits_in=16, nbits_out=16)
    else:
        read = Streng(engine=0, dir=0, addr=RAM, fwidth=W, fheight=H, batch_depth=per_frame // 2,
                      batch_offset=channels, line_offset=W * channels, frame_loop_cnt=1, loop_offset=per_frame,
                      frame_tot_cnt=frames, nbits_in=16, nbits_out=16)
    kernels = Streng(engine=1, dir=0, addr=FLASH, raw=True, frame_count=frames * per_frame * 9 * per_frame,
                     continuous=True)
    write = Streng(engine=2, dir=1, addr=RAM + 0x1000, raw=True, frame_count=frames * OH * OW * per_frame,
                   nbits_in=16, nbits_out=16)
    fields = dict(fWidth=W, fHeight=H, kernelWidth=3, kernelHeight=3, nKernels=per_frame, batchDepth=per_frame,
                  hstride=2, vstride=2, right_padding=1, bot_padding=1, right_crop=W - 1, bot_crop=H - 1,
                  simd=1, inbytes_f=1, f_unsigned=1, outbytes_o=2, saturation_o=1, dss2mode=1)
    fields.update(unit_fields)
    links = (Link("CONVACC", 0, 0, "STRENG", 0, 0), Link("CONVACC", 0, 1, "STRENG", 1, 0),
             Link("STRENG", 2, 0, "CONVACC", 0, 0))
    return HwEpoch(number=3, strengs=(read, kernels, write), units=(Unit("CONVACC", 0, tuple(fields.items())),),
                   links=links)


def _depthwise_stride2(feat: np.ndarray, taps: np.ndarray) -> np.ndarray:
    """(OH, OW, C) sums of a 3x3 stride-2 depthwise convolution, zero padding right and bottom."""
    x = np.zeros((H + 1, W + 1, feat.shape[2]), np.int64)
    x[:H, :W] = feat
    out = np.zeros((OH, OW, feat.shape[2]), np.int64)
    for dy in range(3):
        for dx in range(3):
            out += x[dy:dy + 2 * OH:2, dx:dx + 2 * OW:2] * taps[dy, dx]
    return out


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("channels, per_frame, raw, inbytes_f", [
    (6, 2, False, 1),  # a channel pair per element, one pair a frame (ST FaceDetection's later layers)
    (8, 4, False, 1),  # two pairs per pixel, four channels a frame (its first, svogl's YOLOX)
    (8, 4, True, 2),  # a raw stream over 4-channel blocks, FBYTES 2 (EfficientNet v2B1's first)
])
def test_each_sixteen_bit_element_carries_two_byte_features_low_byte_first(channels, per_frame, raw, inbytes_f,
                                                                           fast):
    rng = np.random.default_rng(channels + fast)
    feat = rng.integers(0, 256, (H, W, channels), dtype=np.uint8)
    taps = rng.integers(-128, 128, (3, 3, channels), dtype=np.int8)
    frames = channels // per_frame
    dense = np.zeros((frames, per_frame, 3, 3, per_frame), np.int8)  # the compiler's kernels: K x kh x kw x C
    for k in range(per_frame):
        dense[:, k, :, :, k] = np.moveaxis(taps[:, :, k::per_frame], 2, 0)
    stored = feat.reshape(H, W, frames, per_frame).transpose(2, 0, 1, 3) if raw else feat  # blocks of channels
    mem = ex.Memory([("RAM", RAM, 0x4000, False), ("FLASH", FLASH, 0x1000, True)])
    mem.load(RAM, np.ascontiguousarray(stored).tobytes())
    mem.load(FLASH, dense.tobytes())
    ep = _epoch(channels, per_frame, raw, inbytes_f=inbytes_f)
    plan = xp.epoch_plan(ep, {}, mem.read_only_test()) if fast else None
    ex.run_epoch(ep, mem, {}, plan)
    got = np.frombuffer(mem.bytes_at(RAM + 0x1000, frames * OH * OW * per_frame * 2), "<i2")
    want = _depthwise_stride2(feat, taps).reshape(OH, OW, frames, per_frame).transpose(2, 0, 1, 3)
    assert np.array_equal(got, np.clip(want, -32768, 32767).reshape(-1))


def test_features_per_element_are_the_streams_bytes_in_the_mode_only():
    u = Unit("CONVACC", 0, (("dss2mode", 1), ("inbytes_f", 2), ("simd", 1)))
    assert [dss2.features_per_element(u, b) for b in (8, 16, 24)] == [1, 2, 3]
    assert dss2.features_per_element(Unit("CONVACC", 0, (("inbytes_f", 1),)), 16) == 1  # not in the mode
    patterns, bits = dss2.unpack(np.array([0x0201, 0xFFFE]), 16, u)
    assert bits == 8 and patterns.tolist() == [1, 2, 0xFE, 0xFF]


@pytest.mark.parametrize("other, reason", [("fstat", "with feature-stationary mode"),
                                           ("deepmode", "with deep 1x1 mode"), ("simd", "with SIMD 2")])
def test_the_mode_with_what_the_runtime_refuses_or_npusim_does_not_know_is_refused_in_one_line(other, reason):
    ep = _epoch(6, 2, **{other: 2 if other == "simd" else 1, "fstatcnt": 1})
    mem = ex.Memory([("RAM", RAM, 0x4000, False), ("FLASH", FLASH, 0x1000, True)])
    with pytest.raises(StImportError) as e:
        ex.run_epoch(ep, mem, {})
    assert e.value.exit_code == EXIT_INVALID_INPUT and f"depthwise stride-2 mode {reason}" in str(e.value)
    assert "\n" not in str(e.value)


@needs_shared
def test_a_shared_compiles_convacc_in_the_mode_is_run_not_refused():
    """mnv1's first 8x8 CONVACC with DSS2MODE set passes the unit's checks (it was refused as undescribed);
    with DEEPMODE too it is refused, as ST's runtime refuses it, and so is its 16x8 one (not seen in the mode)."""
    from npusim.importers.stedgeai import load
    from npusim.importers.stedgeai.units_exec import convacc_check

    out = load(SHARED / "st_ic_mnv1_nucleo")
    u = next(u for b in out.blocks for e in b.epochs for u in e.units if u.kind == "CONVACC" and u.get("simd") == 1)

    def with_fields(**kw):
        return Unit(u.kind, u.index, tuple((k, v) for k, v in u.fields if k not in kw) + tuple(kw.items()))

    convacc_check(with_fields(dss2mode=1))
    with pytest.raises(StImportError, match="depthwise stride-2 mode with deep 1x1 mode"):
        convacc_check(with_fields(dss2mode=1, deepmode=1, kernelWidth=1, kernelHeight=1))
    with pytest.raises(StImportError, match="depthwise stride-2 mode with SIMD 2"):
        convacc_check(with_fields(dss2mode=1, simd=2))
