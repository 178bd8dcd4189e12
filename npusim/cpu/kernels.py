"""The host's own kernels, for operators ONNX's reference implementation gets wrong or runs too slowly.

    ConvTranspose   N-D, any groups, strides, dilations, pads, output_padding, output_shape, auto_pad:
                    a scatter-add per kernel tap (onnx 1.23's reference mixes the groups up when a group
                    has more than one channel)
    Upsample        opsets 7-9, nearest and linear, any rank: ONNX's Resize with asymmetric coordinates
                    and floor rounding, the given scales (the reference implements only whole-number
                    nearest scales)
    Softmax, LogSoftmax, Hardmax before opset 13: over the input coerced to 2-D at `axis` (every axis
                    from `axis` on at once; the reference runs opset 13's single axis for every opset)

Each kernel takes the operator's inputs (numpy arrays) and its attribute dict and returns its outputs;
the formulas are ONNX's (the operator's documentation) and ONNX Runtime's rounding of the auto pads.
"""

from __future__ import annotations

import numpy as np


def conv_transpose_pads(in_sizes, kernel, strides, dilations, out_pad, attrs) -> tuple[list, list, list]:
    """(output sizes, begin pads, end pads) of a ConvTranspose."""
    nd = len(in_sizes)
    full = [s * (i - 1) + op + (k - 1) * d + 1 for i, k, s, d, op in zip(in_sizes, kernel, strides, dilations, out_pad)]
    auto = attrs.get("auto_pad", "NOTSET")
    if isinstance(auto, bytes):
        auto = auto.decode()
    shape = attrs.get("output_shape")
    if shape is not None:
        out = [int(v) for v in list(shape)[-nd:]]
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        out = [i * s for i, s in zip(in_sizes, strides)]
    else:
        pads = [int(v) for v in attrs.get("pads", [0] * 2 * nd)]
        return [f - pads[a] - pads[a + nd] for a, f in enumerate(full)], pads[:nd], pads[nd:]
    begin, end = [], []
    for f, o in zip(full, out):
        total = f - o
        head = total // 2 if auto == "SAME_UPPER" else total - total // 2
        begin.append(head)
        end.append(total - head)
    return out, begin, end


def conv_transpose(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, attrs: dict) -> np.ndarray:
    """ConvTranspose of x [N, C, *spatial] with weights [C, M/group, *kernel] (and bias [M])."""
    n, c = x.shape[:2]
    spatial = x.shape[2:]
    nd = len(spatial)
    group = int(attrs.get("group", 1))
    kernel = [int(v) for v in attrs.get("kernel_shape", w.shape[2:])]
    strides = [int(v) for v in attrs.get("strides", [1] * nd)]
    dil = [int(v) for v in attrs.get("dilations", [1] * nd)]
    out_pad = [int(v) for v in attrs.get("output_padding", [0] * nd)]
    out, begin, _ = conv_transpose_pads(list(spatial), kernel, strides, dil, out_pad, attrs)
    mg = w.shape[1]
    cg = c // group
    span = [s_ * (i - 1) + (k - 1) * d + 1 for i, k, s_, d in zip(spatial, kernel, strides, dil)]
    shift = [max(0, -b0) for b0 in begin]  # a negative begin pad: output rows before the first tap
    size = [max(sp + sh, sh + b0 + o) for sp, sh, b0, o in zip(span, shift, begin, out)]
    y = np.zeros((n, mg * group) + tuple(size), dtype=np.float64)
    xf = x.astype(np.float64)
    wf = w.astype(np.float64)
    for tap in np.ndindex(*kernel):
        idx = tuple(slice(sh + t * d, sh + t * d + s_ * (i - 1) + 1, s_)
                    for sh, t, d, s_, i in zip(shift, tap, dil, strides, spatial))
        for gi in range(group):
            # [N, C/g, *spatial] x [C/g, M/g] -> [N, M/g, *spatial]
            part = np.einsum("nc...,cm->nm...", xf[:, gi * cg:(gi + 1) * cg], wf[(slice(gi * cg, (gi + 1) * cg),
                                                                                  slice(None)) + tap])
            y[(slice(None), slice(gi * mg, (gi + 1) * mg)) + idx] += part
    y = y[(slice(None), slice(None)) + tuple(slice(sh + b0, sh + b0 + o) for sh, b0, o in zip(shift, begin, out))]
    if b is not None:
        y = y + b.astype(np.float64).reshape((1, -1) + (1,) * nd)
    return y


def upsample(ins: list[np.ndarray], attrs: dict) -> np.ndarray:
    """Upsample of ins[0] by the scales (input 1 from opset 9, the `scales` attribute before): the output
    is floor(size * scale) and output index i reads source coordinate i / scale (asymmetric), rounded down
    for nearest, interpolated for linear -- Resize-11's semantics with those settings."""
    from onnx import helper

    from .reference import evaluator

    x = np.asarray(ins[0])
    scales = np.asarray(ins[1] if len(ins) > 1 else attrs["scales"], dtype=np.float32).reshape(-1)
    mode = attrs.get("mode", "nearest")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if scales.size != x.ndim:
        raise ValueError(f"{scales.size} scales for a rank-{x.ndim} input")
    if mode not in ("nearest", "linear", "bilinear"):
        raise ValueError(f"mode={mode!r} (Upsample has nearest and linear)")
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest" if mode == "nearest" else "linear",
                            coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    return evaluator(node, 11, [x, scales]).run(None, {"x": x, "s": scales})[0]


COERCED_2D = ("Softmax", "LogSoftmax", "Hardmax")  # their pre-13 forms (opset 1-12)


def coerced_2d(op: str, ins: list[np.ndarray], attrs: dict) -> np.ndarray:
    """`op` (opset 1-12) on x: x as [prod(d[:axis]), prod(d[axis:])], the operator over its last axis
    (opset 13's definition), reshaped back."""
    from onnx import helper

    from .reference import evaluator

    x = np.asarray(ins[0])
    axis = int(attrs.get("axis", 1))
    if not -max(x.ndim, 1) <= axis < max(x.ndim, 1):
        raise ValueError(f"axis {axis} of a rank-{x.ndim} input")
    axis %= max(x.ndim, 1)
    flat = x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), -1) if x.ndim else x.reshape(1, 1)
    node = helper.make_node(op, ["x"], ["y"], axis=-1)
    return evaluator(node, 13, [flat]).run(None, {"x": flat})[0].reshape(x.shape)


KERNELS = {"ConvTranspose": lambda ins, attrs: [conv_transpose(ins[0], ins[1], ins[2] if len(ins) > 2 else None, attrs)],
           "Upsample": lambda ins, attrs: [upsample(ins, attrs)]}
