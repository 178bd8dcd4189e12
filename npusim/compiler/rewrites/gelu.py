"""The Erf form of GELU, as exporters write it before opset 20, back into one Gelu node (ACT gelu).

    x * 0.5 * (1 + Erf(x / sqrt(2)))      (x / sqrt(2) also as x * (1 / sqrt(2)))

Matched from each Erf: Div (or Mul) of x by the constant, Erf, Add of 1, and the product of x, the
sum and 0.5 in any of its three groupings by two Muls. Every intermediate tensor must have one
consumer and not be a graph output; the rewrite fires only when the NPU runs the Gelu (as SiLU's),
and not on tensors a pre-quantized model quantizes. The Gelu keeps the last Mul's name and output.
"""

from __future__ import annotations

import math

import numpy as np

from .. import legality
from ..ir import Graph, Node


def _scalar(g: Graph, t: str, want: float) -> bool:
    v = g.consts.get(t)
    return v is not None and np.asarray(v).size == 1 and \
        math.isclose(float(np.asarray(v).reshape(-1)[0]), want, rel_tol=1e-4)


def _other(n: Node, t: str) -> str | None:
    """The other input of a two-input node that reads `t` once, else None."""
    if len(n.inputs) != 2 or n.inputs.count(t) != 1:
        return None
    return n.inputs[1] if n.inputs[0] == t else n.inputs[0]


def _only(g: Graph, t: str, op: str) -> Node | None:
    cons = g.consumers(t)
    if len(cons) != 1 or t in g.outputs or t in g.qdq or cons[0].op != op:
        return None
    return cons[0]


def _match(g: Graph, erf: Node) -> tuple[str, list[Node]] | None:
    """(x, the pattern's nodes, last one last) of the Erf form of GELU around `erf`, else None."""
    scaled = erf.inputs[0]
    pre = g.producer(scaled)
    if pre is None or _only(g, scaled, "Erf") is not erf or len(pre.inputs) != 2:
        return None
    x, c = pre.inputs
    if pre.op == "Mul" and _scalar(g, x, 1 / math.sqrt(2)):
        x, c = c, x
    if not (pre.op == "Div" and _scalar(g, c, math.sqrt(2)) or pre.op == "Mul" and _scalar(g, c, 1 / math.sqrt(2))):
        return None
    add = _only(g, erf.outputs[0], "Add")
    if add is None or not _scalar(g, _other(add, erf.outputs[0]) or "", 1.0):
        return None
    s = add.outputs[0]
    m1 = _only(g, s, "Mul")
    if m1 is None:
        return None
    k = _other(m1, s)
    if k == x or k is not None and _scalar(g, k, 0.5):  # (x * s) * 0.5 or (s * 0.5) * x
        m2 = _only(g, m1.outputs[0], "Mul")
        last = _other(m2, m1.outputs[0]) if m2 is not None else None
        if m2 is None or not (last == x and k != x or k == x and last is not None and _scalar(g, last, 0.5)):
            return None
        return x, [pre, erf, add, m1, m2]
    half = g.producer(k) if k else None  # (x * 0.5) * s
    if half is None or half.op != "Mul" or _only(g, k, "Mul") is not m1 or _other(half, x) is None \
            or not _scalar(g, _other(half, x), 0.5):
        return None
    return x, [half, pre, erf, add, m1]


def rewrite_gelu(g: Graph) -> None:
    """Every Erf form of GELU the NPU can run -> one Gelu node."""
    for erf in [n for n in g.nodes if n.op == "Erf"]:
        if erf not in g.nodes:
            continue
        got = _match(g, erf)
        if got is None:
            continue
        x, nodes = got
        last = nodes[-1]
        gelu = Node(last.name, "Gelu", [x], list(last.outputs), {"_fused": [n.name for n in nodes[:-1]]})
        if not legality.decide(g, gelu).npu:
            continue
        g.nodes[g.nodes.index(last)] = gelu
        for n in nodes[:-1]:
            g.nodes.remove(n)
