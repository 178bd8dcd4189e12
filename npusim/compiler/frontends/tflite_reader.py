"""Read a .tflite flatbuffer into plain data (the `tflite` package's generated reader classes).

`read_tflite(data, where)` checks what it reads before it uses it: the "TFL3" identifier, one
subgraph (control flow is not supported), tensor/buffer/opcode indices in range, static shapes with a
bounded element count, constant data whose size matches shape x element size, and quantization
vectors that fit the tensor. Anything else is one `ModelError` line naming the tensor or operator.
Operator options are read generically from the schema's table accessors into a dict with the
schema's snake_case field names (enum values as ints).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ...errors import ModelError

IDENTIFIER = b"TFL3"
MAX_ELEMENTS = 1 << 28  # a stated limit on one tensor (no N657 pool holds anything near it)
# TensorType -> (name, numpy dtype); names are the ISA element names where one exists
TYPES = {0: ("fp32", np.float32), 1: ("fp16", np.float16), 2: ("int32", np.int32), 3: ("uint8", np.uint8),
         4: ("int64", np.int64), 6: ("bool", np.bool_), 7: ("int16", np.int16), 9: ("int8", np.int8),
         10: ("fp64", np.float64), 15: ("uint32", np.uint32), 16: ("uint16", np.uint16), 17: ("int4", None)}


@dataclass(frozen=True)
class TTensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str  # TYPES name ("int8", "uint8", "int32", "fp32", ...) or "type N"
    data: np.ndarray | None  # constant data (from its buffer), else None
    scale: np.ndarray | None  # float64 (exact float32 values), per tensor (1) or per `axis`
    zero_point: np.ndarray | None  # int64
    axis: int = 0

    @property
    def quantized(self) -> bool:
        return self.scale is not None and self.scale.size > 0


@dataclass(frozen=True)
class TOp:
    index: int
    opcode: str  # BuiltinOperator name, or "CUSTOM"
    custom: str  # custom code ("" for builtins)
    version: int
    inputs: tuple[int, ...]  # -1: an absent optional input
    outputs: tuple[int, ...]
    options: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"custom operator {self.custom!r}" if self.opcode == "CUSTOM" else self.opcode


@dataclass(frozen=True)
class TModel:
    version: int
    description: str
    tensors: tuple[TTensor, ...]
    ops: tuple[TOp, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


def is_tflite(data: bytes) -> bool:
    """Whether `data` carries the TFLite flatbuffer identifier ("TFL3" at offset 4)."""
    return len(data) >= 8 and bytes(data[4:8]) == IDENTIFIER


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _names(enum_cls) -> dict[int, str]:
    return {v: k for k, v in vars(enum_cls).items() if not k.startswith("_") and isinstance(v, int)}


def _read_options(op, where: str) -> dict:
    """The builtin options table of `op` as {snake_case field: value}, read by reflection."""
    import importlib

    from tflite.BuiltinOptions import BuiltinOptions

    kind = op.BuiltinOptionsType()
    if not kind:
        return {}
    name = _names(BuiltinOptions).get(kind)
    if name is None:
        raise ModelError(f"{where}: unknown builtin options type {kind}")
    table = op.BuiltinOptions()
    if table is None:
        return {}
    cls = getattr(importlib.import_module(f"tflite.{name}"), name)
    opts = cls()
    opts.Init(table.Bytes, table.Pos)
    out = {}
    for attr in dir(cls):
        if attr.startswith("_") or attr in ("Init", "GetRootAs") or attr.startswith("GetRootAs") or \
                attr.endswith(("Length", "IsNone", "BufferHasIdentifier")):
            continue
        if attr.endswith("AsNumpy"):
            value = getattr(opts, attr)()
            out[_snake(attr[:-len("AsNumpy")])] = [] if isinstance(value, int) else [int(v) for v in value]
            continue
        if hasattr(cls, attr + "AsNumpy"):
            continue
        fn = getattr(opts, attr)
        if callable(fn):
            try:
                out[_snake(attr)] = fn()
            except TypeError:  # a vector-of-tables accessor taking an index: not an option we read
                continue
    return out


def _buffer_bytes(model, data: bytes, index: int, where: str) -> bytes:
    buf = model.Buffers(index)
    if buf is None:
        return b""
    off, size = int(buf.Offset()), int(buf.Size())
    if off > 1:  # large models keep tensor data after the flatbuffer: offset/size into the file
        if off + size > len(data):
            raise ModelError(f"{where}: buffer {index} [{off}, {off + size}) runs past the end of the file "
                             f"({len(data)} B)")
        return bytes(data[off:off + size])
    if buf.DataIsNone():
        return b""
    return buf.DataAsNumpy().tobytes()


def _tensor(model, graph, data: bytes, i: int) -> TTensor:
    t = graph.Tensors(i)
    name = (t.Name() or b"").decode("utf-8", "replace") or f"tensor{i}"
    where = f"tensor {i} {name!r}"
    shape = tuple(int(d) for d in t.ShapeAsNumpy()) if not t.ShapeIsNone() else ()
    if any(d < 0 for d in shape):
        raise ModelError(f"{where} has a dynamic shape {list(shape)} (npusim plans static buffers)")
    n = int(np.prod(shape, dtype=object)) if shape else 1
    if n > MAX_ELEMENTS:
        raise ModelError(f"{where} {list(shape)} has {n} elements, more than npusim's limit of {MAX_ELEMENTS}")
    code = int(t.Type())
    dtype, np_type = TYPES.get(code, (f"type {code}", None))
    bidx = int(t.Buffer())
    if not 0 <= bidx < model.BuffersLength():
        raise ModelError(f"{where}: buffer index {bidx} is outside the model's {model.BuffersLength()} buffers")
    raw = _buffer_bytes(model, data, bidx, where) if bidx else b""
    arr = None
    if raw:
        if np_type is None:
            raise ModelError(f"{where} holds constant data of {dtype}, which npusim cannot read")
        esize = np.dtype(np_type).itemsize
        if len(raw) != n * esize:
            raise ModelError(f"{where}: its buffer has {len(raw)} B, shape {list(shape)} of {dtype} needs {n * esize} B")
        arr = np.frombuffer(raw, dtype=np_type).reshape(shape).copy()
    scale = zp = None
    axis = 0
    q = t.Quantization()
    if q is not None and not q.ScaleIsNone() and q.ScaleLength() > 0:
        scale = q.ScaleAsNumpy().astype(np.float64)
        zp = q.ZeroPointAsNumpy().astype(np.int64) if not q.ZeroPointIsNone() else np.zeros(scale.size, np.int64)
        if isinstance(zp, int) or zp.size == 0:
            zp = np.zeros(scale.size, np.int64)
        axis = int(q.QuantizedDimension())
        if zp.size not in (1, scale.size):
            raise ModelError(f"{where}: {scale.size} scales but {zp.size} zero points")
        if scale.size > 1 and (not 0 <= axis < len(shape) or shape[axis] != scale.size):
            raise ModelError(f"{where}: {scale.size} scales along axis {axis} of shape {list(shape)}")
        if not np.all(np.isfinite(scale)) or np.any(scale <= 0):
            raise ModelError(f"{where}: quantization scales must be positive and finite")
    return TTensor(i, name, shape, dtype, arr, scale, zp, axis)


def read_tflite(data: bytes, where: str = "model") -> TModel:
    """Parse and check a .tflite flatbuffer (module doc); ModelError naming what is wrong."""
    data = bytes(data)
    if not is_tflite(data):
        raise ModelError(f"{where}: not a TFLite model (no TFL3 flatbuffer identifier)")
    try:
        return _read(data, where)
    except ModelError:
        raise
    except Exception as e:  # a corrupt flatbuffer: offsets out of range, truncated tables
        why = "a table or vector lies outside the file" if type(e).__name__ in ("error", "ValueError", "IndexError") \
            else f"{type(e).__name__}"
        raise ModelError(f"{where}: malformed TFLite flatbuffer ({why})") from None


def _read(data: bytes, where: str) -> TModel:
    from tflite.BuiltinOperator import BuiltinOperator
    from tflite.Model import Model

    model = Model.GetRootAs(data, 0)
    if model.SubgraphsLength() < 1:
        raise ModelError(f"{where}: the TFLite model has no subgraph")
    if model.SubgraphsLength() > 1:
        raise ModelError(f"{where}: the TFLite model has {model.SubgraphsLength()} subgraphs (control flow such as "
                         f"WHILE/IF is not supported)")
    graph = model.Subgraphs(0)
    nt = graph.TensorsLength()
    tensors = tuple(_tensor(model, graph, data, i) for i in range(nt))
    names = _names(BuiltinOperator)
    codes = []
    for k in range(model.OperatorCodesLength()):
        c = model.OperatorCodes(k)
        value = max(int(c.BuiltinCode()), int(c.DeprecatedBuiltinCode()))
        custom = (c.CustomCode() or b"").decode("utf-8", "replace")
        codes.append((names.get(value, f"BUILTIN_{value}"), custom, int(c.Version())))

    def indices(vec, what: str, allow_absent: bool) -> tuple[int, ...]:
        out = tuple(int(v) for v in vec)
        for v in out:
            if not (0 <= v < nt or allow_absent and v == -1):
                raise ModelError(f"{what}: tensor index {v} is outside the subgraph's {nt} tensors")
        return out

    ops = []
    for i in range(graph.OperatorsLength()):
        op = graph.Operators(i)
        ci = int(op.OpcodeIndex())
        if not 0 <= ci < len(codes):
            raise ModelError(f"{where}: operator {i} has opcode index {ci} outside the model's {len(codes)} codes")
        name, custom, version = codes[ci]
        opw = f"{where}: operator {i} ({name if name != 'CUSTOM' else custom})"
        ins = indices(op.InputsAsNumpy() if not op.InputsIsNone() else [], opw, True)
        outs = indices(op.OutputsAsNumpy() if not op.OutputsIsNone() else [], opw, False)
        ops.append(TOp(i, name, custom, version, ins, outs, _read_options(op, opw)))
    g_in = indices(graph.InputsAsNumpy() if not graph.InputsIsNone() else [], f"{where}: subgraph inputs", False)
    g_out = indices(graph.OutputsAsNumpy() if not graph.OutputsIsNone() else [], f"{where}: subgraph outputs", False)
    if not ops or not g_out:
        raise ModelError(f"{where}: the TFLite model has no operators or no outputs")
    desc = (model.Description() or b"").decode("utf-8", "replace")
    return TModel(int(model.Version()), desc, tensors, tuple(ops), g_in, g_out)
