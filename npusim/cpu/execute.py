"""Values of a host operator: ONNX's reference implementation (`onnx.reference`) on a one-node model.

Float operands (float16/float32) are computed in float64 and rounded once to the operator's
output type, so results do not depend on the SIMD variant of a float32 kernel a machine picks
(the same rule as the NPU's float activations). Operators whose rounding is part of their
definition (quantization, casts) run in their own types. numpy warnings (overflow to inf, 0/0)
are the simulated CPU's arithmetic, not the simulator's: they are silenced here.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..errors import NpusimError
from .reference import evaluator

# operators computed in their own float types (their rounding is defined on that type)
NATIVE_FLOAT = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "Cast", "CastLike",
                          "QLinearConv", "QLinearMatMul", "QLinearAdd", "QLinearMul", "Bitcast"})


class HostOpError(NpusimError):
    """The host operator could not run on its operands (the simulated CPU fails: a Fault, not a crash)."""


def run_operator(record, inputs: list[np.ndarray], out_types: list) -> list[np.ndarray]:
    """The operator's outputs (numpy arrays of `out_types`) for its present inputs, in operand order.

    Raises HostOpError when the operator refuses its operands (bad values, unsupported types)."""
    upcast = record.op_type not in NATIVE_FLOAT
    feeds = []
    for x in inputs:
        a = np.asarray(x)
        if upcast and a.dtype in (np.float16, np.float32):
            a = a.astype(np.float64)
        feeds.append(a)
    proto = record.node_proto()
    names = [n for n in proto.output if n]
    if len(names) != len(out_types) or len([n for n in proto.input if n]) != len(feeds):
        raise HostOpError(f"{record.op_type}: the record has {len([n for n in proto.input if n])} inputs and "
                          f"{len(names)} outputs, the command {len(feeds)} and {len(out_types)}")
    try:
        ev = evaluator(record.node, record.opset, feeds)
    except Exception as e:  # onnx refuses the node (unknown op, bad attribute): the program is wrong
        raise HostOpError(f"{record.op_type}: the host cannot run this operator ({_first_line(e)})") from None
    feed = {n: a for n, a in zip([n for n in proto.input if n], feeds)}
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            got = ev.run(None, feed)
    except Exception as e:
        raise HostOpError(f"{record.op_type}: failed on its operands ({_first_line(e)})") from None
    out = []
    for y, t in zip(got, out_types):
        y = np.asarray(y)
        with np.errstate(all="ignore"):
            out.append(y.astype(t, copy=False) if y.dtype != np.dtype(t) else y)
    return out


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:160]}" if text else type(e).__name__
