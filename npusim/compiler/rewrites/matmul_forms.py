"""Matrix products in the form the NPU's constant-B MatMul takes (compiler/recipes/matmul.py; isa/README.md
"MatMul between activations", *A by a constant B*). Three exact rewrites before the lowering:

- **Gemm of a matrix** (A [M, K] with M > 1: a token sequence, as ONNX Runtime's quantization tools and
  many exporters write a Linear layer) -> MatMul(A, alpha * B') with B' = B or B^T by `transB`, its bias
  beta * C (a scalar or one value per output column) carried by the MatMul's CONVs (`_bias`).
- **MatMul + Add of a bias row** (a constant broadcast along the last axis) -> the MatMul with that
  bias, when nothing else reads the product (a [1, K] vector's MatMul is already the fully connected
  CONV, which fuses its Add on its own).
- **Reshape - MatMul - Reshape** that flattens A's leading axes ([1, a, b, K] -> [a*b, K]) and restores
  them on Y -> one MatMul on the unflattened A (numpy batching: the same products).

Each is kept only where the resulting MatMul is mapped to the NPU (legality.decide); otherwise the model's
own nodes stay (a CPU epoch runs exactly them). A pre-quantized model's stored weight integers and int32
bias move with the weights; the product of a MatMul whose output the model quantizes on its own keeps
its Add.
"""

from __future__ import annotations

import numpy as np

from .. import legality
from ..checks import fc_operand
from ..ir import Graph, Node, WeightQuant, add_tensor, drop_tensors


def _bias_row(g: Graph, c: str, n_out: int, rank: int) -> np.ndarray | None:
    """A constant C as one value per output column ([N], [1, N], [1, .., 1, N] or a scalar), else None."""
    if c not in g.consts:
        return None
    v = np.asarray(g.consts[c])
    if v.ndim > rank or any(d != 1 for d in v.shape[:-1]) or v.size not in (1, n_out):
        return None
    return np.broadcast_to(v.reshape(-1).astype(np.float32), (n_out,)).copy()


def _try(g: Graph, old: list[Node], new: Node, added: list) -> bool:
    """Replace `old` (consecutive uses) by `new` where the MatMul maps to the NPU; undo otherwise."""
    if not legality.decide(g, new).npu:
        drop_tensors(g, added)
        return False
    i = min(g.nodes.index(n) for n in old)
    for n in old:
        g.nodes.remove(n)
    g.nodes.insert(i, new)
    return True


def rewrite(g: Graph) -> None:
    """All three rewrites (module doc), in the order that lets each feed the next."""
    _gemm_to_matmul(g)
    _fold_bias_add(g)
    _unflatten(g)


def _gemm_to_matmul(g: Graph) -> None:
    for n in [n for n in g.nodes if n.op == "Gemm"]:
        a, b = n.inputs[0], n.inputs[1]
        c = n.inputs[2] if len(n.inputs) > 2 else ""
        sa = g.shapes.get(a, ())
        if len(sa) != 2 or sa[0] == 1 or int(n.attrs.get("transA", 0)) or b not in g.consts:
            continue
        alpha, beta = float(n.attrs.get("alpha", 1.0)), float(n.attrs.get("beta", 1.0))
        wq = g.wq.get(b)
        if wq is not None and alpha != 1.0:
            continue
        w = np.asarray(g.consts[b], np.float32)
        trans = int(n.attrs.get("transB", 0))
        w = w.T if trans else w  # [K, N]
        n_out = int(w.shape[1])
        bias = _bias_row(g, c, n_out, 2) if c else np.zeros(n_out, np.float32)
        if bias is None or (c in g.wq and beta != 1.0):
            continue
        added: list[str] = []
        if wq is not None and trans:  # per-column scales: axis 0 of B^T's [N, K] is axis 1 of [K, N]
            axis = None if wq.axis is None else 1 - wq.axis
            wq = WeightQuant(np.ascontiguousarray(np.asarray(wq.values).T), wq.scale, wq.zero_point, axis)
        w_name = add_tensor(g, added, f"{b}::matmul::{n.name}", w.shape, g.dtype(b), value=np.ascontiguousarray(alpha * w),
                            wq=wq)
        b_name = add_tensor(g, added, f"{n.name}::bias", bias.shape, "fp32", value=beta * bias, wq=g.wq.get(c) if c else None)
        _try(g, [n], Node(n.name, "MatMul", [a, w_name], list(n.outputs), {"_bias": b_name}), added)


def _fold_bias_add(g: Graph) -> None:
    for n in [n for n in g.nodes if n.op == "MatMul" and n.inputs[1] in g.consts]:
        y = n.outputs[0]
        users = g.consumers(y)
        if len(users) != 1 or users[0].op != "Add" or y in g.outputs or y in g.qdq or "_bias" in n.attrs or \
                fc_operand(g, n) is None:  # a [1, K] vector's MatMul is the fully connected CONV
            continue
        add = users[0]
        other = add.inputs[1] if add.inputs[0] == y else add.inputs[0]
        if other == y or g.shapes.get(add.outputs[0]) != g.shapes.get(y):
            continue
        bias = _bias_row(g, other, int(g.shapes[y][-1]), len(g.shapes[y]))
        if bias is None or other in g.wq:
            continue
        added: list[str] = []
        b_name = add_tensor(g, added, f"{n.name}::bias", bias.shape, "fp32", value=bias)
        _try(g, [n, add], Node(n.name, "MatMul", list(n.inputs), list(add.outputs), {"_bias": b_name}), added)


def _merged_leading(src: tuple, flat: tuple) -> bool:
    """flat == (prod(src[:-1]), src[-1]): a Reshape that only merges the leading axes."""
    return len(src) >= 3 and len(flat) == 2 and flat[1] == src[-1] and flat[0] == int(np.prod(src[:-1]))


def _unflatten(g: Graph) -> None:
    for n in [n for n in g.nodes if n.op == "MatMul" and n.inputs[1] in g.consts]:
        a, y = n.inputs[0], n.outputs[0]
        before, users = g.producer(a), g.consumers(y)
        if before is None or before.op != "Reshape" or len(users) != 1 or users[0].op != "Reshape":
            continue
        after, x = users[0], before.inputs[0]
        src, out = tuple(g.shapes.get(x, ())), tuple(g.shapes.get(after.outputs[0], ()))
        if not _merged_leading(src, g.shapes[a]) or out != src[:-1] + (g.shapes[y][-1],) or \
                len(g.consumers(a)) != 1 or y in g.outputs or a in g.outputs or \
                g.qdq.get(a) != g.qdq.get(x) or g.qdq.get(y) != g.qdq.get(after.outputs[0]):
            continue
        attrs = {k: v for k, v in n.attrs.items() if k != "_matmul"}  # the old node's memoised plan
        _try(g, [before, n, after], Node(n.name, "MatMul", [x, n.inputs[1]], list(after.outputs), attrs), [])
