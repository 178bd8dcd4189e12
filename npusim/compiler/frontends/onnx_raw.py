"""Initializers read in place: where each initializer's `raw_data` lies in a serialized ONNX model, so
its array is a view of the model's bytes rather than a copy (ResNet-50: 100 MB not copied).

Follows the protobuf wire format (tag = field << 3 | wire type) down the path ModelProto.graph (7) ->
GraphProto.initializer (5) -> TensorProto.name (8) / raw_data (9); every other field is skipped by its
length. Anything it does not follow (a second graph field, a group, a truncated field) gives no spans, and
the caller copies the values as before.
"""

from __future__ import annotations

import math
import sys

import numpy as np
from onnx import TensorProto, helper

GRAPH, INITIALIZER, NAME, RAW_DATA = 7, 5, 8, 9
LEN = 2  # wire type of a length-delimited field
# element types whose raw_data is the little-endian numpy array as it is (no packing, no strings)
PLAIN = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT8, TensorProto.UINT8,
                   TensorProto.INT16, TensorProto.UINT16, TensorProto.INT32, TensorProto.UINT32, TensorProto.INT64,
                   TensorProto.UINT64, TensorProto.BOOL})


class _Unfollowed(Exception):
    """Bytes this reader does not follow."""


def _varint(buf: bytes, at: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= end or shift > 63:
            raise _Unfollowed
        b = buf[at]
        at += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, at
        shift += 7


def _fields(buf: bytes, at: int, end: int):
    """(field number, wire type, start, end) of each field of the message in buf[at:end] (a varint or fixed
    field's span is its value's bytes)."""
    while at < end:
        tag, at = _varint(buf, at, end)
        wire = tag & 7
        if wire == 0:
            start = at
            _, at = _varint(buf, at, end)
        elif wire == 1 or wire == 5:
            start, at = at, at + (8 if wire == 1 else 4)
        elif wire == LEN:
            size, start = _varint(buf, at, end)
            at = start + size
        else:  # groups (3, 4) and undefined wire types
            raise _Unfollowed
        if at > end:
            raise _Unfollowed
        yield tag >> 3, wire, start, at


def raw_spans(data: bytes) -> dict[str, tuple[int, int]]:
    """{initializer name: (offset, size) of its raw_data in `data`}, for the initializers named once that
    carry raw_data; {} when the bytes hold something this reader does not follow."""
    try:
        graphs = [(s, e) for f, w, s, e in _fields(data, 0, len(data)) if f == GRAPH and w == LEN]
        if len(graphs) != 1:  # protobuf would merge several: not followed
            return {}
        spans: dict[str, tuple[int, int] | None] = {}
        for f, w, s, e in _fields(data, *graphs[0]):
            if f != INITIALIZER or w != LEN:
                continue
            name, raw = None, None
            for tf, tw, ts, te in _fields(data, s, e):  # the last of a repeated scalar field wins, as in protobuf
                if tf == NAME and tw == LEN:
                    name = bytes(data[ts:te]).decode("utf-8", errors="replace")
                elif tf == RAW_DATA and tw == LEN:
                    raw = (ts, te - ts)
            if name is not None:
                spans[name] = None if name in spans else raw
        return {k: v for k, v in spans.items() if v is not None}
    except _Unfollowed:
        return {}


def view_of(init: TensorProto, data: bytes, spans: dict) -> np.ndarray | None:
    """The initializer's array as a read-only view of `data` (what numpy_helper.to_array returns, without
    the copy), or None when it is not a plain little-endian raw_data tensor whose bytes match its dims."""
    span = spans.get(init.name)
    if span is None or sys.byteorder != "little" or init.data_type not in PLAIN or not init.HasField("raw_data") \
            or init.data_location == TensorProto.EXTERNAL:
        return None
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(init.data_type))
    count = math.prod(init.dims)
    if count * dtype.itemsize != span[1]:
        return None
    return np.frombuffer(data, dtype=dtype, count=count, offset=span[0]).reshape(tuple(init.dims))
