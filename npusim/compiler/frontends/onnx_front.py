"""Front end: load ONNX, validate it (modelcheck.py), fix input shapes, infer shapes, fold constants,
strip no-ops, import QDQ scales.

Output: a `Graph` (ir.py) of ONNX nodes with static shapes and element types, plus the cleaned
float ONNX model (same tensor names) that calibration runs through ONNX Runtime. Which node runs
where is not decided here (refusals.py does).

Over 500 lines: loading, checking, folding (constants, If), shape inference and the graph build
are one sequence over one cleaned model whose intermediate state they share.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from ...cpu.reference import evaluator
from ...errors import DataError, ModelError, ModelNote
from .. import refusals
from ..ir import Graph, Node, WeightQuant
from . import modelcheck, onnx_raw

OPSET = 17
REMOVED = frozenset({"Identity", "Dropout"})


def load_model(model) -> onnx.ModelProto:
    """An onnx.ModelProto from a path or a proto; ModelError for a missing or non-ONNX file."""
    if isinstance(model, onnx.ModelProto):
        return model
    if not isinstance(model, (str, Path)):
        raise ModelError(f"model: expected a path or onnx.ModelProto, got {type(model).__name__}")
    path = Path(model)
    if path.is_dir():
        raise ModelError(f"{path}: is a folder, not an ONNX model file")
    if not path.is_file():
        raise ModelError(f"{path}: no such model file")
    return load_model_file(path)[0]


def load_model_file(path: Path) -> tuple[onnx.ModelProto, bytes]:
    """(proto, the file's bytes when they are the whole model, else b"": a model with external data or in
    a text format), for an existing file; ModelError for a non-ONNX one. A caller sharing the model
    as bytes then need not serialize it again."""
    try:
        if path.suffix.lower() != ".onnx":  # onnx picks the format from the suffix
            proto, data = onnx.load(str(path)), b""
        else:
            data = path.read_bytes()
            proto = onnx.load_model_from_string(data)
            if any(onnx.external_data_helper.uses_external_data(t) for t in _tensors(proto.graph)):
                onnx.external_data_helper.load_external_data_for_model(proto, str(path.parent))
                data = b""
    except Exception as e:  # protobuf raises DecodeError, RuntimeWarning, ValueError...
        raise ModelError(f"{path}: not an ONNX model ({type(e).__name__})") from None
    if not proto.graph.node or not proto.graph.output:
        raise ModelError(f"{path}: not an ONNX model (no graph nodes or outputs)")
    return proto, data


def _tensors(graph: onnx.GraphProto):
    """Every tensor of the graph: initializers, node attributes, and those of its subgraphs."""
    yield from graph.initializer
    for s in graph.sparse_initializer:
        yield s.values
    for n in graph.node:
        for a in n.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
        for sub in _subgraphs(n):
            yield from _tensors(sub)


def _dims(vi) -> list | None:
    """The dims of a value info (ints, or the dim_param / "?" of a symbolic one); None: no shape at all."""
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    return [int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim]


def _fix_inputs(model: onnx.ModelProto, input_shapes) -> list[str]:
    """Give every graph input a static shape (from `input_shapes` where needed); return input names."""
    inits = {i.name for i in model.graph.initializer}
    real = [vi for vi in model.graph.input if vi.name not in inits]
    if isinstance(input_shapes, (tuple, list)):
        if len(real) != 1:
            raise ModelError(f"a bare --input-shape needs a single-input model; this one has "
                             f"{len(real)} inputs ({', '.join(v.name for v in real)}): use NAME=DIMS")
        input_shapes = {real[0].name: tuple(input_shapes)}
    input_shapes = dict(input_shapes or {})
    unknown = sorted(set(input_shapes) - {v.name for v in real})
    if unknown:
        raise ModelError(f"--input-shape {unknown[0]}: the model has no input of that name "
                         f"(inputs: {', '.join(v.name for v in real)})")
    for vi in real:
        if vi.type.tensor_type.elem_type not in modelcheck.ELEMS:
            raise ModelError(f"input {vi.name!r}: element type {modelcheck._type_name(vi.type.tensor_type.elem_type)} "
                             f"is not supported")
        dims = _dims(vi) or []
        if vi.name in input_shapes:
            want = input_shapes[vi.name]
            if dims and len(dims) != len(want):
                raise ModelError(f"--input-shape {vi.name}={','.join(map(str, want))}: the model input has rank {len(dims)}")
            for d, w in zip(dims, want):
                if isinstance(d, int) and d != w:
                    raise ModelError(f"--input-shape {vi.name}: dimension {w} contradicts the model's static {d}")
            dims = list(want)
        elif not vi.type.tensor_type.HasField("shape"):
            raise ModelError(f"input {vi.name!r} has no declared shape: give --input-shape {vi.name}=...")
        elif any(not isinstance(d, int) for d in dims):
            dims = _default_batch(vi.name, dims)
        vi.type.tensor_type.ClearField("shape")
        vi.type.tensor_type.shape.SetInParent()  # a scalar's shape is present with no dims
        for d in dims:
            vi.type.tensor_type.shape.dim.add().dim_value = int(d)
    return [vi.name for vi in real]


def _default_batch(name: str, dims: list) -> list[int]:
    """A dynamic first (batch) dimension of a map or a row of features (rank >= 2) is 1, said in one
    `ModelNote`; any other dynamic dimension needs --input-shape (ModelError naming them)."""
    rest = [k for k, d in enumerate(dims) if not isinstance(d, int) and (k > 0 or len(dims) < 2)]
    if rest:
        example = ",".join("1" if k == 0 and k not in rest else str(d) for k, d in enumerate(dims))
        raise ModelError(f"input {name!r} has a dynamic shape {dims}: dimension{'s' * (len(rest) > 1)} "
                         f"{', '.join(map(str, rest))} need{'s' * (len(rest) == 1)} a size: give --input-shape "
                         f"{name}={example} (a dynamic batch dimension alone defaults to 1)")
    warnings.warn(ModelNote(f"input {name!r}: dynamic batch dimension {dims[0]!r} set to 1 (--input-shape "
                            f"{name}=N,... for another)"), stacklevel=2)
    return [1] + list(dims[1:])


def _freeze_inputs(model: onnx.ModelProto, const_inputs: dict | None) -> None:
    """Make the listed graph inputs initializers with the values of their .npy files (checked against
    the input's element type and static dims)."""
    if not const_inputs:
        return
    inits = {i.name for i in model.graph.initializer}
    real = {vi.name: vi for vi in model.graph.input if vi.name not in inits}
    for name, path in const_inputs.items():
        vi = real.get(name)
        if vi is None:
            raise ModelError(f"--const-input {name}: the model has no input of that name "
                             f"(inputs: {', '.join(real) or 'none'})")
        try:
            a = np.load(path, allow_pickle=False)
        except FileNotFoundError:
            raise DataError(f"--const-input {name}: no such file {path}") from None
        except Exception as e:
            raise DataError(f"--const-input {name}: {path} is not a readable .npy file ({type(e).__name__})") from None
        et = vi.type.tensor_type.elem_type
        want = helper.tensor_dtype_to_np_dtype(et) if et in modelcheck.ELEMS else None
        if want is None or np.asarray(a).dtype.kind != np.dtype(want).kind and not (
                np.dtype(want).kind in "iu" and a.dtype.kind in "iu"):
            raise DataError(f"--const-input {name}: {path} holds {a.dtype}, the input is "
                            f"{modelcheck._type_name(et)}")
        dims = _dims(vi)
        if dims is not None and all(isinstance(d, int) for d in dims) and a.size == int(np.prod(dims)):
            a = a.reshape(dims)  # e.g. [1] given for a scalar input
        if dims is not None and (len(dims) != a.ndim or any(isinstance(d, int) and d != s
                                                            for d, s in zip(dims, a.shape))):
            raise DataError(f"--const-input {name}: shape {list(a.shape)} disagrees with the input's {dims}")
        model.graph.initializer.append(numpy_helper.from_array(a.astype(want), name))
        model.graph.input.remove(vi)


def _infer(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with the value_info (and output types) of ONNX shape inference, run on the model
    without its weights' data (`modelcheck.light_copy`)."""
    try:
        inferred = shape_inference.infer_shapes(modelcheck.light_copy(model), data_prop=True)
    except Exception as e:
        raise ModelError(f"shape inference failed: {str(e).splitlines()[0][:200]}") from None
    model.graph.ClearField("value_info")
    model.graph.value_info.extend(inferred.graph.value_info)
    model.graph.ClearField("output")
    model.graph.output.extend(inferred.graph.output)
    return model


def _static(dims) -> bool:
    return dims is not None and all(isinstance(d, int) for d in dims)


def _shape_map(model: onnx.ModelProto) -> dict[str, list]:
    out = {}
    for vi in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output):
        dims = _dims(vi)
        if dims is not None:
            out[vi.name] = dims
    return out


def _eval_node(node: onnx.NodeProto, consts: dict, opset: int, implicit=()) -> list[np.ndarray]:
    """Outputs of a node on constant inputs (and constant outer-scope tensors its subgraphs read), by
    ONNX's reference at the model's opset (the form an operator takes, e.g. Unsqueeze's axes
    attribute before opset 13, depends on it)."""
    feeds = {n: np.asarray(consts[n]) for n in dict.fromkeys(list(node.input) + list(implicit)) if n}
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return evaluator(node, opset, list(feeds.values()), implicit).run(None, feeds)
    except Exception as e:
        raise ModelError(f"node {node.name or node.op_type!r} ({node.op_type}): constant folding failed "
                         f"({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})") from None


def _elem_sizes(model: onnx.ModelProto) -> dict[str, int]:
    """Bytes per element of every typed tensor of an inferred model."""
    out = {}
    for vi in list(model.graph.value_info) + list(model.graph.output):
        et = vi.type.tensor_type.elem_type
        if et:
            try:
                out[vi.name] = np.dtype(helper.tensor_dtype_to_np_dtype(et)).itemsize
            except (KeyError, TypeError):
                pass
    return out


def _check_fold_size(node: onnx.NodeProto, consts: dict, shapes: dict, esizes: dict, max_bytes: int | None) -> None:
    """Refuse to evaluate a constant node whose output would exceed `max_bytes`: the size comes from
    the inferred shape (or, for ConstantOfShape, its shape input), before anything is allocated."""
    if max_bytes is None:
        return
    if node.op_type == "Constant" and not any(a.name == "sparse_value" for a in node.attribute):
        return  # a dense Constant is a copy of data the model file already holds
    for out in node.output:
        dims = shapes.get(out)
        if not dims or any(not isinstance(d, int) for d in dims):
            dims = None
            if node.op_type == "ConstantOfShape" and node.input and node.input[0] in consts:
                dims = [int(d) for d in np.asarray(consts[node.input[0]]).reshape(-1)]
        if dims is None:
            continue
        need = int(np.prod([max(int(d), 0) for d in dims], dtype=object)) * esizes.get(out, 4)
        if need > max_bytes:
            raise ModelError(f"model too big: constant {out!r} {list(dims)} of node {node.name!r} ({node.op_type}) "
                             f"needs {need} B, more than the target could hold ({max_bytes} B)")


def subgraph_reads(node: onnx.NodeProto) -> list[str]:
    """Tensors of enclosing scopes that a node's subgraphs (If/Loop/Scan bodies, nested) read: its
    implicit inputs."""
    out: list[str] = []

    def visit(g, bound):
        bound = set(bound) | {i.name for i in g.input} | {i.name for i in g.initializer} | \
            {s.values.name for s in g.sparse_initializer}
        for n in g.node:
            for i in n.input:
                if i and i not in bound and i not in out:
                    out.append(i)
            for sub in _subgraphs(n):
                visit(sub, bound)
            bound |= {o for o in n.output if o}

    for sub in _subgraphs(node):
        visit(sub, set())
    return out


def _subgraphs(node: onnx.NodeProto) -> list:
    subs = []
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            subs.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            subs.extend(a.graphs)
    return subs


def _initializers(model: onnx.ModelProto, data: dict | None = None) -> dict[str, np.ndarray]:
    """{name: array} of the model's initializers; `data`: {name: TensorProto, or its array read in place
    (`onnx_raw`)} holding the values of those the model keeps without them (`_working_copy`)."""
    out = {}
    for init in model.graph.initializer:
        name = init.name
        init = data.get(name, init) if data else init
        if isinstance(init, np.ndarray):
            out[name] = init
            continue
        try:
            out[init.name] = numpy_helper.to_array(init)
        except Exception as e:  # data that disagrees with dims/type
            raise ModelError(f"initializer {init.name!r} {list(init.dims)}: its data does not match its dims and "
                             f"type ({type(e).__name__})") from None
    return out


def _inference_dropout(node: onnx.NodeProto, consts: dict, shapes: dict, opset: int) -> bool:
    """A Dropout that is the identity in inference: not in training mode (no training_mode attribute set,
    its opset-12 training_mode input absent or a constant false) and, when its mask is wanted, of a static
    input shape (the mask is then a constant all-true tensor of that shape; opset 7-9 types it as the input,
    10 on as bool)."""
    if any(a.name == "training_mode" and a.i for a in node.attribute):
        return False
    if len(node.input) > 2 and node.input[2]:
        flag = consts.get(node.input[2])
        if flag is None or bool(np.asarray(flag).reshape(-1)[0]):
            return False
    if not node.input or not node.input[0]:
        return False
    if len(node.output) > 1 and node.output[1]:
        dims = shapes.get(node.input[0])
        if dims is None or not all(isinstance(d, int) for d in dims):
            return False
    return True


def _elem_type(model, name: str) -> int:
    """The ONNX element type of tensor `name` declared in the (inferred) model, 1 (float) if undeclared."""
    if model is not None:
        for vi in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output):
            if vi.name == name and vi.type.tensor_type.elem_type:
                return vi.type.tensor_type.elem_type
    return onnx.TensorProto.FLOAT


def _fold(model: onnx.ModelProto, shapes: dict, graph_inputs: list[str], max_bytes: int | None = None,
          opset: int = OPSET, data: dict | None = None):
    """Fold constants and strip no-ops. Returns (kept NodeProtos, consts, qdq scales, weight quantization).

    A constant node whose output would exceed `max_bytes` is refused before it is evaluated. A graph
    output that is a copy of an input, of a constant or of another output keeps an Identity (the
    program copies it); a QuantizeLinear not followed by its DequantizeLinear stays an operator. `data`: the
    values of initializers the model keeps without them (`_working_copy`)."""
    consts = _initializers(model, data)
    esizes = _elem_sizes(model)
    outputs = [o.name for o in model.graph.output]
    work = [(n, subgraph_reads(n)) for n in model.graph.node]
    outer = {t for _, r in work for t in r}  # read by a subgraph: keep the tensor under its name
    rename: dict[str, str] = {}
    kept: list[onnx.NodeProto] = []
    qdq: dict[str, tuple[float, int]] = {}
    wq: dict[str, WeightQuant] = {}
    pending_q: dict[str, tuple[onnx.NodeProto, str, float, int]] = {}  # Q output -> (node, x, scale, zp)
    idx = 0
    while idx < len(work):
        src, implicit = work[idx]
        idx += 1
        node = onnx.NodeProto()
        node.CopyFrom(src)
        if not node.name:
            node.name = f"{node.op_type}_{idx - 1}"
        for i, n in enumerate(node.input):
            if n in rename:
                node.input[i] = rename[n]
        op, ins = node.op_type, [n for n in node.input if n]
        if op == "If" and ins and ins[0] in consts and np.asarray(consts[ins[0]]).size == 1:
            taken = _inline_branch(node, bool(np.asarray(consts[ins[0]]).reshape(-1)[0]), consts)
            if taken is not None:  # the branch the constant condition takes replaces the If
                inlined = [(n, subgraph_reads(n)) for n in taken]
                work[idx:idx] = inlined
                outer |= {t for _, reads in inlined for t in reads}
                continue
        foldable = op not in refusals.REFUSED and not any(o in outputs for o in node.output)
        if op == "Constant" or (foldable and (ins or implicit) and all(n in consts for n in ins + implicit)
                                and op != "QuantizeLinear"):
            _check_fold_size(node, consts, shapes, esizes, max_bytes)
            if op == "DequantizeLinear":  # a pre-quantized constant: keep what the model stores
                wq[node.output[0]] = _weight_quant(node, consts)
            for name, val in zip([o for o in node.output if o], _eval_node(node, consts, opset, implicit)):
                consts[name] = np.asarray(val)
            continue
        if op == "Shape" and foldable:
            dims = shapes.get(node.input[0], [])
            if node.input[0] in shapes and all(isinstance(d, int) for d in dims):
                start = next((a.i for a in node.attribute if a.name == "start"), 0)
                end = next((a.i for a in node.attribute if a.name == "end"), None)
                consts[node.output[0]] = np.array(dims[start:end], dtype=np.int64)
                continue
        if op == "Dropout" and _inference_dropout(node, consts, shapes, opset) and node.output[0] not in outer:
            rename[node.output[0]] = node.input[0]
            if len(node.output) > 1 and node.output[1]:  # inference keeps every element: the mask is all true
                dt = np.bool_ if opset >= 10 else helper.tensor_dtype_to_np_dtype(_elem_type(model, node.input[0]))
                consts[node.output[1]] = np.ones(shapes[node.input[0]], dtype=dt)
            continue
        if op in REMOVED and len([o for o in node.output if o]) == 1 and ins and node.output[0] not in outer and \
                op != "Dropout":
            rename[node.output[0]] = node.input[0]
            continue
        if op == "QuantizeLinear" and ins and ins[0] not in consts and len(ins) > 1 and ins[1] in consts \
                and (len(ins) < 3 or ins[2] in consts) and np.asarray(consts[ins[1]]).size == 1:
            scale = float(np.asarray(consts[node.input[1]]).reshape(-1)[0])
            zpa = consts.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
            zp = int(np.asarray(zpa).reshape(-1)[0]) if zpa is not None else 0
            if zpa is not None and np.asarray(zpa).dtype == np.uint8:
                zp -= 128
            pending_q[node.output[0]] = (node, node.input[0], scale, zp)
            continue
        if op == "DequantizeLinear" and ins and ins[0] in pending_q and ins[0] not in outputs:
            _, x, scale, zp = pending_q[ins[0]]
            qdq[x] = (scale, zp)
            rename[node.output[0]] = x
            continue
        kept.append(node)
    # a QuantizeLinear whose output is used other than by its DequantizeLinear is an operator of its own
    used = {_resolve(rename, i) for n in kept for i in n.input if i} | set(outputs)
    for q, (qnode, *_) in pending_q.items():
        if q in used:
            kept.append(qnode)
    kept = _topological(kept)
    # an output that became an alias: the producer writes the output name instead (or an Identity copies)
    for o in outputs:
        src = _resolve(rename, rename[o]) if o in rename else None
        if src is None and o not in consts:
            continue
        if src is None:  # the output itself is a constant: an Identity copies it out
            consts[o + "::const"] = consts.pop(o)
            kept.append(helper.make_node("Identity", [o + "::const"], [o], name=f"{o}::copy"))
            continue
        if src in graph_inputs or src in outputs or src in consts or src in outer or \
                not any(src in n.output for n in kept):
            kept.append(helper.make_node("Identity", [src], [o], name=f"{o}::copy"))
            continue
        for n in kept:
            n.input[:] = [o if i == src else i for i in n.input]
            n.output[:] = [o if t == src else t for t in n.output]
        rename.pop(o, None)  # the output is itself now (it may have been an alias of src: no cycle)
        for k, v in list(rename.items()):
            if v == src:
                rename[k] = o
        if src in qdq:
            qdq[o] = qdq.pop(src)
    for n in kept:
        n.input[:] = [_resolve(rename, i) if i else i for i in n.input]
    return kept, consts, qdq, wq


def _weight_quant(node: onnx.NodeProto, consts: dict) -> WeightQuant:
    """The stored integers, scale and zero point of a DequantizeLinear of constants."""
    ins = list(node.input)
    values = np.asarray(consts[ins[0]])
    scale = np.asarray(consts[ins[1]], np.float64).reshape(-1)
    zp = np.asarray(consts[ins[2]]).reshape(-1).astype(np.int64) if len(ins) > 2 and ins[2] else np.zeros(1, np.int64)
    axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
    return WeightQuant(values, scale, zp, int(axis) % max(values.ndim, 1) if scale.size > 1 else None)


def _inline_branch(node: onnx.NodeProto, cond: bool, consts: dict) -> list | None:
    """The nodes of the branch an If with a constant condition takes, its own tensor names prefixed
    with the If's name and its outputs copied to the If's (Identity); None when a nested subgraph
    reads a tensor of the branch (it could not be renamed)."""
    g = next((a.g for a in node.attribute if a.name == ("then_branch" if cond else "else_branch")), None)
    if g is None:
        return None
    own = {o for n in g.node for o in n.output if o} | {i.name for i in g.initializer}
    if any(set(subgraph_reads(n)) & own for n in g.node) or g.sparse_initializer:
        return None
    pre = f"{node.name}::"

    def name(t: str) -> str:
        return pre + t if t in own else t

    for init in g.initializer:
        consts[pre + init.name] = numpy_helper.to_array(init)
    out = []
    for k, n in enumerate(g.node):
        m = onnx.NodeProto()
        m.CopyFrom(n)
        m.name = pre + (n.name or f"{n.op_type}_{k}")
        m.input[:] = [name(t) if t else t for t in n.input]
        m.output[:] = [name(t) if t else t for t in n.output]
        out.append(m)
    for o, y in zip(g.output, node.output):
        if y:
            out.append(helper.make_node("Identity", [name(o.name)], [y], name=f"{pre}out::{y}"))
    return out


def _topological(nodes: list) -> list:
    """Nodes in an order where every producer comes before its consumers (stable)."""
    made = {o for n in nodes for o in n.output if o}
    deps = [[i for i in n.input if i] + subgraph_reads(n) for n in nodes]
    done: set = set()
    out, todo = [], list(range(len(nodes)))
    while todo:
        rest = []
        for k in todo:
            n = nodes[k]
            if all(i not in made or i in done for i in deps[k]):
                out.append(n)
                done.update(o for o in n.output if o)
            else:
                rest.append(k)
        if len(rest) == len(todo):  # a cycle: keep the given order (ONNX's checker refuses cycles)
            return out + [nodes[k] for k in rest]
        todo = rest
    return out


PAIRWISE = {"Sum": "Add", "Max": "Max", "Min": "Min"}  # n-input operators that are chains of two-input ones


def _split_sums(nodes, consts: dict) -> list:
    """Sum / Max / Min of n > 2 inputs -> a chain of n - 1 two-input Adds / Maxes / Mins (the last
    keeps the node's name and output), so calibration sees every partial result. Computed inputs
    come first (the operators commute), so constants only ever meet a computed partial result."""
    out = []
    for n in nodes:
        if n.op_type not in PAIRWISE or len(n.input) <= 2 or any(not t for t in n.input):
            out.append(n)
            continue
        ins = sorted(n.input, key=lambda t: t in consts)  # stable: computed inputs, then constants
        acc = ins[0]
        for i, t in enumerate(ins[1:], 1):
            last = i == len(ins) - 1
            y = n.output[0] if last else f"{n.output[0]}__sum{i}"
            op = PAIRWISE[n.op_type]
            out.append(helper.make_node(op, [acc, t], [y], name=n.name if last else f"{n.name}__{op.lower()}{i}"))
            acc = y
    return out


def _resolve(rename: dict, name: str) -> str:
    seen = set()
    while name in rename and name not in seen:
        seen.add(name)
        name = rename[name]
    return name


@dataclass(frozen=True)
class Cleaned:
    """The cleaned float model calibration runs. `model` keeps every initializer's name, type and
    dims, but a large one (more than modelcheck.SMALL_INIT elements, a plain numeric type) carries no
    data: its array is `weights[name]`, the front end's own constant, never copied into a proto.
    `modelcheck.light_copy(model)` turns exactly those into graph inputs, fed from `weights`."""
    model: onnx.ModelProto
    weights: dict


def _rebuild(model: onnx.ModelProto, nodes, consts: dict, inputs: list[str]) -> Cleaned:
    used = {i for n in nodes for i in n.input if i}
    inits, weights = [], {}
    for k in sorted(used & set(consts)):
        a = np.asarray(consts[k])
        if a.size > modelcheck.SMALL_INIT and a.dtype.kind in "biuf":
            inits.append(onnx.TensorProto(name=k, dims=a.shape, data_type=helper.np_dtype_to_tensor_dtype(a.dtype)))
            weights[k] = np.ascontiguousarray(a)
        else:
            inits.append(numpy_helper.from_array(a, k))
    g_in = [vi for vi in model.graph.input if vi.name in inputs]
    outs = [o for o in model.graph.output]  # with the shapes inference or the model gave them
    graph = helper.make_graph(list(nodes), model.graph.name or "model", g_in, outs, inits)
    opset = [o for o in model.opset_import if o.domain in ("", "ai.onnx")] or [helper.make_opsetid("", OPSET)]
    m = helper.make_model(graph, opset_imports=opset)
    m.ir_version = model.ir_version
    return Cleaned(m, weights)


def fix_input_shapes(model, input_shapes=None) -> onnx.ModelProto:
    """A copy of the model with static input shapes (ModelError as in compile) and inferred shapes."""
    proto = onnx.ModelProto()
    proto.CopyFrom(load_model(model))
    _fix_inputs(proto, input_shapes)
    return _infer(proto)


def _refuse(nodes, opset: int) -> None:
    for i, n in enumerate(nodes):
        why = refusals.refusal(Node(n.name, n.op_type, list(n.input), list(n.output),
                                    {a.name: helper.get_attribute_value(a) for a in n.attribute}), opset)
        if why:
            raise ModelError(f"node {n.name or f'{n.op_type}_{i}'!r} ({n.op_type}): {why}")


def _copy_fields(msg, out, skip: str = "") -> None:
    """Every set field of protobuf message `msg` but `skip` copied into `out`."""
    for fd, value in msg.ListFields():
        if fd.name == skip:
            continue
        if hasattr(value, "extend"):  # a repeated field
            getattr(out, fd.name).extend(value)
        elif hasattr(value, "CopyFrom"):
            getattr(out, fd.name).CopyFrom(value)
        else:
            setattr(out, fd.name, value)


def _working_copy(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict]:
    """(a copy of `model` the front end may change, whose initializers of more than SMALL_INIT elements keep
    their name, type and dims but not their values (a name given twice keeps them); {name: `model`'s
    TensorProto} of those, read where the values are needed, `_fold`): the weights' bytes are not copied."""
    work = onnx.ModelProto()
    _copy_fields(model, work, skip="graph")
    _copy_fields(model.graph, work.graph, skip="initializer")
    data = {}
    named_twice = {n for n, k in Counter(i.name for i in model.graph.initializer).items() if k > 1}
    for init in model.graph.initializer:
        if math.prod(init.dims) > modelcheck.SMALL_INIT and init.name not in named_twice:
            data[init.name] = init
            init = onnx.TensorProto(name=init.name, dims=init.dims, data_type=init.data_type)
        work.graph.initializer.append(init)
    return work, data


def build_graph(model, input_shapes=None, max_bytes: int | None = None,
                const_inputs: dict | None = None, serialized: bytes = b"") -> tuple[Graph, Cleaned]:
    """Load, check and clean a model. Returns (Graph, the cleaned float ONNX model).

    `max_bytes` bounds every constant the folder may compute (refused before it is allocated);
    `const_inputs` ({input: .npy path}) turns those inputs into constants first; `serialized`: the bytes
    `model` was parsed from, if any (its large initializers are then read in place, `onnx_raw`)."""
    src = load_model(model)
    opset = modelcheck.check_model(src)
    proto, data = _working_copy(src)
    if serialized and data:
        spans = onnx_raw.raw_spans(serialized)
        for name, init in list(data.items()):
            view = onnx_raw.view_of(init, serialized, spans)
            if view is not None:
                data[name] = view
    _freeze_inputs(proto, const_inputs)
    inputs = _fix_inputs(proto, input_shapes)
    inferred = _infer(proto)
    dtypes = modelcheck.elem_types(inferred)
    _refuse(inferred.graph.node, opset)
    smap = _shape_map(inferred)
    smap.update({i.name: list(i.dims) for i in inferred.graph.initializer})
    modelcheck.check_semantics(inferred.graph.node, smap, {})
    nodes, consts, qdq, wq = _fold(inferred, smap, inputs, max_bytes, opset, data)
    nodes = _split_sums(nodes, consts)
    cleaned = _rebuild(inferred, nodes, consts, inputs)
    clean = cleaned.model
    if all(_static(smap.get(t)) for n in nodes for t in list(n.output) + list(n.input) if t and t not in consts):
        # folding left every shape as the first inference found it: no second pass
        known = {t for n in nodes for t in n.output} - {o.name for o in clean.graph.output}
        clean.graph.value_info.extend(vi for vi in inferred.graph.value_info if vi.name in known)
        clean.graph.ClearField("output")
        clean.graph.output.extend(o for o in inferred.graph.output)
    else:  # a shape only folding could fix (e.g. a computed Reshape target): infer again
        _infer(clean)
    dtypes.update(modelcheck.elem_types(clean))
    # shapes of the cleaned model, else of the model as given (inference may know less once a node's
    # context changed, e.g. a declared output shape of a function operator)
    smap = {**smap, **{k: v for k, v in _shape_map(clean).items() if all(isinstance(d, int) for d in v)}}
    shapes: dict[str, tuple[int, ...]] = {}
    implicits = [subgraph_reads(n) for n in nodes]
    for n, implicit in zip(nodes, implicits):
        for t in [o for o in n.output if o] + [i for i in list(n.input) + implicit if i and i not in consts]:
            dims = smap.get(t)
            if dims is None or any(not isinstance(d, int) for d in dims):
                raise ModelError(f"tensor {t!r} (node {n.name!r}, {n.op_type}): {refusals.DYNAMIC_SHAPE}")
            if len(dims) > refusals.MAX_RANK:
                raise ModelError(f"tensor {t!r} (node {n.name!r}, {n.op_type}) has rank {len(dims)}: "
                                 f"{refusals.RANK_LIMIT}")
            shapes[t] = tuple(int(d) for d in dims)
    for t in inputs:
        shapes.setdefault(t, tuple(int(d) for d in smap.get(t, [])))
    for t, a in consts.items():
        shapes.setdefault(t, tuple(np.asarray(a).shape))
        dtypes.setdefault(t, modelcheck.ELEMS.get(helper.np_dtype_to_tensor_dtype(np.asarray(a).dtype), "fp32"))
    ir_nodes = []
    for n, implicit in zip(nodes, implicits):
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        for k, v in list(attrs.items()):
            if isinstance(v, bytes):
                attrs[k] = v.decode(errors="replace")
        op = "Add" if n.op_type == "Sum" and len(n.input) == 2 else n.op_type
        if implicit:
            attrs["_implicit"] = implicit
        ir_nodes.append(Node(n.name, op, list(n.input), list(n.output), attrs, proto=n))
    fconsts = {k: (np.asarray(v, dtype=np.float32) if np.asarray(v).dtype.kind == "f" else np.asarray(v))
               for k, v in consts.items()}
    outputs = [o.name for o in clean.graph.output]
    g = Graph(ir_nodes, shapes, fconsts, inputs, outputs, qdq, dtypes=dtypes, opset=opset,
              wq={k: v for k, v in wq.items() if k in fconsts}, prequantized=bool(qdq), source="onnx-qdq" if qdq else "onnx")
    if g.prequantized:
        mark_float_islands(g)
    return g, cleaned


WEIGHTED = ("Conv", "ConvTranspose", "Gemm", "MatMul")
PASS_SCALE_BACK = ("Relu", "Clip")  # x -> act(x) with the act's scale quantizes x the same way (monotone clamp)


def mark_float_islands(g: Graph) -> None:
    """In a model that fixes its own scales: a float tensor whose only consumer is a Relu/Clip with a scale
    takes that scale (the quantizer removed the pair between them); every other float tensor without one
    lies in a float island of the model and stays float (`Graph.float_islands`: the CPU runs it in fp32)."""
    changed = True
    while changed:
        changed = False
        for n in g.nodes:
            x = n.inputs[0] if n.inputs else ""
            if n.op in PASS_SCALE_BACK and x and x not in g.qdq and x not in g.consts and g.is_float(x) \
                    and n.outputs[0] in g.qdq and len(g.consumers(x)) == 1 and x not in g.outputs:
                g.qdq[x] = g.qdq[n.outputs[0]]
                changed = True
    for n in g.nodes:
        for t in list(n.inputs) + list(n.outputs):
            if t and t not in g.consts and g.is_float(t) and t not in g.qdq:
                g.float_islands.add(t)
        # an operator the quantizer left float keeps float weights (no DequantizeLinear): it stays float too
        w = n.inputs[1] if n.op in WEIGHTED and len(n.inputs) > 1 else ""
        if w in g.consts and g.is_float(w) and w not in g.wq:
            g.float_islands.add(w)
