"""Model families users bring (issue 11 item 6) and the public zoo networks (Done-when): compiled at
--mem-align 128 in int8 and fp16, run without a fault and validated against ONNX Runtime."""

from __future__ import annotations

import onnx
import pytest

import npusim
import npusim.runtime
from npusim.compiler import CompileOptions, compile
from npusim.compiler.driver import cpu_summary
from npusim.hw import load_profile
from npusim.reference import validate
from npusim.zoo import families

PROFILE = load_profile()


def _validated(model, q, profile=PROFILE):
    prog = compile(model, CompileOptions(quantization=q, mem_align=128), profile=profile)
    rep = validate(prog, model, npusim.runtime.seeded_inputs(prog, 0), profile=profile)
    assert rep.run_result.status == "ok", rep.run_result.report_text()
    cos = min(v.cosine for v in rep.metrics.values())
    assert cos >= (0.99 if q == "int8" else 0.9999), rep.text()
    assert rep.passed, rep.text()
    return prog, rep


@pytest.mark.parametrize("q", ["int8", "fp16"])
@pytest.mark.parametrize("name", families.__all__)
def test_family_validates(name, q):
    prog, rep = _validated(getattr(families, name)(), q)
    kinds = {e.kind for e in rep.run_result.stats.epochs}
    assert "npu" in kinds


def test_families_use_the_operators_they_are_about():
    """Each family really contains its operators (so a pass is not vacuous), and what must run on the NPU does."""
    ops = {name: {n.op_type for n in getattr(families, name)().graph.node} for name in families.__all__}
    assert {"Reshape", "Transpose", "Split", "Concat"} <= ops["shufflenet_block_style"]
    assert "LRN" in ops["inception_block_style"]
    assert {"Unsqueeze", "Concat"} <= ops["densenet_block_style"]
    assert {"Split", "Slice", "Reshape", "Transpose", "Concat", "Resize"} <= ops["yolo_head_style"]
    assert "ConvTranspose" in ops["unet_convtranspose_style"]
    assert {"LayerNormalization", "MatMul", "Softmax", "Gelu"} <= ops["transformer_block_style"]
    assert {"Conv", "Concat", "Gather", "Gemm", "MatMul"} <= ops["vit_style"]
    assert {"Conv", "MaxPool", "ReduceMean"} <= ops["audio_conv1d_style"]
    for name, on_npu in (("vit_style", "Conv"), ("audio_conv1d_style", "Conv"), ("audio_conv1d_style", "ReduceMean")):
        prog = compile(getattr(families, name)(), CompileOptions())  # the patch embedding / 1-D convs
        assert not any(line.startswith(on_npu + " ") for line in cpu_summary(prog, PROFILE)), (name, on_npu)
    unet = families.unet_convtranspose_style()
    prog = compile(unet, CompileOptions())
    assert not any(line.startswith("ConvTranspose") for line in cpu_summary(prog, PROFILE))
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in unet.graph.value_info}
    concats = sorted(shapes[n.output[0]][1] for n in unet.graph.node if n.op_type == "Concat")
    assert 512 in concats and 1024 in concats


@pytest.mark.slow
@pytest.mark.parametrize("name", ["squeezenet", "shufflenet_v2", "inception_v1", "densenet121", "alexnet"])
def test_public_network_int8(name, zoo_file):
    _validated(onnx.load(zoo_file(name)), "int8")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["squeezenet", "shufflenet_v2", "inception_v1"])
def test_public_network_fp16(name, zoo_file):
    _validated(onnx.load(zoo_file(name)), "fp16")


@pytest.mark.slow
def test_alexnet_fp16_needs_a_larger_flash(zoo_file):
    m = onnx.load(zoo_file("alexnet"))  # public.alexnet(), built once per run (3 s)
    with pytest.raises(npusim.errors.ModelError, match="too big for octoFlash"):
        compile(m, CompileOptions(quantization="fp16"))
    _validated(m, "fp16", profile=load_profile(overrides=["pool.octoFlash.size=128MiB"]))
