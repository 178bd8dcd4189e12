"""Element permutations as CONVs gathering channels (issue 11 item 3, compiler/recipes/moveconv.py GatherPlan): an
output pixel that is one input pixel with its channels picked by the pixel's phase (DepthToSpace CRD and DCR
across 16-channel blocks, any block size; channel shuffles the stream-engine pattern pairs cannot walk).
Each compiled int8, fp16 and fp32 at --mem-align 128 and 16, run with the checker (no fault) and compared
with ONNX Runtime, checked to have no HOST epoch; the host keeps it where the profile finds the host faster."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from npusim.compiler.driver import cpu_summary
from npusim.hw import load_profile
from test_npu_moveconv import POINTS, _graph, _run  # the same compile - check - validate as the moving CONVs

PROFILE = load_profile()
SLOW_HOST = load_profile(overrides=["host.cycles.movement=40", "host.cycles.elementwise=40"])
FAST_HOST = load_profile(overrides=["host.cycles.movement=0.01", "host.cycles.elementwise=0.01"])


def _d2s(shape, b, mode="CRD"):
    return _graph([helper.make_node("Relu", ["x"], ["r"]),
                   helper.make_node("DepthToSpace", ["r"], ["y"], blocksize=b, mode=mode)], {"x": shape})


def _shuffle(shape, groups):
    """ShuffleNet's channel shuffle: Reshape [1, g, C/g, H, W] - Transpose - Reshape back."""
    n, c, h, w = shape
    return _graph([helper.make_node("Relu", ["x"], ["r"]),
                   helper.make_node("Reshape", ["r", "s5"], ["a"]),
                   helper.make_node("Transpose", ["a"], ["t"], perm=[0, 2, 1, 3, 4]),
                   helper.make_node("Reshape", ["t", "s4"], ["y"])], {"x": shape},
                  {"s5": np.array([n, groups, c // groups, h, w], np.int64), "s4": np.array(shape, np.int64)})


def _swap_within_blocks(shape):
    """Within each 16-channel block, channel a * 8 + b moves to b * 2 + a: a permutation of the channels that
    never leaves its block (a grouped CONV, 16 channels a group)."""
    n, c, h, w = shape
    return _graph([helper.make_node("Relu", ["x"], ["r"]),
                   helper.make_node("Reshape", ["r", "s6"], ["a"]),
                   helper.make_node("Transpose", ["a"], ["t"], perm=[0, 1, 3, 2, 4, 5]),
                   helper.make_node("Reshape", ["t", "s4"], ["y"])], {"x": shape},
                  {"s6": np.array([n, c // 16, 2, 8, h, w], np.int64), "s4": np.array(shape, np.int64)})


CASES = {
    "crd-64ch-b2": _d2s((1, 64, 16, 16), 2),       # 16 channels per phase, every input block
    "crd-48ch-b2": _d2s((1, 48, 12, 16), 2),       # 12 output channels: a partial block
    "crd-72ch-b3": _d2s((1, 72, 8, 8), 3),         # block size 3, 8 output channels
    "crd-128ch-b4": _d2s((1, 128, 4, 8), 4),       # 8 output channels of 16 phases
    "crd-16ch-b2-image": _d2s((1, 16, 6, 8), 2),  # 4 output channels: an image-layout output
    "dcr-48ch-b2": _d2s((1, 48, 12, 16), 2, "DCR"),  # a DCR phase box crossing a block
    "shuffle-48ch-3-groups": _shuffle((1, 48, 8, 8), 3),
    "shuffle-40ch-5-groups": _shuffle((1, 40, 6, 8), 5),
    "swap-within-blocks-32ch": _swap_within_blocks((1, 32, 4, 8)),
}


# int8 image pixels of 4 channels: phase (0, 1) of the output starts 4 B off the 8 B bus-word grid (below)
@pytest.mark.parametrize("case,q,align", [(c, q, a) for c in sorted(CASES) for q, a in POINTS
                                          if not (c.endswith("-image") and q == "int8")])
def test_channel_gathers_run_on_the_npu(case, q, align):
    prog, _ = _run(CASES[case], q, align, SLOW_HOST)
    # in fp16 the planner's stream-engine pattern pairs are estimated cheaper for the swap within blocks and
    # for the DCR box (its 12-channel output plane zeroed by a copy first: 47,750 simulated cycles vs 58,386
    # for the gather CONVs)
    assert any(c.op == "CONV" for c in prog.commands) or case.startswith(("swap", "dcr")) and q == "fp16"


def test_the_gather_is_kept_where_the_n657_host_is_slower():
    """On the n657 profile DepthToSpace CRD of 64 channels runs on the NPU in int8 and fp16 (four grouped phase
    CONVs side by side in one epoch, written strided); 72 channels at block size 3 (nine phases of 8 channels
    on an 8 x 8 map: three epochs) cost more than the host's copy, and say so."""
    for q in ("int8", "fp16"):
        prog, _ = _run(CASES["crd-64ch-b2"], q, 128, PROFILE)
        convs = [c for c in prog.commands if c.op == "CONV"]
        assert len(convs) == 4 and all(c.args["groups"] > 1 for c in convs)
        assert sum(c.op == "EPOCH" for c in prog.commands) == 2  # the Relu, then the four phases
        prog, _ = _run(CASES["crd-72ch-b3"], q, 128, PROFILE, on_cpu=("DepthToSpace",))
        why = cpu_summary(prog, PROFILE)[0]
        assert "its channel gather (9 one-hot CONV(s), ~" in why and "slower than the host's copy" in why


@pytest.mark.parametrize("case", ["crd-64ch-b2", "shuffle-48ch-3-groups"])
def test_a_fast_host_keeps_the_cpu(case):
    prog, _ = _run(CASES[case], "int8", 128, FAST_HOST, on_cpu=("DepthToSpace",) if case.startswith("crd")
                   else ("Reshape", "Transpose"))
    assert not any(c.op == "CONV" for c in prog.commands)


def test_a_phase_off_the_bus_word_grid_stays_on_the_cpu_with_the_reason():
    prog, _ = _run(CASES["crd-16ch-b2-image"], "int8", 128, SLOW_HOST, on_cpu=("DepthToSpace",))
    assert "as CONVs gathering channels: its phase (0, 1): a part starting 4 B off" in cpu_summary(prog, SLOW_HOST)[0]


def test_gather_groups():
    """DepthToSpace CRD: output channel o of every phase reads input channels o b^2 .. o b^2 + b^2 - 1 (groups
    C'); DCR of 12 channels a phase: dense; a permutation within blocks: one CONV of 16-channel groups."""
    convs = [c for c in _run(CASES["crd-72ch-b3"], "int8", 128, SLOW_HOST)[0].commands if c.op == "CONV"]
    assert len(convs) == 9 and all(c.args["groups"] == 8 and c.args["out_c"] == 8 for c in convs)
    convs = [c for c in _run(CASES["dcr-48ch-b2"], "int8", 128, SLOW_HOST)[0].commands if c.op == "CONV"]
    assert len(convs) == 4 and all(c.args["groups"] == 1 and c.args["out_c"] == 12 for c in convs)
    convs = [c for c in _run(CASES["swap-within-blocks-32ch"], "fp32", 128, SLOW_HOST)[0].commands if c.op == "CONV"]
    assert convs and all(c.args["groups"] * 16 == c.args["in_c"] for c in convs)
