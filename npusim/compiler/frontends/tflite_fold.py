"""Shape computations of a static-shape TFLite model, folded before lowering (tflite_front has the story).

A converter often leaves the arithmetic of a tensor's shape in the graph: SHAPE of a map, a STRIDED_SLICE
taking its batch, a PACK with constants giving a RESHAPE its target. With static shapes every such value
is known at compile time. `fold_constants` walks the operators in order: SHAPE gives its input's declared
shape; an operator of `FOLDERS` whose inputs are all known (constants of the file or values folded before)
is computed here, in TFLite's own axis order, and its output becomes a constant of the model. Only
operators that move values, or compute on unquantized integers, are folded: arithmetic on quantized data
stays the model's to run. A folded value must have the shape the model declares (else one ModelError
line). A graph output is never folded.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ...errors import ModelError
from .tflite_reader import TYPES, TModel, TOp, TTensor

MOVES = ("RESHAPE", "SQUEEZE", "EXPAND_DIMS", "STRIDED_SLICE", "PACK", "UNPACK", "CONCATENATION", "GATHER",
         "TRANSPOSE", "SLICE")
INT_ARITHMETIC = {"ADD": np.add, "SUB": np.subtract, "MUL": np.multiply, "FLOOR_DIV": np.floor_divide,
                  "MAXIMUM": np.maximum, "MINIMUM": np.minimum}


def strided_slice_index(shape, begin, end, strides, options: dict) -> tuple[tuple[slice | int, ...], bool]:
    """TFLite STRIDED_SLICE as a numpy index (ints for shrunk axes) of a tensor of `shape`; the second value
    says whether the form is one this index expresses (no ellipsis, new-axis masks or offset)."""
    if int(options.get("ellipsis_mask", 0)) or int(options.get("new_axis_mask", 0)) or bool(options.get("offset", False)):
        return (), False
    bm, em, sm = (int(options.get(k, 0)) for k in ("begin_mask", "end_mask", "shrink_axis_mask"))
    index: list[slice | int] = []
    for a, n in enumerate(shape):
        b, e, s = int(begin[a]), int(end[a]), int(strides[a])
        if sm >> a & 1:
            index.append(b)
            continue
        index.append(slice(None if bm >> a & 1 else b, None if em >> a & 1 else e, s))
    return tuple(index), True


def _values(op: TOp, m: TModel, known: dict) -> list[np.ndarray] | None:
    vals = []
    for i in op.inputs:
        if i < 0:
            continue
        if i not in known:
            return None
        vals.append(known[i])
    return vals


def _quant(t: TTensor):
    return None if not t.quantized else (tuple(t.scale.tolist()), tuple(t.zero_point.reshape(-1).tolist()))


def _foldable(op: TOp, m: TModel) -> bool:
    outs = [m.tensors[o] for o in op.outputs]
    ins = [m.tensors[i] for i in op.inputs if i >= 0]
    if int(op.options.get("fused_activation_function", 0)):
        return False
    if op.opcode in MOVES:  # the values move: their quantization must not change
        data = ins[:1] if op.opcode not in ("PACK", "CONCATENATION") else ins
        return all(_quant(t) == _quant(outs[0]) for t in data) and all(_quant(o) == _quant(outs[0]) for o in outs)
    if op.opcode in INT_ARITHMETIC or op.opcode == "CAST":
        return all(not t.quantized and t.dtype in ("int32", "int64") for t in ins + outs) or \
            op.opcode == "CAST" and not any(t.quantized for t in ins + outs)
    return False


def _compute(op: TOp, m: TModel, vals: list[np.ndarray]) -> list[np.ndarray] | None:
    """The outputs of `op` on known inputs (TFLite semantics, NHWC), or None for a form not folded here."""
    o, out = op.options, m.tensors[op.outputs[0]]
    k = op.opcode
    if k in ("RESHAPE", "SQUEEZE", "EXPAND_DIMS"):
        return [vals[0].reshape(out.shape)]
    if k == "STRIDED_SLICE":
        index, ok = strided_slice_index(vals[0].shape, *(v.reshape(-1) for v in vals[1:4]), o)
        return [np.asarray(vals[0][index])] if ok else None
    if k == "SLICE":
        begin, size = (v.reshape(-1).astype(np.int64) for v in vals[1:3])
        return [vals[0][tuple(slice(b, None if s < 0 else b + s) for b, s in zip(begin, size))]]
    if k == "PACK":
        return [np.stack(vals, axis=int(o.get("axis", 0)))]
    if k == "UNPACK":
        axis = int(o.get("axis", 0))
        return [np.take(vals[0], j, axis=axis) for j in range(vals[0].shape[axis])]
    if k == "CONCATENATION":
        return [np.concatenate(vals, axis=int(o.get("axis", 0)))]
    if k == "GATHER":
        if int(o.get("batch_dims", 0)):
            return None
        axis = int(o.get("axis", 0)) % max(vals[0].ndim, 1)
        if vals[1].size * (vals[0].size // max(vals[0].shape[axis], 1)) != int(np.prod(out.shape)):
            raise ValueError(f"GATHER of {vals[1].size} indices does not give the declared {list(out.shape)}")
        return [np.take(vals[0], vals[1].astype(np.int64), axis=axis)]
    if k == "TRANSPOSE":
        return [np.transpose(vals[0], vals[1].reshape(-1).astype(np.int64))]
    if k == "CAST":
        return [vals[0]]
    with np.errstate(all="raise"):
        try:
            return [INT_ARITHMETIC[k](vals[0], vals[1])]
        except FloatingPointError:  # a division by zero: the model's own fault, left to run
            return None


def fold_constants(m: TModel, where: str) -> TModel:
    """The model with its shape computations folded into constants (module doc)."""
    known = {t.index: t.data for t in m.tensors if t.data is not None}
    tensors = list(m.tensors)
    ops = []
    outputs = set(m.outputs)
    for op in m.ops:
        vals = None
        if not outputs.intersection(op.outputs):
            if op.opcode == "SHAPE" and len(op.inputs) == 1 and op.inputs[0] >= 0:
                vals = [np.asarray(m.tensors[op.inputs[0]].shape, np.int64)]
            elif op.opcode in MOVES + ("CAST",) + tuple(INT_ARITHMETIC) and _foldable(op, m):
                args = _values(op, m, known)
                try:
                    vals = None if args is None else _compute(op, m, args)
                except (ValueError, IndexError, TypeError) as e:  # inputs that do not fit the operator
                    raise ModelError(f"{where}: operator {op.index} ({op.opcode}) cannot be computed on its constant "
                                     f"inputs ({str(e).splitlines()[0][:120]})") from None
        if vals is None:
            ops.append(op)
            continue
        for i, v in zip(op.outputs, vals):
            t = tensors[i]
            np_type = dict(TYPES.values()).get(t.dtype)
            if np_type is None or tuple(v.shape) != tuple(t.shape):
                raise ModelError(f"{where}: operator {op.index} ({op.opcode}) computes {list(v.shape)} where its output "
                                 f"{t.name!r} is declared {t.dtype} {list(t.shape)}")
            tensors[i] = dataclasses.replace(t, data=np.array(v, dtype=np_type, order="C"))  # 0-d stays 0-d
            known[i] = tensors[i].data
    if len(ops) == len(m.ops):
        return m
    return dataclasses.replace(m, tensors=tuple(tensors), ops=tuple(ops))
