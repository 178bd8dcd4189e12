"""The software epochs' library operators (run by ST's runtime on the Cortex-M55), on simulated memory.

Each operator reads its tensors where its `*_sw_info` struct says (`<tensor>.mem.start_offset`, the
dims and byte strides beside it) and writes its output there too. Modelled:

    dequantizelinear   out = (x - zp) * scale, float32; scale (float32) and zp (int8/uint8) read from
                       the `is` / `izp` addresses
    quantizelinear     out = clamp(round_half_even(x / scale) + zp), as the output's signedness
    softmax_integer    TFLite's int8 softmax: the input scale is the call's `quantized_multiplier` *
                       2^`left_shift` / 2^57 (the (31 - 5)-bit scaled difference the runtime uses),
                       over `axis` counted as ONNX does (N, C, H, W) on the call's (b, h, w, c) dims,
                       differences below `diff_min` give 0; computed in float64, quantised to the
                       output's scale / zero point (`os` / `ozp`) with round-half-to-even. The
                       library's fixed-point exp is not reproduced bit for bit (it is ±1 step away).

    Concat             the library's concatenation of buffers along `axis` (ONNX order), each buffer
                       read and written in its own memory layout
    DMA_DepthToSpace   blocks of `blocksize_h` x `blocksize_w` moved from channels to space, depth-column-
                       row order (output channel c of block (i, j) is input channel (i * bw + j) * C + c)

A buffer's memory layout (`LL_Buffer_InfoTypeDef`): its shape is (N, H, W, C); its channels are stored
in blocks of `batch` ([N][C / batch][H][W][batch]): `batch` = C for channels last, 1 for channels first,
the last `mem_shape` dimension for the mixed (blocked) layout.

Any other operator refuses the functional run with one line.
"""

from __future__ import annotations

import numpy as np

from ...errors import StImportError
from . import units_exec as ux


NCHW_AXIS = {0: 0, 1: 3, 2: 1, 3: 2}  # the library's axis (ONNX order N, C, H, W) -> index in (b, h, w, c)


def _tensor(op, mem, name: str, dtype) -> np.ndarray:
    """The tensor `name` of the call (general.input, is, ...), its elements in logical order (b, h, w, c)."""
    addr = op.param(f"{name}.mem.start_offset")
    if addr is None:
        raise StImportError(f"{op.kind}: the call gives no address for '{name}'")
    n = int(op.param(f"{name}.dim.num_elem", 1))
    size = np.dtype(dtype).itemsize
    dims = [int(op.param(f"{name}.dim.tensor_{a}", 1)) for a in "bhwc"]
    strides = [int(op.param(f"{name}.stride.{a}", 0)) for a in "bhwc"]
    if int(np.prod(dims)) == n and all(strides):
        idx = np.zeros(1, np.int64)
        for d, st in zip(dims, strides):
            idx = (idx[:, None] + np.arange(d, dtype=np.int64)[None, :] * st).reshape(-1)
        # a stride counts elements when it is smaller than the element size would need
        scale = 1 if strides[3] >= size else size
        raw = np.frombuffer(mem.bytes_at(addr, int(idx.max()) * scale + size), np.uint8)
        byte = idx * scale
        return np.stack([raw[byte + i] for i in range(size)], axis=1).copy().view(dtype).reshape(-1)
    return np.frombuffer(mem.bytes_at(addr, n * size), dtype).copy()


def _store(op, mem, name: str, values: np.ndarray) -> None:
    addr = op.param(f"{name}.mem.start_offset")
    if addr is None:
        raise StImportError(f"{op.kind}: the call gives no address for '{name}'")
    mem.load(addr, np.ascontiguousarray(values).tobytes())


def _int_type(op, name: str):
    return np.int8 if op.param(f"{name}.format.is_signed", 1) else np.uint8


def _dequantizelinear(op, mem) -> None:
    x = _tensor(op, mem, "general.input", _int_type(op, "general.input")).astype(np.float64)
    scale = float(np.frombuffer(mem.bytes_at(op.param("is.mem.start_offset"), 4), np.float32)[0])
    zp = int(_tensor(op, mem, "izp", _int_type(op, "izp"))[0])
    _store(op, mem, "general.output", ((x - zp) * scale).astype(np.float32))


def _quantizelinear(op, mem) -> None:
    x = _tensor(op, mem, "general.input", np.float32).astype(np.float64)
    scale = float(np.frombuffer(mem.bytes_at(op.param("os.mem.start_offset"), 4), np.float32)[0])
    t = _int_type(op, "general.output")
    zp = int(_tensor(op, mem, "ozp", t)[0])
    info = np.iinfo(t)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.clip(np.nan_to_num(np.rint(x / scale) + zp), info.min, info.max).astype(t)
    _store(op, mem, "general.output", q)


def _softmax_integer(op, mem) -> None:
    t_in, t_out = _int_type(op, "general.input"), _int_type(op, "general.output")
    dims = [int(op.param(f"general.input.dim.tensor_{a}", 1)) for a in "bhwc"]
    x = _tensor(op, mem, "general.input", t_in).astype(np.float64).reshape(dims)
    axis = NCHW_AXIS[int(op.param("axis", 1)) % 4]
    beta_scale = float(op.param("quantized_multiplier")) * 2.0 ** (int(op.param("left_shift")) - 57)
    diff = x - x.max(axis=axis, keepdims=True)
    e = np.where(diff >= float(op.param("diff_min", -np.inf)), np.exp(diff * beta_scale), 0.0)
    p = e / e.sum(axis=axis, keepdims=True)
    scale = float(np.frombuffer(mem.bytes_at(op.param("os.mem.start_offset"), 4), np.float32)[0])
    zp = int(_tensor(op, mem, "ozp", t_out)[0])
    info = np.iinfo(t_out)
    with np.errstate(divide="ignore", invalid="ignore"):  # a zero scale (weights not loaded) saturates
        q = np.clip(np.nan_to_num(np.rint(p / scale) + zp), info.min, info.max).astype(t_out)
    _store(op, mem, "general.output", q.reshape(-1))


def channel_block(b) -> int:
    """Channels per stored block of a buffer (see the module docstring)."""
    c = b.shape[3]
    if b.chpos == "CHPos_First":
        return 1
    if b.chpos == "CHPos_Mixed" and b.mem_shape:
        return int(b.mem_shape[-1])
    return c


def _check_4d(b, op) -> None:
    if len(b.shape) != 4 or int(np.prod(b.shape)) * max(b.nbits // 8, 1) != b.size or b.nbits % 8:
        ux.refuse(f"{op.kind} on buffer '{b.name}' of shape {list(b.shape)} ({b.nbits}-bit, {b.size} bytes)")
    if b.shape[3] % channel_block(b):
        ux.refuse(f"{op.kind} on buffer '{b.name}': {b.shape[3]} channels in blocks of {channel_block(b)}")


def _dtype(b):
    from .execute import buffer_dtype

    dt = buffer_dtype(b)
    return dt if dt.itemsize * 8 == b.nbits else np.dtype(f"u{b.nbits // 8}")


def read_logical(mem, b) -> np.ndarray:
    """A buffer as its (N, H, W, C) tensor."""
    n, h, w, c = b.shape
    bc = channel_block(b)
    raw = np.frombuffer(mem.bytes_at(b.start, b.size), _dtype(b))
    return raw.reshape(n, c // bc, h, w, bc).transpose(0, 2, 3, 1, 4).reshape(n, h, w, c)


def write_logical(mem, b, t: np.ndarray) -> None:
    n, h, w, c = b.shape
    bc = channel_block(b)
    if tuple(t.shape) != (n, h, w, c):
        raise StImportError(f"buffer '{b.name}': a {list(t.shape)} result for its {list(b.shape)} shape")
    blocks = t.astype(_dtype(b), copy=False).reshape(n, h, w, c // bc, bc).transpose(0, 3, 1, 2, 4)
    mem.load(b.start, np.ascontiguousarray(blocks).tobytes())


def _tensors(op, ninputs: int):
    ts = op.param("tensors") or ()
    if len(ts) < ninputs + 1:
        raise StImportError(f"{op.kind}: the call describes {len(ts)} tensors, {ninputs} inputs and an output expected")
    for b in ts:
        _check_4d(b, op)
    return ts[:ninputs], ts[ninputs]


def _concat(op, mem) -> None:
    args = op.param("args") or ()
    if len(args) < 2 or args[0] is None or args[1] is None:
        raise StImportError("Concat: the call gives no input count and axis")
    ins, out = _tensors(op, args[0])
    axis = NCHW_AXIS[int(args[1]) % 4]
    write_logical(mem, out, np.concatenate([read_logical(mem, b) for b in ins], axis=axis))


def _depth_to_space(op, mem) -> None:
    args = op.param("args") or ()
    if len(args) < 3 or None in args[:3]:
        raise StImportError("DMA_DepthToSpace: the call gives no input count and block sizes")
    (src,), out = _tensors(op, 1) if args[0] == 1 else ux.refuse(f"DMA_DepthToSpace of {args[0]} inputs")
    bh, bw = int(args[1]), int(args[2])
    x = read_logical(mem, src)
    n, h, w, c = x.shape
    if c % (bh * bw):
        raise StImportError(f"DMA_DepthToSpace: {c} channels, not a multiple of {bh} x {bw}")
    co = c // (bh * bw)
    y = x.reshape(n, h, w, bh, bw, co).transpose(0, 1, 3, 2, 4, 5).reshape(n, h * bh, w * bw, co)
    write_logical(mem, out, y)


OPERATORS = {"dequantizelinear": _dequantizelinear, "quantizelinear": _quantizelinear,
             "softmax_integer": _softmax_integer, "Concat": _concat, "DMA_DepthToSpace": _depth_to_space}


def run_sw_operator(op, mem, buffers, block) -> None:
    fn = OPERATORS.get(op.kind)
    if fn is None:
        ux.refuse(f"epoch block {block.index}: the software operator {op.kind}")
    fn(op, mem)
