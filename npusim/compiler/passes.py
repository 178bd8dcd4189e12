"""Graph passes: pattern rewrites (SiLU, Pad and BN folding), lowering ONNX nodes to NPU layers or
software epochs (the mapping table, legality.py, decides), chain fusion.

Each ONNX node becomes one single-step Layer (or an alias, or a Concat, or a host Layer); fusion
then merges a producer layer into its only consumer (conv-act, conv-add, add-act, conv-pool), so
one epoch runs a chain (CA -> ACT/ARITH/POOL -> write SE through the stream switch) and the tensors
inside it never reach memory. A rewrite only fires on nodes the NPU runs, so a host layer always runs the node as
the model gave it.
"""

from __future__ import annotations

import numpy as np

from ..errors import ModelError
from . import legality
from .checks import conv_kernel_limit
from .ir import Concat, Graph, HostOp, Layer, Node, Step, hwc
from .recipe import Lowering
from .recipes import MAPPINGS, addressing
from .recipes.conv import const_input, fc_step
from .recipes.eltwise import bn_affine
from .rewrites import conv_forms, matmul_forms, shuffle_chains
from .rewrites.gelu import rewrite_gelu
from .storage import storage_layout

ALIAS_OPS = legality.ALIAS_OPS
ADDRESSED = ("Slice", "Split", "Transpose", "DepthToSpace", "SpaceToDepth", "Pad")  # compiler/recipes/addressing.py


def _single_consumer(g: Graph, t: str) -> Node | None:
    cons = g.consumers(t)
    if len(cons) != 1 or t in g.outputs:
        return None
    return cons[0]


def rewrite_silu(g: Graph) -> None:
    """x * Sigmoid(x) -> SiLU(x) (named after the Mul)."""
    for sig in [n for n in g.nodes if n.op == "Sigmoid"]:
        x, s = sig.inputs[0], sig.outputs[0]
        mul = _single_consumer(g, s)
        if mul is None or mul.op != "Mul" or sorted(mul.inputs) != sorted([x, s]) or \
                not legality.decide(g, sig).npu or s in g.qdq:  # the model quantizes Sigmoid(x): keep both ops
            continue
        i = g.nodes.index(mul)
        g.nodes[i] = Node(mul.name, "SiLU", [x], list(mul.outputs), {"_fused": [sig.name]})
        g.nodes.remove(sig)


def fold_pad(g: Graph) -> None:
    """Pad(constant 0, H/W only) -> Conv(s) the NPU runs: the pads move into the convs' own pads.
    Any other Pad stays (a software epoch)."""
    for pad in [n for n in g.nodes if n.op == "Pad"]:
        cons = g.consumers(pad.outputs[0])
        pads = g.consts.get(pad.inputs[1]) if len(pad.inputs) > 1 and pad.inputs[1] else None
        pads = pad.attrs.get("pads") if pads is None else pads
        if pads is None:
            continue
        pads = np.asarray(pads).reshape(-1)
        value = g.consts.get(pad.inputs[2]) if len(pad.inputs) > 2 and pad.inputs[2] else \
            np.float32(pad.attrs.get("value", 0.0))
        ok = (pad.attrs.get("mode", "constant") == "constant" and value is not None and np.asarray(value).size == 1
              and float(np.asarray(value).reshape(-1)[0]) == 0.0 and (len(pad.inputs) < 4 or not pad.inputs[3])
              and pads.size == 8 and not pads[[0, 1, 4, 5]].any() and (pads >= 0).all() and cons
              and pad.outputs[0] not in g.outputs
              and all(c.op == "Conv" and c.inputs[0] == pad.outputs[0] and
                      c.attrs.get("auto_pad", "NOTSET") in ("NOTSET", "") for c in cons))
        if not ok:
            continue
        t, l, b, r = (int(v) for v in pads[[2, 3, 6, 7]])
        trial = []
        for c in cons:
            p0 = list(c.attrs.get("pads", [0, 0, 0, 0]))
            moved = Node(c.name, c.op, [pad.inputs[0]] + c.inputs[1:], c.outputs,
                         {**c.attrs, "pads": [p0[0] + t, p0[1] + l, p0[2] + b, p0[3] + r]})
            trial.append(moved)
        if not all(legality.decide(g, m).npu for m in trial):
            continue
        for c, m in zip(cons, trial):
            c.attrs["pads"] = m.attrs["pads"]
            c.inputs[0] = pad.inputs[0]
            c.attrs.setdefault("_fused", []).append(pad.name)
        g.nodes.remove(pad)


def fold_bn(g: Graph) -> None:
    """Conv -> BN folds into the conv's weights and bias; the conv takes over the BN's output."""
    for conv in [n for n in g.nodes if n.op == "Conv"]:
        bn = _single_consumer(g, conv.outputs[0])
        if bn is None or bn.op != "BatchNormalization" or conv.inputs[1] not in g.consts or conv.outputs[0] in g.qdq or \
                not legality.decide(g, conv).npu or not legality.decide(g, bn).npu:
            continue
        k, b = bn_affine(g, bn)
        cb = const_input(g, conv, 2, "bias B")
        bias = 0.0 if cb is None else cb.astype(np.float64)
        wname, bname = conv.outputs[0] + "::w_bn", conv.outputs[0] + "::b_bn"
        g.consts[wname] = _scaled(g.consts[conv.inputs[1]], k)
        g.consts[bname] = (bias * k + b).astype(np.float32)
        conv.inputs = [conv.inputs[0], wname, bname]
        conv.outputs = list(bn.outputs[:1])
        conv.attrs.setdefault("_fused", []).append(bn.name)
        g.nodes.remove(bn)


SCALE_CHUNK = 1 << 15  # float64 elements of one block of _scaled (256 KiB)


def _scaled(w: np.ndarray, k: np.ndarray) -> np.ndarray:
    """float32 of w[oc, ...] * k[oc], multiplied in float64, a cache-sized block of channels at a time."""
    w = np.asarray(w)
    k = np.asarray(k, np.float64).reshape((-1,) + (1,) * (w.ndim - 1))
    out = np.empty(np.broadcast_shapes(w.shape, k.shape), np.float32)
    per = max(1, out[0].size) if out.ndim else 1
    step = max(1, SCALE_CHUNK // per)
    if out.ndim == 0 or out.shape[0] != len(k) or w.shape[0] not in (1, len(k)):  # not one row per channel
        out[...] = w.astype(np.float64) * k
        return out
    for r in range(0, len(k), step):
        wr = w if w.shape[0] == 1 else w[r:r + step]
        np.multiply(wr, k[r:r + step], out=out[r:r + step], dtype=np.float64, casting="same_kind")
    return out


def same_bytes(g: Graph, a: str, b: str) -> bool:
    """Whether tensors a and b (same element count) are the same bytes in memory: both linear
    (dense in ONNX order), or feature maps of one [H][W][C] view."""
    if g.dtype(a) != g.dtype(b) and not (g.is_float(a) and g.is_float(b)):
        return False
    if (a in g.float_islands) != (b in g.float_islands):  # fp32 storage next to the compile dtype's
        return False
    la, lb = storage_layout(g, a), storage_layout(g, b)
    if la == lb == "linear":
        return True
    return la == lb and hwc(g.shapes[a]) == hwc(g.shapes[b])


def _host_layer(g: Graph, n: Node, reason: str, names: list[str]) -> Layer:
    implicit = list(n.attrs.get("_implicit", []))
    ins = list(n.inputs) + implicit
    x = next((t for t in ins if t and t not in g.consts), "")
    op = HostOp(n, ins, list(n.outputs), reason, frozenset(t for t in ins if t in g.consts), implicit)
    return Layer(n.name, names, x, [], kind="host", host=op)


def lower(g: Graph, cpu_fallback: bool = True) -> tuple[list[Layer], list[Concat], dict[str, str]]:
    """ONNX nodes -> single-step layers, concats, host layers and aliases (alias tensor -> source).

    A node the mapping table (legality.decide) puts on the CPU becomes a host layer; without
    `cpu_fallback` it is refused instead, naming the node and the reason."""
    layers: list[Layer] = []
    ctx = Lowering(g)
    concats, alias = ctx.concats, ctx.alias
    fc_src: dict[str, str] = {}
    out_roots: dict[str, str] = {}  # alias root -> graph output it is stored as

    def cpu(n: Node, why: str, names):
        if not cpu_fallback:
            raise ModelError(f"node {n.name!r} ({n.op}) cannot run on the NPU: {why} (--no-cpu-fallback)")
        layers.append(_host_layer(g, n, why, names))

    for n in g.nodes:
        names = [n.name] + list(n.attrs.get("_fused", []))
        x = n.inputs[0] if n.inputs else ""
        x = alias.get(x, x)
        if n.op == "Transpose" and addressing.moves_nothing(g, n) and same_bytes(g, x, n.outputs[0]) and not (
                n.outputs[0] in g.outputs and (x in g.inputs or x in g.outputs or x in g.consts or x in out_roots)):
            alias[n.outputs[0]] = x  # only axes of length 1 move: the same bytes
            if n.outputs[0] in g.outputs:
                out_roots[x] = n.outputs[0]
            continue
        if n.op in ALIAS_OPS:
            out = n.outputs[0]
            cons = g.consumers(out)
            root_is_io = x in g.inputs or x in g.outputs or x in g.consts or x in out_roots
            if same_bytes(g, x, out) and not (out in g.outputs and root_is_io):
                alias[out] = x
                if out in g.outputs:
                    out_roots[x] = out
            elif cons and all(m.op in ("Gemm", "MatMul") and m.inputs[0] == out for m in cons) \
                    and out not in g.outputs and g.is_map(x) and len(g.shapes[out]) == 2 and g.shapes[out][0] == 1 \
                    and hwc(g.shapes[out])[2] == int(np.prod(g.shapes[x])) \
                    and max(hwc(g.shapes[x])[:2]) <= conv_kernel_limit():
                fc_src[out] = x
            elif addressing.same_stream(g, n, x, out):  # the same dense stream: copied by line runs
                layers.append(Layer(n.name, names, x, [Step("ARITH", out, dict(op="copy"))]))
            else:
                cpu(n, f"reshaping {list(g.shapes[x])} to {list(g.shapes[out])} moves bytes "
                       f"({storage_layout(g, x)} -> {storage_layout(g, out)})", names)
            continue
        if n.op in ("Gemm", "MatMul") and n.inputs[0] in fc_src:
            src = fc_src[n.inputs[0]]
            flat = Node(n.name, n.op, [n.inputs[0]] + n.inputs[1:], n.outputs, n.attrs, n.proto)
            d = legality.decide(g, flat)
            if d.npu:
                layers.append(Layer(n.name, names, src, [fc_step(g, n, src)]))
            else:
                _reshape_back(g, layers, fc_src, n.inputs[0], cpu)
                cpu(n, d.reason, names)
            continue
        for t in n.inputs:  # a flatten this node reads as a plain tensor (not a fully connected layer)
            if t in fc_src:
                _reshape_back(g, layers, fc_src, t, cpu)
        d = legality.decide(g, n)
        if not d.npu:
            cpu(n, d.reason, names)
            continue
        ctx.names = names
        layers.extend(MAPPINGS[n.op].lower(ctx, n, x))  # the recipe's lowering (compiler/recipes/)
    return layers, concats, alias


def _reshape_back(g: Graph, layers: list, fc_src: dict, flat: str, cpu) -> None:
    """A flatten kept for a fully connected layer that turned out not to be one: materialise it."""
    src = fc_src.pop(flat)
    n = g.producer(flat)
    cpu(n, f"reshaping {list(g.shapes[src])} to {list(g.shapes[flat])} moves bytes", [n.name])


def _readers(layers: list[Layer], concats: list[Concat]) -> dict[str, list]:
    """{tensor: the layers (then concats) that read it, once each, in list order}."""
    out: dict[str, list] = {}
    for L in layers:
        if L.kind != "concat":
            for t in dict.fromkeys(L.reads()):
                out.setdefault(t, []).append(L)
    for c in concats:
        for t in dict.fromkeys(c.parts):
            out.setdefault(t, []).append(c)
    return out


def fuse_chains(layers: list[Layer], concats: list[Concat], outputs: list[str], fusions: frozenset) -> list[Layer]:
    """Merge a layer into its only consumer when the chain is a supported fusion.

    One scan in order: a merge replaces the consumer M by the merged layer and drops L, and the scan
    goes on at L's place. Nothing before it can fuse after the merge (a layer whose one consumer was
    L or M now feeds the merged layer, which has more than one step), so this is the restart-from-the-
    start fixpoint in one pass; the readers of each tensor are kept in a table."""
    readers = _readers(layers, concats)
    i = 0
    while i < len(layers):
        L = layers[i]
        i += 1
        if L.kind != "npu" or L.output in outputs or L.siblings:
            continue
        cons = readers.get(L.output, [])
        if len(cons) != 1 or not isinstance(cons[0], Layer) or cons[0].kind != "npu" or len(cons[0].steps) != 1 \
                or cons[0].siblings:
            continue
        M, last, nxt = cons[0], L.steps[-1], cons[0].steps[0]
        if len(L.steps) >= 4:
            continue
        ok = False
        if nxt.unit == "ACT" and M.input == L.output:
            if last.unit == "CONV" and "conv-act" in fusions:
                ok = True
                if nxt.params["func"] in ("relu", "clip") and last.params["act"] == "none" and \
                        nxt.params["table"] is None and not last.params.get("moves"):  # moves: keeps its scale
                    last.params["act"] = nxt.params["func"]
                    last.params["act_range"] = (nxt.params["lo"], nxt.params["hi"])
                    last.out, nxt = nxt.out, None
            elif last.unit == "ARITH" and last.params["op"] == "add" and "add-act" in fusions \
                    and nxt.params["func"] in ("relu", "clip") and "act" not in last.params \
                    and nxt.params["table"] is None:
                ok = True
                last.params["act"] = nxt.params["func"]
                last.params["act_range"] = (nxt.params["lo"], nxt.params["hi"])
                last.out, nxt = nxt.out, None
        elif nxt.unit == "ARITH" and nxt.params["op"] == "add" and "conv-add" in fusions \
                and not nxt.params.get("broadcast") and "const_map" not in nxt.params \
                and any(s.unit == "CONV" for s in L.steps) and (M.input == L.output) != (nxt.operand == L.output):
            ok = True
            if nxt.operand == L.output:
                nxt.operand = M.input
        elif nxt.unit == "POOL" and "conv-pool" in fusions and M.input == L.output \
                and any(s.unit == "CONV" for s in L.steps) and not any(s.unit == "POOL" for s in L.steps):
            ok = True  # the CA's output streams into the pooling unit (max, avg, global average)
        if not ok:
            continue
        merged = Layer(L.name, L.nodes + M.nodes, L.input, L.steps + ([nxt] if nxt else []))
        for t in set(L.reads()) | set(M.reads()) | {L.output}:
            readers[t] = [r for r in readers.get(t, []) if r is not L and r is not M]
        for t in dict.fromkeys(merged.reads()):
            readers.setdefault(t, []).append(merged)
        k = next(k for k, x in enumerate(layers) if x is M)
        layers[k] = merged
        i -= 1
        del layers[i]  # L
        i = min(i, k)  # go on at L's place (or at the merged layer, were it earlier)
    return layers


RESCALE_FREE = ("MaxPool", "GlobalMaxPool", "Resize", "Upsample", "Concat", "Identity") + ALIAS_OPS + ADDRESSED


def insert_rescales(g: Graph) -> None:
    """Where a model fixes different scales on the input and output of an operator that moves values
    unchanged on the NPU (max pool, resize, concat by addressing, copy, reshape), the input is first
    rescaled to the output's scale and zero point: a Mul by 1 (one ARITH mul_const epoch)."""
    if not g.qdq:
        return
    for n in list(g.nodes):
        if n.op not in RESCALE_FREE or not n.outputs or n.outputs[0] not in g.qdq:
            continue
        want = g.qdq[n.outputs[0]]
        for k, t in enumerate(n.inputs if n.op == "Concat" else n.inputs[:1]):
            if not t or t in g.consts or t not in g.qdq or g.qdq[t] == want:
                continue
            one, r = f"{n.name}::one", f"{t}::rescaled{k}::{n.name}"
            g.consts[one] = np.float32(1.0)
            g.shapes[one], g.dtypes[one] = (), "fp32"
            g.shapes[r], g.dtypes[r], g.qdq[r] = g.shapes[t], g.dtype(t), want
            g.nodes.insert(g.nodes.index(n), Node(f"{n.name}::rescale{k}", "Mul", [t, one], [r]))
            n.inputs[k] = r


def run_passes(g: Graph, fusions: frozenset, cpu_fallback: bool = True) -> tuple[list[Layer], list[Concat], dict[str, str]]:
    insert_rescales(g)
    fold_pad(g)
    rewrite_silu(g)
    rewrite_gelu(g)
    if "conv-bn" in fusions:
        fold_bn(g)
    conv_forms.rewrite(g)
    matmul_forms.rewrite(g)
    shuffle_chains.fold_chains(g)
    layers, concats, alias = lower(g, cpu_fallback)
    layers = fuse_chains(layers, concats, g.outputs, fusions)
    return layers, concats, alias
