"""Tiny ONNX models for the compiler tests (one op family each), built with npusim.zoo.Builder."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from npusim.zoo import Builder


def _stem(b: Builder, cin: int, c: int) -> str:
    return b.conv("input", cin, c, k=3, name="stem")


def op_model(kind: str, c: int = 16, h: int = 12, w: int = 12, cin: int = 3):
    """A stem conv (cin -> c) followed by the op family `kind`; input 'input' (1, cin, h, w)."""
    b = Builder(seed=hash(kind) % 1000)
    x = _stem(b, cin, c)
    cc = c
    if kind == "conv":
        y = b.conv(x, c, 24, k=3)
    elif kind == "conv_stride_asym":
        y = b.conv(x, c, 20, k=3, stride=2, pad=[0, 1, 1, 0])
    elif kind == "conv_same":
        w_ = b.const(np.random.default_rng(1).standard_normal((16, c, 3, 3)).astype(np.float32) * 0.1, "w")
        y = b.node("Conv", [x, w_], auto_pad="SAME_UPPER", strides=[2, 2], kernel_shape=[3, 3])
    elif kind == "depthwise":
        y = b.conv(x, c, c, k=3, groups=c)
    elif kind == "grouped":
        y = b.conv(x, c, 32, k=3, groups=4)
    elif kind == "dilated":
        y = b.conv(x, c, 16, k=3, dilation=2)
    elif kind == "bn":
        y = b.bn(x, c)
    elif kind in ("Relu", "Sigmoid", "Tanh", "HardSwish"):
        y = b.node(kind, [x])
    elif kind == "LeakyRelu":
        y = b.node("LeakyRelu", [x], alpha=0.2)
    elif kind == "Clip":
        y = b.node("Clip", [x, b.const(np.float32(-0.5), "lo"), b.const(np.float32(1.0), "hi")])
    elif kind == "silu":
        y = b.node("Mul", [x, b.node("Sigmoid", [x])])
    elif kind == "add":
        y = b.node("Add", [x, b.conv(x, c, c, k=1)])
    elif kind == "sum":
        y = b.node("Sum", [b.conv(x, c, c, k=1), x])
    elif kind == "mul":
        y = b.node("Mul", [x, b.node("Sigmoid", [b.conv(x, c, c, k=1)])])
    elif kind == "mul_const":
        y = b.node("Mul", [x, b.const(np.linspace(-1, 2, c, dtype=np.float32).reshape(1, c, 1, 1), "k")])
    elif kind == "add_const":
        y = b.node("Add", [x, b.const(np.float32(0.5), "k")])
    elif kind == "maxpool":
        y = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    elif kind == "maxpool_ceil":
        y = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
    elif kind == "avgpool":
        y = b.node("AveragePool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    elif kind == "avgpool_incl":
        y = b.node("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2], count_include_pad=1)
    elif kind == "gap":
        y = b.node("GlobalAveragePool", [x])
    elif kind == "concat":
        y = b.node("Concat", [x, b.conv(x, c, 32, k=1)], axis=1)
    elif kind == "concat3":
        y = b.node("Concat", [b.conv(x, c, 16, k=1), x, b.conv(x, c, 32, k=1)], axis=1)
    elif kind == "concat_misaligned":
        y = b.node("Concat", [b.conv(x, c, 8, k=1), b.conv(x, c, 12, k=1)], axis=1)
    elif kind == "resize_nearest":
        y = b.resize(x, 2)
    elif kind == "resize_bilinear":
        y = b.resize(x, 2, mode="linear")
    elif kind == "gemm":
        y = b.fc(b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1), c, 10)
    elif kind == "gemm_map":
        small = b.node("MaxPool", [x], kernel_shape=[4, 4], strides=[4, 4])
        y = b.fc(b.node("Flatten", [small], axis=1), c * (h // 4) * (w // 4), 10)
    elif kind == "matmul":
        flat = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
        y = b.node("MatMul", [flat, b.const(np.random.default_rng(2).standard_normal((c, 7)).astype(np.float32) * 0.3)])
    elif kind == "softmax":
        y = b.node("Softmax", [b.fc(b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1), c, 10)], axis=1)
    elif kind == "reshape_chain":  # Shape/Gather/Unsqueeze/Concat/Reshape computed shape, folded away
        g = b.node("GlobalAveragePool", [x])
        shp = b.node("Shape", [g])
        n0 = b.node("Gather", [shp, b.const(np.array(0, np.int64), "i")], axis=0)
        dims = b.node("Concat", [b.node("Unsqueeze", [n0, b.const(np.array([0], np.int64), "ax")]),
                                 b.const(np.array([-1], np.int64), "m1")], axis=0)
        y = b.fc(b.node("Reshape", [g, dims]), c, 10)
    elif kind == "identity_dropout":
        y = b.node("Relu", [b.node("Dropout", [b.node("Identity", [x])])])
    else:
        raise KeyError(kind)
    return b.model([1, cin, h, w], [y], kind)


OPS = ["conv", "conv_stride_asym", "conv_same", "depthwise", "grouped", "dilated", "bn", "Relu", "Sigmoid",
       "Tanh", "HardSwish", "LeakyRelu", "Clip", "silu", "add", "sum", "mul", "mul_const", "add_const",
       "maxpool", "maxpool_ceil", "avgpool", "avgpool_incl", "gap", "concat", "concat3", "concat_misaligned",
       "resize_nearest", "resize_bilinear", "gemm", "gemm_map", "matmul", "softmax", "reshape_chain",
       "identity_dropout"]


def qdq_model(c: int = 16, h: int = 8, w: int = 8):
    """A QDQ-quantized conv + relu (weights stored int8 with DequantizeLinear, activations Q/DQ pairs)."""
    rng = np.random.default_rng(3)
    wf = rng.standard_normal((c, 3, 3, 3)).astype(np.float32) * 0.3
    ws = np.float32(np.abs(wf).max() / 127)
    wq = np.clip(np.round(wf / ws), -127, 127).astype(np.int8)
    b = Builder(seed=3)
    xs, ys = b.const(np.float32(4.0 / 255), "xs"), b.const(np.float32(3.0 / 255), "ys")
    zx, zy = b.const(np.int8(0), "zx"), b.const(np.int8(-128), "zy")
    xq = b.node("QuantizeLinear", ["input", xs, zx])
    xd = b.node("DequantizeLinear", [xq, xs, zx])
    wd = b.node("DequantizeLinear", [b.const(wq, "wq"), b.const(ws, "ws"), b.const(np.int8(0), "zw")])
    y = b.node("Relu", [b.node("Conv", [xd, wd], kernel_shape=[3, 3], pads=[1, 1, 1, 1])])
    yq = b.node("QuantizeLinear", [y, ys, zy])
    out = b.node("DequantizeLinear", [yq, ys, zy], name="out")
    return b.model([1, 3, h, w], [out], "qdq")


def dynamic_model():
    """A conv whose input has a symbolic batch and spatial size."""
    b = Builder(seed=4)
    y = b.conv("input", 3, 16, k=3, name="conv")
    g = helper.make_graph(b.nodes, "dyn", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, "H", "W"])],
                          [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)], b.inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def unsupported_model():
    b = Builder(seed=5)
    y = b.node("Erf", [b.conv("input", 3, 16, k=3)], name="my_erf")
    return b.model([1, 3, 8, 8], [y], "unsupported")
