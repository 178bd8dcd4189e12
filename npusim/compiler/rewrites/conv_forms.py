"""Convolutions the CONV fields cannot hold as given, rewritten into forms they can (isa/README.md
"Convolutions in other forms"). Both rewrites are exact and run before the lowering, so every node they
add is mapped by the usual rules.

**1-D** (an audio or sequence model's Conv over [1, C, L]): a [1, C, L] map is stored as an H = 1 image
(ir.hwc), so Conv1d(x, W[O, C, k]) == Reshape(Conv2d(Reshape(x, [1, C, 1, L]), W[O, C, 1, k])) with the
stride, dilation and pads on the W axis only; the two Reshapes are views of the same bytes.

**Strided past the CA's 7** (a vision transformer's patch embedding: kernel = stride = 8, 14, 16, 32).
With s = the stride on both axes,

    Conv(x, W, stride s) == Conv'(SpaceToDepth_s(x), W', stride 1)

where W' [O, s*s*C, ceil(kh/s), ceil(kw/s)] holds W[o, c, u*s + i, v*s + j] at input channel
(i*s + j)*C + c (ONNX's SpaceToDepth channel order) and kernel tap (u, v), and zero where u*s + i >= kh.
Top/left pads that are multiples of s become pads of Conv'; the bottom/right pads are whatever makes
Conv' give the original output size. Rows and columns of x past the last multiple of s are cropped
(a Slice) when the original never reads them, else zero-padded (a Pad). The SpaceToDepth, Slice and Pad
move values under one int8 scale (quantize.SAME_SCALE_OPS); Conv' is a CONV epoch.

A pre-quantized model's stored weight integers move with its weights.

**A mean or sum over the channels** (ReduceMean/ReduceSum, axis 1, keepdims, e.g. CBAM's spatial
attention) of a [1, C, H, W] map is a 1 x 1 CONV C -> 1 whose weights are all 1/C or 1 (one weight value:
exact in int8 per-channel weights, fp16 and fp32 up to the sum's rounding).
"""

from __future__ import annotations

import numpy as np

from .. import legality
from ..checks import conv_stride_limit
from ..ir import Graph, Node, WeightQuant, add_tensor, drop_tensors


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _plan(g: Graph, n: Node):
    """(s, kh', kw', pads', crop or pad of x to (H', W')) of a Conv to rewrite, or None."""
    if n.op != "Conv" or len(n.inputs) < 2 or n.inputs[1] not in g.consts:
        return None
    w = g.consts[n.inputs[1]]
    x_shape = g.shapes.get(n.inputs[0], ())
    if w.ndim != 4 or len(x_shape) != 4 or x_shape[0] != 1 or int(n.attrs.get("group", 1)) != 1:
        return None
    strides = [int(v) for v in n.attrs.get("strides", [1, 1])]
    limit = conv_stride_limit()
    if len(strides) != 2 or strides[0] != strides[1] or strides[0] <= limit:
        return None
    if any(int(d) != 1 for d in n.attrs.get("dilations", [1, 1])) or \
            n.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", ""):
        return None
    s = strides[0]
    _, _, kh, kw = (int(v) for v in w.shape)
    _, _, h, wd = (int(v) for v in x_shape)
    pt, pl, pb, pr = (int(v) for v in n.attrs.get("pads", [0, 0, 0, 0]))
    if pt % s or pl % s:
        return None
    ho, wo = (h + pt + pb - kh) // s + 1, (wd + pl + pr - kw) // s + 1
    if ho < 1 or wo < 1:
        return None

    def extent(size: int, lead: int, k: int, out: int) -> int | None:
        """x's size along one axis after cropping or zero-padding it to a multiple of s."""
        if size % s == 0:
            return size
        last = (out - 1) * s + k - 1 - lead  # the last row the original reads, in x's own rows
        return size // s * s if last < size // s * s else _ceil_div(size, s) * s

    h2, w2 = extent(h, pt, kh, ho), extent(wd, pl, kw, wo)
    k2h, k2w = _ceil_div(kh, s), _ceil_div(kw, s)
    pads = [pt // s, pl // s, ho - (h2 // s + pt // s - k2h + 1), wo - (w2 // s + pl // s - k2w + 1)]
    if min(pads) < 0:
        return None
    return s, k2h, k2w, pads, (h2, w2)


def _weights(w: np.ndarray, s: int, k2h: int, k2w: int, fill=0) -> np.ndarray:
    """W [O, C, kh, kw] -> W' [O, s*s*C, k2h, k2w] in SpaceToDepth's channel order; taps past the kernel
    hold `fill` (0, or a pre-quantized tensor's zero point per output channel: the value 0)."""
    o, c, kh, kw = w.shape
    padded = np.empty((o, c, k2h * s, k2w * s), w.dtype)
    padded[...] = np.asarray(fill, w.dtype).reshape(-1, 1, 1, 1) if np.ndim(fill) else fill
    padded[:, :, :kh, :kw] = w
    return padded.reshape(o, c, k2h, s, k2w, s).transpose(0, 3, 5, 1, 2, 4).reshape(o, s * s * c, k2h, k2w)


def rewrite(g: Graph) -> None:
    """Both rewrites (module doc), each kept only where its CONV is then legal on the NPU."""
    rewrite_1d(g)
    rewrite_strided(g)
    rewrite_channel_reduce(g)


def _axes(g: Graph, n: Node) -> list[int] | None:
    axes = n.attrs.get("axes")
    if axes is None and len(n.inputs) > 1 and n.inputs[1] in g.consts:
        axes = np.asarray(g.consts[n.inputs[1]]).reshape(-1).tolist()
    return None if axes is None else [int(a) for a in axes]


def rewrite_channel_reduce(g: Graph) -> None:
    """ReduceMean/ReduceSum over axis 1 (keepdims) of a [1, C, H, W] map -> a 1 x 1 CONV C -> 1."""
    for n in [n for n in g.nodes if n.op in ("ReduceMean", "ReduceSum")]:
        x = n.inputs[0]
        shape = g.shapes.get(x, ())
        if len(shape) != 4 or shape[0] != 1 or int(n.attrs.get("keepdims", 1)) != 1 or \
                [a % 4 for a in _axes(g, n) or []] != [1] or x in g.qdq or n.outputs[0] in g.qdq:
            continue
        c = int(shape[1])
        added: list[str] = []
        w = np.full((1, c, 1, 1), 1.0 / c if n.op == "ReduceMean" else 1.0, np.float32)
        w_name = add_tensor(g, added, f"{n.name}::ones", w.shape, "fp32", value=w)
        conv = Node(n.name, "Conv", [x, w_name], list(n.outputs), {"kernel_shape": [1, 1]})
        if not g.is_float(x) or not legality.decide(g, conv).npu:
            drop_tensors(g, added)
            continue
        g.nodes[g.nodes.index(n)] = conv


def rewrite_1d(g: Graph) -> None:
    """Every batch-1 Conv over a [1, C, L] map -> Reshape [1, C, 1, L] -> Conv2d (1 x k) -> Reshape back."""
    for n in [n for n in g.nodes if n.op == "Conv"]:
        if len(n.inputs) < 2 or n.inputs[1] not in g.consts or g.consts[n.inputs[1]].ndim != 3:
            continue
        x, y = n.inputs[0], n.outputs[0]
        if len(g.shapes.get(x, ())) != 3 or g.shapes[x][0] != 1 or len(g.shapes.get(y, ())) != 3 or \
                n.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "", "VALID"):
            continue
        wq = g.wq.get(n.inputs[1])
        if wq is not None and wq.scale.size > 1 and wq.axis != 0:
            continue
        added: list[str] = []
        w = np.asarray(g.consts[n.inputs[1]])
        w_name = add_tensor(g, added, f"{n.inputs[1]}::2d::{n.name}", (*w.shape[:2], 1, w.shape[2]), g.dtype(n.inputs[1]),
                      value=w[:, :, None, :])
        if wq is not None:
            g.wq[w_name] = WeightQuant(np.asarray(wq.values)[:, :, None, :], wq.scale, wq.zero_point, wq.axis)
        (_, c, length), (_, o, out_len) = g.shapes[x], g.shapes[y]
        x2 = add_tensor(g, added, f"{n.name}::2d_in", (1, c, 1, length), g.dtype(x), like=x)
        y2 = add_tensor(g, added, f"{n.name}::2d_out", (1, o, 1, out_len), g.dtype(y), like=y)
        shapes = [add_tensor(g, added, f"{n.name}::2d_{k}", (4 if k == "in_shape" else 3,), "int64", value=np.array(v, np.int64))
                  for k, v in (("in_shape", [1, c, 1, length]), ("out_shape", [1, o, out_len]))]
        pads = [int(v) for v in n.attrs.get("pads", [0, 0])] if n.attrs.get("auto_pad", "NOTSET") != "VALID" else [0, 0]
        attrs = {k: v for k, v in n.attrs.items() if k not in ("strides", "pads", "kernel_shape", "dilations", "auto_pad")}
        conv = Node(n.name, "Conv", [x2, w_name, *n.inputs[2:]], [y2],
                    {**attrs, "kernel_shape": [1, int(w.shape[2])], "strides": [1, int(n.attrs.get("strides", [1])[0])],
                     "dilations": [1, int(n.attrs.get("dilations", [1])[0])], "pads": [0, pads[0], 0, pads[1]]})
        if not legality.decide(g, conv).npu:
            drop_tensors(g, added)
            continue
        i = g.nodes.index(n)
        g.nodes[i:i + 1] = [Node(f"{n.name}::2d_in", "Reshape", [x, shapes[0]], [x2]), conv,
                            Node(f"{n.name}::2d_out", "Reshape", [y2, shapes[1]], [y])]


def rewrite_strided(g: Graph) -> None:
    """Every batch-1, ungrouped, undilated Conv strided past the CA's limit equally on both axes ->
    [Slice | Pad] -> SpaceToDepth -> Conv', where Conv' is then legal on the NPU (kept as is otherwise)."""
    for n in [n for n in g.nodes if n.op == "Conv"]:
        plan = _plan(g, n)
        wq = g.wq.get(n.inputs[1])
        if plan is None or wq is not None and wq.scale.size > 1 and wq.axis != 0:
            continue
        s, k2h, k2w, pads, (h2, w2) = plan
        x = n.inputs[0]
        _, c, h, wd = g.shapes[x]
        crop, pad = h2 <= h and w2 <= wd, h2 >= h and w2 >= wd
        if not (crop or pad):  # one axis cropped, the other padded
            continue
        added, new = [], []
        if (h2, w2) != (h, wd):
            fitted = add_tensor(g, added, f"{n.name}::fit", (1, c, h2, w2), g.dtype(x), like=x)
            if crop:
                bounds = [add_tensor(g, added, f"{n.name}::fit_{k}", (2,), "int64", value=np.array(v, np.int64))
                          for k, v in (("starts", [0, 0]), ("ends", [h2, w2]), ("axes", [2, 3]))]
                new.append(Node(f"{n.name}::fit", "Slice", [x, *bounds], [fitted]))
            else:
                pads_x = add_tensor(g, added, f"{n.name}::fit_pads", (8,), "int64",
                              value=np.array([0, 0, 0, 0, 0, 0, h2 - h, w2 - wd], np.int64))
                new.append(Node(f"{n.name}::fit", "Pad", [x, pads_x], [fitted], {"mode": "constant"}))
            x = fitted
        s2d = add_tensor(g, added, f"{n.name}::s2d", (1, c * s * s, h2 // s, w2 // s), g.dtype(x), like=x)
        new.append(Node(f"{n.name}::s2d", "SpaceToDepth", [x], [s2d], {"blocksize": s}))
        w2d = _weights(np.asarray(g.consts[n.inputs[1]]), s, k2h, k2w)
        w_name = add_tensor(g, added, f"{n.inputs[1]}::s2d{s}::{n.name}", w2d.shape, g.dtype(n.inputs[1]), value=w2d)
        if wq is not None:  # a pre-quantized model's stored integers move with the weights
            zp = wq.zero_point.reshape(-1)
            g.wq[w_name] = WeightQuant(_weights(np.asarray(wq.values), s, k2h, k2w, zp if zp.size > 1 else zp[0]),
                                       wq.scale, wq.zero_point, wq.axis)
        conv = Node(n.name, "Conv", [s2d, w_name, *n.inputs[2:]], list(n.outputs),
                    {**{k: v for k, v in n.attrs.items() if k not in ("strides", "pads", "kernel_shape")},
                     "strides": [1, 1], "pads": pads, "kernel_shape": [k2h, k2w]})
        if not legality.decide(g, conv).npu:
            drop_tensors(g, added)
            continue
        i = g.nodes.index(n)
        g.nodes[i:i + 1] = new + [conv]
