"""The calibrated N657 profile against ST's published latencies, and the fast timing model against
the burst-level reference on the calibration models' layer shapes (issue #13)."""

from __future__ import annotations

import pytest

import npusim
from npusim import zoo
from npusim.zoo import st

TIMING = npusim.RunOptions(timing_only=True, trace=False)

# Distinct conv shapes of the calibration models (MobileNet v1/v2, tiny YOLO v2, RegNetX-200MF):
# (cin, cout, h = w, k, stride, groups); stems, depthwise, pointwise, dense 3x3, group convs, and
# the flash-bound late layers (1x1 1024->1024 and 3x3 512->1024 at 7x7).
LAYERS = [(3, 32, 224, 3, 2, 1), (32, 32, 112, 3, 1, 32), (32, 64, 112, 1, 1, 1), (128, 128, 56, 1, 1, 1),
          (512, 512, 14, 1, 1, 1), (1024, 1024, 7, 1, 1, 1), (96, 96, 112, 3, 2, 96), (16, 96, 112, 1, 1, 1),
          (64, 128, 28, 3, 1, 1), (512, 1024, 7, 3, 1, 1), (368, 368, 7, 1, 1, 1), (56, 56, 28, 3, 2, 7)]


def _body(res) -> float:
    return res.stats.cycles - sum(e.setup_cycles for e in res.stats.epochs)


@pytest.mark.slow
@pytest.mark.parametrize("shape", LAYERS, ids=lambda s: "x".join(map(str, s)))
def test_fast_model_within_3_percent_of_burst_mode(shape):
    cin, cout, h, k, stride, groups = shape
    prog = npusim.compile(zoo.conv_model(cin, cout, h, h, k, stride, groups))
    fast = npusim.run(prog, random_inputs=True, options=TIMING)
    burst = npusim.run(prog, random_inputs=True, options=npusim.RunOptions(timing_only=True, trace=False, mode="burst"))
    assert burst.stats.mode == "burst"
    assert _body(fast) == pytest.approx(_body(burst), rel=0.03)


# Group convs whose per-CA input reads serialize on one RAM's banks while the weights stream from
# flash on the same bus port: a burst waiting for the port holds its banks.
GROUPED = [(56, 56, 28, 3, 1, 7), (96, 96, 28, 3, 1, 12), (64, 64, 32, 3, 2, 8), (32, 32, 56, 3, 2, 2),
           (120, 120, 28, 3, 1, 15), (24, 48, 56, 3, 2, 2)]


@pytest.mark.slow
@pytest.mark.parametrize("shape", GROUPED, ids=lambda s: "x".join(map(str, s)))
def test_fast_model_within_3_percent_of_burst_mode_on_group_convs(shape):
    test_fast_model_within_3_percent_of_burst_mode(shape)


@pytest.mark.slow
def test_default_profile_within_10_percent_of_st_on_the_calibration_models():
    for fig in [f for f in st.PUBLISHED if f.role == "calibration"]:
        prog = npusim.compile(fig.model())
        kib = st.weight_bytes(prog) / 1024
        assert kib == pytest.approx(fig.weights_kib, rel=0.06), fig.name  # the same topology as ST's
        ms = npusim.run(prog, random_inputs=True, options=TIMING).stats.ms
        assert ms == pytest.approx(fig.ms, rel=0.10), f"{fig.name}: npusim {ms:.2f} ms vs ST {fig.ms} ms"


def test_published_figures_name_their_source_and_build():
    roles = {f.role for f in st.PUBLISHED}
    assert roles == {"calibration", "held-out"}
    assert sum(f.role == "calibration" for f in st.PUBLISHED) == 4
    for f in st.PUBLISHED:
        assert f.ms > 0 and f.weights_kib > 0 and f.source
    m = st.mobilenet_v2(width=0.35, size=96, classes=10, style="keras")
    assert m.graph.input[0].type.tensor_type.shape.dim[2].dim_value == 96
    with pytest.raises(ValueError, match="style"):
        st.mobilenet_v1(style="caffe")


@pytest.mark.parametrize("mode", ["fast", "burst"])
def test_a_kernel_larger_than_half_the_kernel_buffer_takes_turns_with_its_weight_stream(mode):
    from npusim.hw.profile import load_profile

    # 3x3x256 = 2304 B per output channel; one CA, so SE0 is the map and SE1 the weights
    prog = npusim.compile(zoo.conv_model(256, 32, 7, 7, 3, 1, 1), npusim.CompileOptions(conv_units=1))
    opts = npusim.RunOptions(timing_only=True, trace=False, mode=mode)

    def epoch(buffer):
        res = npusim.run(prog, random_inputs=True, options=opts,
                         profile=load_profile(overrides=[f"compute.kernel_buffer={buffer}"]))
        return max(res.stats.epochs, key=lambda e: e.macs)

    fits, turns = epoch(8192), epoch(4096)  # 2304 B fits half of 8 KiB, not half of 4 KiB
    ca = max((n for n in fits.stages if n.startswith("CA")), key=fits.stages.get)
    weights = max(v for n, v in fits.stages.items() if n.startswith("SE") and n != "SE0")
    assert fits.cycles - fits.setup_cycles == pytest.approx(max(fits.stages.values()))
    assert turns.stages[ca] == pytest.approx(fits.stages[ca] + weights, rel=0.02)
    assert turns.cycles > fits.cycles
    stalls = turns.stall_cycles  # the CA's compute, then the flash stream by its causes: the whole body
    assert stalls["compute"] == pytest.approx(fits.stages[ca], rel=0.02)
    assert sum(stalls.values()) - stalls["setup"] == pytest.approx(turns.cycles - turns.setup_cycles, rel=0.02)
