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

RAM, FLASH = 0x34200000, 0x70000000
H = W = 6  # the feature map; a 3x3 depthwise kernel at stride 2, padded right and bottom (TF's SAME)
OH = OW = 3


def _epoch(channels: int, per_frame: int, **unit_fields) -> HwEpoch:
    """Engine 0 reads the `channels`-deep uint8 map as 16-bit elements, `per_frame` channels a frame (one frame
    per channel group, each 2 bytes further: the compiler's loop offset); engine 1 the kernels (raw, 8-bit);
    engine 2 writes the unit's 16-bit outputs frame after frame."""
    frames = channels // per_frame
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
@pytest.mark.parametrize("channels, per_frame", [(6, 2), (8, 4)])
def test_each_sixteen_bit_element_carries_two_features_low_byte_first(channels, per_frame, fast):
    rng = np.random.default_rng(channels + fast)
    feat = rng.integers(0, 256, (H, W, channels), dtype=np.uint8)
    taps = rng.integers(-128, 128, (3, 3, channels), dtype=np.int8)
    frames = channels // per_frame
    dense = np.zeros((frames, per_frame, 3, 3, per_frame), np.int8)  # the compiler's kernels: K x kh x kw x C
    for k in range(per_frame):
        dense[:, k, :, :, k] = np.moveaxis(taps[:, :, k::per_frame], 2, 0)
    mem = ex.Memory([("RAM", RAM, 0x4000, False), ("FLASH", FLASH, 0x1000, True)])
    mem.load(RAM, feat.tobytes())
    mem.load(FLASH, dense.tobytes())
    ep = _epoch(channels, per_frame)
    plan = xp.epoch_plan(ep, {}, mem.read_only_test()) if fast else None
    ex.run_epoch(ep, mem, {}, plan)
    got = np.frombuffer(mem.bytes_at(RAM + 0x1000, frames * OH * OW * per_frame * 2), "<i2")
    want = _depthwise_stride2(feat, taps).reshape(OH, OW, frames, per_frame).transpose(2, 0, 1, 3)
    assert np.array_equal(got, np.clip(want, -32768, 32767).reshape(-1))


def test_features_per_element_follow_the_stream_and_the_units_width():
    u = Unit("CONVACC", 0, (("dss2mode", 1), ("inbytes_f", 1)))
    assert [dss2.features_per_element(u, b) for b in (8, 16, 24)] == [1, 2, 3]
    assert dss2.features_per_element(Unit("CONVACC", 0, (("inbytes_f", 1),)), 16) == 1  # not in the mode
    patterns, bits = dss2.unpack(np.array([0x0201, 0xFFFE]), 16, u)
    assert bits == 8 and patterns.tolist() == [1, 2, 0xFE, 0xFF]


@pytest.mark.parametrize("other", ["fstat", "deepmode"])
def test_the_mode_with_feature_stationary_or_deep_mode_is_refused_in_one_line(other):
    ep = _epoch(6, 2, **{other: 1, "fstatcnt": 1})
    mem = ex.Memory([("RAM", RAM, 0x4000, False), ("FLASH", FLASH, 0x1000, True)])
    with pytest.raises(StImportError) as e:
        ex.run_epoch(ep, mem, {})
    reason = {"fstat": "feature-stationary", "deepmode": "deep 1x1"}[other]
    assert e.value.exit_code == EXIT_INVALID_INPUT and f"depthwise stride-2 mode with {reason} mode" in str(e.value)
    assert "\n" not in str(e.value)
