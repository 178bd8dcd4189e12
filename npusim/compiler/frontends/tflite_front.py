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

Shape computations (SHAPE and what computes on its values) are folded into constants first (tflite_fold).

Refused (one ModelError line): float or 16-bit models, a builtin with no ONNX counterpart, custom
operators, dynamic shapes.
"""

from __future__ import annotations

import numpy as np

from ...errors import ModelError
from ..ir import Graph
from .tflite_fold import fold_constants
from .tflite_lowering import BINARY, OPSET, QUANT_TYPES, Lowering, ir_perm
from .tflite_ops import HANDLERS, SUPPORTED, OpLowering
from .tflite_reader import TModel

__all__ = ["build_graph", "ir_perm", "SUPPORTED"]


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


def _boundaries(L: Lowering, m: TModel) -> set[int]:
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


def _check_shapes(L: Lowering, inputs: list[str], where: str) -> None:
    """The shapes the model declares must be the ones its operators compute: ONNX's shape inference on
    the lowered graph (strict) is compared with every declared tensor shape. As for an ONNX model
    (`modelcheck.light_copy`), a constant of more than SMALL_INIT elements enters as a typed input of its
    shape: inference needs no weight values, so none are copied or serialized."""
    import onnx
    from onnx import helper, numpy_helper

    from .modelcheck import SMALL_INIT  # imports onnx, as this check does

    vi = [helper.make_tensor_value_info(t, _ONNX_TYPES.get(L.dtypes.get(t, "fp32"), 1), L.shapes[t]) for t in inputs]
    used = {i for n in L.nodes for i in n.inputs if i}
    consts = {k: np.asarray(L.consts[k]) for k in sorted(used & set(L.consts))}
    inits = [numpy_helper.from_array(a, k) for k, a in consts.items() if a.size <= SMALL_INIT]
    vi += [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for k, a in consts.items() if a.size > SMALL_INIT]
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
    model = fold_constants(model, where)
    _check_types(model, where)
    L = OpLowering(model, where)
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
