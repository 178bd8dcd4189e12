"""The core of the TFLite front end: TFLite tensors as IR tensors (tflite_front has the story).

`Lowering` names every TFLite tensor once in the IR (unique, after the model's own names; a boundary
QUANTIZE/DEQUANTIZE folds a float tensor into the quantized one it stands for), gives it its NCHW
shape (`ir_perm`) and its scale and zero point (`Graph.qdq`; uint8 as int8 with zp - 128), turns
quantized constants into IR float constants with their stored integers (`Graph.wq`), and emits IR
nodes with their ONNX NodeProto. The operators themselves are lowered in tflite_ops.
"""

from __future__ import annotations

import numpy as np

from ...errors import ModelError
from ..ir import Node, WeightQuant
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


def same_order(shape: tuple[int, ...]) -> bool:
    """Whether the NHWC bytes of `shape` are in the same order as its NCHW view's (channel or plane of 1)."""
    if len(shape) not in (3, 4):
        return True
    spatial = int(np.prod(shape[1:-1]))
    return spatial == 1 or shape[-1] == 1


def _unique(base: str, taken: set) -> str:
    """`base`, or `base#2`, `base#3`, ... : the first not in `taken` (added to it)."""
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}#{k}"
    taken.add(name)
    return name

class Lowering:
    """The graph being built from one TFLite model (see module doc)."""

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
        return _unique(base, self.used)

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
            self.dtypes[n] = t.dtype
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
        return _unique(base, self.node_names)

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
        if not same_order(src_tfl):
            p = ir_perm(len(src_tfl))
            cur = self.tmp(name + "/nhwc", src_tfl, q)
            self.emit(name + "/to_nhwc", "Transpose", [src], [cur], perm=[p.index(j) for j in range(len(p))])
        if same_order(dst_tfl):
            self.emit(name, "Reshape", [cur, self.add_const(name + "/shape", np.array(self.ir_shape(dst_tfl),
                                                                                       np.int64))], [dst])
            return
        flat = self.tmp(name + "/flat", dst_tfl, q)
        self.emit(name, "Reshape", [cur, self.add_const(name + "/shape", np.array(dst_tfl, np.int64))], [flat])
        self.emit(name + "/to_nchw", "Transpose", [flat], [dst], perm=list(ir_perm(len(dst_tfl))))

    # ------------------------------------------------------------------ operators

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

    def table(self, x: str, out: str, fn, *args) -> dict:
        """The `_table` attribute: the interpreter's int8 -> int8 values of an activation for the
        ACT unit's LUT (kernels/tflite_int.py), from the tensors' scales and zero points."""
        (si, zi), (so, zo) = self.qdq[x], self.qdq[out]
        return {"_table": fn(si, zi, so, zo, *args)}

