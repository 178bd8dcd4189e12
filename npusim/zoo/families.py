"""Small model families users bring, built in code (seeded random weights, batch 1): each stresses a
group of operators a classifier-only compiler never sees. The public networks they come from are in
`npusim.zoo.public`.

    shufflenet_block_style   channel split, channel shuffle (Reshape - Transpose - Reshape), Concat
    inception_block_style    LRN, a four-branch inception module, max pool in a branch
    densenet_block_style     opset 9: dense layers concatenated, transition, Unsqueeze with `axes` attribute
    yolo_head_style          default nearest Resize (half_pixel, round_prefer_floor) x2, Split, Slice,
                             Reshape, Transpose, Concat on axis 2 (YOLOv8-style decoded head)
    unet_convtranspose_style ConvTranspose 2x2/2 upsampling, skip Concats of 512 and 1024 channels
    transformer_block_style  LayerNorm, MatMul between activations (attention), Softmax over the last
                             axis, Gelu, residual Adds (opset 20)
    vit_style                a vision transformer: patch-embedding Conv with kernel = stride (past the
                             CA's 7), tokens by Reshape - Transpose, class token Concat, position Add,
                             an encoder block, Gather of the class token, Gemm head
    audio_conv1d_style       a 1-D conv stack over [1, C, L] (strided, dilated, depthwise), BatchNorm,
                             1-D max pool, mean over L, Gemm head
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from . import Builder

__all__ = ["shufflenet_block_style", "inception_block_style", "densenet_block_style", "yolo_head_style",
           "unet_convtranspose_style", "transformer_block_style", "vit_style", "audio_conv1d_style"]


def _i64(b: Builder, values, hint="c") -> str:
    return b.const(np.array(values, np.int64), hint)


def shufflenet_block_style(size: int = 32, c: int = 48, seed: int = 0) -> onnx.ModelProto:
    """A stem and two ShuffleNet v2 units (stride 2, then a channel-split unit), each ending in a shuffle."""
    b = Builder(seed)
    x = b.cbr("input", 3, c, stride=2)
    h = size // 2
    half = c // 2
    left = b.cbr(b.cbr(x, c, c, stride=2, groups=c, act=None), c, half, k=1)
    right = b.cbr(b.cbr(b.cbr(x, c, half, k=1), half, half, stride=2, groups=half, act=None), half, half, k=1)
    h //= 2
    x = b.channel_shuffle(b.node("Concat", [left, right], axis=1), c, h, h)
    b.nodes.append(helper.make_node("Split", [x, _i64(b, [half, half], "split")], ["xa", "xb"], name="split", axis=1))
    right = b.cbr(b.cbr(b.cbr("xb", half, half, k=1), half, half, groups=half, act=None), half, half, k=1)
    x = b.channel_shuffle(b.node("Concat", ["xa", right], axis=1), c, h, h)
    return b.model([1, 3, size, size], [x], "shufflenet_block")


def inception_block_style(size: int = 32, seed: int = 0) -> onnx.ModelProto:
    """GoogLeNet's stem pattern (conv, max pool, LRN) and one inception module followed by LRN."""
    b = Builder(seed)

    def rc(x, cin, cout, k):
        return b.node("Relu", [b.conv(x, cin, cout, k=k)])

    x = b.node("MaxPool", [rc("input", 3, 32, 3)], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1])
    x = b.node("LRN", [x], size=5, alpha=1e-4, beta=0.75, bias=1.0)
    p1 = rc(x, 32, 16, 1)
    p3 = rc(rc(x, 32, 24, 1), 24, 32, 3)
    p5 = rc(rc(x, 32, 8, 1), 8, 16, 5)
    pp = rc(b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]), 32, 16, 1)
    x = b.node("Concat", [p1, p3, p5, pp], axis=1)
    x = b.node("LRN", [x], size=5, alpha=1e-4, beta=0.75, bias=2.0)
    return b.model([1, 3, size, size], [x], "inception_block")


def densenet_block_style(size: int = 32, growth: int = 16, layers: int = 3, seed: int = 0) -> onnx.ModelProto:
    """Opset 9: a dense block (BN-ReLU-1x1, BN-ReLU-3x3, concatenated), a transition, and a classifier head
    whose flatten shape comes from Shape - Gather - Unsqueeze(axes=[0]) - Concat - Reshape."""
    b = Builder(seed)
    x = b.cbr("input", 3, 32, stride=2)
    c = 32
    for _ in range(layers):
        y = b.conv(b.node("Relu", [b.bn(x, c)]), c, 4 * growth, k=1, bias=False)
        y = b.conv(b.node("Relu", [b.bn(y, 4 * growth)]), 4 * growth, growth, k=3, bias=False)
        x = b.node("Concat", [x, y], axis=1)
        c += growth
    x = b.conv(b.node("Relu", [b.bn(x, c)]), c, c // 2, k=1, bias=False)
    c //= 2
    x = b.node("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = b.node("GlobalAveragePool", [b.node("Relu", [b.bn(x, c)])])
    y = b.fc(b.flatten_by_shape(x), c, 10)
    return b.model([1, 3, size, size], [y], "densenet_block", opset=9, ir_version=4, out_shapes={y: [1, 10]})


def yolo_head_style(size: int = 64, classes: int = 4, seed: int = 0) -> onnx.ModelProto:
    """A small backbone with an FPN step (ONNX's default nearest Resize x2, Concat) and a YOLOv8-style
    decoded head: per level a 1x1 conv to 4 + classes channels, Reshape [1, 4 + nc, H*W], Concat on axis 2,
    Split into box and class rows, Slice of the box rows into xy and wh, Sigmoid, Concat, Transpose."""
    b = Builder(seed)
    x = b.cbr("input", 3, 16, stride=2, act="SiLU")
    p3 = b.cbr(x, 16, 32, stride=2, act="SiLU")
    p4 = b.cbr(p3, 32, 64, stride=2, act="SiLU")
    up = b.node("Resize", [p4, "", b.const(np.array([1, 1, 2, 2], np.float32), "scales")], mode="nearest")
    f3 = b.cbr(b.node("Concat", [up, p3], axis=1), 96, 32, k=1, act="SiLU")
    no = 4 + classes
    levels = []
    for f, c, s in ((f3, 32, size // 4), (p4, 64, size // 8)):
        y = b.conv(f, c, no, k=1)
        levels.append(b.node("Reshape", [y, _i64(b, [1, no, s * s], "shp")]))
    y = b.node("Concat", levels, axis=2)
    b.nodes.append(helper.make_node("Split", [y, _i64(b, [4, classes], "split")], ["box", "cls"], name="split",
                                    axis=1))
    xy = b.node("Slice", ["box", _i64(b, [0], "st"), _i64(b, [2], "en"), _i64(b, [1], "ax")])
    wh = b.node("Slice", ["box", _i64(b, [2], "st"), _i64(b, [4], "en"), _i64(b, [1], "ax")])
    xy = b.node("Mul", [b.node("Sigmoid", [xy]), b.const(np.float32(2.0), "two")])
    wh = b.node("Exp", [b.node("Clip", [wh, b.const(np.float32(-4.0), "lo"), b.const(np.float32(4.0), "hi")])])
    y = b.node("Concat", [xy, wh, b.node("Sigmoid", ["cls"])], axis=1)
    y = b.node("Transpose", [y], perm=[0, 2, 1])
    return b.model([1, 3, size, size], [y], "yolo_head")


def unet_convtranspose_style(size: int = 32, seed: int = 0) -> onnx.ModelProto:
    """A three-level UNet: 128-256-512 channel encoder with max pools, a 1024-channel bottleneck, and a
    decoder of ConvTranspose 2x2/2 upsampling whose skip Concats hold 1024, 512 and 256 channels."""
    b = Builder(seed)

    def up(x, cin, cout):
        b.reserve(cin, cout, 2, 2)
        w = b.rng.standard_normal((cin, cout, 2, 2)).astype(np.float32) * np.sqrt(1.0 / cin)
        bias = b.rng.standard_normal(cout).astype(np.float32) * 0.05
        return b.node("ConvTranspose", [x, b.const(w, "wt"), b.const(bias, "bt")], kernel_shape=[2, 2], strides=[2, 2])

    pool = dict(kernel_shape=[2, 2], strides=[2, 2])
    e1 = b.cbr("input", 3, 128)
    e2 = b.cbr(b.node("MaxPool", [e1], **pool), 128, 256)
    e3 = b.cbr(b.node("MaxPool", [e2], **pool), 256, 512)
    x = b.cbr(b.node("MaxPool", [e3], **pool), 512, 1024)
    x = b.cbr(b.node("Concat", [up(x, 1024, 512), e3], axis=1), 1024, 512, k=1)   # 1024-channel skip concat
    x = b.cbr(b.node("Concat", [up(x, 512, 256), e2], axis=1), 512, 256)          # 512-channel skip concat
    x = b.cbr(b.node("Concat", [up(x, 256, 128), e1], axis=1), 256, 64, k=1)
    return b.model([1, 3, size, size], [b.conv(x, 64, 2, k=1)], "unet_convtranspose")


def transformer_block_style(tokens: int = 16, dim: int = 64, heads: int = 4, seed: int = 0) -> onnx.ModelProto:
    """A pre-norm transformer encoder block on [1, tokens, dim]: LayerNorm, Q/K/V projections, multi-head
    attention (MatMul of Q and K^T, scale, Softmax over the last axis, MatMul with V), output projection,
    residual Add, LayerNorm, MLP with Gelu, residual Add."""
    b = Builder(seed)
    y = _encoder_block(b, "input", tokens, dim, heads)
    return b.model([1, tokens, dim], [y], "transformer_block", opset=20, ir_version=9)


def vit_style(size: int = 64, patch: int = 16, dim: int = 64, heads: int = 4, classes: int = 10,
              seed: int = 0) -> onnx.ModelProto:
    """ViT: a patch x patch / stride-patch Conv to `dim` channels, the (size/patch)^2 tokens as [1, T, dim]
    (Reshape, Transpose), a learned class token concatenated in front, position embeddings added, one
    encoder block, final LayerNorm, the class token gathered, a Gemm head."""
    b = Builder(seed)
    r = b.rng
    t = (size // patch) ** 2
    x = b.conv("input", 3, dim, k=patch, stride=patch, pad=0)
    x = b.node("Transpose", [b.node("Reshape", [x, _i64(b, [1, dim, t], "shp")])], perm=[0, 2, 1])
    x = b.node("Concat", [b.const(r.standard_normal((1, 1, dim)).astype(np.float32), "cls"), x], axis=1)
    x = b.node("Add", [x, b.const((0.5 * r.standard_normal((1, t + 1, dim))).astype(np.float32), "pos")])
    x = _layer_norm(b, _encoder_block(b, x, t + 1, dim, heads), dim)
    cls = b.node("Gather", [x, b.const(np.array(0, np.int64), "i0")], axis=1)
    return b.model([1, 3, size, size], [b.fc(cls, dim, classes)], "vit", opset=20, ir_version=9)


def audio_conv1d_style(length: int = 800, classes: int = 12, seed: int = 0) -> onnx.ModelProto:
    """A keyword-spotting-style 1-D conv stack over a [1, 1, L] waveform: a k=9 stride-2 conv to 32 channels,
    a dilated k=5 conv, a depthwise k=3 conv and a 1x1 conv (each BatchNorm + Relu), a 1-D max pool,
    the mean over L, a Gemm head."""
    b = Builder(seed)
    r = b.rng

    def conv1d(x, cin, cout, k, stride=1, dilation=1, groups=1):
        w = b.const((r.standard_normal((cout, cin // groups, k)) * np.sqrt(2.0 / (cin // groups * k))).astype(
            np.float32), "w1d")
        y = b.node("Conv", [x, w], kernel_shape=[k], strides=[stride], dilations=[dilation], group=groups,
                   pads=[(k - 1) // 2 * dilation] * 2)
        return b.node("Relu", [b.bn(y, cout)])

    x = conv1d("input", 1, 32, 9, stride=2)
    x = conv1d(x, 32, 48, 5, dilation=2)
    x = conv1d(x, 48, 48, 3, groups=48)
    x = conv1d(x, 48, 64, 1)
    x = b.node("MaxPool", [x], kernel_shape=[2], strides=[2])
    x = b.node("ReduceMean", [x], axes=[2], keepdims=0)
    return b.model([1, 1, length], [b.fc(x, 64, classes)], "audio_conv1d")


def _layer_norm(b: Builder, x: str, dim: int) -> str:
    r = b.rng
    g = b.const((1.0 + 0.1 * r.standard_normal(dim)).astype(np.float32), "ln_g")
    beta = b.const((0.05 * r.standard_normal(dim)).astype(np.float32), "ln_b")
    return b.node("LayerNormalization", [x, g, beta], axis=-1, epsilon=1e-5)


def _encoder_block(b: Builder, x_in: str, tokens: int, dim: int, heads: int) -> str:
    """transformer_block_style's block on x_in [1, tokens, dim]; returns its output tensor."""
    r = b.rng
    dh = dim // heads

    def ln(x):
        return _layer_norm(b, x, dim)

    def proj(x, cin, cout):
        b.reserve(cin, cout)
        w = b.const(r.standard_normal((cin, cout)).astype(np.float32) / np.sqrt(cin), "wp")
        return b.node("Add", [b.node("MatMul", [x, w]), b.const((0.02 * r.standard_normal(cout)).astype(np.float32), "bp")])

    def split_heads(t):
        t = b.node("Reshape", [t, _i64(b, [1, tokens, heads, dh], "shp")])
        return b.node("Transpose", [t], perm=[0, 2, 1, 3])

    h = ln(x_in)
    q, k, v = (split_heads(proj(h, dim, dim)) for _ in range(3))
    s = b.node("MatMul", [q, b.node("Transpose", [k], perm=[0, 1, 3, 2])])
    s = b.node("Mul", [s, b.const(np.float32(1.0 / np.sqrt(dh)), "scale")])
    a = b.node("MatMul", [b.node("Softmax", [s], axis=-1), v])
    a = b.node("Reshape", [b.node("Transpose", [a], perm=[0, 2, 1, 3]), _i64(b, [1, tokens, dim], "shp")])
    x = b.node("Add", [x_in, proj(a, dim, dim)])
    m = b.node("Gelu", [proj(ln(x), dim, 4 * dim)])
    return b.node("Add", [x, proj(m, 4 * dim, dim)])
