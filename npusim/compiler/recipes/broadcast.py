"""Numpy broadcasting of a computed map by stream-engine addressing (zero strides).

An ARITH unit sees port 0 and port 1 as dense tensors of the output's [H][W][C] in its layout.
A smaller operand (H or W of 1 where the output has more, ONNX/numpy broadcasting) is streamed
in that shape by a read SE that revisits its bytes: the loop over a broadcast axis gets stride 0.
The channel axis cannot broadcast (a run is contiguous bytes: it cannot repeat one element over
a pixel's channels): an operand of one channel is first expanded to the output's C by a CONV
(compiler/recipes/moveconv.py). An operand broadcasts when it has the output's C and its own storage
gives runs the output's layout can take:

| operand stored | output layout | SE program (run; loops inner first) |
|---|---|---|
| the output's layout, [1, C, 1, W] | image / blocked16 | a line; H x stride 0; (blocked16) planes x plane stride |
| the output's layout, [1, C, H, 1] | image / blocked16 | a pixel; W x stride 0; H x line stride; (blocked16) planes |
| linear [1, C, 1, 1] vector | image (C <= 4) | the C elements; W x 0; H x 0 (byte strides) |
| linear [1, C, 1, 1] vector | blocked16, C a multiple of 16 | 16 elements; W x 0; H x 0; C/16 x 16 elements |

A [1, C, 1, 1] vector of another C under a blocked16 output would read past its own end in its
last plane (the planes hold 16 channels), so it stays on the CPU (Mul has ARITH mul_channel).

An operand of lower rank than the result (numpy aligns the trailing axes: [H, W] or [1, H, W] or [W] under
[1, C, H, W]) is stored for its own shape ([1, H, W] as H channels of W pixels, [H, W] and [C, 1, 1] dense
in ONNX order). Where that storage is not the map of its padded shape ([1, 1, H, W], [1, 1, 1, W]) the
operand is first copied into that map, in ONNX order on both sides, by the element-permutation planner's
pattern pairs (compiler/recipes/permute.py, `relayout`); then the rules above apply (expansion, zero strides).
"""

from __future__ import annotations

import numpy as np

from ...hw import load_profile
from ...program.layouts import block_size, required_layout
from ...program.spec import load_isa
from ..ir import Graph, Layer, Node, hwc
from ..storage import storage_layout
from . import permute


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


# ------------------------------------------------------------------ lower-rank operands

def relayout_shape(g: Graph, t: str, out: str) -> tuple[int, ...] | None:
    """The map shape (`t`'s padded to the result's rank) computed operand `t` of lower rank than result
    `out` is first copied into, or None when it is streamed as stored (the same storage, or a linear vector
    the table takes) or the padded shape is itself a vector."""
    st, so = tuple(g.shapes[t]), tuple(g.shapes[out])
    if len(st) >= len(so) or not g.is_map(out):
        return None
    ps = padded(st, len(so))
    target = required_layout(*hwc(ps))
    if target == "linear" or hwc(st) == hwc(ps) and (storage_layout(g, t) == target or problem(g, t, out) is None):
        return None
    return ps


def relayout_plan(g: Graph, n: Node, t: str, shape):
    """(permute.Plan, "") copying operand `t` of node `n` (ONNX order kept) into a map of `shape`, or
    (None, why); planned once per node (the mapping table and the lowering both ask, memo in n.attrs)."""
    memo = n.attrs.setdefault("_relayout", {})
    if (t, tuple(shape)) not in memo:
        memo[(t, tuple(shape))] = _plan_relayout(g, t, shape)
    return memo[(t, tuple(shape))]


def _plan_relayout(g: Graph, t: str, shape):

    n = int(np.prod(shape, dtype=np.int64))
    return permute.plan_shapes(tuple(g.shapes[t]), storage_layout(g, t), tuple(shape), required_layout(*hwc(shape)),
                       load_isa().dtype_bytes(g.compile_dtype), np.arange(n, dtype=np.int64),
                       g.profile or load_profile())


def relayout_operands(g: Graph, n: Node, names: list[str], alias: dict) -> tuple[Node, list[Layer]]:
    """(the node reading its lower-rank operands as maps of their padded shapes, the copies making them):
    registers each `::relayout` tensor (shape, dtype, int8 range of its operand)."""
    out, ins, layers = n.outputs[0], list(n.inputs), []
    for i, t in enumerate(n.inputs[:2]):
        shape = relayout_shape(g, t, out) if t and t not in g.consts else None
        if shape is None:
            continue
        best, _ = relayout_plan(g, n, t, shape)
        name = f"{out}::relayout{i}"
        g.shapes[name], g.dtypes[name] = shape, g.dtype(t)
        if t in g.ranges:
            g.ranges[name] = g.ranges[t]
        layers += permute.lower(g, Node(n.name, "Reshape", [t], [name]), names, alias.get(t, t), best)
        ins[i] = name
    return Node(n.name, n.op, ins, list(n.outputs), n.attrs, n.proto), layers
