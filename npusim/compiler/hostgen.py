"""Codegen of software epochs: a host layer -> HTENSOR operands + HOST (isa/n657.toml).

The node goes into a host operator record (program/hostop.py) placed with the weights; its
constant inputs are placed there too, dense in their own element type; every other operand is
the tensor's buffer as the memory plan placed it (layout, strides, quantization).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from ..cpu import HostOpError, HostOpUnsupported, run_operator
from ..errors import ModelError, NpusimError
from ..kernels.quant import np_dtype
from ..program.codec import Command
from ..program.hostop import decode_record, encode_record, operand_names
from .ir import Layer

MAX_DIM = (1 << 24) - 1  # HTENSOR d0..d7


def _fp32_bits(v: float) -> int:
    return int(np.array(v, np.float32).view(np.uint32))


def _node_proto(L: Layer) -> onnx.NodeProto:
    n = L.host.node
    if n.proto is not None:
        p = onnx.NodeProto()
        p.CopyFrom(n.proto)
        return p
    return helper.make_node(n.op, list(n.inputs), list(n.outputs), name=n.name,
                            **{k: v for k, v in n.attrs.items() if not k.startswith("_")})


def _tensor(slot: int, direction: str, dims, addr: int, dtype: str, elem: str, layout="linear", line=0, plane=0,
            scale=1.0, zp=0, name="") -> Command:
    dims = [int(d) for d in dims]
    if any(d > MAX_DIM for d in dims):
        raise ModelError(f"tensor {name!r} {dims}: a dimension exceeds the host operand's {MAX_DIM}")
    args = dict(slot=slot, dir=direction, dtype=dtype, elem=elem, layout=layout, rank=len(dims), zp=int(zp),
                addr=int(addr), line=int(line), plane=int(plane), scale=_fp32_bits(scale))
    for k in range(8):
        args[f"d{k}"] = dims[k] if k < len(dims) else 0
    return Command("HTENSOR", args)


def host_commands(cg, L: Layer) -> list[Command]:
    """HTENSOR per present operand (inputs, then the implicit inputs, then outputs; slots counted from
    0), then HOST."""
    op, g = L.host, cg.g
    proto = _node_proto(L)
    own = op.inputs[:len(op.inputs) - len(op.implicit)]
    ins, outs = operand_names([bool(t) for t in own], [bool(t) for t in op.outputs])
    proto.ClearField("input")
    proto.input.extend(ins)
    proto.ClearField("output")
    proto.output.extend(outs)
    try:
        record = encode_record(proto, g.opset, op.reason, op.implicit)
    except NpusimError as e:
        raise ModelError(f"node {L.name!r}: {e}") from None
    why = host_problem(cg.g, op, record)
    if why:
        raise ModelError(f"node {L.name!r} ({op.node.op}) falls back to the CPU, but the simulator's host cannot "
                         f"run it: {why}")
    rbuf = cg.const(f"{L.name}::host_op", record, L.name, (len(record),), "uint8")
    cmds: list[Command] = []
    slot = 0
    for t in op.inputs:
        if not t:
            continue
        if t in op.consts:
            cmds.append(_const_operand(cg, L, t, slot))
        else:
            cmds.append(_buffer_operand(cg, t, slot, "read"))
        slot += 1
    for k, t in enumerate(t for t in op.outputs if t):
        cmds.append(_buffer_operand(cg, t, k, "write"))
    cmds.append(Command("HOST", dict(n_in=slot, n_out=len([t for t in op.outputs if t]), node_bytes=len(record),
                                     node=cg.plan.buffer(rbuf).address(cg.profile))))
    return cmds


def _probe_values(g, op, fill) -> list[np.ndarray]:
    """The operator's input values as the host would read them: constants as placed (float in fp32, then in
    the operator's element type), computed tensors filled with `fill`, in their shapes and element types."""
    vals = []
    for t in op.inputs:
        if not t:
            continue
        elem = np_dtype(g.dtype(t))
        if t in op.consts:
            store = "fp32" if g.dtype(t) in ("fp32", "fp16") else g.dtype(t)
            vals.append(np.asarray(g.consts[t]).astype(np_dtype(store)).astype(elem))
        else:
            vals.append(np.full(tuple(g.shapes[t]), fill, dtype=elem))
    return vals


def host_problem(g, op, record: bytes) -> str | None:
    """Why the simulator's host cannot run this software epoch (None when it can), decided by running the
    record once with the host's own code (cpu.run_operator, as the engine runs it) on probe operands of the
    planned shapes and element types: constants as placed, computed tensors all zeros, else all ones.

    An operator the host cannot build is refused outright. A failure on the probe values is decisive when
    every computed operand is float (zeros and ones both failing is not a matter of values); integer or bool
    operands (indices, shapes, counts) may be valid only with the values the model computes, so their probe
    failure decides nothing and the run reports what happens. Output shapes are not compared: some follow
    the values (a NonMaxSuppression's count). A limit of the simulator is refused here, never reported as
    a simulated fault."""
    rec = decode_record(record)
    types = [np_dtype(g.dtype(t)) for t in op.outputs if t]
    decisive = all(g.is_float(t) for t in op.inputs if t and t not in op.consts)
    why = None
    for fill in (0, 1):
        try:
            with np.errstate(all="ignore"):
                run_operator(rec, _probe_values(g, op, fill), types)
            return None
        except HostOpUnsupported as e:
            return str(e)
        except HostOpError as e:
            why = str(e)
    return why if decisive else None


def _const_operand(cg, L: Layer, t: str, slot: int) -> Command:
    g = cg.g
    elem = g.dtype(t)
    store = "fp32" if elem in ("fp32", "fp16") else elem  # host constants keep full precision
    a = np.asarray(g.consts[t]).astype(np_dtype(store))
    data = a.tobytes() or bytes(a.dtype.itemsize)  # an empty tensor still gets an element of room
    buf = cg.const(f"{L.name}::{t}", data, L.name, a.shape, store)
    return _tensor(slot, "read", a.shape, cg.plan.buffer(buf).address(cg.profile), store, elem, name=t)


def _buffer_operand(cg, t: str, slot: int, direction: str) -> Command:
    g, p = cg.g, cg.plan.place[t]
    elem = g.dtype(t)
    scale, zp = (1.0, 0)
    if p.dtype == "int8" and g.is_float(t):
        scale, zp = cg.qp(t)
    return _tensor(slot, direction, g.shapes[t], cg.plan.address(t), p.dtype, elem, p.layout, p.line, p.plane,
                   scale, zp, name=t)
