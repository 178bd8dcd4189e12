"""Numpy broadcasting of a computed map by stream-engine addressing (zero strides).

An ARITH unit sees port 0 and port 1 as dense tensors of the output's [H][W][C] in its layout.
A smaller operand (H or W of 1 where the output has more, ONNX/numpy broadcasting) is streamed
in that shape by a read SE that revisits its bytes: the loop over a broadcast axis gets stride 0.
The channel axis cannot broadcast (a run is contiguous bytes: it cannot repeat one element over
a pixel's channels): an operand of one channel is first expanded to the output's C by a CONV
(compiler/moveconv.py). An operand broadcasts when it has the output's C and its own storage
gives runs the output's layout can take:

| operand stored | output layout | SE program (run; loops inner first) |
|---|---|---|
| the output's layout, [1, C, 1, W] | image / blocked16 | a line; H x stride 0; (blocked16) planes x plane stride |
| the output's layout, [1, C, H, 1] | image / blocked16 | a pixel; W x stride 0; H x line stride; (blocked16) planes |
| linear [1, C, 1, 1] vector | image (C <= 4) | the C elements; W x 0; H x 0 (byte strides) |
| linear [1, C, 1, 1] vector | blocked16, C a multiple of 16 | 16 elements; W x 0; H x 0; C/16 x 16 elements |

A [1, C, 1, 1] vector of another C under a blocked16 output would read past its own end in its
last plane (the planes hold 16 channels), so it stays on the CPU (Mul has ARITH mul_channel).
"""

from __future__ import annotations

from ..program.layouts import block_size, required_layout
from .ir import Graph, hwc
from .memplan import storage_layout


def padded(shape, rank: int) -> tuple[int, ...]:
    """`shape` with leading 1s up to `rank` (numpy broadcasting aligns the trailing axes)."""
    return (1,) * (rank - len(shape)) + tuple(shape)


def problem(g: Graph, t: str, out: str, shape=None) -> str | None:
    """Why computed map `t` (or a map of `shape` made from it, stored by the layout rule) cannot be streamed
    as a map of `out`'s shape by zero strides, or None."""
    st, so = tuple(g.shapes[t] if shape is None else shape), tuple(g.shapes[out])
    if st == so:
        return None
    if len(st) > len(so):
        return f"operand {t!r} {list(st)} has more axes than the result {list(so)}"
    ps = padded(st, len(so))
    th, tw, tc = hwc(ps)
    oh, ow, oc = hwc(so)
    if hwc(st) != (th, tw, tc):
        return f"cannot broadcast {t!r} {list(st)}: not stored as a map of {list(ps)} (its rank differs from the result's)"
    if tc != oc:
        return f"broadcasting {tc} channel(s) of {t!r} over {oc} (an SE run cannot repeat one element)"
    if (th not in (1, oh)) or (tw not in (1, ow)):
        return f"operand {t!r} {list(st)} does not broadcast to {list(so)}"
    lt, lo = storage_layout(g, t) if shape is None else required_layout(th, tw, tc), storage_layout(g, out)
    if lt == lo:
        return None
    if lt == "linear" and (lo == "image" or lo == "blocked16" and oc % block_size() == 0):
        return None
    return (f"operand {t!r} {list(st)} is stored {lt}; streamed as {lo} planes it would read past its end "
            f"(C = {oc}, not a multiple of {block_size()})")


def stream_args(p, oh: int, ow: int, block: int) -> tuple[str, dict]:
    """(SE layout, run/loop fields) reading placement `p` (a [th][tw][C] map, th/tw = 1 or the
    output's) as an [oh][ow][C] stream in the output's layout (module doc table)."""
    if p.layout == "linear":  # a [1][1][C] vector: byte strides
        px = (block if p.c > 4 else p.c) * p.esize  # a blocked16 pixel (C a multiple of the block) or an image one
        planes = p.c * p.esize // px
        return "linear", dict(run=px, n1=ow, s1=0, n2=oh, s2=0, n3=planes, s3=px)
    px = (block if p.layout == "blocked16" else p.c) * p.esize
    planes = -(-p.c // block) if p.layout == "blocked16" else 1
    if p.w == ow:  # whole lines, each line (or the one line) repeated over H
        return p.layout, dict(run=ow * px, n1=oh, s1=p.line if p.h == oh else 0, n2=planes, s2=p.plane)
    return p.layout, dict(run=px, n1=ow, s1=0, n2=oh, s2=p.line if p.h == oh else 0, n3=planes, s3=p.plane)
