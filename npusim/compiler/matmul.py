"""MatMul between two computed maps on the CONV unit (contract: isa/README.md "MatMul between activations").

    Y[1, M, N] = A[1, M, K] @ B[1, K, N]

A rank-3 map [1, C, L] is stored with C channels over L pixels (ir.hwc), so B is a map of N pixels with
K channels and Y one of N pixels with M channels: Y^T = B^T A^T is a 1 x 1 convolution of B whose M x K
kernel is A itself, read in its dense [out_c = M][in_c = K] order from A's buffer by the weight SE
(`weight_stream`: one element per run, the k loop over A's pixels, the m loop over its channels). Nothing
is copied or transposed in memory.

int8: the CA has no weight zero point, so A (the kernel) is quantized symmetrically (zero point 0,
`quantize.assign_qparams`); the multiplier is s_B * s_A / s_Y for every output channel.
Refused to the CPU, with the reason: other ranks or a batch (per-head attention [1, H, T, d] needs its
rows as pixels: a channel-moving transpose), A's channels not whole 16-channel planes (the weight stream
would read the padding lanes) or more than 4 in an image map, A read by addressing (a box of another map),
a pre-quantized model (its zero point of A is the model's).
"""

from __future__ import annotations

import numpy as np

from ..program.layouts import required_layout
from .ir import Graph, Node, Step, hwc


def problem(g: Graph, n: Node) -> str | None:
    """two computed maps [1, M, K] @ [1, K, N]: B is the CA's input map, A its kernel read in place (A's M
    channels in an image map or whole 16-channel planes; int8: not a pre-quantized model)"""
    a, b = n.inputs[0], n.inputs[1]
    sa, sb = tuple(g.shapes[a]), tuple(g.shapes[b])
    if len(sa) != 3 or len(sb) != 3 or sa[0] != 1 or sb[0] != 1:
        return (f"A {list(sa)} @ B {list(sb)} between two activations: only [1, M, K] @ [1, K, N] (batched "
                f"or per-head operands need their rows as pixels: a channel-moving transpose)")
    m, k = sa[1], sa[2]
    layout = required_layout(*hwc(sa))
    if layout == "blocked16" and m % 16:
        return f"A's {m} rows are channels of a blocked16 map that fill no whole 16-channel planes"
    if a in g.windows or a in g.strided:
        return "A is read by addressing (a box of another map), not a map of its own"
    if g.compile_dtype == "int8" and g.prequantized:
        return "a pre-quantized model fixes A's zero point (the CA's kernel takes none)"
    if k < 1 or m < 1:
        return f"empty operand A {list(sa)}"
    return None


def step(g: Graph, n: Node, a: str) -> Step:
    """The CONV step (its input map is B, the layer's input; `operand` is A, fed on the weight port)."""
    m = g.shapes[n.inputs[0]][1]
    return Step("CONV", n.outputs[0], dict(weights=None, bias=np.zeros(m, np.float32), kh=1, kw=1, sh=1, sw=1,
                                           dh=1, dw=1, pads=(0, 0, 0, 0), groups=1, act="none", act_range=None),
                operand=a)


def weight_stream(p) -> dict:
    """SE loops (bytes, i1 fastest) reading map placement `p` ([1, M, K]: K pixels of M channels) as the
    dense [M][K] kernel: element (m, k) is pixel k, channel m."""
    es, k, m = p.esize, p.w, p.c
    if p.layout == "linear":  # K = 1: the M channels are dense
        return dict(run=m * es)
    if p.layout == "image":  # [K][M] packed pixels
        return dict(run=es, n1=k, s1=m * es, n2=m, s2=es)
    return dict(run=es, n1=k, s1=p.block * es, n2=p.block, s2=es, n3=m // p.block, s3=p.plane)
