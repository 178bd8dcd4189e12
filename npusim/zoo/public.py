"""Public model-zoo networks with their exact topologies (seeded random weights, batch 1, NCHW).

SqueezeNet 1.1, ShuffleNet v2 x1.0, Inception v1 (GoogLeNet, with LRN), DenseNet-121
(opset 9: Unsqueeze/Squeeze take `axes` as an attribute), AlexNet (with LRN and grouped convs) and
VGG-19, as the ONNX model zoo and torchvision define them. Their weights are random (He-style), so
they exercise every operator and shape of the real network, not its accuracy. ResNet-50 is
`npusim.zoo.resnet50`. VGG-19 (548 MB of
float weights) is larger than the N657's octoFlash in every precision: compiling it is refused
before any work unless a larger flash is given (`--set pool.octoFlash.size=256MiB`).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from . import Builder as _Builder


class Builder(_Builder):
    """The zoo's builder drawing weights directly in float32 (half the memory and time of float64 draws:
    VGG-19 has 143.7 M weights)."""

    def conv(self, x, cin, cout, k=3, stride=1, groups=1, pad=None, bias=True, dilation=1, name=None):
        fan_in = cin // groups * k * k
        self.reserve(cout, cin // groups, k, k)
        w = self.rng.standard_normal((cout, cin // groups, k, k), dtype=np.float32)
        w *= np.float32(np.sqrt(2.0 / fan_in))
        ins = [x, self.const(w, "w")]
        if bias:
            ins.append(self.const(self.rng.standard_normal(cout, dtype=np.float32) * np.float32(0.05), "b"))
        p = (k - 1) // 2 * dilation if pad is None else pad
        pads = list(p) if isinstance(p, (list, tuple)) else [p] * 4
        return self.node("Conv", ins, name, kernel_shape=[k, k], strides=[stride, stride], pads=pads,
                         group=groups, dilations=[dilation, dilation])

    def fc(self, x, cin, cout):
        self.reserve(cout, cin)
        w = self.rng.standard_normal((cout, cin), dtype=np.float32)
        w *= np.float32(np.sqrt(1.0 / cin))
        b = self.rng.standard_normal(cout, dtype=np.float32) * np.float32(0.05)
        return self.node("Gemm", [x, self.const(w, "fcw"), self.const(b, "fcb")], transB=1)

# ResNet-50 is npusim.zoo.resnet50 (its exact torchvision topology)
__all__ = ["squeezenet", "shufflenet_v2", "inception_v1", "densenet121", "alexnet", "vgg19"]


def _maxpool(b: Builder, x, k=3, s=2, pad=0, ceil=0):
    extra = {"ceil_mode": 1} if ceil else {}  # (ceil_mode exists from opset 10: DenseNet's opset 9 has none)
    return b.node("MaxPool", [x], kernel_shape=[k, k], strides=[s, s], pads=[pad] * 4, **extra)


def _relu_conv(b: Builder, x, cin, cout, k=3, stride=1, groups=1, pad=None):
    return b.node("Relu", [b.conv(x, cin, cout, k, stride, groups, pad=pad)])


def _head(b: Builder, x, c, classes, softmax=False):
    x = b.node("Flatten", [x], axis=1)
    y = b.fc(x, c, classes)
    return b.node("Softmax", [y], axis=1) if softmax else y


def squeezenet(size: int = 224, classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """SqueezeNet 1.1 (torchvision): 3x3/2 stem, fire modules (squeeze 1x1, expand 1x1 + 3x3 concatenated),
    ceil-mode max pools, a 1x1 classifier conv, global average pool."""
    b = Builder(seed)

    def fire(x, cin, s, e):
        q = _relu_conv(b, x, cin, s, k=1)
        return b.node("Concat", [_relu_conv(b, q, s, e, k=1), _relu_conv(b, q, s, e, k=3)], axis=1)

    x = _maxpool(b, _relu_conv(b, "input", 3, 64, k=3, stride=2, pad=0), ceil=1)
    x = fire(fire(x, 64, 16, 64), 128, 16, 64)
    x = _maxpool(b, x, ceil=1)
    x = fire(fire(x, 128, 32, 128), 256, 32, 128)
    x = _maxpool(b, x, ceil=1)
    x = fire(fire(fire(fire(x, 256, 48, 192), 384, 48, 192), 384, 64, 256), 512, 64, 256)
    x = b.node("Dropout", [x])
    x = _relu_conv(b, x, 512, classes, k=1)
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    return b.model([1, 3, size, size], [x], "squeezenet1_1")


def shufflenet_v2(size: int = 224, classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """ShuffleNet v2 x1.0 (torchvision): 24-channel stem + max pool, stages of 4/8/4 units with 116/232/464
    channels (a unit splits the channels, runs 1x1 - depthwise 3x3 - 1x1 on one half, concatenates and
    shuffles the two groups), a 1024-channel 1x1 conv, global average pool, FC."""
    b = Builder(seed)
    x = _maxpool(b, b.cbr("input", 3, 24, stride=2), pad=1)
    c, hw = 24, -(-size // 4)
    for reps, out in zip((4, 8, 4), (116, 232, 464)):
        for i in range(reps):
            half = out // 2
            if i == 0:  # stride 2: both branches see the whole input
                left = b.cbr(b.cbr(x, c, c, k=3, stride=2, groups=c, act=None), c, half, k=1)
                right = b.cbr(b.cbr(b.cbr(x, c, half, k=1), half, half, k=3, stride=2, groups=half, act=None),
                              half, half, k=1)
                hw = -(-hw // 2)
            else:
                split = b.const(np.array([half, half], np.int64), "split")
                b.nodes.append(helper.make_node("Split", [x, split], [x + "_a", x + "_b"], name=x + "_split",
                                                axis=1))
                left = x + "_a"
                right = b.cbr(b.cbr(b.cbr(x + "_b", half, half, k=1), half, half, k=3, groups=half, act=None),
                              half, half, k=1)
            x = b.channel_shuffle(b.node("Concat", [left, right], axis=1), out, hw, hw)
            c = out
    x = b.cbr(x, c, 1024, k=1)
    x = b.node("GlobalAveragePool", [x])
    return b.model([1, 3, size, size], [_head(b, x, 1024, classes)], "shufflenet_v2_x1_0")


def inception_v1(size: int = 224, classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """Inception v1 (GoogLeNet, BVLC Caffe / ONNX model zoo): 7x7/2 stem, ceil-mode max pools, LRN after
    the first and third conv, nine inception modules (1x1 | 1x1-3x3 | 1x1-5x5 | maxpool-1x1, concatenated),
    7x7 average pool, dropout, FC, softmax."""
    b = Builder(seed)

    def lrn(x):
        return b.node("LRN", [x], size=5, alpha=1e-4, beta=0.75, bias=1.0)

    def inception(x, cin, c1, c3r, c3, c5r, c5, cp):
        p1 = _relu_conv(b, x, cin, c1, k=1)
        p3 = _relu_conv(b, _relu_conv(b, x, cin, c3r, k=1), c3r, c3, k=3)
        p5 = _relu_conv(b, _relu_conv(b, x, cin, c5r, k=1), c5r, c5, k=5)
        pp = _relu_conv(b, b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]),
                        cin, cp, k=1)
        return b.node("Concat", [p1, p3, p5, pp], axis=1), c1 + c3 + c5 + cp

    x = lrn(_maxpool(b, _relu_conv(b, "input", 3, 64, k=7, stride=2), ceil=1))
    x = _relu_conv(b, _relu_conv(b, x, 64, 64, k=1), 64, 192, k=3)
    x = _maxpool(b, lrn(x), ceil=1)
    c = 192
    for i, cfg in enumerate([(64, 96, 128, 16, 32, 32), (128, 128, 192, 32, 96, 64), None,
                             (192, 96, 208, 16, 48, 64), (160, 112, 224, 24, 64, 64), (128, 128, 256, 24, 64, 64),
                             (112, 144, 288, 32, 64, 64), (256, 160, 320, 32, 128, 128), None,
                             (256, 160, 320, 32, 128, 128), (384, 192, 384, 48, 128, 128)]):
        if cfg is None:
            x = _maxpool(b, x, ceil=1)
        else:
            x, c = inception(x, c, *cfg)
    k = -(-size // 32)
    x = b.node("AveragePool", [x], kernel_shape=[k, k], strides=[1, 1])
    x = b.node("Dropout", [x])
    return b.model([1, 3, size, size], [_head(b, x, c, classes, softmax=True)], "inception_v1")


def densenet121(size: int = 224, classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """DenseNet-121 at opset 9 (ONNX model zoo): 7x7/2 stem + max pool, dense blocks of 6/12/24/16 layers
    (BN-ReLU-1x1 conv to 128, BN-ReLU-3x3 conv to 32, concatenated onto the block's input), transitions
    (BN-ReLU-1x1 conv halving the channels, 2x2 average pool), BN-ReLU, global average pool, a head that
    computes its flatten shape with Shape/Gather/Unsqueeze(axes attribute)/Concat/Reshape, FC."""
    b = Builder(seed)
    x = _maxpool(b, b.cbr("input", 3, 64, k=7, stride=2), pad=1)
    c = 64
    for i, layers in enumerate((6, 12, 24, 16)):
        for _ in range(layers):
            y = b.conv(b.node("Relu", [b.bn(x, c)]), c, 128, k=1, bias=False)
            y = b.conv(b.node("Relu", [b.bn(y, 128)]), 128, 32, k=3, bias=False)
            x = b.node("Concat", [x, y], axis=1)
            c += 32
        if i < 3:
            x = b.conv(b.node("Relu", [b.bn(x, c)]), c, c // 2, k=1, bias=False)
            c //= 2
            x = b.node("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = b.node("GlobalAveragePool", [b.node("Relu", [b.bn(x, c)])])
    y = b.fc(b.flatten_by_shape(x), c, classes)
    return b.model([1, 3, size, size], [y], "densenet121", opset=9, ir_version=4, out_shapes={y: [1, classes]})


def alexnet(size: int = 224, classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """AlexNet (BVLC Caffe / ONNX model zoo): 11x11/4 conv, LRN after the first two convs, grouped convs
    (2 groups) in conv2/4/5, 3x3/2 max pools, FC 4096-4096-classes with dropout, softmax."""
    b = Builder(seed)

    def lrn(x):
        return b.node("LRN", [x], size=5, alpha=1e-4, beta=0.75, bias=1.0)

    x = _maxpool(b, lrn(_relu_conv(b, "input", 3, 96, k=11, stride=4, pad=0)))
    x = _maxpool(b, lrn(_relu_conv(b, x, 96, 256, k=5, groups=2, pad=2)))
    x = _relu_conv(b, _relu_conv(b, x, 256, 384, k=3), 384, 384, k=3, groups=2)
    x = _maxpool(b, _relu_conv(b, x, 384, 256, k=3, groups=2))
    side = ((size - 11) // 4 + 1 - 3) // 2 + 1
    side = (side - 3) // 2 + 1
    side = (side - 3) // 2 + 1
    x = b.node("Flatten", [x], axis=1)
    x = b.node("Dropout", [b.node("Relu", [b.fc(x, 256 * side * side, 4096)])])
    x = b.node("Dropout", [b.node("Relu", [b.fc(x, 4096, 4096)])])
    y = b.node("Softmax", [b.fc(x, 4096, classes)], axis=1)
    return b.model([1, 3, size, size], [y], "alexnet")


def vgg19(size: int = 224, classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """VGG-19 (torchvision): 16 3x3 convs in five blocks (64, 128, 256, 512, 512 channels; 2-2-4-4-4) with
    2x2 max pools, FC 4096-4096-classes with dropout (143.7 M weights, 548 MB as float32)."""
    b = Builder(seed)
    x, c = "input", 3
    for n, out in zip((2, 2, 4, 4, 4), (64, 128, 256, 512, 512)):
        for _ in range(n):
            x, c = _relu_conv(b, x, c, out), out
        x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    side = size // 32
    x = b.node("Flatten", [x], axis=1)
    x = b.node("Dropout", [b.node("Relu", [b.fc(x, 512 * side * side, 4096)])])
    x = b.node("Dropout", [b.node("Relu", [b.fc(x, 4096, 4096)])])
    return b.model([1, 3, size, size], [b.fc(x, 4096, classes)], "vgg19")
