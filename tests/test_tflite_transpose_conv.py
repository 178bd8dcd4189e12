"""TFLite TRANSPOSE_CONV lowered onto ConvTranspose (issue 37 C: CenterFace), against the TFLite interpreter."""

from __future__ import annotations

import numpy as np
import pytest

from npusim.compiler import CompileOptions, compile
from npusim.cpu.kernels import conv_transpose
from npusim.zoo.tflite_writer import TFLiteWriter

pytest.importorskip("ai_edge_litert")


def transpose_conv_model(cin=8, cout=16, hw=(6, 5), k=3, stride=2, padding="SAME", per_channel=True, bias=True,
                         act="NONE", seed=0) -> bytes:
    """input [1, H, W, cin] int8 -> TRANSPOSE_CONV (filter [cout, k, k, cin]) -> [1, OH, OW, cout] int8, quantized
    the way the converter does (weights symmetric per output channel or per tensor, int32 bias at s_in * s_w)."""
    rng = np.random.default_rng(seed)
    h, w = hw
    oh, ow = (h * stride, w * stride) if padding == "SAME" else ((h - 1) * stride + k, (w - 1) * stride + k)
    s_in, z_in = 0.03, -5
    wf = rng.standard_normal((cout, k, k, cin)) * rng.uniform(0.2, 1.0, (cout, 1, 1, 1))
    amax = np.abs(wf).reshape(cout, -1).max(axis=1)
    s_w = (amax / 127.0) if per_channel else np.full(cout, amax.max() / 127.0)
    wq = np.clip(np.rint(wf / s_w[:, None, None, None]), -127, 127).astype(np.int8)
    bq = np.rint(rng.standard_normal(cout) * 0.5 / (s_in * s_w)).astype(np.int32)
    # the output scale from the float result on a typical input
    x = (rng.integers(-128, 128, (1, cin, h, w)) - z_in) * s_in
    pads = _pads(h, w, oh, ow, k, stride, padding)
    yf = conv_transpose(x, wq.transpose(3, 0, 1, 2) * s_w[None, :, None, None],
                        bq * s_in * s_w if bias else None, pads)
    s_out = float(np.abs(yf).max() / 120.0)
    t = TFLiteWriter()
    xi = t.tensor("input", [1, h, w, cin], "int8", scale=s_in, zero_point=z_in)
    shape = t.tensor("output_shape", [4], "int32", data=[1, oh, ow, cout])
    wi = t.tensor("filter", [cout, k, k, cin], "int8", data=wq, scale=s_w if per_channel else s_w[0], zero_point=0,
                  axis=0)
    ins = [shape, wi, xi]
    if bias:
        ins.append(t.tensor("bias", [cout], "int32", data=bq, scale=s_in * s_w if per_channel else s_in * s_w[0],
                            zero_point=0))
    y = t.tensor("output", [1, oh, ow, cout], "int8", scale=s_out, zero_point=3)
    t.op("TRANSPOSE_CONV", ins, [y], "TransposeConvOptions", padding=padding, stride_h=stride, stride_w=stride,
         fused_activation_function=act)
    return t.finish([xi], [y])


def _pads(h, w, oh, ow, k, s, padding) -> dict:
    """ONNX ConvTranspose attributes of TFLite's placement (independent of the front end: TFLite's
    ComputePaddingHeightWidth on the output size, the crop at the end)."""
    b, e = [], []
    for n_in, n_out in ((h, oh), (w, ow)):
        conv_out = -(-n_out // s) if padding == "SAME" else (n_out - k + s) // s
        p = max(((conv_out - 1) * s + k - n_out) // 2, 0)
        b.append(p)
        e.append(s * (n_in - 1) + k - p - n_out)
    return dict(strides=[s, s], pads=b + e)


CASES = [  # (attributes, on the NPU)
    (dict(stride=2, padding="SAME", per_channel=True, bias=True), True),
    (dict(stride=2, padding="SAME", per_channel=False, bias=True), True),
    (dict(stride=2, padding="VALID", per_channel=True, bias=False), True),
    (dict(stride=1, padding="SAME", per_channel=True, bias=False), True),
    (dict(stride=1, padding="VALID", per_channel=False, bias=True), True),
    (dict(stride=2, padding="SAME", per_channel=True, bias=True, k=4, act="RELU"), True),
    (dict(stride=2, padding="SAME", per_channel=True, bias=True, k=2, cout=4), False),  # image-layout output (C <= 4)
    (dict(stride=2, padding="SAME", per_channel=True, bias=True, k=1), False),  # a phase with no taps (output_padding)
]


@pytest.mark.parametrize("case, npu", CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items())
                         if isinstance(c, dict) else f"npu={c}")
def test_transpose_conv_matches_the_interpreter(case, npu):
    """On the NPU every int8 output equals the interpreter's: the phases' CONVs take the model's integers, int32
    biases and per-channel scales, so the accumulator and TFLite's requantization (s_in * s_w / s_out as a fixed-point
    multiplier) are the interpreter's. On the CPU the host computes in float from the dequantized operands and rounds
    half to even once: within one step of the interpreter's integer rounding."""
    from npusim.reference import validate
    from npusim.runtime import seeded_inputs

    model = transpose_conv_model(**case)
    prog = compile(model, CompileOptions(mem_align=128))
    assert (prog.host_layers == []) == npu, prog.host_layers
    for seed in (0, 1):
        rep = validate(prog, model, seeded_inputs(prog, seed))
        assert rep.run_result.status == "ok", rep.run_result.report_text()
        for met in rep.metrics.values():
            assert met.max_steps == 0 if npu else met.max_steps <= 1, met.text()


def test_output_shape_must_match_the_declared_output():
    from npusim.compiler.frontends.tflite_reader import read_tflite
    from npusim.errors import ModelError

    model = read_tflite(transpose_conv_model())
    shape_tensor = next(t for t in model.tensors if t.name == "output_shape")
    shape_tensor.data[1] += 1  # the reader's copy: a model whose output_shape input contradicts its output tensor
    from npusim.compiler.frontends.tflite_front import build_graph

    with pytest.raises(ModelError, match=r"operator 0 \(TRANSPOSE_CONV\): output shape \[1, 13, 10, 16\] is not"):
        build_graph(model)


@pytest.mark.parametrize("per_channel", [True, False])
def test_qdq_convtranspose_runs_on_the_npu(per_channel):
    """Pre-quantized ConvTranspose weights (ONNX QDQ, per channel along axis 1 or per tensor) keep the model's
    integers in every phase (was: the CPU, whose software epochs hit the watchdog on this U-Net)."""
    from npusim.reference import validate
    from npusim.runtime import seeded_inputs
    from npusim.zoo.quantized import float_model, quantize_onnx

    m = quantize_onnx(float_model("unet_convtranspose_style", 32), per_channel=per_channel)
    prog = compile(m, CompileOptions(mem_align=128))
    assert prog.host_layers == []
    rep = validate(prog, m, seeded_inputs(prog, 0))
    assert rep.passed, rep.text()
