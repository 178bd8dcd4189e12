"""The model's own validity, checked before anything is computed from it.

`check_model` (on the model as given): the default-domain opset lies in the range npusim
knows (7 .. onnx.defs.onnx_opset_version()), every node's operator exists at that opset, every
attribute is one its schema declares, of the declared type, with a legal value (strides,
dilations, kernel_shape > 0, pads >= 0, group >= 1), and ONNX's own checker passes with strict
shape inference (a graph output no node produces, an initializer whose data disagrees with its
dims, inconsistent types). `check_semantics` (after shape inference): element types npusim can
store, Conv/ConvTranspose `group` dividing the channels and matching the weights, `kernel_shape`
matching the weights. Each problem is one ModelError line naming the node and attribute.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper

from ...errors import ModelError
from ..refusals import ELEMENT_TYPES, NOT_TENSORS

MIN_OPSET = 7
# ONNX element types npusim stores (ISA element names); anything else is refused by name
ELEMS = {onnx.TensorProto.FLOAT: "fp32", onnx.TensorProto.FLOAT16: "fp16", onnx.TensorProto.INT8: "int8",
         onnx.TensorProto.UINT8: "uint8", onnx.TensorProto.INT16: "int16", onnx.TensorProto.UINT16: "uint16",
         onnx.TensorProto.INT32: "int32", onnx.TensorProto.UINT32: "uint32", onnx.TensorProto.INT64: "int64",
         onnx.TensorProto.UINT64: "uint64", onnx.TensorProto.BOOL: "bool"}
POSITIVE_INTS = ("strides", "dilations", "kernel_shape")
NON_NEGATIVE_INTS = ("pads", "output_padding")
# string attributes the compiler interprets itself, and their legal values
STRING_VALUES = {  # (auto_pad: AUTO_PADS below)
    ("Pad", "mode"): ("constant", "reflect", "edge", "wrap"),
    ("Resize", "mode"): ("nearest", "linear", "cubic"),
    ("Upsample", "mode"): ("nearest", "linear", "bilinear"),
    ("Resize", "coordinate_transformation_mode"): ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                                                   "align_corners", "asymmetric", "tf_half_pixel_for_nn",
                                                   "tf_crop_and_resize"),
    ("Resize", "nearest_mode"): ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"),
    ("DepthToSpace", "mode"): ("DCR", "CRD"),
}


def opset_of(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return int(onnx.defs.onnx_opset_version())


def _where(n: onnx.NodeProto, i: int) -> str:
    return f"node {n.name or f'#{i}'!r} ({n.op_type})"


def _check_opsets(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain not in ("", "ai.onnx"):
            raise ModelError(f"opset domain {imp.domain!r} is not supported (only the default ONNX domain)")
    opset, top = opset_of(model), onnx.defs.onnx_opset_version()
    if not MIN_OPSET <= opset <= top:
        raise ModelError(f"opset {opset} is outside the supported range {MIN_OPSET}..{top}")
    return opset


AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def _check_attribute(n: onnx.NodeProto, i: int, at: onnx.AttributeProto, schema) -> None:
    where = f"{_where(n, i)}: attribute {at.name!r}"
    spec = schema.attributes.get(at.name)
    if spec is None:
        known = ", ".join(sorted(schema.attributes)) or "none"
        raise ModelError(f"{where} is not an attribute of {n.op_type} (it has: {known})")
    if at.type != spec.type and not (at.type == onnx.AttributeProto.UNDEFINED):
        want = onnx.AttributeProto.AttributeType.Name(spec.type)
        got = onnx.AttributeProto.AttributeType.Name(at.type)
        raise ModelError(f"{where} must be {want}, got {got}")
    if at.name in POSITIVE_INTS + NON_NEGATIVE_INTS and at.type == onnx.AttributeProto.INTS:
        vals = list(at.ints)
        if at.name in POSITIVE_INTS and any(v <= 0 for v in vals):
            raise ModelError(f"{where}={vals}: every value must be positive")
        if at.name in NON_NEGATIVE_INTS and any(v < 0 for v in vals):
            raise ModelError(f"{where}={vals}: values must not be negative")
    if at.name == "group" and at.type == onnx.AttributeProto.INT and at.i < 1:
        raise ModelError(f"{where}={at.i}: must be at least 1")
    if at.name == "auto_pad" and at.type == onnx.AttributeProto.STRING:
        mode = at.s.decode("utf-8", "replace")
        if mode not in AUTO_PADS:
            raise ModelError(f"{where}={mode!r}: must be one of {', '.join(AUTO_PADS)}")
        if mode != "NOTSET" and any(a.name == "pads" for a in n.attribute):
            raise ModelError(f"{where}={mode!r}: ONNX forbids 'pads' together with an auto_pad other than NOTSET")
    legal = STRING_VALUES.get((n.op_type, at.name))
    if legal and at.type == onnx.AttributeProto.STRING:
        v = at.s.decode("utf-8", errors="replace")
        if v not in legal:
            raise ModelError(f"{where}={v!r}: expected one of {', '.join(legal)}")


def _check_nodes(graph: onnx.GraphProto, opset: int) -> None:
    for i, n in enumerate(graph.node):
        if n.domain not in ("", "ai.onnx"):
            raise ModelError(f"{_where(n, i)}: domain {n.domain!r} is not supported (only the default ONNX domain)")
        try:
            schema = onnx.defs.get_schema(n.op_type, opset, "")
        except onnx.defs.SchemaError:
            raise ModelError(f"{_where(n, i)}: no operator {n.op_type!r} in ONNX opset {opset}") from None
        if schema.deprecated:
            raise ModelError(f"{_where(n, i)}: {n.op_type} is deprecated at opset {opset}")
        for at in n.attribute:
            _check_attribute(n, i, at, schema)


SMALL_INIT = 64  # initializers of up to this many elements keep their data in a light copy


def light_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model without its large initializers' data: each becomes a graph input of the same type
    and shape. ONNX's checker and shape inference need no weight values (shapes computed from small
    constants such as Reshape targets still propagate), so nothing of the weights is copied or
    serialized; their data is checked against their dims when the front end reads them."""
    light = onnx.ModelProto()
    light.ir_version = model.ir_version
    light.opset_import.extend(model.opset_import)
    g, src = light.graph, model.graph
    g.name = src.name
    g.node.extend(src.node)
    g.input.extend(src.input)
    g.output.extend(src.output)
    g.value_info.extend(src.value_info)
    g.sparse_initializer.extend(src.sparse_initializer)
    declared = {vi.name for vi in src.input}
    for init in src.initializer:
        if math.prod(init.dims) <= SMALL_INIT:
            g.initializer.append(init)
        elif init.name not in declared:  # (onnx.helper.make_tensor_value_info's proto, built in place)
            vi = g.input.add()
            vi.name = init.name
            tensor = vi.type.tensor_type
            tensor.elem_type = init.data_type
            for d in init.dims:
                tensor.shape.dim.add().dim_value = d
    return light


def _checkable(model: onnx.ModelProto) -> onnx.ModelProto:
    """A light copy (`light_copy`) whose graph outputs carry the shapes inference finds (ONNX's
    checker wants one)."""
    m = light_copy(model)
    missing = [o for o in m.graph.output if o.type.HasField("tensor_type") and not o.type.tensor_type.HasField("shape")]
    if not missing:
        return m
    try:
        inferred = onnx.shape_inference.infer_shapes(m)
    except Exception:
        inferred = m
    found = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    for o in missing:
        v = found.get(o.name)
        if v is not None and v.type.tensor_type.HasField("shape"):
            o.type.tensor_type.shape.CopyFrom(v.type.tensor_type.shape)
        else:
            o.type.tensor_type.shape.SetInParent()  # unknown to inference: present but empty
    return m


def check_model(model: onnx.ModelProto) -> int:
    """Refuse an invalid model (module doc) with one line; returns the default-domain opset."""
    opset = _check_opsets(model)
    _check_nodes(model.graph, opset)
    checkable = _checkable(model)
    try:
        onnx.checker.check_model(checkable, full_check=True)
    except onnx.shape_inference.InferenceError as e:
        if not _inside_a_function_body(str(e), opset):
            raise ModelError(f"invalid model: {_first_line(e)}") from None
        try:  # ONNX's own function body of a standard operator fails its inference: not the model's fault
            onnx.checker.check_model(checkable, full_check=False)
        except onnx.checker.ValidationError as e2:
            raise ModelError(f"invalid model: {_first_line(e2)}") from None
    except onnx.checker.ValidationError as e:
        raise ModelError(f"invalid model: {_first_line(e)}") from None
    except Exception as e:  # protobuf limits, >2 GiB models
        raise ModelError(f"invalid model: ONNX's checker failed ({type(e).__name__}: {_first_line(e)})") from None
    return opset


def _inside_a_function_body(message: str, opset: int) -> bool:
    """An inference error raised inside the function body of a standard operator (the message nests
    a second op_type under an operator that ONNX defines as a function)."""
    import re

    ops = re.findall(r"\(op_type:(\w+)", message)
    if len(ops) < 2:
        return False
    try:
        schema = onnx.defs.get_schema(ops[0], opset, "")
    except onnx.defs.SchemaError:
        return False
    return bool(schema.has_function or schema.has_context_dependent_function)


def _first_line(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return (lines[0] if lines else type(e).__name__)[:240]


def elem_types(model: onnx.ModelProto) -> dict[str, str]:
    """{tensor: ISA element name} of every typed tensor of an inferred model; ModelError naming a
    tensor of a type npusim cannot store (double, bfloat16, string, float8, 4-bit, ...)."""
    out = {}
    items = list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output)
    for vi in items:
        t = vi.type
        if not t.HasField("tensor_type"):
            raise ModelError(f"tensor {vi.name!r}: {NOT_TENSORS}")
        et = t.tensor_type.elem_type
        if not et:
            continue
        if et not in ELEMS:
            raise ModelError(f"tensor {vi.name!r} is {_type_name(et)}: {ELEMENT_TYPES}")
        out[vi.name] = ELEMS[et]
    for init in model.graph.initializer:
        if init.data_type not in ELEMS:
            raise ModelError(f"initializer {init.name!r} is {_type_name(init.data_type)}: {ELEMENT_TYPES}")
        out[init.name] = ELEMS[init.data_type]
    return out


def _type_name(et: int) -> str:
    try:
        return helper.tensor_dtype_to_string(et).replace("TensorProto.", "").lower()
    except Exception:
        return f"element type {et}"


def check_semantics(nodes, shapes: dict, consts: dict) -> None:
    """Conv/ConvTranspose group and kernel_shape against the input and weights (after inference)."""
    for i, n in enumerate(nodes):
        if n.op_type not in ("Conv", "ConvTranspose") or len(n.input) < 2:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        x, w = shapes.get(n.input[0]), consts.get(n.input[1])
        wshape = tuple(np.shape(w)) if w is not None else shapes.get(n.input[1])
        if not x or not wshape or any(not isinstance(d, int) for d in list(x) + list(wshape)):
            continue
        group = int(attrs.get("group", 1))
        where = _where(n, i)
        cin = int(x[1]) if len(x) > 1 else 0
        if len(wshape) != len(x):
            raise ModelError(f"{where}: weights {list(wshape)} have rank {len(wshape)}, the input {list(x)} rank {len(x)}")
        if n.op_type == "Conv":
            if cin % group or wshape[0] % group:
                raise ModelError(f"{where}: attribute 'group'={group} does not divide the {cin} input channels "
                                 f"and {wshape[0]} output channels")
            if wshape[1] * group != cin:
                raise ModelError(f"{where}: weights {list(wshape)} take {wshape[1]} x group {group} input channels, "
                                 f"the input has {cin}")
        else:
            if cin % group or wshape[0] != cin:
                raise ModelError(f"{where}: attribute 'group'={group} and weights {list(wshape)} do not fit the "
                                 f"{cin} input channels")
        ks = attrs.get("kernel_shape")
        if ks is not None and list(ks) != list(wshape[2:]):
            raise ModelError(f"{where}: attribute 'kernel_shape'={list(ks)} disagrees with the weights' "
                             f"{list(wshape[2:])}")
