"""Pooling on the POOL unit: max and average windows, global pools, ReduceMean / ReduceMax over H and W.
"""

from __future__ import annotations

import numpy as np

from ..checks import MAP, field_limit, rank4_maps
from ..ir import Graph, Node, Step, hwc
from ..recipe import Recipe, one_step
from .conv import conv_pads


def reduce_hw(g: Graph, n: Node):
    """a mean or max over the spatial axes of a map: H and W (axes 2, 3) of [1, C, H, W], L (axis 2) of [1, C, L]"""
    rank = len(g.shapes[n.inputs[0]])
    axes = n.attrs.get("axes")
    if axes is None and len(n.inputs) > 1 and n.inputs[1] in g.consts:
        axes = np.asarray(g.consts[n.inputs[1]]).reshape(-1).tolist()
    if rank not in (3, 4) or axes is None or sorted(int(a) % rank for a in axes) != list(range(2, rank)):
        return f"axes {axes} (the POOL unit reduces H and W)"
    return None


def pool_fields(g: Graph, n: Node):
    """a 1-D or 2-D window within the POOL fields (15x15, strides 7, pads 15), no dilation, no indices output,
    no ceil_mode with count_include_pad"""
    k = [int(v) for v in n.attrs.get("kernel_shape", [])]
    if len(k) not in (1, 2) or len(k) + 2 != len(g.shapes[n.inputs[0]]):
        return f"a {len(k)}-D window"
    if any(int(d) != 1 for d in n.attrs.get("dilations", [1] * len(k))):
        return "dilated window"
    if len([o for o in n.outputs if o]) > 1:
        return "the Indices output is requested"
    if int(n.attrs.get("storage_order", 0)):
        return "storage_order=1"
    if max(k) > field_limit("POOL", "kh"):
        return f"window {k} exceeds the POOL's {field_limit('POOL', 'kh')}"
    if max([int(v) for v in n.attrs.get("strides", [1])]) > field_limit("POOL", "sh"):
        return f"strides exceed the POOL's {field_limit('POOL', 'sh')}"
    if max([int(v) for v in n.attrs.get("pads", [0])] + [0]) > field_limit("POOL", "pad_t"):
        return f"pads exceed the POOL's {field_limit('POOL', 'pad_t')}"
    if n.op == "AveragePool" and int(n.attrs.get("count_include_pad", 0)) and int(n.attrs.get("ceil_mode", 0)):
        return "ceil_mode with count_include_pad"
    return None


def pool_step(g: Graph, n: Node) -> Step:
    """POOL of a 2-D window, or of a 1-D window over the L axis of a [1, C, L] map (a 1 x k window)."""
    x = n.inputs[0]
    ih, iw, _ = hwc(g.shapes[x])
    rounding = n.attrs.get("_round", "half_up")  # a front end's rounding of int8 averages (tflite_ops: TFLite's)
    if n.op in ("GlobalAveragePool", "GlobalMaxPool"):
        mode = "global_avg" if n.op == "GlobalAveragePool" else "global_max"
        return Step("POOL", n.outputs[0], dict(mode=mode, kh=1, kw=1, sh=1, sw=1, pads=(0, 0, 0, 0), include_pad=0,
                                               rounding=rounding))
    k = [int(v) for v in n.attrs["kernel_shape"]]
    st = [int(v) for v in n.attrs.get("strides", [1] * len(k))]
    if len(k) == 1:  # [1, C, L] is a 1 x L map (ir.hwc)
        pads1 = [int(v) for v in n.attrs.get("pads", [0, 0])]
        one = Node(n.name, n.op, n.inputs, n.outputs, {**n.attrs, "kernel_shape": [1, k[0]], "strides": [1, st[0]],
                                                        "pads": [0, pads1[0], 0, pads1[1]]})
        return pool_step(g, one)
    kh, kw = k
    sh, sw = st
    pt, pl, pb, pr = conv_pads(n, ih, iw, kh, kw, sh, sw, 1, 1)
    oh, ow, _ = hwc(g.shapes[n.outputs[0]])
    pb += max(0, (oh - 1) * sh + kh - (ih + pt + pb))  # ceil_mode: extra cells at the end
    pr += max(0, (ow - 1) * sw + kw - (iw + pl + pr))
    include = int(n.attrs.get("count_include_pad", 0))
    mode = "max" if n.op == "MaxPool" else "avg"
    return Step("POOL", n.outputs[0], dict(mode=mode, kh=kh, kw=kw, sh=sh, sw=sw, pads=(pt, pl, pb, pr),
                                           include_pad=include, rounding=rounding))


def _reduce_step(g: Graph, n: Node) -> Step:
    mode = "global_avg" if n.op == "ReduceMean" else "global_max"
    return Step("POOL", n.outputs[0], dict(mode=mode, kh=1, kw=1, sh=1, sw=1, pads=(0, 0, 0, 0), include_pad=0,
                                           rounding=n.attrs.get("_round", "half_up")))


RECIPES = [
    Recipe("ReduceMean", "POOL global_avg (over the channels: a 1 x 1 CONV C -> 1)", MAP + (reduce_hw,),
           one_step(_reduce_step)),
    Recipe("ReduceMax", "POOL global_max", MAP + (reduce_hw,), one_step(_reduce_step)),
    Recipe("MaxPool", "POOL max", MAP + (pool_fields,), one_step(pool_step)),
    Recipe("AveragePool", "POOL avg", MAP + (pool_fields,), one_step(pool_step)),
    Recipe("GlobalAveragePool", "POOL global_avg", MAP + (rank4_maps,), one_step(pool_step)),
    Recipe("GlobalMaxPool", "POOL global_max", MAP + (rank4_maps,), one_step(pool_step)),
]
