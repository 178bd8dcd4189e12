"""Cost of a host operator on the Cortex-M55: operator class x units of work (profile [host]).

    host cycles = host.call_cycles + host.cycles[class] * work
    NPU cycles  = host cycles * profile.clock / host.clock   (the NPU idles meanwhile)

Work by class: `mac` multiply-accumulates (from the shapes), `window` output elements x window
cells, `reduce` input elements, `sort` n log2 n, every other class the larger of the input and
output element counts. Every per-class value in the default profile is ASSUMED.
"""

from __future__ import annotations

import math

CLASSES = {
    "movement": ("Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split", "Slice",
                 "Gather", "GatherElements", "GatherND", "Scatter", "ScatterElements", "ScatterND", "Tile", "Expand",
                 "Pad", "DepthToSpace", "SpaceToDepth", "Cast", "CastLike", "Shape", "Size", "Compress",
                 "ReverseSequence", "Trilu", "OneHot", "Range", "ConstantOfShape", "EyeLike", "Col2Im", "CenterCropPad",
                 "Constant", "Bitcast"),
    "transcendental": ("Exp", "Log", "Tanh", "Sigmoid", "Erf", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh",
                       "Cosh", "Asinh", "Acosh", "Atanh", "Softmax", "LogSoftmax", "Hardmax", "Softplus", "Softsign",
                       "Elu", "Selu", "Celu", "Gelu", "Mish", "Pow", "Sqrt", "LRN", "HardSigmoid", "HardSwish",
                       "ThresholdedRelu", "Swish"),
    "reduce": ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
               "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "GlobalAveragePool",
               "GlobalMaxPool", "GlobalLpPool", "LpNormalization", "CumSum"),
    "normalize": ("LayerNormalization", "InstanceNormalization", "GroupNormalization", "BatchNormalization",
                  "MeanVarianceNormalization", "RMSNormalization", "SkipLayerNormalization"),
    "window": ("MaxPool", "AveragePool", "LpPool", "MaxUnpool", "MaxRoiPool"),
    "mac": ("Conv", "ConvTranspose", "MatMul", "Gemm", "ConvInteger", "MatMulInteger", "QLinearConv",
            "QLinearMatMul", "Einsum", "DeformConv", "Attention", "RNN", "GRU", "LSTM", "DFT", "STFT"),
    "resize": ("Resize", "Upsample", "GridSample", "RoiAlign", "AffineGrid"),
    "sort": ("TopK", "Unique", "NonMaxSuppression", "NonZero"),
}
_CLASS_OF = {op: cls for cls, ops in CLASSES.items() for op in ops}


def cost_class(op_type: str) -> str:
    """The [host] cycles class of an ONNX operator (elementwise unless listed)."""
    return _CLASS_OF.get(op_type, "elementwise")


def _numel(shape) -> int:
    return int(math.prod(int(d) for d in shape))


def _macs(op: str, ins: list[tuple], outs: list[tuple], attrs: dict) -> int:
    out = outs[0] if outs else ()
    if op in ("Conv", "ConvInteger", "QLinearConv", "DeformConv") and len(ins) > 1:
        w = ins[3] if op == "QLinearConv" and len(ins) > 3 else ins[1]
        return _numel(out) * _numel(w[1:])
    if op == "ConvTranspose" and len(ins) > 1:
        return _numel(ins[0]) * _numel(ins[1][1:])
    if op in ("MatMul", "MatMulInteger", "QLinearMatMul") and ins and ins[0]:
        return _numel(out) * int(ins[0][-1])
    if op == "Gemm" and ins and ins[0]:
        k = ins[0][0] if attrs.get("transA") else ins[0][-1]
        return _numel(out) * int(k)
    return max([_numel(s) for s in ins + outs] + [0]) * 8  # recurrent/attention/DFT: a rough multiple


def work(op_type: str, in_shapes: list[tuple], out_shapes: list[tuple], attrs: dict | None = None) -> float:
    """Units of work of the operator's class (module doc) from its operand shapes."""
    attrs = attrs or {}
    cls = cost_class(op_type)
    elems = max([_numel(s) for s in in_shapes + out_shapes] + [0])
    if cls == "mac":
        return float(_macs(op_type, in_shapes, out_shapes, attrs))
    if cls == "window":
        k = attrs.get("kernel_shape") or [1]
        return float(_numel(out_shapes[0]) * _numel(k)) if out_shapes else 0.0
    if cls == "reduce":
        return float(_numel(in_shapes[0])) if in_shapes else 0.0
    if cls == "sort":
        return float(elems * max(1.0, math.log2(max(elems, 1))))
    return float(elems)


def host_cycles(op_type: str, in_shapes: list[tuple], out_shapes: list[tuple], profile, attrs=None) -> float:
    """NPU cycles the host spends on one software epoch of this operator."""
    h = profile.host
    mine = float(h.call_cycles) + float(h.cycles[cost_class(op_type)]) * work(op_type, in_shapes, out_shapes, attrs)
    return profile.host_to_npu_cycles(mine)
