"""ONNX's reference implementation (`onnx.reference`) of one node, at the model's opset.

The reference implements some operators only from a later version than the one that defines
them (e.g. DequantizeLinear from 19, while opset 13 defines it): such a node is evaluated with
the first implemented version, whose semantics extend the older one's. Evaluators are cached by
(node bytes, opset, input types), so a node compiled or run again costs one lookup.
"""

from __future__ import annotations

import functools

import numpy as np


# deprecated operators the reference no longer implements, and the operator the spec names as their
# replacement with the same semantics
REPLACED = {"Scatter": "ScatterElements"}


def implemented_opset(op_type: str, opset: int) -> int:
    """`opset`, or the lowest version the reference implements `op_type` in when none is <= opset."""
    try:
        from onnx.reference.ops import _op_list

        if _op_list._registered_operators is None:
            _op_list._registered_operators = _op_list._build_registered_operators()
        impl = _op_list._registered_operators.get(op_type) or {}
    except Exception:  # a future onnx without this registry: evaluate at the model's opset
        return int(opset)
    versions = sorted(v for v in impl if v is not None)
    if not versions or any(v <= opset for v in versions):
        return int(opset)
    return int(versions[0])


@functools.lru_cache(maxsize=512)
def _cached(node: bytes, opset: int, in_types: tuple, implicit: tuple = ()):
    import onnx
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    proto = onnx.NodeProto()
    proto.ParseFromString(node)
    if proto.op_type in REPLACED:
        proto.op_type = REPLACED[proto.op_type]
        opset = max(opset, 11)
    present = list(dict.fromkeys([n for n in proto.input if n] + list(implicit)))
    ins = [helper.make_tensor_value_info(n, t, None) for n, t in zip(present, in_types)]
    outs = [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in proto.output if n]
    graph = helper.make_graph([proto], "node", ins, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", implemented_opset(proto.op_type, opset))])
    return ReferenceEvaluator(model)


def evaluator(node_proto, opset: int, inputs: list[np.ndarray], implicit=()):
    """A ReferenceEvaluator of the one-node model: its inputs are the node's present inputs (named as
    the node names them) and then the outer-scope tensors `implicit` its subgraphs read."""
    from onnx import helper

    types = tuple(helper.np_dtype_to_tensor_dtype(np.asarray(a).dtype) for a in inputs)
    return _cached(node_proto.SerializeToString() if not isinstance(node_proto, bytes) else node_proto,
                   int(opset), types, tuple(implicit))
