"""Public networks of ST's model zoo for the STM32N6, with their exact topologies (seeded random weights).

These are the models ST publishes N6 latencies and weight-flash sizes for (ST model zoo READMEs,
STM32N6570-DK); `scripts/calibrate.py` uses them to calibrate and check npusim's timing.
Channel counts follow the sources the zoo's models come from:

- `mobilenet_v1`, `mobilenet_v2`: `style="pytorchcv"` (the zoo's PyTorch models: channels are
  `int(c * width)`, MobileNet v2 keeps its 1280-channel last conv below width 1) or `style="keras"`
  (the zoo's TensorFlow models: channels rounded to multiples of 8, `tf.keras.applications`);
- `tiny_yolo_v2`: darknet's yolov2-tiny (COCO cfg: 16..512 with six max pools, 1024 and 512 3x3
  convs, a 1x1 head of anchors x (5 + classes));
- `regnetx_200mf`: pycls RegNetX-200MF (depths 1-1-4-7, widths 24-56-152-368, group width 8);
- `resnet18`: pytorchcv ResNet-18 with a width scale (the last unit keeps 512 channels);
- `resnet50_v2`: `tf.keras.applications.ResNet50V2` (pre-activation bottlenecks);
- `fd_mobilenet`: FD-MobileNet (fast-downsampling MobileNet, the zoo's Keras model, `int(c * alpha)`);
- SqueezeNet 1.1: `npusim.zoo.public.squeezenet` (fire modules, ceil-mode max pools, a conv classifier).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import Builder
from .public import squeezenet

__all__ = ["mobilenet_v1", "mobilenet_v2", "tiny_yolo_v2", "regnetx_200mf", "resnet18", "resnet50_v2", "fd_mobilenet",
           "weight_bytes", "Figure", "PUBLISHED"]


def _make_divisible(v: float, divisor: int = 8) -> int:
    """tf.keras.applications' channel rounding: nearest multiple of `divisor`, never 10 % below v."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def _width(c: int, width: float, style: str) -> int:
    if style == "keras":
        return _make_divisible(c * width)
    if style == "pytorchcv":
        return max(1, int(c * width))
    raise ValueError(f"style must be 'keras' or 'pytorchcv', not {style!r}")


def _head(b: Builder, x, c: int, classes: int):
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    return b.fc(x, c, classes)


def mobilenet_v1(width: float = 1.0, size: int = 224, classes: int = 1000, style: str = "pytorchcv", seed: int = 0):
    """MobileNet v1: 3x3 stride-2 stem, 13 depthwise-separable blocks (BN + ReLU), GAP, FC."""
    b = Builder(seed)
    act = "Relu" if style == "pytorchcv" else "Relu6"
    plan = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]
    c = _width(32, width, style)
    x = b.cbr("input", 3, c, stride=2, act=act)
    for cout, stride in plan:
        co = _width(cout, width, style)
        x = b.cbr(b.cbr(x, c, c, stride=stride, groups=c, act=act), c, co, k=1, act=act)
        c = co
    return b.model([1, 3, size, size], [_head(b, x, c, classes)], f"mobilenet_v1_{width:g}_{size}")


def mobilenet_v2(width: float = 1.0, size: int = 224, classes: int = 1000, style: str = "pytorchcv", seed: int = 0):
    """MobileNet v2: stem, 17 inverted residual blocks (expand 1x1 ReLU6, depthwise 3x3 ReLU6, linear
    1x1 project; residual add when shape is kept), 1x1 conv to 1280 (kept below width 1), GAP, FC."""
    b = Builder(seed)
    plan = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
    c = _width(32, width, style)
    x = b.cbr("input", 3, c, stride=2, act="Relu6")
    for t, cout, n, s in plan:
        co = _width(cout, width, style)
        for i in range(n):
            stride = s if i == 0 else 1
            y = b.cbr(x, c, c * t, k=1, act="Relu6") if t != 1 else x
            y = b.cbr(y, c * t, c * t, stride=stride, groups=c * t, act="Relu6")
            y = b.cbr(y, c * t, co, k=1, act=None)
            x = b.node("Add", [x, y]) if stride == 1 and co == c else y
            c = co
    last = 1280 if width <= 1.0 else _width(1280, width, style)
    x = b.cbr(x, c, last, k=1, act="Relu6")
    return b.model([1, 3, size, size], [_head(b, x, last, classes)], f"mobilenet_v2_{width:g}_{size}")


def tiny_yolo_v2(size: int = 224, classes: int = 1, anchors: int = 5, seed: int = 0):
    """Tiny YOLO v2 (darknet yolov2-tiny, COCO cfg): six 3x3 conv + BN + LeakyReLU(0.1) stages with
    2x2 max pools (the sixth with stride 1, padded right/bottom), 3x3 convs to 1024 and 512, and a
    1x1 detection head of anchors x (5 + classes) channels at stride 32."""
    b = Builder(seed)
    x, c = "input", 3
    for i, co in enumerate((16, 32, 64, 128, 256, 512)):
        x = b.cbr(x, c, co, act="LeakyRelu")
        c = co
        if i < 5:
            x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
        else:
            x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[1, 1], pads=[0, 0, 1, 1])
    x = b.cbr(x, 512, 1024, act="LeakyRelu")
    x = b.cbr(x, 1024, 512, act="LeakyRelu")
    out = b.conv(x, 512, anchors * (5 + classes), k=1, name="head")
    return b.model([1, 3, size, size], [out], f"tiny_yolo_v2_{size}")


def regnetx_200mf(size: int = 224, classes: int = 1000, seed: int = 0):
    """RegNetX-200MF (pycls): 3x3 stride-2 stem to 32, X blocks (1x1, 3x3 group conv of group width 8
    with the stage's stride, 1x1; projection shortcut on the first block of a stage), GAP, FC."""
    b = Builder(seed)
    x = b.cbr("input", 3, 32, stride=2)
    c = 32
    for depth, w in zip((1, 1, 4, 7), (24, 56, 152, 368)):
        for i in range(depth):
            stride = 2 if i == 0 else 1
            y = b.cbr(x, c, w, k=1)
            y = b.cbr(y, w, w, stride=stride, groups=w // 8)
            y = b.cbr(y, w, w, k=1, act=None)
            sc = b.cbr(x, c, w, k=1, stride=stride, act=None) if (stride != 1 or c != w) else x
            x = b.node("Relu", [b.node("Add", [y, sc])])
            c = w
    return b.model([1, 3, size, size], [_head(b, x, c, classes)], f"regnetx_200mf_{size}")


def resnet18(width: float = 1.0, size: int = 224, classes: int = 1000, seed: int = 0):
    """ResNet-18 (pytorchcv): 7x7 stride-2 stem, 3x3 max pool, four stages of two basic blocks with
    channels 64-128-256-512 x width (the last block keeps 512, as pytorchcv's width-scaled ResNets),
    GAP, FC."""
    b = Builder(seed)
    stages = [[int(c * width)] * 2 for c in (64, 128, 256, 512)]
    stages[-1][-1] = 512
    c = int(64 * width)
    x = b.node("MaxPool", [b.cbr("input", 3, c, k=7, stride=2)], kernel_shape=[3, 3], strides=[2, 2],
               pads=[1, 1, 1, 1])
    for si, stage in enumerate(stages):
        for i, co in enumerate(stage):
            stride = 2 if i == 0 and si > 0 else 1
            y = b.bn(b.conv(b.cbr(x, c, co, stride=stride), co, co, bias=False), co)
            sc = b.bn(b.conv(x, c, co, k=1, stride=stride, bias=False), co) if (stride != 1 or c != co) else x
            x = b.node("Relu", [b.node("Add", [y, sc])])
            c = co
    return b.model([1, 3, size, size], [_head(b, x, c, classes)], f"resnet18_{width:g}_{size}")


def resnet50_v2(size: int = 224, classes: int = 1000, seed: int = 0):
    """ResNet50 v2 (tf.keras.applications.ResNet50V2): 7x7 stride-2 conv with bias, 3x3 stride-2 max pool,
    stacks of 3-4-6-3 pre-activation bottlenecks (BN-ReLU, then 1x1, 3x3, 1x1 x4; a 1x1 projection shortcut
    on a stack's first block; the stride on the 3x3 of a stack's last block, whose shortcut is a 1x1
    stride-2 max pool), BN-ReLU, GAP, FC."""
    b = Builder(seed)
    x = b.node("MaxPool", [b.conv("input", 3, 64, k=7, stride=2)], kernel_shape=[3, 3], strides=[2, 2],
               pads=[1, 1, 1, 1])
    c = 64
    for filters, blocks, stride in ((64, 3, 2), (128, 4, 2), (256, 6, 2), (512, 3, 1)):
        for i in range(blocks):
            pre = b.node("Relu", [b.bn(x, c)])
            s = stride if i == blocks - 1 else 1
            if i == 0:
                sc = b.conv(pre, c, 4 * filters, k=1)
            else:
                sc = b.node("MaxPool", [x], kernel_shape=[1, 1], strides=[s, s]) if s > 1 else x
            y = b.cbr(b.cbr(pre, c, filters, k=1), filters, filters, stride=s)
            x = b.node("Add", [sc, b.conv(y, filters, 4 * filters, k=1)])
            c = 4 * filters
    x = b.node("Relu", [b.bn(x, c)])
    return b.model([1, 3, size, size], [_head(b, x, c, classes)], f"resnet50_v2_{size}")


def fd_mobilenet(alpha: float = 0.25, size: int = 224, classes: int = 1000, seed: int = 0):
    """FD-MobileNet (Qin et al. 2018, the zoo's Keras model): 3x3 stride-2 stem to 32 x alpha, 12
    depthwise-separable blocks (64/2, 128/2, 128, 256/2, 256, 512/2, 512 x5, 1024; x alpha), GAP, FC."""
    b = Builder(seed)
    c = int(32 * alpha)
    x = b.cbr("input", 3, c, stride=2)
    plan = [(64, 2), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 1)]
    for cout, stride in plan:
        co = int(cout * alpha)
        x = b.cbr(b.cbr(x, c, c, stride=stride, groups=c), c, co, k=1)
        c = co
    return b.model([1, 3, size, size], [_head(b, x, c, classes)], f"fd_mobilenet_{alpha:g}_{size}")


def weight_bytes(program) -> int:
    """Bytes of a compiled program's constants (weights and parameter tables)."""
    return sum(len(c.data) for c in program.constants)


# ------------------------------------------------------------ ST's published N6 figures

_ZOO = "STMicroelectronics/stm32ai-modelzoo"


@dataclass(frozen=True)
class Figure:
    """One published STM32N6570-DK measurement of a model built by `builder(**kwargs)`."""

    name: str
    builder: Callable
    kwargs: dict
    ms: float  # ST's inference time
    weights_kib: float  # ST's weight-flash size
    source: str
    role: str = "held-out"  # "calibration": fitted on; "held-out": only checked

    def model(self):
        return self.builder(**self.kwargs)


def _fig(name, builder, kwargs, ms, kib, source, role="held-out"):
    return Figure(name, builder, dict(kwargs), float(ms), float(kib), source, role)


_PT_V1 = f"{_ZOO} image_classification/mobilenet_pt/README.md (STEdgeAI Core 3.0.0)"
_PT_V2 = f"{_ZOO} image_classification/mobilenetv2_pt/README.md (STEdgeAI Core 3.0.0)"
_TF_V1 = f"{_ZOO} image_classification/mobilenetv1/README.md (STEdgeAI Core 2.0.0)"
_TF_V2 = f"{_ZOO} image_classification/mobilenetv2/README.md (STEdgeAI Core 2.0.0)"
_YOLO = f"{_ZOO} object_detection/yolov2t/README.md (STEdgeAI Core 3.0.0)"
_V22 = "README.md, food-101 / ImageNet rows (STEdgeAI Core 2.2.0)"

# Board: STM32N6570-DK, NPU at 1 GHz, int8, weights in external flash, no external RAM.
# "calibration" figures are the only ones scripts/calibrate.py fits on; "held-out" ones only check it.
PUBLISHED = (
    _fig("MobileNet v1 1.0 224", mobilenet_v1, {}, 18.81, 4250, "issue #13 (ST model zoo, PyTorch MobileNet v1)",
         "calibration"),
    _fig("MobileNet v2 1.0 224", mobilenet_v2, {}, 20.45, 3812, _PT_V2 + " / issue #13", "calibration"),
    _fig("tiny YOLO v2 224", tiny_yolo_v2, {}, 30.67, 10805, _YOLO + " / issue #13", "calibration"),
    _fig("RegNetX-200MF 224", regnetx_200mf, {}, 9.96, 2606.72,
         f"{_ZOO} image_classification/regnet_pt/README.md (STEdgeAI Core 3.0.0)", "calibration"),
    _fig("MobileNet v1 0.25 224", mobilenet_v1, {"width": 0.25}, 2.98, 469.45, _PT_V1),
    _fig("MobileNet v1 0.5 224", mobilenet_v1, {"width": 0.5}, 6.55, 1318.3, _PT_V1),
    _fig("MobileNet v1 0.75 224", mobilenet_v1, {"width": 0.75}, 11.73, 2612.79, _PT_V1),
    _fig("MobileNet v2 0.25 224", mobilenet_v2, {"width": 0.25}, 6.50, 1522.31, _PT_V2),
    _fig("MobileNet v2 0.5 224", mobilenet_v2, {"width": 0.5}, 10.08, 1972.03, _PT_V2),
    _fig("MobileNet v2 0.75 224", mobilenet_v2, {"width": 0.75}, 15.17, 2737.58, _PT_V2),
    _fig("ResNet-18 x0.25 224", resnet18, {"width": 0.25}, 13.82, 3843.64,
         f"{_ZOO} image_classification/resnet18_pt/README.md (STEdgeAI Core 3.0.0)"),
    _fig("tiny YOLO v2 416", tiny_yolo_v2, {"size": 416}, 50.26, 10884.56, _YOLO),
    _fig("MobileNet v1 0.25 224 (TF)", mobilenet_v1, {"width": 0.25, "style": "keras"}, 3.57, 549.88, _TF_V1),
    _fig("MobileNet v1 0.5 224 (TF)", mobilenet_v1, {"width": 0.5, "style": "keras"}, 7.38, 1478.58, _TF_V1),
    _fig("MobileNet v2 0.35 128 (TF)", mobilenet_v2, {"width": 0.35, "size": 128, "style": "keras"}, 6.35, 1840.94,
         _TF_V2),
    _fig("MobileNet v2 0.35 224 (TF)", mobilenet_v2, {"width": 0.35, "style": "keras"}, 9.14, 1855.97, _TF_V2),
    _fig("MobileNet v2 1.4 224 (TF)", mobilenet_v2, {"width": 1.4, "style": "keras"}, 35.34, 7315.69, _TF_V2),
    _fig("MobileNet v2 1.0 224 101 classes (TF)", mobilenet_v2, {"classes": 101, "style": "keras"}, 18.08, 3110.05,
         _TF_V2),
    _fig("FD-MobileNet 0.25 128 (TF)", fd_mobilenet, {"size": 128, "classes": 101}, 0.93, 197.56,
         f"{_ZOO} image_classification/fdmobilenet/{_V22}"),
    _fig("FD-MobileNet 0.25 224 (TF)", fd_mobilenet, {"classes": 101}, 1.46, 197.56,
         f"{_ZOO} image_classification/fdmobilenet/{_V22}"),
    _fig("SqueezeNet 1.1 128 (TF)", squeezenet, {"size": 128, "classes": 101}, 4.06, 753.38,
         f"{_ZOO} image_classification/squeezenetv1.1/{_V22}"),
    _fig("SqueezeNet 1.1 224 (TF)", squeezenet, {"classes": 101}, 8.70, 753.38,
         f"{_ZOO} image_classification/squeezenetv1.1/{_V22}"),
    # the board keeps 3136 KiB of its activations in external RAM (hyperRAM) for this one
    _fig("ResNet50 v2 224 (TF)", resnet50_v2, {}, 231.59, 25633.55, f"{_ZOO} image_classification/resnet50v2/{_V22}"),
)
