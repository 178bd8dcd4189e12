"""Reshape - Transpose - Reshape chains between two maps (ShuffleNet's channel shuffle) folded into one
permutation node of the maps, where the NPU runs it cheaper than the host runs the three nodes."""

from __future__ import annotations

import numpy as np

from .. import legality
from ..ir import Graph, Node
from ..recipes.permute import choose


RESHAPES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")


def fold_chains(g: Graph) -> None:
    """A Reshape - Transpose - Reshape between two maps (ShuffleNet's channel shuffle) becomes one
    permutation node of the maps (`_source`: the chain applied to the input's indices) when the NPU
    runs it cheaper than the host runs the three nodes; otherwise the nodes stay as they are."""
    for n in list(g.nodes):
        if n.op != "Transpose" or n not in g.nodes:
            continue
        a, b = n.inputs[0], n.outputs[0]
        p, cons = g.producer(a), g.consumers(b)
        if p is None or p.op not in RESHAPES or len(cons) != 1 or cons[0].op not in RESHAPES:
            continue
        q = cons[0]
        x, y = p.inputs[0], q.outputs[0]
        if len(g.consumers(a)) != 1 or a in g.outputs or b in g.outputs or x in g.consts \
                or not (g.is_map(x) and g.is_map(y)) or g.dtype(a) != g.dtype(x):
            continue
        perm = [int(v) for v in n.attrs.get("perm", reversed(range(len(g.shapes[a]))))]
        idx = np.arange(int(np.prod(g.shapes[x], dtype=np.int64)), dtype=np.int64).reshape(g.shapes[a])
        src = np.ascontiguousarray(idx.transpose(perm)).reshape(-1)
        syn = Node(n.name, "Transpose", [x], [y], {"_source": src, "_fused": [p.name, q.name]})
        best, _ = choose(g, syn, [p, n, q])
        if best is None or not legality.decide(g, syn).npu:
            continue
        at = g.nodes.index(n)
        g.nodes[at] = syn
        g.nodes.remove(p)
        g.nodes.remove(q)
