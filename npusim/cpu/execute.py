"""Values of a host operator: ONNX's reference implementation (`onnx.reference`) on a one-node model.

float32 operands are computed in float64 and rounded once to the operator's output type, so
results do not depend on the SIMD variant of a float32 kernel a machine picks (the same rule as
the NPU's float activations); float16 operators run in float16 as ONNX defines them (numpy computes
each step in float32 and rounds to float16, which a last-bit float32 difference does not move).
Operators whose rounding is part of their definition (quantization, casts, DFT), or whose
subgraphs or function bodies declare float32, run in their own types. numpy warnings (overflow to inf, 0/0)
are the simulated CPU's arithmetic, not the simulator's: they are silenced here.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..errors import NpusimError
from .reference import evaluator

# operators computed in their own float types (their rounding or bit patterns are defined on that type,
# or their subgraphs declare it)
NATIVE_FLOAT = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "Cast", "CastLike",
                          "QLinearConv", "QLinearMatMul", "BitCast", "If", "Loop", "Scan", "DFT", "STFT"})


class HostOpError(NpusimError):
    """The host operator could not run on its operands (the simulated CPU fails: a Fault, not a crash)."""


class HostOpUnsupported(HostOpError):
    """The host cannot run this operator at all, whatever its operand values (a limit of the simulator)."""


def run_operator(record, inputs: list[np.ndarray], out_types: list) -> list[np.ndarray]:
    """The operator's outputs (numpy arrays of `out_types`) for its present inputs, in operand order.

    Raises HostOpError when the operator refuses its operands (bad values, unsupported types). An
    operator the reference defines by a function body of float32 constants cannot take float64
    operands: it runs in its own types."""
    native = [np.asarray(x) for x in inputs]
    if record.op_type in NATIVE_FLOAT or not any(a.dtype == np.float32 for a in native):
        return _run(record, native, out_types)
    try:
        return _run(record, [a.astype(np.float64) if a.dtype == np.float32 else a for a in native], out_types)
    except HostOpError:  # (a function body of float32 constants): the operator in its own types
        return _run(record, native, out_types)


def _attrs(proto) -> dict:
    from onnx import helper

    out = {}
    for a in proto.attribute:
        v = helper.get_attribute_value(a)
        out[a.name] = v.decode("utf-8", errors="replace") if isinstance(v, bytes) else v
    return out


def _own_kernel(record, feeds: list[np.ndarray], out_types: list):
    """The host's own kernel of the operator (npusim/cpu/kernels.py), or None when it has none."""
    from .kernels import COERCED_2D, KERNELS, coerced_2d

    fn = KERNELS.get(record.op_type)
    if record.op_type in COERCED_2D and record.opset < 13:
        def fn(ins, attrs, op=record.op_type):
            return [coerced_2d(op, ins, attrs)]
    if fn is None or record.implicit:
        return None
    proto = record.node_proto()
    ins = [x for x, name in zip(feeds, [n for n in proto.input if n])]
    try:
        with np.errstate(all="ignore"):
            got = fn(ins, _attrs(proto))
    except Exception as e:
        raise HostOpError(f"{record.op_type}: failed on its operands ({_first_line(e)})") from None
    return [np.asarray(y).astype(t) for y, t in zip(got, out_types)]


def _run(record, feeds: list[np.ndarray], out_types: list) -> list[np.ndarray]:
    own = _own_kernel(record, feeds, out_types)
    if own is not None:
        return own
    proto = record.node_proto()
    names = [n for n in proto.output if n]
    ins = [n for n in proto.input if n] + list(record.implicit)
    if len(names) != len(out_types) or len(ins) != len(feeds):
        raise HostOpError(f"{record.op_type}: the record has {len(ins)} inputs and {len(names)} outputs, "
                          f"the command {len(feeds)} and {len(out_types)}")
    try:
        ev = evaluator(record.node, record.opset, feeds, record.implicit)
    except Exception as e:  # onnx refuses the node (unknown op, bad attribute): the program is wrong
        raise HostOpUnsupported(f"{record.op_type}: the host cannot run this operator ({_first_line(e)})") from None
    feed = dict(zip(ins, feeds))
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
