"""Feature-map layouts: dense stream bytes and strided buffers <-> canonical [H][W][C] arrays.

Dense stream order (DESIGN.md, "Streams and layouts"):
  linear     [H][W][C] bytes as they come
  image      [H][W][C] (packed pixels)
  blocked16  [ceil(C/B)][H][W][B]; channels >= C are written as 0 and ignored on read
Elements are little-endian (int8, IEEE fp16, IEEE fp32). B is the `block` keyword (the ISA's
[layouts.blocked16] block, 16: callers with the ISA pass program.layouts.block_size()).
"""

from __future__ import annotations

import numpy as np

from ..errors import UsageError
from .quant import dtype_name, np_dtype

LAYOUTS = ("linear", "image", "blocked16")
BLOCK = 16  # default channel block (the n657 ISA's); this package imports nothing of the project


def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise UsageError(f"unknown layout {layout!r} (expected one of {', '.join(LAYOUTS)})")


def _as_hwc(hwc: np.ndarray) -> np.ndarray:
    a = np.asarray(hwc)
    if a.ndim != 3:
        raise UsageError(f"expected an [H][W][C] array, got shape {a.shape}")
    dtype_name(a.dtype)  # validates the dtype
    return a.astype(a.dtype.newbyteorder("<"), copy=False)


def _check_block(block) -> int:
    if not isinstance(block, (int, np.integer)) or isinstance(block, bool) or block < 1:
        raise UsageError(f"block={block!r}: expected a positive number of channels")
    return int(block)


def _blocked(a: np.ndarray, block: int) -> np.ndarray:
    """[H][W][C] -> a new contiguous [P][H][W][block] with zero channels appended (one copy)."""
    h, w, c = a.shape
    p = -(-c // block)
    out = np.empty((p, h, w, block), dtype=a.dtype)
    full = c // block
    if full:
        out[:full].transpose(1, 2, 0, 3)[...] = a[:, :, :full * block].reshape(h, w, full, block)
    if full < p:
        out[full, :, :, c - full * block:] = 0
        out[full, :, :, :c - full * block] = a[:, :, full * block:]
    return out


def pack(hwc: np.ndarray, layout: str, *, block: int = BLOCK) -> np.ndarray:
    """Dense stream bytes (np.uint8, a new array) of an [H][W][C] tensor in `layout` (`block`
    channels per blocked16 plane)."""
    _check_layout(layout)
    block = _check_block(block)
    a = _as_hwc(hwc)
    if layout == "blocked16":
        return _blocked(a, block).view(np.uint8).reshape(-1)
    out = np.ascontiguousarray(a)
    if np.shares_memory(out, hwc):
        out = out.copy()
    return out.view(np.uint8).reshape(-1)


def _stream_nbytes(layout: str, h: int, w: int, c: int, esize: int, block: int) -> int:
    if layout == "blocked16":
        return -(-c // block) * h * w * block * esize
    return h * w * c * esize


_LITTLE: dict = {}  # element type name -> its little-endian numpy dtype


def _stream_values(stream, layout: str, h: int, w: int, c: int, dtype: str, block: int) -> np.ndarray:
    """The stream's elements (a little-endian view of its bytes), checked to be exactly its size: flat, or
    for one-byte elements of a uint8 array of several dimensions (a strided view of memory holding the
    stream in C order), that view, which a caller's reshape keeps a view where its strides allow."""
    t = _LITTLE.get(dtype)
    if t is None:
        t = _LITTLE[dtype] = np.dtype(np_dtype(dtype)).newbyteorder("<")
    if isinstance(stream, np.ndarray) and stream.ndim > 1 and t.itemsize == 1 and stream.dtype == np.uint8:
        buf = stream
    elif isinstance(stream, np.ndarray):
        buf = np.ascontiguousarray(stream.reshape(-1)).view(np.uint8)
    else:
        buf = np.frombuffer(bytes(stream), dtype=np.uint8)
    need = _stream_nbytes(layout, h, w, c, t.itemsize, block)
    if buf.size != need:
        raise UsageError(f"unpack: {layout} {h}x{w}x{c} {dtype} needs {need} stream bytes, got {buf.size}")
    return buf.view(t)


class Planes:
    """A tensor [H][W][C] held as planes [P][H][W][B] (channel ch at [ch // B, :, :, ch % B]): a
    view of blocked16 stream bytes (`planes_view`), or an [H][W][C] array as one plane of B = C
    (`as_planes`). Kernels read it without unpacking; `hwc()` unpacks it."""

    ndim = 3

    def __init__(self, planes: np.ndarray, c: int):
        self.planes, self.c = planes, int(c)
        self.shape = (planes.shape[1], planes.shape[2], self.c)
        self.dtype = planes.dtype

    def hwc(self) -> np.ndarray:
        """The tensor as a contiguous [H][W][C] array (unpacked once, then kept; read-only)."""
        got = self.__dict__.get("_hwc")
        if got is None:
            p, h, w, b = self.planes.shape
            got = self.planes[0] if p == 1 and b == self.c else \
                np.ascontiguousarray(self.planes.transpose(1, 2, 0, 3).reshape(h, w, p * b)[:, :, :self.c])
            got.setflags(write=False)
            self._hwc = got
        return got


def as_planes(x) -> Planes:
    """`Planes` of an [H][W][C] array (a contiguous view, or copy) or the Planes itself."""
    if isinstance(x, Planes):
        return x
    a = np.ascontiguousarray(x)
    return Planes(a.reshape(1, *a.shape), a.shape[2])


def planes_view(stream, layout: str, h: int, w: int, c: int, dtype: str, *, block: int = BLOCK) -> Planes:
    """`Planes` viewing the stream bytes of an [h][w][c] tensor in `layout` (no copy of a uint8
    array; the caller keeps the bytes unchanged while it is in use); raises as `unpack` does."""
    _check_layout(layout)
    block = _check_block(block)
    vals = _stream_values(stream, layout, h, w, c, dtype, block)
    if layout == "blocked16":
        return Planes(vals.reshape(-(-c // block), h, w, block), c)
    return Planes(vals.reshape(1, h, w, c), c)


class PlanesReader:
    """`planes_view` of one tensor geometry with its checks, element type and shapes worked out once (a
    caller that views streams of that geometry again and again: a replay's bound conv). Called on a
    stream, it gives what `planes_view` gives, and raises as it does."""

    def __init__(self, layout: str, h: int, w: int, c: int, dtype: str, *, block: int = BLOCK):
        _check_layout(layout)
        block = _check_block(block)
        self.args = (layout, h, w, c, dtype, block)
        self.t = np.dtype(np_dtype(dtype)).newbyteorder("<")
        self.nbytes = _stream_nbytes(layout, h, w, c, self.t.itemsize, block)
        self.shape = (-(-c // block), h, w, block) if layout == "blocked16" else (1, h, w, c)
        self.c = c

    def __call__(self, stream) -> Planes:
        # the views `_stream_values` takes without a copy: a flat contiguous uint8 stream, or (one-byte
        # elements) a strided uint8 view of memory in C order; anything else takes `planes_view`
        if (stream.__class__ is np.ndarray and stream.dtype is _U8 and stream.size == self.nbytes
                and (stream.ndim == 1 and stream.flags.c_contiguous or stream.ndim > 1 and self.t.itemsize == 1)):
            return Planes(stream.view(self.t).reshape(self.shape), self.c)
        layout, h, w, c, dtype, block = self.args
        return planes_view(stream, layout, h, w, c, dtype, block=block)


_U8 = np.dtype(np.uint8)


def unpack(stream, layout: str, h: int, w: int, c: int, dtype: str, *, block: int = BLOCK) -> np.ndarray:
    """[h][w][c] array of `dtype` ("int8" | "fp16" | "fp32") from dense stream bytes."""
    _check_layout(layout)
    block = _check_block(block)
    vals = _stream_values(stream, layout, h, w, c, dtype, block)
    res = np.empty((h, w, c), dtype=np_dtype(dtype))  # one copy, never a view of the stream
    if layout == "blocked16":
        p = -(-c // block)
        planes = vals.reshape(p, h, w, block).transpose(1, 2, 0, 3)
        if c == p * block:
            res.reshape(h, w, p, block)[...] = planes
        else:
            res[...] = planes.reshape(h, w, p * block)[:, :, :c]
    else:
        res[...] = vals.reshape(h, w, c)
    return res


def _strided_geometry(layout, h, w, c, esize, line_stride, plane_stride, block):
    """(planes, lines, run bytes, line stride, plane stride, total bytes) of a strided buffer."""
    if layout == "linear":
        run = h * w * c * esize
        return 1, 1, run, 0, 0, run
    planes = -(-c // block) if layout == "blocked16" else 1
    run = w * (block if layout == "blocked16" else c) * esize
    line_stride, plane_stride = int(line_stride), int(plane_stride)
    if h > 1 and line_stride < run:
        raise UsageError(f"{layout}: line stride {line_stride} B is smaller than a line ({run} B)")
    if planes > 1 and plane_stride < (h - 1) * line_stride + run:
        raise UsageError(f"{layout}: plane stride {plane_stride} B is smaller than a plane "
                         f"({(h - 1) * line_stride + run} B)")
    total = (planes - 1) * plane_stride + (h - 1) * line_stride + run
    return planes, h, run, line_stride, plane_stride, total


def pack_strided(hwc: np.ndarray, layout: str, line_stride: int, plane_stride: int,
                 size: int | None = None, *, block: int = BLOCK) -> bytes:
    """Buffer bytes of an [H][W][C] tensor laid out with the given byte strides.

    Line l of plane p starts at p*plane_stride + l*line_stride; gaps are zero. `linear` is dense
    (strides ignored); `image` has one plane. The result is `size` bytes long if given (it must
    hold the tensor), else just long enough. `hwc` may be any view (a transposed one included): its
    elements are copied once, straight into their strided places.
    """
    _check_layout(layout)
    block = _check_block(block)
    a = _as_hwc(hwc)
    h, w, c = a.shape
    total = _strided_geometry(layout, h, w, c, a.dtype.itemsize, line_stride, plane_stride, block)[5]
    n = total if size is None else int(size)
    if n < total:
        raise UsageError(f"pack_strided: buffer of {n} B cannot hold {total} B of {layout} {h}x{w}x{c}")
    out = np.zeros(n, dtype=np.uint8)
    pack_strided_into(a, layout, line_stride, plane_stride, out, block=block)
    return out.tobytes()


def pack_strided_into(hwc: np.ndarray, layout: str, line_stride: int, plane_stride: int, out: np.ndarray, *,
                      block: int = BLOCK) -> None:
    """`pack_strided` into `out` (a writable flat uint8 array of the buffer's bytes, say a view of simulated
    memory): the same bytes, gaps and padding channels zeroed, without a buffer of its own."""
    _check_layout(layout)
    block = _check_block(block)
    a = _as_hwc(hwc)
    h, w, c = a.shape
    esize = a.dtype.itemsize
    planes, lines, run, ls, ps, total = _strided_geometry(layout, h, w, c, esize, line_stride, plane_stride, block)
    if out.size < total:
        raise UsageError(f"pack_strided: buffer of {out.size} B cannot hold {total} B of {layout} {h}x{w}x{c}")
    out[...] = 0
    if a.size == 0:  # nothing to place: the buffer's zeros
        pass
    elif layout == "linear":
        out[:total] = pack(a, layout, block=block)
    elif layout == "image":  # [H][W][C] lines at line_stride
        _copy_channels(np.ndarray((h, w, c), a.dtype, out, 0, (ls, c * esize, esize)), a)
    else:  # blocked16: [P][H][W][block] planes at plane_stride, lines at line_stride; padding channels 0
        view = np.ndarray((planes, h, w, block), a.dtype, out, 0, (ps, ls, block * esize, esize))
        for p in range(planes):
            c0 = p * block
            _copy_channels(view[p, :, :, :min(block, c - c0)], a[:, :, c0:c0 + block])


def _copy_channels(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[...] = src for [H][W][C] arrays; channel by channel when src's channels are not adjacent
    (a transposed view) and few: numpy copies long runs of a channel far faster than runs of C."""
    if src.shape[2] <= BLOCK and src.strides[2] != src.itemsize:
        for ch in range(src.shape[2]):
            dst[:, :, ch] = src[:, :, ch]
    else:
        dst[...] = src


def unpack_strided(buf, layout: str, h: int, w: int, c: int, dtype: str,
                   line_stride: int, plane_stride: int, *, block: int = BLOCK) -> np.ndarray:
    """[h][w][c] array read from a buffer laid out with the given byte strides (see pack_strided)."""
    _check_layout(layout)
    block = _check_block(block)
    esize = np.dtype(np_dtype(dtype)).itemsize
    planes, lines, run, ls, ps, total = _strided_geometry(layout, h, w, c, esize, line_stride, plane_stride, block)
    data = np.frombuffer(bytes(buf), dtype=np.uint8) if not isinstance(buf, np.ndarray) else \
        np.ascontiguousarray(buf, dtype=np.uint8).reshape(-1)
    if data.size < total:
        raise UsageError(f"unpack_strided: {layout} {h}x{w}x{c} {dtype} needs {total} B, buffer has {data.size}")
    # every line of every plane in one strided copy (a stride of a single line or plane is never taken)
    lines_of = np.ndarray((planes, lines, run), np.uint8, data, 0, (ps if planes > 1 else 0, ls if lines > 1 else 0, 1))
    return unpack(np.ascontiguousarray(lines_of).reshape(-1), layout, h, w, c, dtype, block=block)


def nchw_to_hwc(x: np.ndarray) -> np.ndarray:
    """[1][C][H][W] (or [C][H][W]) -> contiguous [H][W][C]."""
    a = np.asarray(x)
    if a.ndim == 4:
        if a.shape[0] != 1:
            raise UsageError(f"nchw_to_hwc: batch must be 1, got shape {a.shape}")
        a = a[0]
    if a.ndim != 3:
        raise UsageError(f"nchw_to_hwc: expected [1][C][H][W], got shape {a.shape}")
    return np.ascontiguousarray(a.transpose(1, 2, 0))


def hwc_to_nchw(x: np.ndarray) -> np.ndarray:
    """[H][W][C] -> contiguous [1][C][H][W]."""
    a = np.asarray(x)
    if a.ndim != 3:
        raise UsageError(f"hwc_to_nchw: expected [H][W][C], got shape {a.shape}")
    return np.ascontiguousarray(a.transpose(2, 0, 1))[None]


def fmap_hwc(shape) -> tuple[int, int, int]:
    """(H, W, C) of a tensor as the units see it: [1, C, H, W] -> (H, W, C), [1, C, L] -> (1, L, C);
    any other shape (rank 0-2, 5, batch > 1) is a vector of all its elements, (1, 1, numel)."""
    s = tuple(int(d) for d in shape)
    if len(s) == 4 and s[0] == 1:
        return s[2], s[3], s[1]
    if len(s) == 3 and s[0] == 1:
        return 1, s[2], s[1]
    return 1, 1, int(np.prod(s, dtype=np.int64)) if s else 1


def onnx_to_hwc(x: np.ndarray, layout: str, contiguous: bool = True) -> np.ndarray:
    """The [H][W][C] array a buffer of `layout` holds for the ONNX-order tensor `x`: a `linear`
    buffer is dense in ONNX order (1 x 1 x numel); image/blocked16 hold a feature map (fmap_hwc).
    Without `contiguous`, a transposed view of x where one serves (for `pack_strided`: no copy)."""
    a = np.asarray(x)
    if layout == "linear":
        return a.reshape(1, 1, -1)
    h, w, c = fmap_hwc(a.shape)
    if a.ndim not in (3, 4) or a.shape[0] != 1:
        raise UsageError(f"a {layout} buffer holds a feature map [1, C, H, W] or [1, C, L], not {a.shape}")
    t = a.reshape(c, h, w).transpose(1, 2, 0)
    return np.ascontiguousarray(t) if contiguous else t


def hwc_to_onnx(hwc: np.ndarray, layout: str, shape) -> np.ndarray:
    """Inverse of onnx_to_hwc: the ONNX-order tensor of `shape` from a buffer's [H][W][C] array."""
    a = np.asarray(hwc)
    shape = tuple(int(d) for d in shape)
    if layout == "linear":
        return a.reshape(shape)
    return np.ascontiguousarray(a.transpose(2, 0, 1)).reshape(shape)
