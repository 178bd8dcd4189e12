"""Test and demo models built with onnx.helper (opset 17, seeded random weights, NCHW, batch 1).

Every builder returns an onnx.ModelProto with one input "input" and float32 weights scaled so
activations stay O(1) (He-style init). BatchNormalization nodes carry random statistics.

This package holds the small "-style" models of the tests and the demo; whole public networks
with their exact topologies live in submodules of their own (one family of sources per module).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17

__all__ = ["conv_model", "resnet_style", "mobilenet_style", "mobilenet_v3_style", "squeezenet_style", "yolo_style", "unet_style",
           "resnet50", "Builder", "op_model", "OPS", "qdq_model", "dynamic_model", "unsupported_model"]


MAX_WEIGHT_BYTES = 1 << 30  # float32 weights of a zoo model: VGG-19 has 548 MB; ONNX cannot save 2 GiB


class Builder:
    """Tiny graph builder: each method adds nodes and returns the output tensor name."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.n = [], [], 0
        self.weight_bytes = 0

    def reserve(self, *shape: int) -> None:
        """Count a float32 tensor of `shape` against MAX_WEIGHT_BYTES before it is allocated."""
        self.weight_bytes += 4 * int(np.prod(shape, dtype=np.int64))
        if self.weight_bytes > MAX_WEIGHT_BYTES:
            raise ValueError(f"the weights would exceed {MAX_WEIGHT_BYTES >> 30} GiB (MAX_WEIGHT_BYTES)")

    def _name(self, op: str) -> str:
        self.n += 1
        return f"{op.lower()}{self.n}"

    def const(self, arr: np.ndarray, hint: str = "c") -> str:
        name = f"{hint}_{len(self.inits)}"
        a = np.asarray(arr)
        self.inits.append(numpy_helper.from_array(a.astype(np.float32, copy=False) if a.dtype.kind == "f" else a, name))
        return name

    def node(self, op: str, inputs, name: str | None = None, **attrs) -> str:
        name = name or self._name(op)
        self.nodes.append(helper.make_node(op, list(inputs), [name], name=name, **attrs))
        return name

    def conv(self, x, cin, cout, k=3, stride=1, groups=1, pad=None, bias=True, dilation=1, name=None):
        fan_in = cin // groups * k * k
        self.reserve(cout, cin // groups, k, k)
        w = self.rng.standard_normal((cout, cin // groups, k, k)).astype(np.float32) * np.sqrt(2.0 / fan_in)
        ins = [x, self.const(w, "w")]
        if bias:
            ins.append(self.const(self.rng.standard_normal(cout).astype(np.float32) * 0.05, "b"))
        p = (k - 1) // 2 * dilation if pad is None else pad
        pads = list(p) if isinstance(p, (list, tuple)) else [p] * 4
        return self.node("Conv", ins, name, kernel_shape=[k, k], strides=[stride, stride], pads=pads,
                         group=groups, dilations=[dilation, dilation])

    def bn(self, x, c):
        r = self.rng
        ins = [x, self.const((1.0 + 0.1 * r.standard_normal(c)).astype(np.float32), "g"),
               self.const((0.05 * r.standard_normal(c)).astype(np.float32), "beta"),
               self.const((0.05 * r.standard_normal(c)).astype(np.float32), "mean"),
               self.const((1.0 + 0.1 * r.random(c)).astype(np.float32), "var")]
        return self.node("BatchNormalization", ins, epsilon=1e-5)

    def cbr(self, x, cin, cout, k=3, stride=1, groups=1, act="Relu"):
        y = self.bn(self.conv(x, cin, cout, k, stride, groups, bias=False), cout)
        if act == "Relu6":
            return self.node("Clip", [y, self.const(np.float32(0.0), "lo"), self.const(np.float32(6.0), "hi")])
        if act == "SiLU":
            return self.node("Mul", [y, self.node("Sigmoid", [y])])
        if act == "LeakyRelu":
            return self.node("LeakyRelu", [y], alpha=0.1)
        return self.node(act, [y]) if act else y

    def se_block(self, x, c, squeeze):
        """Squeeze-and-excite: x * Sigmoid(1x1 conv(Relu(1x1 conv(GlobalAveragePool(x)))))."""
        s = self.node("GlobalAveragePool", [x])
        s = self.node("Relu", [self.conv(s, c, squeeze, k=1)])
        s = self.node("Sigmoid", [self.conv(s, squeeze, c, k=1)])
        return self.node("Mul", [x, s])

    def fc(self, x, cin, cout):
        self.reserve(cout, cin)
        w = self.rng.standard_normal((cout, cin)).astype(np.float32) * np.sqrt(1.0 / cin)
        b = self.rng.standard_normal(cout).astype(np.float32) * 0.05
        return self.node("Gemm", [x, self.const(w, "fcw"), self.const(b, "fcb")], transB=1)

    def resize(self, x, factor=2, mode="nearest"):
        scales = self.const(np.array([1, 1, factor, factor], np.float32), "scales")
        attrs = dict(mode=mode, coordinate_transformation_mode="asymmetric", nearest_mode="floor") \
            if mode == "nearest" else dict(mode="linear", coordinate_transformation_mode="half_pixel")
        return self.node("Resize", [x, "", scales], **attrs)

    def flatten_by_shape(self, x: str) -> str:
        """x reshaped to [N, -1] the way opset-9 exporters write a flatten: Shape - Gather(0) -
        Unsqueeze(axes=[0]) - Concat with [-1] - Reshape."""
        n = self.node("Gather", [self.node("Shape", [x]), self.const(np.array(0, np.int64), "i0")], axis=0)
        shape = self.node("Concat", [self.node("Unsqueeze", [n], axes=[0]), self.const(np.array([-1], np.int64), "m1")],
                          axis=0)
        return self.node("Reshape", [x, shape])

    def channel_shuffle(self, x: str, c: int, h: int, w: int, groups: int = 2) -> str:
        """ShuffleNet's channel shuffle of a [1, c, h, w] map: Reshape to groups - Transpose - Reshape back."""
        shape = self.const(np.array([1, groups, c // groups, h, w], np.int64), "shp")
        y = self.node("Transpose", [self.node("Reshape", [x, shape])], perm=[0, 2, 1, 3, 4])
        return self.node("Reshape", [y, self.const(np.array([1, c, h, w], np.int64), "shp")])

    def model(self, x_shape, outputs: dict, name="zoo", opset: int = OPSET, ir_version: int = 8,
              out_shapes: dict | None = None) -> onnx.ModelProto:
        """The checked, shape-inferred model of the nodes so far (input "input" of `x_shape`)."""
        shapes = out_shapes or {}
        g = helper.make_graph(self.nodes, name, [helper.make_tensor_value_info("input", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, shapes.get(o)) for o in outputs],
                              self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="npusim.zoo")
        m.ir_version = ir_version
        m = onnx.shape_inference.infer_shapes(m)
        onnx.checker.check_model(m)
        return m


def conv_model(cin=16, cout=16, h=52, w=52, k=3, stride=1, groups=1, pad=None, act=None, bias=True,
               seed=0) -> onnx.ModelProto:
    """A single Conv (optionally followed by an activation op) on a 1 x cin x h x w input."""
    b = Builder(seed)
    y = b.conv("input", cin, cout, k, stride, groups, pad=pad, bias=bias, name="conv")
    if act:
        y = b.node(act, [y], name="act")
    return b.model([1, cin, h, w], [y], "conv_model")


def resnet_style(size=32, width=16, blocks=2, classes=10, seed=0) -> onnx.ModelProto:
    """Stem + basic residual blocks (identity and strided projection shortcuts) + GAP + FC + Softmax."""
    b = Builder(seed)
    x = b.cbr("input", 3, width)
    c = width
    for stage in range(blocks):
        cout, stride = c * (2 if stage else 1), 2 if stage else 1
        y = b.cbr(x, c, cout, stride=stride)
        y = b.bn(b.conv(y, cout, cout, bias=False), cout)
        sc = x if stride == 1 and cout == c else b.bn(b.conv(x, c, cout, k=1, stride=stride, bias=False), cout)
        x = b.node("Relu", [b.node("Add", [y, sc])])
        c = cout
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    out = b.node("Softmax", [b.fc(x, c, classes)], axis=1)
    return b.model([1, 3, size, size], [out], "resnet_style")


def mobilenet_style(size=32, classes=10, seed=0) -> onnx.ModelProto:
    """MobileNet-v2 flavour: depthwise separable blocks with ReLU6, an inverted residual, HardSwish head."""
    b = Builder(seed)
    x = b.cbr("input", 3, 16, stride=2, act="Relu6")
    x = b.cbr(b.cbr(x, 16, 16, groups=16, act="Relu6"), 16, 32, k=1, act=None)
    y = b.cbr(x, 32, 64, k=1, act="Relu6")
    y = b.cbr(y, 64, 64, groups=64, act="Relu6")
    x = b.node("Add", [x, b.cbr(y, 64, 32, k=1, act=None)])
    x = b.cbr(b.cbr(x, 32, 32, stride=2, groups=32, act="Relu6"), 32, 64, k=1, act="HardSwish")
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    return b.model([1, 3, size, size], [b.fc(x, 64, classes)], "mobilenet_style")


def mobilenet_v3_style(size=32, classes=10, seed=0) -> onnx.ModelProto:
    """MobileNet-v3 flavour: HardSwish stem, depthwise blocks with squeeze-and-excite (GAP -> 1x1 convs
    -> Sigmoid -> channel-broadcast Mul), an inverted residual, GAP + FC head."""
    b = Builder(seed)
    x = b.cbr("input", 3, 16, stride=2, act="HardSwish")
    y = b.se_block(b.cbr(x, 16, 16, groups=16), 16, 8)
    x = b.node("Add", [x, b.cbr(y, 16, 16, k=1, act=None)])
    y = b.cbr(b.cbr(x, 16, 48, k=1, act="HardSwish"), 48, 48, stride=2, groups=48, act="HardSwish")
    x = b.cbr(b.se_block(y, 48, 16), 48, 32, k=1, act=None)
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    return b.model([1, 3, size, size], [b.fc(x, 32, classes)], "mobilenet_v3_style")


def _fire(b: Builder, x, cin, squeeze, expand):
    s = b.node("Relu", [b.conv(x, cin, squeeze, k=1)])
    e1 = b.node("Relu", [b.conv(s, squeeze, expand, k=1)])
    e3 = b.node("Relu", [b.conv(s, squeeze, expand, k=3)])
    return b.node("Concat", [e1, e3], axis=1)


def squeezenet_style(size=32, classes=10, seed=0) -> onnx.ModelProto:
    """SqueezeNet flavour: stem, max pools, fire modules (squeeze 1x1, expand 1x1 + 3x3, concat)."""
    b = Builder(seed)
    x = b.node("Relu", [b.conv("input", 3, 32, k=3, stride=2)])
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    x = _fire(b, x, 32, 16, 32)
    x = _fire(b, x, 64, 16, 32)
    x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = _fire(b, x, 64, 32, 48)
    x = b.node("Relu", [b.conv(x, 96, classes, k=1)])
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    return b.model([1, 3, size, size], [x], "squeezenet_style")


def yolo_style(size=416, width=16, anchors=3, classes=4, seed=0) -> onnx.ModelProto:
    """Tiny-YOLO flavour: stride-2 conv stages (16+ channels, LeakyReLU/SiLU), an upsampling branch
    (resize + concat) and two detection heads at strides 16 and 32."""
    b = Builder(seed)
    x = b.cbr("input", 3, width, stride=2, act="LeakyRelu")            # /2
    c = width
    feats = []
    for i in range(4):                                                    # /4 /8 /16 /32
        x = b.cbr(x, c, c * 2, stride=2, act="SiLU" if i % 2 else "LeakyRelu")
        c *= 2
        feats.append((x, c))
    (p4, c4), (p5, c5) = feats[2], feats[3]
    h5 = b.cbr(p5, c5, c5 // 2, k=1, act="LeakyRelu")
    head = 5 + classes
    out1 = b.conv(b.cbr(h5, c5 // 2, c5, act="LeakyRelu"), c5, anchors * head, k=1, name="head32")
    up = b.resize(b.cbr(h5, c5 // 2, c4 // 2, k=1, act="LeakyRelu"), 2)
    cat = b.node("Concat", [up, p4], axis=1)
    out2 = b.conv(b.cbr(cat, c4 // 2 + c4, c4, act="LeakyRelu"), c4, anchors * head, k=1, name="head16")
    out1 = b.node("Sigmoid", [out1], name="det32")
    out2 = b.node("Sigmoid", [out2], name="det16")
    return b.model([1, 3, size, size], [out1, out2], "yolo_style")


def unet_style(size=32, base=64, depth=3, seed=0) -> onnx.ModelProto:
    """UNet flavour: encoder doubling channels to base * 2**depth (512 by default) with max pools,
    decoder with bilinear upsampling and skip concats, a 3-channel tanh image head."""
    b = Builder(seed)
    x, c, skips = "input", 3, []
    for d in range(depth):
        x = b.cbr(b.cbr(x, c, base << d), base << d, base << d)
        c = base << d
        skips.append((x, c))
        x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = b.cbr(b.cbr(x, c, base << depth), base << depth, base << depth)
    c = base << depth
    for d in reversed(range(depth)):
        s, sc = skips[d]
        up = b.cbr(b.resize(x, 2, mode="linear"), c, sc, k=1)
        x = b.cbr(b.cbr(b.node("Concat", [up, s], axis=1), 2 * sc, sc), sc, sc)
        c = sc
    out = b.node("Tanh", [b.conv(x, c, 3, k=1)], name="image")
    return b.model([1, 3, size, size], [out], "unet_style")


def resnet50(size=224, classes=1000, seed=0) -> onnx.ModelProto:
    """ResNet-50 topology: 7x7 stem, max pool, 3-4-6-3 bottlenecks (1x1-3x3-1x1, x4 expansion), GAP, FC."""
    b = Builder(seed)
    x = b.node("MaxPool", [b.cbr("input", 3, 64, k=7, stride=2)], kernel_shape=[3, 3], strides=[2, 2],
               pads=[1, 1, 1, 1])
    c = 64
    for stage, (n, mid) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512))):
        for i in range(n):
            stride = 2 if i == 0 and stage > 0 else 1
            y = b.cbr(b.cbr(x, c, mid, k=1), mid, mid, stride=stride)
            y = b.bn(b.conv(y, mid, mid * 4, k=1, bias=False), mid * 4)
            sc = b.bn(b.conv(x, c, mid * 4, k=1, stride=stride, bias=False), mid * 4) if i == 0 else x
            x = b.node("Relu", [b.node("Add", [y, sc])])
            c = mid * 4
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    return b.model([1, 3, size, size], [b.fc(x, c, classes)], "resnet50")


# ------------------------------------------------------------ one op family per model (compiler tests)

def _stem(b: Builder, cin: int, c: int) -> str:
    return b.conv("input", cin, c, k=3, name="stem")


def op_model(kind: str, c: int = 16, h: int = 12, w: int = 12, cin: int = 3):
    """A stem conv (cin -> c) followed by the op family `kind`; input 'input' (1, cin, h, w)."""
    b = Builder(seed=sum(map(ord, kind)))
    x = _stem(b, cin, c)
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
    elif kind == "se_mul":
        y = b.se_block(x, c, max(c // 4, 1))
    elif kind == "sum3":
        y = b.node("Sum", [b.conv(x, c, c, k=1), x, b.conv(x, c, c, k=3)])
    elif kind == "sum4":
        y = b.node("Sum", [x, b.conv(x, c, c, k=1), b.node("Relu", [x]), b.conv(x, c, c, k=3)])
    elif kind == "mul_const":
        y = b.node("Mul", [x, b.const(np.linspace(-1, 2, c, dtype=np.float32).reshape(1, c, 1, 1), "k")])
    elif kind == "add_const":
        y = b.node("Add", [x, b.const(np.float32(0.5), "k")])
    elif kind == "sub_div_const":
        y = b.node("Div", [b.node("Sub", [x, b.const(np.float32(0.25), "k")]), b.const(np.float32(2.0), "d")])
    elif kind == "reducemean":
        y = b.fc(b.node("ReduceMean", [x], axes=[2, 3], keepdims=0), c, 10)
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
    elif kind == "concat_image":  # a 3-channel (image layout) part: ARITH concat epoch
        y = b.node("Concat", ["input", x], axis=1)
    elif kind == "concat_image_last":
        y = b.node("Concat", [x, "input"], axis=1)
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
    elif kind == "pad_conv":
        padded = b.node("Pad", [x, b.const(np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64), "pads")], mode="constant")
        y = b.conv(padded, c, 16, k=3, pad=0)
    elif kind == "identity_dropout":
        y = b.node("Relu", [b.node("Dropout", [b.node("Identity", [x])])])
    else:
        raise KeyError(kind)
    return b.model([1, cin, h, w], [y], kind)


OPS = ["conv", "conv_stride_asym", "conv_same", "depthwise", "grouped", "dilated", "bn", "Relu", "Sigmoid",
       "Tanh", "HardSwish", "LeakyRelu", "Clip", "silu", "add", "sum", "mul", "mul_const", "add_const",
       "maxpool", "maxpool_ceil", "avgpool", "avgpool_incl", "gap", "concat", "concat3", "concat_misaligned",
       "resize_nearest", "resize_bilinear", "gemm", "gemm_map", "matmul", "softmax", "reshape_chain",
       "identity_dropout", "pad_conv", "concat_image", "concat_image_last",
       "sub_div_const", "reducemean", "se_mul", "sum3", "sum4"]


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
    y = b.node("Pow", [b.conv("input", 3, 16, k=3), b.const(np.array(2.0, np.float32))], name="my_pow")  # no NPU unit: a software epoch
    return b.model([1, 3, 8, 8], [y], "unsupported")
