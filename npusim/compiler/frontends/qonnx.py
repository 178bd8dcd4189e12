"""Quantized ONNX in: the QOperator form rewritten into the QDQ form the ONNX front end imports.

A QOperator model (QLinearConv, QLinearMatMul, com.microsoft QGemm / QLinearAdd / QLinearMul /
QLinearGlobalAveragePool / QLinearAveragePool / QLinearConcat / QLinearSigmoid / QLinearLeakyRelu /
QLinearSoftmax, as `onnxruntime.quantization` writes them) becomes the same graph in QDQ form:
every quantized operator is DequantizeLinear on each quantized input -> the float operator ->
QuantizeLinear with the operator's output scale and zero point (its tensor keeps its name); an
operator that moves quantized values unchanged (MaxPool, Reshape, Flatten, Transpose, Resize, ...)
gets the same treatment with its input's scale. The front end then folds each Q/DQ pair into
the scale and zero point of the float tensor between them (`frontend._fold`), so QDQ and
QOperator models lower to one IR. Opset imports of domains no node uses (the quantizer lists
several) are dropped.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ...errors import ModelError

MS = "com.microsoft"
# QOperator op -> (float op, quantized input groups as (value, scale, zp) indices, (y_scale, y_zp) indices)
QLINEAR = {
    ("", "QLinearConv"): ("Conv", [(0, 1, 2), (3, 4, 5)], (6, 7)),
    ("", "QLinearMatMul"): ("MatMul", [(0, 1, 2), (3, 4, 5)], (6, 7)),
    (MS, "QGemm"): ("Gemm", [(0, 1, 2), (3, 4, 5)], (7, 8)),
    (MS, "QLinearAdd"): ("Add", [(0, 1, 2), (3, 4, 5)], (6, 7)),
    (MS, "QLinearMul"): ("Mul", [(0, 1, 2), (3, 4, 5)], (6, 7)),
    (MS, "QLinearGlobalAveragePool"): ("GlobalAveragePool", [(0, 1, 2)], (3, 4)),
    (MS, "QLinearAveragePool"): ("AveragePool", [(0, 1, 2)], (3, 4)),
    (MS, "QLinearSigmoid"): ("Sigmoid", [(0, 1, 2)], (3, 4)),
    (MS, "QLinearLeakyRelu"): ("LeakyRelu", [(0, 1, 2)], (3, 4)),
    (MS, "QLinearSoftmax"): ("Softmax", [(0, 1, 2)], (3, 4)),
}
# operators that move quantized values unchanged (their output has their first input's scale)
TRANSPARENT = frozenset({"MaxPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Resize", "Identity",
                         "Split", "Slice", "Gather", "DepthToSpace", "SpaceToDepth", "Pad", "Tile", "Expand",
                         "GlobalMaxPool", "Upsample"})
DROP_ATTRS = {"channels_last", "opset"}  # com.microsoft attributes the float operator has no use for


def is_qoperator(model: onnx.ModelProto) -> bool:
    return any((n.domain if n.domain != "ai.onnx" else "", n.op_type) in QLINEAR for n in model.graph.node)


def is_quantized(model: onnx.ModelProto) -> bool:
    """A model that carries its own quantization (QDQ or QOperator form)."""
    return is_qoperator(model) or any(n.op_type in ("QuantizeLinear", "DequantizeLinear") and n.domain in ("", "ai.onnx")
                                      for n in model.graph.node)


def drop_unused_domains(model: onnx.ModelProto) -> None:
    used = {n.domain if n.domain != "ai.onnx" else "" for n in model.graph.node}
    keep = [o for o in model.opset_import if (o.domain if o.domain != "ai.onnx" else "") in used | {""}]
    del model.opset_import[:]
    model.opset_import.extend(keep)


def to_qdq(model: onnx.ModelProto) -> onnx.ModelProto:
    """The QDQ form of a QOperator model (module doc); a QDQ model only loses unused opset imports."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    if is_qoperator(model):
        _rewrite(out)
    drop_unused_domains(out)
    return out


def _rewrite(m: onnx.ModelProto) -> None:
    g = m.graph
    inits = {i.name: i for i in g.initializer}
    qinfo: dict[str, tuple[str, str]] = {}  # quantized tensor -> (scale name, zero point name)
    new_nodes: list[onnx.NodeProto] = []
    new_inits: list[onnx.TensorProto] = []
    counter = [0]

    def uniq(base: str) -> str:
        counter[0] += 1
        return f"{base}__q{counter[0]}"

    def dq(x: str, s: str, z: str, axis: int | None = None) -> str:
        y = uniq(x + "_dq")
        attrs = {} if axis is None else {"axis": axis}
        new_nodes.append(helper.make_node("DequantizeLinear", [x, s, z] if z else [x, s], [y],
                                          name=uniq("DequantizeLinear"), **attrs))
        return y

    def q(x: str, s: str, z: str, y: str) -> None:
        new_nodes.append(helper.make_node("QuantizeLinear", [x, s, z] if z else [x, s], [y], name=uniq("QuantizeLinear")))

    def size(name: str) -> int:
        return int(np.prod(list(inits[name].dims))) if name in inits else 1

    for n in g.node:
        key = (n.domain if n.domain != "ai.onnx" else "", n.op_type)
        if n.op_type == "QuantizeLinear" and key[0] == "":
            qinfo[n.output[0]] = (n.input[1], n.input[2] if len(n.input) > 2 else "")
            new_nodes.append(n)
            continue
        if key in QLINEAR:
            op, groups, (ys, yz) = QLINEAR[key]
            ins = list(n.input)
            where = f"node {n.name!r} ({n.op_type})"
            floats = []
            for k, (vi, si, zi) in enumerate(groups):
                if vi >= len(ins) or not ins[vi]:
                    raise ModelError(f"{where}: quantized input {vi} is missing")
                axis = None
                if size(ins[si]) > 1:  # per-channel weights: Conv output channels (axis 0); MatMul/Gemm B columns
                    axis = 0 if op == "Conv" or op == "Gemm" and _attr(n, "transB", 0) else 1
                floats.append(dq(ins[vi], ins[si], ins[zi] if zi < len(ins) else "", axis))
            extra = []
            if op == "Conv" and len(ins) > 8 and ins[8]:  # int32 bias with scale x_scale * w_scale
                extra.append(_bias(ins[8], ins[1], ins[4], inits, new_inits, new_nodes, uniq))
            if op == "Gemm" and len(ins) > 6 and ins[6]:
                if float(_attr(n, "alpha", 1.0)) != 1.0:
                    raise ModelError(f"{where}: alpha={_attr(n, 'alpha', 1.0)} with an int32 bias is not supported")
                extra.append(_bias(ins[6], ins[1], ins[4], inits, new_inits, new_nodes, uniq))
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute if a.name not in DROP_ATTRS}
            if _attr(n, "channels_last", 0):
                raise ModelError(f"{where}: channels_last=1 is not supported")
            if op == "Gemm" and "beta" not in attrs and extra:
                attrs["beta"] = 1.0
            y = n.output[0]
            has_q = ys < len(ins) and ins[ys]
            yf = uniq(y + "_f") if has_q else y
            new_nodes.append(helper.make_node(op, floats + extra, [yf], name=n.name or uniq(op), **attrs))
            if has_q:
                q(yf, ins[ys], ins[yz] if yz < len(ins) else "", y)
                qinfo[y] = (ins[ys], ins[yz] if yz < len(ins) else "")
            continue
        if key == (MS, "QLinearConcat"):  # Y_scale, Y_zp, then (X, X_scale, X_zp) triples
            ins = list(n.input)
            floats = [dq(ins[i], ins[i + 1], ins[i + 2]) for i in range(2, len(ins), 3)]
            yf = uniq(n.output[0] + "_f")
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            new_nodes.append(helper.make_node("Concat", floats, [yf], name=n.name or uniq("Concat"), **attrs))
            q(yf, ins[0], ins[1], n.output[0])
            qinfo[n.output[0]] = (ins[0], ins[1])
            continue
        if key[0] == "" and n.op_type in TRANSPARENT and n.input and n.input[0] in qinfo:
            s, z = qinfo[n.input[0]]
            ins = [dq(n.input[0], s, z)] + list(n.input[1:])
            outs = []
            for o in n.output:
                if not o:
                    outs.append(o)
                    continue
                f = uniq(o + "_f")
                outs.append(f)
            node = onnx.NodeProto()
            node.CopyFrom(n)
            del node.input[:]
            node.input.extend(ins)
            del node.output[:]
            node.output.extend(outs)
            new_nodes.append(node)
            for o, f in zip(n.output, outs):
                if o:
                    q(f, s, z, o)
                    qinfo[o] = (s, z)
            continue
        if key[0] != "":
            raise ModelError(f"node {n.name!r}: operator {n.domain}.{n.op_type} is not supported (npusim reads the "
                             f"default ONNX domain and onnxruntime's QOperator ops)")
        new_nodes.append(n)
    del g.node[:]
    g.node.extend(new_nodes)
    g.initializer.extend(new_inits)
    # value_info of the rewritten tensors is stale (int8 where the float now flows): infer again
    del g.value_info[:]


def _bias(b: str, xs: str, ws: str, inits: dict, new_inits: list, nodes: list, uniq) -> str:
    """DequantizeLinear of an int32 bias whose scale is x_scale * w_scale (per channel when w_scale is)."""
    if xs not in inits or ws not in inits:
        raise ModelError(f"bias {b!r}: the input and weight scales must be constants")
    scale = (numpy_helper.to_array(inits[xs]).astype(np.float64) *
             numpy_helper.to_array(inits[ws]).astype(np.float64)).astype(np.float32).reshape(-1)
    name = uniq(b + "_scale")
    new_inits.append(numpy_helper.from_array(scale if scale.size > 1 else scale.reshape(()), name))
    y = uniq(b + "_dq")
    nodes.append(helper.make_node("DequantizeLinear", [b, name], [y], name=uniq("DequantizeLinear"),
                                  **({"axis": 0} if scale.size > 1 else {})))
    return y


def _attr(n: onnx.NodeProto, name: str, default):
    for a in n.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default
