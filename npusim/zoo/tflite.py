"""TFLite int8 models for tests and demos (listed by `npusim zoo`: they return `TFLiteModel` bytes).

`tflite_op` (one supported builtin on a small input, the per-builtin bit-exactness models),
`tflite_mobilenet_v2_block`, `tflite_tiny_yolo_v2` and `tflite_model` (any float zoo model by name):
each builds the zoo's float ONNX model and quantizes it with `tflite_export.to_tflite`.
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from .tflite_export import TFLiteModel, to_tflite
from .tflite_writer import TFLiteWriter

__all__ = ["TFLiteModel", "to_tflite", "tflite_model", "tflite_op", "tflite_mobilenet_v2_block", "tflite_tiny_yolo_v2",
           "TFLITE_OPS"]


def tflite_model(name: str = "mobilenet_style", size: int = 32, io: str = "int8", quantize: bool = True,
                 seed: int = 0) -> TFLiteModel:
    """Any float zoo model (of npusim.zoo or npusim.zoo.st, with a `size` parameter), quantized to int8 and
    written as TFLite (module doc)."""
    from .quantized import float_model

    return to_tflite(float_model(name, size, seed), seed=seed, quantize=quantize, io=io)


TFLITE_OPS = ("conv", "conv_valid", "conv_stride2", "depthwise", "fully_connected", "add", "sub", "mul",
              "mul_const", "average_pool", "max_pool", "mean", "reshape", "softmax", "logistic", "hard_swish",
              "relu", "relu6", "leaky_relu", "tanh", "concat", "concat_rescale", "pad", "resize_nearest",
              "resize_bilinear", "transpose", "strided_slice", "split", "quantize", "dequantize")


def tflite_op(kind: str = "conv", c: int = 16, h: int = 8, w: int = 8, io: str = "int8", seed: int = 0) -> TFLiteModel:
    """One TFLite builtin (`kind`, one of TFLITE_OPS) on a 1 x h x w x c int8 input (after a 1x1 conv where
    the op needs a computed operand), quantized like the converter would (module doc)."""
    from . import Builder

    if kind not in TFLITE_OPS:
        raise ValueError(f"tflite_op: unknown kind {kind!r} (kinds: {', '.join(TFLITE_OPS)})")
    b = Builder(seed=seed + sum(map(ord, kind)))
    x = "input"
    if kind == "conv":
        y = b.conv(x, c, c, k=3)
    elif kind == "conv_valid":
        y = b.conv(x, c, 2 * c, k=3, pad=0)
    elif kind == "conv_stride2":
        y = b.node("Relu", [b.conv(x, c, c, k=3, stride=2)])
    elif kind == "depthwise":
        y = b.node("Clip", [b.conv(x, c, c, k=3, groups=c), b.const(np.float32(0)), b.const(np.float32(6))])
    elif kind == "fully_connected":
        y = b.fc(b.node("Flatten", [x], axis=1), c * h * w, 10)
    elif kind in ("add", "sub", "mul"):
        y = b.node(kind.capitalize(), [x, b.conv(x, c, c, k=1)])
    elif kind == "mul_const":
        y = b.node("Mul", [x, b.const(np.linspace(0.5, 2.0, c, dtype=np.float32).reshape(1, c, 1, 1))])
    elif kind == "average_pool":
        y = b.node("AveragePool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    elif kind == "max_pool":
        y = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    elif kind == "mean":
        y = b.node("ReduceMean", [x], axes=[2, 3], keepdims=0)
    elif kind == "reshape":
        y = b.node("Reshape", [x, b.const(np.array([1, c * h * w], np.int64))])
    elif kind == "softmax":
        y = b.node("Softmax", [b.fc(b.node("Flatten", [x], axis=1), c * h * w, 10)], axis=1)
    elif kind in ("logistic", "hard_swish", "relu", "tanh", "leaky_relu"):
        op = {"logistic": "Sigmoid", "hard_swish": "HardSwish", "relu": "Relu", "tanh": "Tanh",
              "leaky_relu": "LeakyRelu"}[kind]
        y = b.node(op, [x], **({"alpha": 0.1} if kind == "leaky_relu" else {}))
    elif kind == "relu6":
        y = b.node("Clip", [x, b.const(np.float32(0)), b.const(np.float32(6))])
    elif kind == "concat":
        y = b.node("Concat", [x, b.node("MaxPool", [x], kernel_shape=[1, 1])], axis=1)
    elif kind == "concat_rescale":
        y = b.node("Concat", [x, b.conv(x, c, c, k=1)], axis=1)
    elif kind == "pad":
        y = b.node("Pad", [x, b.const(np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64))])
    elif kind == "resize_nearest":
        y = b.resize(x, 2)
    elif kind == "resize_bilinear":
        y = b.resize(x, 2, mode="linear")
    elif kind == "transpose":
        y = b.node("Transpose", [x], perm=[0, 1, 3, 2])
    elif kind == "strided_slice":
        y = b.node("Slice", [x, b.const(np.array([1, 0], np.int64)), b.const(np.array([h, w], np.int64)),
                             b.const(np.array([2, 3], np.int64)), b.const(np.array([2, 3], np.int64))])
    elif kind == "split":
        name = b._name("split")
        b.nodes.append(helper.make_node("Split", [x], [name + "_a", name + "_b"], name=name, axis=1))
        return to_tflite(b.model([1, c, h, w], [name + "_a", name + "_b"], "tflite_split"), seed=seed, io=io)
    elif kind in ("quantize", "dequantize"):
        return _boundary_op(kind, c, h, w, seed)
    return to_tflite(b.model([1, c, h, w], [y], f"tflite_{kind}"), seed=seed, io=io)


def _boundary_op(kind: str, c: int, h: int, w: int, seed: int) -> TFLiteModel:
    """QUANTIZE (int8 -> int8 at another scale and zero point) or DEQUANTIZE (int8 -> float32 output)."""
    t = TFLiteWriter("npusim.zoo.tflite")
    x = t.tensor("input", [1, h, w, c], "int8", scale=0.02, zero_point=-3)
    if kind == "quantize":
        y = t.tensor("output", [1, h, w, c], "int8", scale=0.037, zero_point=11)
        t.op("QUANTIZE", [x], [y])
    else:
        r = t.tensor("relu", [1, h, w, c], "int8", scale=0.02, zero_point=-3)
        t.op("RELU", [x], [r])
        y = t.tensor("output", [1, h, w, c], "float32")
        t.op("DEQUANTIZE", [r], [y])
    return TFLiteModel(t.finish([x], [y]))


def tflite_mobilenet_v2_block(size: int = 56, cin: int = 24, expand: int = 6, io: str = "int8",
                              seed: int = 0) -> TFLiteModel:
    """A MobileNet-v2 inverted residual block (1x1 expand + ReLU6, 3x3 depthwise + ReLU6, 1x1 linear
    project, residual add) on a size x size x cin input, int8 TFLite."""
    from . import Builder

    b = Builder(seed)
    y = b.cbr("input", cin, cin * expand, k=1, act="Relu6")
    y = b.cbr(y, cin * expand, cin * expand, groups=cin * expand, act="Relu6")
    y = b.cbr(y, cin * expand, cin, k=1, act=None)
    out = b.node("Add", ["input", y], name="block_out")
    return to_tflite(b.model([1, cin, size, size], [out], "mobilenet_v2_block"), seed=seed, io=io)


def tflite_tiny_yolo_v2(size: int = 224, classes: int = 1, io: str = "int8", seed: int = 0) -> TFLiteModel:
    """Tiny YOLO v2 (npusim.zoo.st.tiny_yolo_v2: darknet yolov2-tiny), int8 TFLite."""
    from .st import tiny_yolo_v2

    return to_tflite(tiny_yolo_v2(size=size, classes=classes, seed=seed), seed=seed, io=io)
