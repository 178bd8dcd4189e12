"""TFLite front end: an int8 .tflite model (tflite_reader.TModel) -> the graph IR (ir.Graph).

TFLite is NHWC; the IR is ONNX's NCHW. The conversion happens here, once: a rank-4 tensor
[N, H, W, C] becomes [N, C, H, W], a rank-3 [N, L, C] becomes [N, C, L]; axes, paddings,
permutations and slices are remapped; a RESHAPE whose bytes would be ordered differently in NCHW
gets explicit transposes (software epochs) around it. Weights become the IR's float constants
(dequantized) with their stored integers, scales and zero points attached (`Graph.wq`); every
activation keeps the model's scale and zero point (`Graph.qdq`, uint8 as int8 with zp - 128, the
way ST's toolchain feeds the int8 NPU), so nothing is calibrated. Fused activations become Relu/Clip
nodes whose input carries the output's scale (the passes fuse them back). Each builtin becomes the
ONNX operator of the same meaning, so the passes, the mapping table and the CPU fallback treat it
like any other node.

Refused (one ModelError line): float or 16-bit models, a builtin with no ONNX counterpart, custom
operators, dynamic shapes.
"""

from __future__ import annotations

import numpy as np

from ..errors import ModelError
from .ir import Graph, Node, WeightQuant
from .tflite_reader import TModel, TOp, TTensor

OPSET = 17
QUANT_TYPES = ("int8", "uint8")
ACTIVATIONS = {0: None, 1: ("Relu", None, None), 2: ("Clip", -1.0, 1.0), 3: ("Clip", 0.0, 6.0), 4: ("Tanh", None, None)}
UNARY = {"LOGISTIC": "Sigmoid", "TANH": "Tanh", "ABS": "Abs",
         "EXP": "Exp", "LOG": "Log", "SQRT": "Sqrt", "NEG": "Neg", "FLOOR": "Floor", "CEIL": "Ceil", "SIN": "Sin",
         "COS": "Cos", "ELU": "Elu", "GELU": "Gelu"}
CLIPS = {"RELU6": (0.0, 6.0), "RELU_N1_TO_1": (-1.0, 1.0), "RELU_0_TO_1": (0.0, 1.0)}
BINARY = {"ADD": "Add", "SUB": "Sub", "MUL": "Mul", "DIV": "Div", "MAXIMUM": "Max", "MINIMUM": "Min", "POW": "Pow"}
REDUCERS = {"MEAN": "ReduceMean", "SUM": "ReduceSum", "REDUCE_MAX": "ReduceMax", "REDUCE_MIN": "ReduceMin",
            "REDUCE_PROD": "ReduceProd"}


def ir_perm(rank: int) -> tuple[int, ...]:
    """IR axis i is TFLite axis perm[i]: NHWC -> NCHW for rank 4, NLC -> NCL for rank 3."""
    if rank == 4:
        return (0, 3, 1, 2)
    if rank == 3:
        return (0, 2, 1)
    return tuple(range(rank))


def _same_order(shape: tuple[int, ...]) -> bool:
    """Whether the NHWC bytes of `shape` are in the same order as its NCHW view's (channel or plane of 1)."""
    if len(shape) not in (3, 4):
        return True
    spatial = int(np.prod(shape[1:-1]))
    return spatial == 1 or shape[-1] == 1


class _Lowering:
    def __init__(self, model: TModel, where: str):
        self.m, self.where = model, where
        self.nodes: list[Node] = []
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.consts: dict[str, np.ndarray] = {}
        self.dtypes: dict[str, str] = {}
        self.qdq: dict[str, tuple[float, int]] = {}
        self.wq: dict[str, WeightQuant] = {}
        self.names: dict[int, str] = {}
        self.used: set[str] = set()  # tensor names
        self.node_names: set[str] = set()
        self.rename: dict[int, int] = {}  # boundary QUANTIZE/DEQUANTIZE: tensor -> the tensor it stands for
        self.fc_flat: dict[int, int] = {}  # a RESHAPE read only by fully connected layers: output -> its input
        self.consumers: dict[int, list[TOp]] = {}
        for op in model.ops:
            for i in op.inputs:
                if i >= 0:
                    self.consumers.setdefault(i, []).append(op)

    # ------------------------------------------------------------------ tensors

    def t(self, i: int) -> TTensor:
        return self.m.tensors[i]

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.used:
            k += 1
            name = f"{base}#{k}"
        self.used.add(name)
        return name

    def name(self, i: int) -> str:
        """The IR name of TFLite tensor i (a boundary alias resolves to the tensor it stands for)."""
        i = self.rename.get(i, i)
        if i not in self.names:
            self.names[i] = self.fresh(self.t(i).name)
            self._declare(i)
        return self.names[i]

    def _declare(self, i: int) -> None:
        t, n = self.t(i), self.names[i]
        self.shapes[n] = self.ir_shape(t.shape)
        if t.data is not None:  # a constant read as a tensor: its float values in IR order
            v = self.dequantized(t) if t.quantized or t.data.dtype.kind == "f" else t.data
            self.consts[n] = np.ascontiguousarray(np.asarray(v).transpose(ir_perm(v.ndim)))
            self.dtypes[n] = "fp32" if self.consts[n].dtype.kind == "f" else str(self.consts[n].dtype).replace(
                "float", "fp")
            return
        if t.dtype in QUANT_TYPES:
            self.dtypes[n] = "fp32"  # a float tensor the model stores quantized
            self.qdq[n] = self.act_q(t)
        elif t.dtype in ("int32", "int64", "bool", "int16") and not t.quantized:
            self.dtypes[n] = {"int32": "int32", "int64": "int64", "bool": "bool", "int16": "int16"}[t.dtype]
        else:
            self.dtypes[n] = "fp32"

    def act_q(self, t: TTensor) -> tuple[float, int]:
        """(scale, int8 zero point) of an activation; uint8 shifts its zero point by -128."""
        if not t.quantized or t.scale.size != 1:
            raise ModelError(f"{self.where}: tensor {t.name!r} needs one scale and zero point per tensor "
                             f"(activations are quantized per tensor)")
        zp = int(t.zero_point.reshape(-1)[0]) - (128 if t.dtype == "uint8" else 0)
        return float(t.scale[0]), zp

    @staticmethod
    def ir_shape(shape) -> tuple[int, ...]:
        return tuple(int(shape[p]) for p in ir_perm(len(shape)))

    def ir_axis(self, axis: int, rank: int) -> int:
        return ir_perm(rank).index(int(axis) % rank)

    def const_values(self, i: int, what: str, op: TOp) -> np.ndarray:
        t = self.t(i)
        if t.data is None:
            raise ModelError(f"{self.where}: {self.label(op)}: {what} must be a constant tensor")
        return t.data

    def dequantized(self, t: TTensor) -> np.ndarray:
        """Float values of a constant as the model means them ((q - zp) * scale; float data as is)."""
        a = t.data
        if not t.quantized:
            return a.astype(np.float32)
        s, z = t.scale, t.zero_point.reshape(-1)
        if s.size > 1:
            shape = [1] * a.ndim
            shape[t.axis] = s.size
            s, z = s.reshape(shape), (z if z.size == s.size else np.repeat(z, s.size)).reshape(shape)
        return ((a.astype(np.float64) - z) * s).astype(np.float32)

    def add_const(self, base: str, value: np.ndarray, dtype: str | None = None) -> str:
        n = self.fresh(base)
        v = np.asarray(value)
        self.consts[n] = v
        self.shapes[n] = tuple(v.shape)
        self.dtypes[n] = dtype or ("fp32" if v.dtype.kind == "f" else {np.dtype(np.int64): "int64",
                                                                      np.dtype(np.int32): "int32"}.get(v.dtype, "int64"))
        return n

    def weight(self, i: int, perm: tuple[int, ...] | None, base: str, reshape=None) -> str:
        """A quantized constant as an IR float constant (transposed by `perm`, then reshaped) with its
        stored integers and per-axis scales attached."""
        t = self.t(i)
        f = self.dequantized(t)
        q = t.data
        axis = t.axis if t.scale is not None and t.scale.size > 1 else None
        if perm is not None:
            f, q = f.transpose(perm), q.transpose(perm)
            axis = None if axis is None else perm.index(axis)
        if reshape is not None:
            f, q = f.reshape(reshape), q.reshape(reshape)
        n = self.add_const(base, np.ascontiguousarray(f))
        if t.quantized:
            self.wq[n] = WeightQuant(np.ascontiguousarray(q), t.scale.astype(np.float64),
                                     t.zero_point.reshape(-1).astype(np.int64), axis)
        return n

    # ------------------------------------------------------------------ nodes

    def label(self, op: TOp) -> str:
        return f"operator {op.index} ({op.label})"

    def node_name(self, op: TOp) -> str:
        """A node is named after its first output tensor (as TFLite's tools show layers), made unique."""
        out = op.outputs[0] if op.outputs else None
        base = f"{op.opcode.lower()}_{op.index}" if out is None else self.t(out).name
        name, k = base, 1
        while name in self.node_names:
            k += 1
            name = f"{base}#{k}"
        self.node_names.add(name)
        return name

    def emit(self, name: str, op: str, inputs, outputs, **attrs) -> None:
        """An IR node with its ONNX NodeProto (what a CPU fallback and the resize probe run)."""
        from onnx import helper

        proto = helper.make_node(op, list(inputs), list(outputs), name=name,
                                 **{k: v for k, v in attrs.items() if not k.startswith("_")})
        self.nodes.append(Node(name, op, list(inputs), list(outputs), attrs, proto=proto))

    def tmp(self, base: str, shape, q=None, dtype="fp32") -> str:
        n = self.fresh(base)
        self.shapes[n] = tuple(int(d) for d in shape)
        self.dtypes[n] = dtype
        if q is not None:
            self.qdq[n] = q
        return n

    def activation(self, op: TOp, name: str, pre: str, out: str) -> None:
        """Fused activation `fused_activation_function` from `pre` to `out` (same scale)."""
        act = ACTIVATIONS.get(int(op.options.get("fused_activation_function", 0)), "bad")
        if act == "bad":
            raise ModelError(f"{self.where}: {self.label(op)}: fused activation "
                             f"{op.options.get('fused_activation_function')} is not supported")
        if act is None:
            return
        kind, lo, hi = act
        if kind == "Clip":
            self.emit(name + "/act", "Clip", [pre, self.add_const(name + "/lo", np.float32(lo)),
                                              self.add_const(name + "/hi", np.float32(hi))], [out])
        else:
            self.emit(name + "/act", kind, [pre], [out])

    def result(self, op: TOp, name: str) -> tuple[str, str]:
        """(tensor the operator computes into, its final output): an intermediate with the output's
        scale when a fused activation follows."""
        out = self.name(op.outputs[0])
        if ACTIVATIONS.get(int(op.options.get("fused_activation_function", 0))) is None:
            return out, out
        return self.tmp(name + "/pre", self.shapes[out], self.qdq.get(out)), out

    def reshape(self, name: str, src: str, src_tfl: tuple, dst: str, dst_tfl: tuple) -> None:
        """`dst` = TFLite's row-major reshape of `src` (both IR tensors, with their TFLite shapes)."""
        q = self.qdq.get(src)
        cur = src
        if not _same_order(src_tfl):
            p = ir_perm(len(src_tfl))
            cur = self.tmp(name + "/nhwc", src_tfl, q)
            self.emit(name + "/to_nhwc", "Transpose", [src], [cur], perm=[p.index(j) for j in range(len(p))])
        if _same_order(dst_tfl):
            self.emit(name, "Reshape", [cur, self.add_const(name + "/shape", np.array(self.ir_shape(dst_tfl),
                                                                                       np.int64))], [dst])
            return
        flat = self.tmp(name + "/flat", dst_tfl, q)
        self.emit(name, "Reshape", [cur, self.add_const(name + "/shape", np.array(dst_tfl, np.int64))], [flat])
        self.emit(name + "/to_nchw", "Transpose", [flat], [dst], perm=list(ir_perm(len(dst_tfl))))

    # ------------------------------------------------------------------ operators

    def conv(self, op: TOp, depthwise: bool) -> None:
        o = op.options
        name = self.node_name(op)
        x, w = op.inputs[0], op.inputs[1]
        xt, wt = self.t(x), self.t(w)
        self.const_values(w, "the filter", op)
        if len(wt.shape) != 4 or len(xt.shape) != 4:
            raise ModelError(f"{self.where}: {self.label(op)}: expected 4-D input and filter, got "
                             f"{list(xt.shape)} and {list(wt.shape)}")
        _, ih, iw, ic = xt.shape
        if depthwise:  # [1, KH, KW, C*M] -> [C*M, 1, KH, KW], group = C
            kh, kw, oc = wt.shape[1], wt.shape[2], wt.shape[3]
            wn = self.weight(w, (3, 0, 1, 2), name + "/filter")
            group = ic
        else:  # [OC, KH, KW, IC/g] -> [OC, IC/g, KH, KW]
            oc, kh, kw, icg = wt.shape
            wn = self.weight(w, (0, 3, 1, 2), name + "/filter")
            group = ic // icg if icg else 1
        sh, sw = int(o.get("stride_h", 1)), int(o.get("stride_w", 1))
        dh, dw = int(o.get("dilation_h_factor", 1)), int(o.get("dilation_w_factor", 1))
        pads = self.pads(op, ih, iw, kh, kw, sh, sw, dh, dw)
        ins = [self.name(x), wn]
        if len(op.inputs) > 2 and op.inputs[2] >= 0:
            self.const_values(op.inputs[2], "the bias", op)
            ins.append(self.weight(op.inputs[2], None, name + "/bias"))
        pre, out = self.result(op, name)
        self.emit(name, "Conv", ins, [pre], kernel_shape=[kh, kw], strides=[sh, sw], dilations=[dh, dw],
                  pads=pads, group=group)
        self.activation(op, name, pre, out)

    def pads(self, op: TOp, ih, iw, kh, kw, sh, sw, dh=1, dw=1) -> list[int]:
        """ONNX pads [t, l, b, r] of TFLite's SAME (the extra cell at the end) or VALID padding."""
        if int(op.options.get("padding", 1)) == 1:
            return [0, 0, 0, 0]
        out = []
        for n, k, s, d in ((ih, kh, sh, dh), (iw, kw, sw, dw)):
            o = -(-n // s)
            total = max((o - 1) * s + (k - 1) * d + 1 - n, 0)
            out.append((total // 2, total - total // 2))
        return [out[0][0], out[1][0], out[0][1], out[1][1]]

    def fully_connected(self, op: TOp) -> None:
        name = self.node_name(op)
        x, w = self.fc_flat.get(op.inputs[0], op.inputs[0]), op.inputs[1]
        xt, wt = self.t(x), self.t(w)
        self.const_values(w, "the weights", op)
        if len(wt.shape) != 2:
            raise ModelError(f"{self.where}: {self.label(op)}: weights {list(wt.shape)} are not 2-D")
        n_out, k = wt.shape
        numel = int(np.prod(xt.shape))
        if numel != k:
            raise ModelError(f"{self.where}: {self.label(op)}: input {list(xt.shape)} is not one row of {k} "
                             f"(batched fully connected layers are not supported)")
        src = self.name(x)
        wperm = None
        if len(xt.shape) != 2:  # TFLite flattens NHWC; the IR's Flatten of the NCHW map orders c, h, w
            if not _same_order(xt.shape):
                wperm = np.arange(k).reshape(xt.shape[1:]).transpose(
                    tuple(p - 1 for p in ir_perm(len(xt.shape))[1:])).reshape(-1)
            flat = self.tmp(name + "/flat", (1, k), self.qdq.get(src))
            self.emit(name + "/flatten", "Flatten", [src], [flat], axis=1)
            src = flat
        wn = self.weight(w, None, name + "/weights")
        if wperm is not None:
            self.consts[wn] = np.ascontiguousarray(self.consts[wn][:, wperm])
            if wn in self.wq:
                q = self.wq[wn]
                self.wq[wn] = WeightQuant(np.ascontiguousarray(q.values[:, wperm]), q.scale, q.zero_point, q.axis)
        ins = [src, wn]
        if len(op.inputs) > 2 and op.inputs[2] >= 0:
            self.const_values(op.inputs[2], "the bias", op)
            ins.append(self.weight(op.inputs[2], None, name + "/bias"))
        out_t = self.t(op.outputs[0])
        pre, out = self.result(op, name)
        if len(out_t.shape) != 2:  # keep_num_dims: compute [1, N], then reshape
            row = self.tmp(name + "/row", (1, n_out), self.qdq.get(out))
            self.emit(name, "Gemm", ins, [row], transB=1)
            mid = self.tmp(name + "/rows", self.shapes[out], self.qdq.get(out)) if pre != out else pre
            self.reshape(name + "/reshape", row, (1, n_out), mid, out_t.shape)
            if pre != out:
                self.activation(op, name, mid, out)
            return
        self.emit(name, "Gemm", ins, [pre], transB=1)
        self.activation(op, name, pre, out)

    def operand(self, i: int, rank: int, name: str, op: TOp) -> str:
        """A binary operand as an IR tensor of the output's rank (TFLite broadcasts trailing axes)."""
        t = self.t(i)
        if t.data is not None:
            v = self.dequantized(t).reshape((1,) * (rank - t.data.ndim) + tuple(t.data.shape))
            return self.add_const(name + "/const", np.ascontiguousarray(v.transpose(ir_perm(rank))))
        n = self.name(i)
        if len(t.shape) == rank:
            return n
        full = (1,) * (rank - len(t.shape)) + tuple(t.shape)
        out = self.tmp(name + "/broadcast", self.ir_shape(full), self.qdq.get(n))
        self.reshape(name + "/broadcast", n, t.shape, out, full)
        return out

    def binary(self, op: TOp) -> None:
        if op.opcode in ("MAXIMUM", "MINIMUM"):  # TFLite compares the raw int8 values: one scale for all
            qs = {(float(self.t(i).scale[0]), int(self.t(i).zero_point.reshape(-1)[0]))
                  for i in list(op.inputs[:2]) + list(op.outputs) if self.t(i).quantized}
            if len(qs) > 1:
                raise ModelError(f"{self.where}: {self.label(op)} with inputs and output of different scales is "
                                 f"not supported (TFLite compares the stored int8 values)")
        name = self.node_name(op)
        rank = len(self.t(op.outputs[0]).shape)
        a, b = (self.operand(i, rank, name, op) for i in op.inputs[:2])
        pre, out = self.result(op, name)
        self.emit(name, BINARY[op.opcode], [a, b], [pre])
        self.activation(op, name, pre, out)

    def pool(self, op: TOp) -> None:
        o = op.options
        name = self.node_name(op)
        xt = self.t(op.inputs[0])
        kh, kw = int(o["filter_height"]), int(o["filter_width"])
        sh, sw = int(o.get("stride_h", 1)), int(o.get("stride_w", 1))
        pads = self.pads(op, xt.shape[1], xt.shape[2], kh, kw, sh, sw)
        pre, out = self.result(op, name)
        kind = "MaxPool" if op.opcode == "MAX_POOL_2D" else "AveragePool"
        attrs = dict(kernel_shape=[kh, kw], strides=[sh, sw], pads=pads)
        if kind == "AveragePool":
            attrs["count_include_pad"] = 0
        self.emit(name, kind, [self.name(op.inputs[0])], [pre], **attrs)
        self.activation(op, name, pre, out)

    def reduce(self, op: TOp) -> None:
        name = self.node_name(op)
        xt = self.t(op.inputs[0])
        rank = len(xt.shape)
        axes = sorted({self.ir_axis(a, rank) for a in np.asarray(self.const_values(op.inputs[1], "axes", op)).reshape(-1)})
        keep = int(bool(op.options.get("keep_dims", False)))
        out_t = self.t(op.outputs[0])
        out = self.name(op.outputs[0])
        if keep or rank not in (3, 4) or len(out_t.shape) <= 2:
            self.emit(name, REDUCERS[op.opcode], [self.name(op.inputs[0])], [out], axes=axes, keepdims=keep)
            return
        # a reduction that keeps a spatial axis of a map: reduce with keepdims, then drop the axes TFLite-style
        kept = tuple(1 if i in [ir_perm(rank)[a] for a in axes] else d for i, d in enumerate(xt.shape))
        mid = self.tmp(name + "/keep", self.ir_shape(kept), self.qdq.get(out))
        self.emit(name, REDUCERS[op.opcode], [self.name(op.inputs[0])], [mid], axes=axes, keepdims=1)
        self.reshape(name + "/squeeze", mid, kept, out, out_t.shape)

    def softmax(self, op: TOp) -> None:
        name = self.node_name(op)
        x = self.name(op.inputs[0])
        rank = len(self.t(op.inputs[0]).shape)
        beta = float(op.options.get("beta", 1.0))
        if beta != 1.0:
            s, z = self.qdq[x]
            y = self.tmp(name + "/beta", self.shapes[x], (s * beta, z))
            self.emit(name + "/beta", "Mul", [x, self.add_const(name + "/beta_c", np.float32(beta))], [y])
            x = y
        self.emit(name, "Softmax", [x], [self.name(op.outputs[0])], axis=self.ir_axis(-1, rank))

    def concat(self, op: TOp) -> None:
        name = self.node_name(op)
        rank = len(self.t(op.outputs[0]).shape)
        parts = []
        for i in op.inputs:
            parts.append(self.operand(i, rank, name, op) if self.t(i).data is not None else self.name(i))
        pre, out = self.result(op, name)
        self.emit(name, "Concat", parts, [pre], axis=self.ir_axis(int(op.options.get("axis", 0)), rank))
        self.activation(op, name, pre, out)

    def pad(self, op: TOp) -> None:
        name = self.node_name(op)
        xt = self.t(op.inputs[0])
        rank = len(xt.shape)
        p = np.asarray(self.const_values(op.inputs[1], "the paddings", op)).reshape(rank, 2)
        perm = ir_perm(rank)
        pads = [int(p[perm[i], 0]) for i in range(rank)] + [int(p[perm[i], 1]) for i in range(rank)]
        ins = [self.name(op.inputs[0]), self.add_const(name + "/pads", np.array(pads, np.int64))]
        if op.opcode == "PADV2" and len(op.inputs) > 2 and op.inputs[2] >= 0:
            ins.append(self.add_const(name + "/value", np.float32(self.dequantized(self.t(op.inputs[2])).reshape(-1)[0])))
        attrs = {}
        if op.opcode == "MIRROR_PAD":
            attrs["mode"] = "reflect" if int(op.options.get("mode", 0)) == 0 else "edge"
            if attrs["mode"] == "edge":
                raise ModelError(f"{self.where}: {self.label(op)}: SYMMETRIC mirror padding has no ONNX counterpart")
        self.emit(name, "Pad", ins, [self.name(op.outputs[0])], **attrs)

    def resize(self, op: TOp) -> None:
        name = self.node_name(op)
        o = op.options
        align, half = bool(o.get("align_corners", False)), bool(o.get("half_pixel_centers", False))
        out_t = self.t(op.outputs[0])
        sizes = self.add_const(name + "/sizes", np.array(self.ir_shape(out_t.shape), np.int64))
        if op.opcode == "RESIZE_BILINEAR":
            coord = "align_corners" if align else "half_pixel" if half else "asymmetric"
            attrs = dict(mode="linear", coordinate_transformation_mode=coord)
        else:
            coord = "align_corners" if align else "tf_half_pixel_for_nn" if half else "asymmetric"
            attrs = dict(mode="nearest", coordinate_transformation_mode=coord,
                         nearest_mode="round_prefer_ceil" if align else "floor")
        self.emit(name, "Resize", [self.name(op.inputs[0]), "", "", sizes], [self.name(op.outputs[0])], **attrs)

    def transpose(self, op: TOp) -> None:
        name = self.node_name(op)
        perm = [int(v) for v in np.asarray(self.const_values(op.inputs[1], "the permutation", op)).reshape(-1)]
        r = len(perm)
        pin, pout = ir_perm(r), ir_perm(r)
        self.emit(name, "Transpose", [self.name(op.inputs[0])], [self.name(op.outputs[0])],
                  perm=[pin.index(perm[pout[k]]) for k in range(r)])

    def strided_slice(self, op: TOp) -> None:
        o = op.options
        name = self.node_name(op)
        xt = self.t(op.inputs[0])
        if int(o.get("ellipsis_mask", 0)) or int(o.get("new_axis_mask", 0)) or bool(o.get("offset", False)):
            raise ModelError(f"{self.where}: {self.label(op)}: ellipsis, new-axis masks and offset are not supported")
        rank = len(xt.shape)
        begin, end, strides = (np.asarray(self.const_values(i, what, op)).reshape(-1).astype(np.int64)
                               for i, what in zip(op.inputs[1:4], ("begin", "end", "strides")))
        bm, em, sm = int(o.get("begin_mask", 0)), int(o.get("end_mask", 0)), int(o.get("shrink_axis_mask", 0))
        big = np.iinfo(np.int64).max
        starts, ends, steps, axes, kept = [], [], [], [], []
        for a in range(rank):
            b, e, s = int(begin[a]), int(end[a]), int(strides[a])
            if bm >> a & 1:
                b = 0 if s > 0 else -1
            if em >> a & 1:
                e = big if s > 0 else -big
            if sm >> a & 1:
                e, s = (b + 1 if b != -1 else big), 1
            starts.append(b)
            ends.append(e)
            steps.append(s)
            axes.append(self.ir_axis(a, rank))
        sliced = []
        for a in range(rank):
            idx = range(xt.shape[a])[slice(starts[a], None if abs(ends[a]) == big else ends[a], steps[a])]
            sliced.append(len(idx))
        out_t = self.t(op.outputs[0])
        out = self.name(op.outputs[0])
        target = out if not sm and tuple(sliced) == tuple(out_t.shape) else \
            self.tmp(name + "/slice", self.ir_shape(sliced), self.qdq.get(out))
        consts = [self.add_const(name + f"/{k}", np.array(v, np.int64)) for k, v in
                  (("starts", starts), ("ends", ends), ("axes", axes), ("steps", steps))]
        self.emit(name, "Slice", [self.name(op.inputs[0])] + consts, [target])
        if target != out:
            self.reshape(name + "/shrink", target, tuple(sliced), out, out_t.shape)

    def split(self, op: TOp) -> None:
        name = self.node_name(op)
        if op.opcode == "SPLIT":
            axis_i, x = op.inputs[0], op.inputs[1]
            sizes = None
        else:
            x, sizes_i, axis_i = op.inputs[0], op.inputs[1], op.inputs[2]
            sizes = np.asarray(self.const_values(sizes_i, "size_splits", op)).reshape(-1).astype(np.int64)
        xt = self.t(x)
        rank = len(xt.shape)
        axis = int(np.asarray(self.const_values(axis_i, "the axis", op)).reshape(-1)[0])
        if sizes is None:
            sizes = np.array([self.t(o).shape[axis % rank] for o in op.outputs], np.int64)
        if np.any(sizes < 0):  # one -1: the rest of the axis
            sizes[sizes < 0] = xt.shape[axis % rank] - sizes[sizes >= 0].sum()
        self.emit(name, "Split", [self.name(x), self.add_const(name + "/split", sizes)],
                  [self.name(o) for o in op.outputs], axis=self.ir_axis(axis, rank))

    def reshape_op(self, op: TOp) -> None:
        xt, ot = self.t(op.inputs[0]), self.t(op.outputs[0])
        y = op.outputs[0]
        cons = self.consumers.get(y, [])
        if cons and y not in self.m.outputs and len(xt.shape) in (3, 4) and len(ot.shape) == 2 and \
                all(c.opcode == "FULLY_CONNECTED" and c.inputs[0] == y for c in cons):
            self.fc_flat[y] = op.inputs[0]  # the fully connected layers read the map and permute their weights
            return
        name = self.node_name(op)
        self.reshape(name, self.name(op.inputs[0]), xt.shape, self.name(op.outputs[0]), ot.shape)

    def table(self, x: str, out: str, fn, *args) -> dict:
        """The `_table` attribute: the interpreter's int8 -> int8 values of an activation for the
        ACT unit's LUT (kernels/tflite_int.py), from the tensors' scales and zero points."""
        (si, zi), (so, zo) = self.qdq[x], self.qdq[out]
        return {"_table": fn(si, zi, so, zo, *args)}

    def unary(self, op: TOp) -> None:
        from ..kernels import tflite_int as T

        name = self.node_name(op)
        x, out = self.name(op.inputs[0]), self.name(op.outputs[0])
        if op.opcode in CLIPS or op.opcode == "RELU":
            lo, hi = CLIPS.get(op.opcode, (0.0, None))
            extra = {} if self.qdq[x] == self.qdq[out] else self.table(x, out, T.relu_table, lo, hi)
            bounds = [self.add_const(name + "/lo", np.float32(lo))]
            if hi is not None:
                bounds.append(self.add_const(name + "/hi", np.float32(hi)))
            self.emit(name, "Clip", [x] + bounds, [out], **extra)
        elif op.opcode == "LEAKY_RELU":
            alpha = float(np.float32(op.options.get("alpha", 0.2)))
            self.emit(name, "LeakyRelu", [x], [out], alpha=alpha, **self.table(x, out, T.leaky_relu_table, alpha))
        elif op.opcode == "HARD_SWISH":
            self.emit(name, "HardSwish", [x], [out], **self.table(x, out, T.hard_swish_table))
        elif op.opcode == "PRELU":
            slope = self.operand(op.inputs[1], len(self.t(op.inputs[0]).shape), name, op)
            self.emit(name, "PRelu", [x, slope], [out])
        else:
            self.emit(name, UNARY[op.opcode], [x], [out])

    def requantize(self, op: TOp) -> None:
        """QUANTIZE between two quantized tensors: the interpreter's requantization as an ACT LUT
        (a Clip without bounds carrying the table); none at all when the int8 scales are equal."""
        from ..kernels import tflite_int as T

        name = self.node_name(op)
        x_t, y_t = self.t(op.inputs[0]), self.t(op.outputs[0])
        if x_t.dtype not in QUANT_TYPES or y_t.dtype not in QUANT_TYPES:
            raise ModelError(f"{self.where}: {self.label(op)}: QUANTIZE from {x_t.dtype} to {y_t.dtype} inside the model "
                             f"(a float part of the model); npusim imports int8 models")
        if self.act_q(x_t) == self.act_q(y_t) and op.outputs[0] not in self.names and op.outputs[0] not in self.m.outputs:
            self.rename[op.outputs[0]] = self.rename.get(op.inputs[0], op.inputs[0])  # uint8 <-> int8: same values
            return
        x, out = self.name(op.inputs[0]), self.name(op.outputs[0])
        self.emit(name, "Clip", [x], [out], **self.table(x, out, T.requantize_table))

    def depth_space(self, op: TOp) -> None:
        name = self.node_name(op)
        kind = "DepthToSpace" if op.opcode == "DEPTH_TO_SPACE" else "SpaceToDepth"
        attrs = dict(blocksize=int(op.options.get("block_size", 2)))
        if kind == "DepthToSpace":
            attrs["mode"] = "DCR"  # NHWC depth_to_space reads channels as (block row, block col, channel)
        self.emit(name, kind, [self.name(op.inputs[0])], [self.name(op.outputs[0])], **attrs)


HANDLERS = {
    "CONV_2D": lambda L, op: L.conv(op, depthwise=False),
    "DEPTHWISE_CONV_2D": lambda L, op: L.conv(op, depthwise=True),
    "FULLY_CONNECTED": _Lowering.fully_connected,
    "AVERAGE_POOL_2D": _Lowering.pool, "MAX_POOL_2D": _Lowering.pool,
    "SOFTMAX": _Lowering.softmax,
    "CONCATENATION": _Lowering.concat,
    "PAD": _Lowering.pad, "PADV2": _Lowering.pad, "MIRROR_PAD": _Lowering.pad,
    "RESIZE_NEAREST_NEIGHBOR": _Lowering.resize, "RESIZE_BILINEAR": _Lowering.resize,
    "TRANSPOSE": _Lowering.transpose,
    "STRIDED_SLICE": _Lowering.strided_slice,
    "SPLIT": _Lowering.split, "SPLIT_V": _Lowering.split,
    "RESHAPE": _Lowering.reshape_op, "SQUEEZE": _Lowering.reshape_op, "EXPAND_DIMS": _Lowering.reshape_op,
    "QUANTIZE": _Lowering.requantize,
    "LEAKY_RELU": _Lowering.unary, "PRELU": _Lowering.unary, "HARD_SWISH": _Lowering.unary, "RELU": _Lowering.unary,
    "DEPTH_TO_SPACE": _Lowering.depth_space, "SPACE_TO_DEPTH": _Lowering.depth_space,
    **{k: _Lowering.binary for k in BINARY},
    **{k: _Lowering.reduce for k in REDUCERS},
    **{k: _Lowering.unary for k in list(UNARY) + list(CLIPS)},
}
SUPPORTED = tuple(sorted(HANDLERS))


def _check_types(m: TModel, where: str) -> None:
    """Refuse float, hybrid and 16-bit models by the first operator that computes in such a type."""
    consts = {t.index for t in m.tensors if t.data is not None}
    for op in m.ops:
        if op.opcode == "DEQUANTIZE" and op.inputs and op.inputs[0] in consts:
            t = m.tensors[op.inputs[0]]
            raise ModelError(f"{where}: a float TFLite model: operator {op.index} (DEQUANTIZE) expands the {t.dtype} "
                             f"constant {t.name!r} to float; npusim imports int8-quantized models (full-integer "
                             f"post-training quantization)")
        if op.opcode in ("QUANTIZE", "DEQUANTIZE"):
            continue
        for i in list(op.inputs) + list(op.outputs):
            if i < 0 or i in consts and op.opcode not in BINARY and op.opcode != "CONCATENATION":
                continue
            t = m.tensors[i]
            if t.dtype in ("fp32", "fp16", "fp64"):
                raise ModelError(f"{where}: a float TFLite model: operator {op.index} ({op.label}) computes in "
                                 f"{t.dtype.replace('fp', 'float')} (tensor {t.name!r}); npusim imports int8-quantized "
                                 f"models (full-integer post-training quantization)")
            if t.dtype == "int16" and t.quantized:
                raise ModelError(f"{where}: operator {op.index} ({op.label}): tensor {t.name!r} is int16 (16x8 "
                                 f"quantization); npusim imports int8 models")


def _boundaries(L: _Lowering, m: TModel) -> set[int]:
    """Fold QUANTIZE of a float graph input and DEQUANTIZE into a graph output: the IR's I/O are the
    quantized tensors themselves (the runtime quantizes inputs and dequantizes outputs). Returns the
    folded operators."""
    folded = set()
    g_in, g_out = set(m.inputs), set(m.outputs)
    for op in m.ops:
        if op.opcode == "QUANTIZE" and op.inputs[0] in g_in and m.tensors[op.inputs[0]].dtype == "fp32":
            f, q = op.inputs[0], op.outputs[0]
        elif op.opcode == "DEQUANTIZE" and op.outputs[0] in g_out and m.tensors[op.inputs[0]].dtype in QUANT_TYPES:
            f, q = op.outputs[0], op.inputs[0]
            if q in g_in or q in g_out:
                continue
        else:
            continue
        if f in L.rename or q in L.names:
            continue
        L.rename[f] = q  # the float boundary tensor stands for the quantized one, which takes its name
        L.names[q] = L.fresh(m.tensors[f].name)
        L._declare(q)
        folded.add(op.index)
    return folded


_ONNX_TYPES = {"fp32": 1, "int32": 6, "int64": 7, "bool": 9, "int16": 5}


def _check_shapes(L: _Lowering, inputs: list[str], where: str) -> None:
    """The shapes the model declares must be the ones its operators compute: ONNX's shape inference on
    the lowered graph (strict) is compared with every declared tensor shape."""
    import onnx
    from onnx import helper, numpy_helper

    vi = [helper.make_tensor_value_info(t, _ONNX_TYPES.get(L.dtypes.get(t, "fp32"), 1), L.shapes[t]) for t in inputs]
    used = {i for n in L.nodes for i in n.inputs if i}
    inits = [numpy_helper.from_array(np.asarray(L.consts[k]), k) for k in sorted(used & set(L.consts))]
    graph = helper.make_graph([n.proto for n in L.nodes], "check", vi, [], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception as e:
        raise ModelError(f"{where}: the operators do not fit the tensor shapes the model declares "
                         f"({str(e).splitlines()[0][:200]})") from None
    producer = {o: n for n in L.nodes for o in n.outputs}
    for v in inferred.graph.value_info:
        if v.name not in L.shapes or not v.type.tensor_type.HasField("shape"):
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim]
        if None in dims:
            continue
        if tuple(dims) != tuple(L.shapes[v.name]):
            n = producer.get(v.name)
            raise ModelError(f"{where}: tensor {v.name!r} is declared {list(L.shapes[v.name])} (NCHW) but its "
                             f"operator {n.name if n else '?'!r} ({n.op if n else '?'}) computes {dims}")


def build_graph(model: TModel, where: str = "model", input_shapes=None) -> Graph:
    """The IR graph of an int8 TFLite model (module doc)."""
    _check_types(model, where)
    L = _Lowering(model, where)
    folded = _boundaries(L, model)
    for i in model.inputs:
        t = model.tensors[L.rename.get(i, i)]
        if t.dtype not in QUANT_TYPES:
            raise ModelError(f"{where}: input {model.tensors[i].name!r} is {t.dtype}: npusim takes int8/uint8 inputs "
                             f"(or float32 ones that a QUANTIZE converts)")
    for op in model.ops:
        if op.index in folded:
            continue
        if op.opcode == "CUSTOM":
            raise ModelError(f"{where}: operator {op.index} is the custom operator {op.custom!r}: npusim has no "
                             f"reference implementation of it (neither an NPU recipe nor a CPU kernel)")
        handler = HANDLERS.get(op.opcode)
        if handler is None:
            raise ModelError(f"{where}: operator {op.index} ({op.opcode}) is not supported: npusim has no NPU recipe "
                             f"and no CPU reference for this TFLite builtin")
        handler(L, op)
    inputs = [L.name(i) for i in model.inputs]
    outputs = [L.name(i) for i in model.outputs]
    if input_shapes:
        want = input_shapes if isinstance(input_shapes, dict) else {inputs[0]: tuple(input_shapes)}
        for k, v in want.items():
            if k not in inputs:
                raise ModelError(f"--input-shape {k}: the model has no input of that name (inputs: {', '.join(inputs)})")
            if tuple(v) != L.shapes[k]:
                raise ModelError(f"--input-shape {k}={','.join(map(str, v))}: a TFLite model's shapes are static "
                                 f"({','.join(map(str, L.shapes[k]))} in NCHW)")
    # an activation feeding only fused Relu/Clip takes their scale (the front end set it); check the rest
    for n in L.nodes:
        for t in n.inputs + n.outputs:
            if t and t not in L.consts and L.dtypes.get(t) == "fp32" and t not in L.qdq:
                raise ModelError(f"{where}: tensor {t!r} of node {n.name!r} has no quantization parameters")
    fconsts = {k: (np.asarray(v, np.float32) if np.asarray(v).dtype.kind == "f" else np.asarray(v))
               for k, v in L.consts.items()}
    _check_shapes(L, inputs, where)
    return Graph(L.nodes, L.shapes, fconsts, inputs, outputs, L.qdq, dtypes=L.dtypes, opset=OPSET, wq=L.wq,
                 prequantized=True, source="tflite")
