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

    conv_integer       sum((x - izp) * (w - wzp[o])) + bias[o] over the kernel window (pads, strides,
                       dilations, groups of the call), requantised by is * ws[o] / os with round half
                       away from zero (TFLite's integer convolution, computed in float64)
    resize_integer     RESIZE_LINEAR (bilinear over H, W) or RESIZE_NEAREST (FLOOR / CEIL) with the
                       ONNX coordinate transform the call names (HALF_PIXEL, ALIGN_CORNERS, ASYMMETRIC),
                       on the dequantised input, requantised half to even
    Concat             the library's concatenation of buffers along `axis` (ONNX order), each buffer
                       read and written in its own memory layout
    DMA_Outputs_Slice_SplitLike   rows of `width_in_bytes` taken every `line_offset` bytes, packed
    DMA_Transpose      8-bit elements read in order, each written at the sum of its indices times the
                       output axes offsets the call's `target_pos` assigns
    DMA_DepthToSpace   blocks of `blocksize_h` x `blocksize_w` moved from channels to space, depth-column-
                       row order (output channel c of block (i, j) is input channel (i * bw + j) * C + c)

A buffer's memory layout (`LL_Buffer_InfoTypeDef`): its shape is (N, H, W, C); its channels are stored
in blocks of `batch` ([N][C / batch][H][W][batch]): `batch` = C for channels last, 1 for channels first,
the row's `batch` field for the mixed (blocked) layout (the last `mem_shape` dimension where it has none).

Any other operator refuses the functional run with one line.
"""

from __future__ import annotations

import numpy as np

from ...errors import StImportError
from . import units_exec as ux


NCHW_AXIS = {0: 0, 1: 3, 2: 1, 3: 2}  # the library's axis (ONNX order N, C, H, W) -> index in (b, h, w, c)


def _tensor(op, mem, name: str, dtype) -> np.ndarray:
    """The tensor `name` of the call (general.input, is, ...), its elements in logical order (b, h, w, c);
    the call's strides are in bytes."""
    addr = op.param(f"{name}.mem.start_offset")
    if addr is None:
        raise StImportError(f"{op.kind}: the call gives no address for '{name}'")
    n = int(op.param(f"{name}.dim.num_elem", 1))
    size = np.dtype(dtype).itemsize
    dims = [int(op.param(f"{name}.dim.tensor_{a}", 1)) for a in "bhwc"]
    strides = [int(op.param(f"{name}.stride.{a}", 0)) for a in "bhwc"]
    if int(np.prod(dims)) == n and n > 1 and all(strides):
        idx = np.zeros(1, np.int64)
        for d, st in zip(dims, strides):
            idx = (idx[:, None] + np.arange(d, dtype=np.int64)[None, :] * st).reshape(-1)
        raw = np.frombuffer(mem.bytes_at(addr, int(idx.max()) + size), np.uint8)
        return np.stack([raw[idx + i] for i in range(size)], axis=1).copy().view(dtype).reshape(-1)
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
    """Channels per stored block of a buffer (see the module docstring). The row's own `batch` decides: its
    `mem_shape` array is shared by every row of the same logical dims (ST's generator names it by them), so
    it can hold another row's blocking (fallguard's Mul_138_out_0: batch 16, mem_shape [1, 32, 16, 16, 4])."""
    c = b.shape[3]
    if b.chpos == "CHPos_First":
        return 1
    if b.chpos == "CHPos_Mixed" and getattr(b, "batch", 0) > 0:
        return int(b.batch)
    if b.chpos == "CHPos_Mixed" and b.mem_shape:
        return int(b.mem_shape[-1])
    return c


def _check_4d(b, op) -> None:
    if len(b.shape) != 4 or int(np.prod(b.shape)) * max(b.nbits // 8, 1) != b.size or b.nbits % 8:
        ux.refuse(f"{op.kind} on buffer '{b.name}' of shape {list(b.shape)} ({b.nbits}-bit, {b.size} bytes)")
    if b.shape[3] % channel_block(b):
        ux.refuse(f"{op.kind} on buffer '{b.name}': {b.shape[3]} channels in blocks of {channel_block(b)}")


def _dtype(b):
    dt = np.dtype(b.numpy_type)
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


def _float(op, mem, name: str) -> np.ndarray:
    n = int(op.param(f"{name}.dim.num_elem", 1))
    return np.frombuffer(mem.bytes_at(op.param(f"{name}.mem.start_offset"), 4 * n), np.float32).astype(np.float64)


def _dims(op, name: str) -> tuple:
    return tuple(int(op.param(f"{name}.dim.tensor_{a}", 1)) for a in "bhwc")


def _requantise(acc: np.ndarray, mult, zp: int, t) -> np.ndarray:
    """round_half_away(acc * mult) + zp, clamped to the type (TFLite's integer requantisation, in float64)."""
    v = np.asarray(acc, np.float64) * mult
    r = np.sign(v) * np.floor(np.abs(v) + 0.5)
    info = np.iinfo(t)
    return np.clip(np.nan_to_num(r) + zp, info.min, info.max).astype(t)


def _conv_integer(op, mem) -> None:
    """Integer convolution: sum((x - izp) * (w - wzp[o])) + bias[o], requantised by is * ws[o] / os."""
    t_in, t_out = _int_type(op, "general.input"), _int_type(op, "general.output")
    b, h, w, c = _dims(op, "general.input")
    x = _tensor(op, mem, "general.input", t_in).astype(np.int64).reshape(b, h, w, c)
    ko, kh, kw, kc = _dims(op, "weights")
    wt = _tensor(op, mem, "weights", _int_type(op, "weights")).astype(np.int64).reshape(ko, kh, kw, kc)
    groups = int(op.param("ngroup", 1))
    if c != kc * groups or ko % groups:
        raise StImportError(f"conv_integer: {c} input channels, kernels of {kc} in {groups} group(s)")
    bias = _tensor(op, mem, "bias", np.int32).astype(np.int64) if op.param("bias.mem.start_offset") else np.zeros(ko)
    izp = int(_tensor(op, mem, "izp", _int_type(op, "izp"))[0])
    wzp = _tensor(op, mem, "wzp", _int_type(op, "wzp")).astype(np.int64)
    ws = _float(op, mem, "ws")
    mult = float(_float(op, mem, "is")[0]) * ws / float(_float(op, mem, "os")[0])
    ozp = int(_tensor(op, mem, "ozp", t_out)[0])
    pt, pl, pb, pr = (tuple(op.param("pads", (0, 0, 0, 0))) + (0, 0, 0, 0))[:4]
    sh, sw = (tuple(op.param("strides", (1, 1))) + (1, 1))[:2]
    dh, dw = (tuple(op.param("dilations", (1, 1))) + (1, 1))[:2]
    ob, oh, ow, oc = _dims(op, "general.output")
    if oc != ko or ob != b:
        raise StImportError(f"conv_integer: output {[ob, oh, ow, oc]} for {ko} kernels")
    xp = np.pad(x - izp, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    wt = wt - wzp.reshape(-1, 1, 1, 1) if wzp.size == ko else wt - wzp.reshape(-1)[0]
    acc = np.zeros((b, oh, ow, ko), np.int64)
    per = ko // groups
    for dy in range(kh):
        for dx in range(kw):
            win = xp[:, dy * dh:dy * dh + sh * (oh - 1) + 1:sh, dx * dw:dx * dw + sw * (ow - 1) + 1:sw, :]
            for g in range(groups):
                acc[..., g * per:(g + 1) * per] += win[..., g * kc:(g + 1) * kc] @ wt[g * per:(g + 1) * per, dy, dx, :].T
    out = _requantise(acc + bias.reshape(-1)[:ko], np.broadcast_to(mult, (ko,)) if mult.size in (1, ko) else mult, ozp, t_out)
    _store(op, mem, "general.output", out.reshape(-1))


def _source_coords(n_out: int, n_in: int, mode: str) -> np.ndarray:
    scale = n_in / n_out
    o = np.arange(n_out, dtype=np.float64)
    if mode == "HALF_PIXEL":
        return (o + 0.5) * scale - 0.5
    if mode == "ALIGN_CORNERS":
        return o * (n_in - 1) / max(n_out - 1, 1)
    if mode == "ASYMMETRIC":
        return o * scale
    ux.refuse(f"resize_integer with coordinate mode {mode}")


def _resize_integer(op, mem) -> None:
    """Resize of an integer tensor: linear (bilinear over H and W) or nearest, the ONNX coordinate
    transform the call names; values dequantised by is / izp, requantised by os / ozp (half to even)."""
    t_in, t_out = _int_type(op, "general.input"), _int_type(op, "general.output")
    b, h, w, c = _dims(op, "general.input")
    ob, oh, ow, oc = _dims(op, "general.output")
    x = (_tensor(op, mem, "general.input", t_in).astype(np.float64).reshape(b, h, w, c)
         - int(_tensor(op, mem, "izp", t_in)[0])) * float(_float(op, mem, "is")[0])
    mode, coord = op.param("mode", ""), op.param("coord_transf_mode", "HALF_PIXEL")
    ys, xs = _source_coords(oh, h, coord), _source_coords(ow, w, coord)
    if mode == "RESIZE_LINEAR":
        ys, xs = np.clip(ys, 0, h - 1), np.clip(xs, 0, w - 1)
        y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
        y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
        fy, fx = (ys - y0)[None, :, None, None], (xs - x0)[None, None, :, None]
        top = x[:, y0][:, :, x0] * (1 - fx) + x[:, y0][:, :, x1] * fx
        bot = x[:, y1][:, :, x0] * (1 - fx) + x[:, y1][:, :, x1] * fx
        y = top * (1 - fy) + bot * fy
    elif mode == "RESIZE_NEAREST":
        rnd = {"FLOOR": np.floor, "CEIL": np.ceil}.get(op.param("nearest_mode", "FLOOR"))
        if rnd is None:
            ux.refuse(f"resize_integer with nearest mode {op.param('nearest_mode')}")
        yi = np.clip(rnd(ys).astype(int), 0, h - 1)
        xi = np.clip(rnd(xs).astype(int), 0, w - 1)
        y = x[:, yi][:, :, xi]
    else:
        ux.refuse(f"resize_integer mode {mode}")
    info = np.iinfo(t_out)
    q = np.rint(y / float(_float(op, mem, "os")[0])) + int(_tensor(op, mem, "ozp", t_out)[0])
    _store(op, mem, "general.output", np.clip(q, info.min, info.max).astype(t_out).reshape(-1))


def _slice_split_like(op, mem) -> None:
    """Rows of `width_in_bytes` copied from the input, one every `line_offset` bytes, packed into the output
    until `tot_out_size` bytes."""
    args = op.param("args") or ()
    ts = op.param("tensors") or ()
    if len(args) < 4 or None in args[:4] or len(ts) < 2:
        raise StImportError("DMA_Outputs_Slice_SplitLike: the call gives no sizes or tensors")
    total, width, _, step = (int(a) for a in args[:4])
    rows = -(-total // max(width, 1))
    src = (ts[0].start + np.arange(rows, dtype=np.int64)[:, None] * step + np.arange(width)[None, :]).reshape(-1)
    mem.load(ts[1].start, mem.read(src[:total]).tobytes())


def _dma_transpose(op, mem) -> None:
    """The input read in order; element (i0, .., iN) goes to sum(i_k * out_offsets[target_pos[k]]) bytes
    after the output's start (8-bit elements)."""
    ts, arrays = op.param("tensors") or (), op.param("arrays") or ()
    if len(ts) < 2 or len(arrays) < 3:
        raise StImportError("DMA_Transpose: the call gives no tensors or axes offsets")
    src, dst = ts[0], ts[1]
    if src.nbits != 8 or dst.nbits != 8 or len(src.shape) not in (3, 4):
        ux.refuse(f"DMA_Transpose of {src.nbits}-bit {len(src.shape)}-D tensors")
    out_off, target = arrays[1], arrays[2]
    off = np.zeros(1, np.int64)
    for k, d in enumerate(src.shape):
        off = (off[:, None] + np.arange(d, dtype=np.int64)[None, :] * out_off[target[k]]).reshape(-1)
    data = np.frombuffer(mem.bytes_at(src.start, off.size), np.uint8)
    mem.write(dst.start + off, data)


OPERATORS = {"dequantizelinear": _dequantizelinear, "quantizelinear": _quantizelinear,
             "softmax_integer": _softmax_integer, "Concat": _concat, "DMA_DepthToSpace": _depth_to_space,
             "conv_integer": _conv_integer, "resize_integer": _resize_integer,
             "DMA_Outputs_Slice_SplitLike": _slice_split_like, "DMA_Transpose": _dma_transpose}


def run_sw_operator(op, mem, buffers, block) -> None:
    fn = OPERATORS.get(op.kind)
    if fn is None:
        ux.refuse(f"epoch block {block.index}: the software operator {op.kind}")
    fn(op, mem)
