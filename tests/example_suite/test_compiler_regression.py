"""Example: how a compiler team regression-tests its compiler output with npusim.

Every case compiles one zoo model with one set of options (cached by the plugin), runs it,
and checks: no faults, outputs close to ONNX Runtime, and the golden snapshot next to this
file (cycles +-2%, per-layer cycles, faults, memory map, outputs). After an intended change:

    pytest tests/example_suite --npusim-update-golden      # and commit golden/*.json
"""

import pytest

from npusim import zoo
from npusim.compiler import CompileOptions
from npusim.testing import (NpusimCheckFailed, assert_cycles, assert_matches_reference,
                            assert_no_faults)

MODELS = {
    "conv3x3": lambda: zoo.conv_model(8, 16, 24, 24, 3),
    "resnet": lambda: zoo.resnet_style(),
    "mobilenet": lambda: zoo.mobilenet_style(),
    "squeezenet": lambda: zoo.squeezenet_style(),
    "yolo64": lambda: zoo.yolo_style(size=64),
}
OPTIONS = {
    "int8": CompileOptions(),
    "int8-perlayer-nofuse": CompileOptions(mem_plan="per-layer", fuse="none"),
    "fp16": CompileOptions(quantization="fp16"),
}


@pytest.mark.parametrize("opt", sorted(OPTIONS))
@pytest.mark.parametrize("model", sorted(MODELS))
def test_model(npusim_sim, model, opt):
    onnx_model = MODELS[model]()
    run = npusim_sim.run(onnx_model, OPTIONS[opt], seed=0)
    assert_no_faults(run)
    assert_matches_reference(run, onnx_model)
    # int8 outputs are compared bit for bit; float outputs by their statistics, within a tolerance
    # scaled by the output's spread (a float toolchain change may move the last bits).
    npusim_sim.assert_golden(run, tolerance=0.02,
                             outputs="tolerance" if OPTIONS[opt].quantization == "fp16" else "hash")


def test_misaligned_compile_faults(npusim_sim):
    """mem_align=16 on a 16-channel 52x52 stage: the hardware's 128 B stride granule overruns."""
    run = npusim_sim.run(zoo.conv_model(16, 16, 52, 52, 3), CompileOptions(mem_align=16), seed=0)
    with pytest.raises(NpusimCheckFailed, match=r"npusim fault: (buffer-overflow|out-of-pool) in layer"):
        assert_no_faults(run)
    npusim_sim.assert_golden(run)  # the fault (class, layer, region) is part of the snapshot


def test_aligned_compile_stays_in_budget(npusim_sim):
    """A performance budget: within 4x of one CA's int8 MAC rate for this 3x3 conv."""
    run = npusim_sim.run(zoo.conv_model(16, 16, 52, 52, 3), CompileOptions(mem_align=128), seed=0)
    assert_no_faults(run)
    macs = 16 * 16 * 9 * 52 * 52
    budget = int(4 * macs / npusim_sim.profile.compute.macs("int8"))
    assert_cycles(run, budget=budget)


def test_blob_from_another_compiler(npusim_sim, tmp_path):
    """Any compiler's blob file: verify it against the ISA, run it, check it like our own."""
    from npusim.program.blob import encode_blob
    from npusim.testing import assert_valid_blob

    prog = npusim_sim.compile(zoo.squeezenet_style(), CompileOptions())
    blob = tmp_path / "squeezenet.npu"
    blob.write_bytes(encode_blob(prog, npusim_sim.profile))  # stands in for a foreign toolchain's output
    assert_valid_blob(blob)
    run = npusim_sim.run(blob, seed=0)
    assert_no_faults(run)
    npusim_sim.assert_golden(run)
