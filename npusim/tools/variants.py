"""Single-operator models of a network and their variants: what `bisect` compiles and shrinks.

`single_op_models` cuts every compute node out with its real shapes; `conv_variant` and
`generic_variant` rebuild one with other channels and size; `search_space` says which
dimensions a node can shrink along. A variant whose window (kernel, dilation, stride and pads)
does not fit its input at some size is no configuration at all: `window_fits` says so before
anything is compiled (ONNX shape inference truncates where ONNX Runtime floors, so it does not).
`sub_model_calibration` gives each single-operator model the inputs it sees inside the whole
model, from a calibration set of the whole model's inputs.
"""

from __future__ import annotations

import numpy as np

ALONE_OPS = {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "Add", "Mul", "Sum", "Concat", "Resize",
             "Upsample", "Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSwish", "Gemm", "MatMul",
             "BatchNormalization", "Softmax"}
CHANNEL_STEPS = (1, 2, 3, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)


def _shapes(model):
    """{value name: dims} by ONNX shape inference, run without the weights' data (`light_copy`: a
    ResNet-50's 100 MB are not serialized for it)."""
    import onnx

    from ..compiler.frontends.modelcheck import light_copy

    inferred = onnx.shape_inference.infer_shapes(light_copy(model))
    g = inferred.graph
    out = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        out[vi.name] = dims
    return out


def _constants_as_initializers(model):
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep = []
    for n in m.graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            t = onnx.TensorProto()
            t.CopyFrom(n.attribute[0].t)
            t.name = n.output[0]
            m.graph.initializer.append(t)
        else:
            keep.append(n)
    del m.graph.node[:]
    m.graph.node.extend(keep)
    return m


def cut_ready(model, input_shapes=None):
    """The model with static input shapes and Constant nodes as initializers (what is cut up)."""
    from ..compiler.frontends.onnx_front import fix_input_shapes

    return _constants_as_initializers(fix_input_shapes(model, input_shapes))


def _is(node, op_type: str) -> bool:
    return node is not None and node.op_type == op_type and node.domain in ("", "ai.onnx")


def _qdq_context(node, producer: dict, consumers: dict, inits: dict, shapes: dict):
    """What a node of a QDQ model needs around it to compile alone as QDQ: (nodes before it, nodes after
    it, {input value: dims}, [output values]), or None when one of its inputs is neither a constant, a
    known float value nor quantized through constants.

    An input made by DequantizeLinear of a constant (weights, bias) keeps that DequantizeLinear; one made by
    DequantizeLinear(QuantizeLinear(x)) keeps both, x becoming the sub-model's float input (so its scale and
    zero point are the whole model's); an output quantized by QuantizeLinear -> DequantizeLinear keeps both,
    the DequantizeLinear's output being the sub-model's output."""
    before, ins = [], {}

    def constant_operands(n) -> bool:
        return all(not i or i in inits for i in n.input[1:])

    for name in node.input:
        if not name or name in inits:
            continue
        dq = producer.get(name)
        if _is(dq, "DequantizeLinear") and constant_operands(dq):
            src = dq.input[0]
            q = producer.get(src)
            if src in inits:
                chain = [dq]
            elif _is(q, "QuantizeLinear") and constant_operands(q) and all(shapes.get(q.input[0]) or [0]):
                chain, ins[q.input[0]] = [q, dq], shapes[q.input[0]]
            else:
                return None
            before.extend(n for n in chain if n not in before)
        elif all(shapes.get(name) or [0]):
            ins[name] = shapes[name]
        else:
            return None
    after, outs = [], []
    for o in node.output:
        q = next((c for c in consumers.get(o, ()) if _is(c, "QuantizeLinear") and constant_operands(c)), None)
        dq = next((c for c in consumers.get(q.output[0], ()) if _is(c, "DequantizeLinear") and constant_operands(c)),
                  None) if q is not None else None
        if dq is not None:
            after += [q, dq]
            outs.append(dq.output[0])
        else:
            outs.append(o)
    return before, after, ins, outs


def single_op_models(model, input_shapes=None, ready=None):
    """[(node, onnx.ModelProto)] for every compute node, with its real shapes (`ready`: `cut_ready(model)`).
    In a QDQ model each node keeps its QuantizeLinear/DequantizeLinear context (`_qdq_context`), so it
    compiles alone as the quantized operator it is in the whole model."""
    import onnx
    from onnx import TensorProto, helper

    from ..compiler.frontends.qonnx import drop_unused_domains

    model = ready if ready is not None else cut_ready(model, input_shapes)
    shapes = _shapes(model)
    inits = {t.name: t for t in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    consumers: dict[str, list] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    out = []
    for i, node in enumerate(model.graph.node):
        if node.op_type not in ALONE_OPS:
            continue
        ctx = _qdq_context(node, producer, consumers, inits, shapes)
        if ctx is None:
            continue
        before, after, ins, outs = ctx
        name = node.name or f"{node.op_type}_{i}"
        n2 = onnx.NodeProto()
        n2.CopyFrom(node)
        n2.name = name
        nodes = before + [n2] + after
        used = dict.fromkeys(x for n in nodes for x in n.input if x in inits)
        g = helper.make_graph(nodes, f"bisect_{name}",
                              [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in ins.items()],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, shapes.get(o)) for o in outs],
                              initializer=[inits[k] for k in used])
        m = helper.make_model(g, opset_imports=list(model.opset_import))
        m.ir_version = model.ir_version
        drop_unused_domains(m)  # a quantizer's com.microsoft / ai.onnx.ml imports: the compiler refuses unused ones
        out.append((n2, m))
    return out


def operator_node(model):
    """The operator a single-operator model is about (its QuantizeLinear/DequantizeLinear context aside)."""
    return next(n for n in model.graph.node if n.op_type in ALONE_OPS)


def _constant(model, name: str):
    """The array of constant `name`: an initializer, or the float values of DequantizeLinear of one."""
    from onnx import numpy_helper

    inits = {t.name: t for t in model.graph.initializer}
    if name in inits:
        return numpy_helper.to_array(inits[name])
    dq = next(n for n in model.graph.node if _is(n, "DequantizeLinear") and n.output[0] == name)
    q, scale = (numpy_helper.to_array(inits[k]) for k in dq.input[:2])
    zp = numpy_helper.to_array(inits[dq.input[2]]) if len(dq.input) > 2 and dq.input[2] else np.zeros_like(scale)
    axis = next((a.i for a in dq.attribute if a.name == "axis"), 1)
    shape = [1] * q.ndim
    if scale.size > 1:
        shape[axis] = scale.size
    return ((q.astype(np.float64) - zp.reshape(shape)) * scale.reshape(shape)).astype(np.float32)


def conv_params(node, model):
    from onnx import helper

    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    w = _constant(model, node.input[1])
    x = model.graph.input[0]
    dims = [d.dim_value for d in x.type.tensor_type.shape.dim]
    return attrs, w, dims


def conv_variant(node, model, cin: int, cout: int, hw: int, seed: int = 0):
    """The same Conv (kernel, strides, pads, dilations, grouping) with other channels and size."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    attrs, w, dims = conv_params(node, model)
    group = int(attrs.get("group", 1))
    depthwise = group > 1 and group == dims[1]
    if depthwise:
        cout, group = cin, cin
    elif group > 1:
        group = 1  # grouped convs are shrunk as dense ones
    kh, kw = w.shape[2:]
    if not window_fits(node, (kh, kw), hw):
        return None
    rng = np.random.default_rng(seed)
    wt = (rng.standard_normal((cout, cin // group, kh, kw)) * np.sqrt(2.0 / (cin // group * kh * kw)))
    bias = len(node.input) > 2 and bool(node.input[2])
    bt = rng.standard_normal(cout) * 0.05 if bias else None
    if _is(_producer(model, node.input[1]), "DequantizeLinear"):
        return _qdq_conv_variant(node, model, group, wt, bt, cin, hw)
    inits = [numpy_helper.from_array(wt.astype(np.float32), "w")]
    ins = ["input", "w"]
    if bias:
        inits.append(numpy_helper.from_array(bt.astype(np.float32), "b"))
        ins.append("b")
    kwargs = {k: v for k, v in attrs.items() if k != "group"}
    conv = helper.make_node("Conv", ins, ["output"], name=node.name, group=group, **kwargs)
    g = helper.make_graph([conv], f"bisect_{node.name}",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, cin, hw, hw])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=list(model.opset_import))
    m.ir_version = model.ir_version
    return onnx.shape_inference.infer_shapes(m)


def _producer(model, name: str):
    return next((n for n in model.graph.node if name in n.output), None)


def _qdq_conv_variant(node, model, group: int, wt, bt, cin: int, hw: int):
    """The QDQ single-Conv model `model` with the float weights `wt` (and bias `bt`) quantized the way the
    model quantizes its own (symmetric int8 weights, per output channel when the model's are; int32 bias at
    input scale x weight scale) on a [1, cin, hw, hw] input; the activations keep the model's scales."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    wdq, xdq = _producer(model, node.input[1]), _producer(model, node.input[0])
    per_channel = inits[wdq.input[1]].size > 1
    peak = np.abs(wt).reshape(len(wt), -1).max(axis=1) if per_channel else np.array(np.abs(wt).max())
    w_scale = np.maximum(peak, 1e-8) / 127.0
    new = {wdq.input[0]: np.clip(np.rint(wt / w_scale.reshape(-1, 1, 1, 1) if per_channel else wt / w_scale),
                                 -127, 127).astype(inits[wdq.input[0]].dtype),
           wdq.input[1]: w_scale.astype(np.float32)}
    if len(wdq.input) > 2 and wdq.input[2]:
        new[wdq.input[2]] = np.zeros(w_scale.shape, inits[wdq.input[2]].dtype)
    if bt is not None:
        bdq = _producer(model, node.input[2])
        b_scale = (float(inits[xdq.input[1]]) * w_scale).astype(np.float32)
        new[bdq.input[0]] = np.rint(bt / b_scale).astype(np.int32)
        new[bdq.input[1]] = b_scale
        if len(bdq.input) > 2 and bdq.input[2]:
            new[bdq.input[2]] = np.zeros(b_scale.shape, np.int32)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for n in m.graph.node:
        if n.name == node.name and n.op_type == "Conv":
            for a in n.attribute:
                if a.name == "group":
                    a.i = group
    for t in m.graph.initializer:
        if t.name in new:
            t.CopyFrom(numpy_helper.from_array(new[t.name], t.name))
    x = m.graph.input[0]
    x.CopyFrom(helper.make_tensor_value_info(x.name, TensorProto.FLOAT, [1, cin, hw, hw]))
    for o in m.graph.output:
        o.CopyFrom(helper.make_tensor_value_info(o.name, TensorProto.FLOAT, None))
    del m.graph.value_info[:]
    return onnx.shape_inference.infer_shapes(m)


def window_fits(node, kernel, hw: int) -> bool:
    """True when the node's window (`kernel` (kh, kw), its dilations, pads, auto_pad) fits an
    hw x hw input: the output has at least one pixel by ONNX's floor rule."""
    from onnx import helper

    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
    if auto_pad.startswith("SAME"):
        return hw >= 1
    dil = list(attrs.get("dilations", [1] * len(kernel)))
    pads = list(attrs.get("pads", [0] * 2 * len(kernel))) if auto_pad == "NOTSET" else [0] * 2 * len(kernel)
    n = len(kernel)
    return all(hw + pads[i] + pads[i + n] >= dil[i] * (kernel[i] - 1) + 1 for i in range(n))


def conv_desc(cin, cout, h, w, k) -> str:
    return f"Conv {k[0]}x{k[1]} Cin={cin} Cout={cout} at {h}x{w}"


def generic_variant(node, model, c: int, hw: int, seed: int = 0):
    """The same single-node model with every 4-D input at [1, c, hw, hw] (size-1 dimensions kept); per-channel initializers
    (BatchNormalization parameters, [C,1,1] / [1,C,1,1] constants) are regenerated for c channels."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    kernel = next((list(helper.get_attribute_value(a)) for a in node.attribute if a.name == "kernel_shape"), None)
    if kernel is not None and not window_fits(node, kernel, hw):
        return None
    rng = np.random.default_rng(seed)
    old_c = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim][1]
    ins = []
    for vi in model.graph.input:
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if len(dims) != 4:
            return None
        # size-1 dimensions stay 1, so a [1,C,1,1] channel vector (squeeze-excite) stays a vector
        new = [1] + [d if d == 1 else v for d, v in zip(dims[1:], (c, hw, hw))]
        ins.append(helper.make_tensor_value_info(vi.name, TensorProto.FLOAT, new))
    inits = []
    bn_params = set(node.input[1:5]) if node.op_type == "BatchNormalization" else set()
    for t in model.graph.initializer:
        a = numpy_helper.to_array(t)
        if t.name in bn_params:
            a = rng.uniform(0.5, 1.5, c) if t.name == node.input[4] else rng.standard_normal(c) * 0.1 + (
                1.0 if t.name == node.input[1] else 0.0)
        elif a.ndim >= 3 and a.shape[a.ndim - 3] == old_c:
            shape = list(a.shape)
            shape[a.ndim - 3] = c
            a = rng.standard_normal(shape)
        inits.append(numpy_helper.from_array(np.asarray(a, dtype=numpy_helper.to_array(t).dtype), t.name))
    outs = [helper.make_tensor_value_info(o.name, TensorProto.FLOAT, None) for o in model.graph.output]
    g = helper.make_graph(list(model.graph.node), f"bisect_{node.name}", ins, outs, inits)
    m = helper.make_model(g, opset_imports=list(model.opset_import))
    m.ir_version = model.ir_version
    try:
        m = onnx.shape_inference.infer_shapes(m, strict_mode=True)
        onnx.checker.check_model(m)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError):
        return None
    return m


def search_space(node, model):
    """(dims, make(dims) -> model, describe(dims) -> str, order of dims to shrink) for a node, or None."""
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] if model.graph.input else []
    if len(dims) != 4:
        return None
    if node.op_type == "Conv":
        _, wt, _ = conv_params(node, model)
        k = tuple(wt.shape[2:])
        start = {"Cin": dims[1], "Cout": wt.shape[0], "size": max(dims[2], dims[3])}
        return (start, lambda d: conv_variant(node, model, d["Cin"], d["Cout"], d["size"]),
                lambda d: conv_desc(d["Cin"], d["Cout"], d["size"], d["size"], k))
    if generic_variant(node, model, dims[1], max(dims[2], dims[3])) is None:
        return None
    start = {"C": dims[1], "size": max(dims[2], dims[3])}
    return (start, lambda d: generic_variant(node, model, d["C"], d["size"]),
            lambda d: f"{node.op_type} C={d['C']} at {d['size']}x{d['size']}")


CALIBRATION_CHUNK_BYTES = 512 << 20  # intermediates held at once while deriving sub-model calibrations


def sub_model_calibration(model, samples: dict, cases, chunk_bytes: int = CALIBRATION_CHUNK_BYTES):
    """Yield (case indices, [calibration dict per case]) in chunks: each single-operator model of
    `cases` ([(node, model)] from `single_op_models(model)`) gets the values its inputs take inside
    the whole `model` (static shapes) when it runs on `samples` ({input: (N, *shape)}), computed by
    ONNX Runtime; at most `chunk_bytes` of intermediates are held at once."""
    from ..errors import DataError

    inits = {t.name for t in model.graph.initializer}
    real = [vi for vi in model.graph.input if vi.name not in inits]
    samples = check_samples(samples, {vi.name: tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
                                       for vi in real}, DataError)
    n = min(len(a) for a in samples.values())
    chunk, chunk_size = [], 0
    for i, (_, m) in enumerate(cases):
        need = sum(n * 4 * int(np.prod([d.dim_value for d in vi.type.tensor_type.shape.dim]))
                   for vi in m.graph.input)
        if chunk and chunk_size + need > chunk_bytes:
            yield chunk, _intermediates(model, samples, n, [cases[k][1] for k in chunk], DataError)
            chunk, chunk_size = [], 0
        chunk.append(i)
        chunk_size += need
    if chunk:
        yield chunk, _intermediates(model, samples, n, [cases[k][1] for k in chunk], DataError)


def check_samples(arrays: dict, shapes: dict, error) -> dict:
    """{input: (N, *shape) float32} (a stack along the batch axis is accepted for batch 1), finite."""
    out = {}
    for name, shape in shapes.items():
        if name not in arrays:
            raise error(f"calibration: no array for model input {name!r} (has: {', '.join(sorted(arrays)) or 'none'})")
        a = np.asarray(arrays[name])
        if a.dtype.kind not in "fiu":
            raise error(f"calibration:{name}: dtype {a.dtype} is not numeric")
        if a.shape[1:] != shape and shape[:1] == (1,) and a.shape[1:] == shape[1:]:
            a = a.reshape((a.shape[0],) + shape)
        if a.shape[1:] != shape or a.shape[0] < 1:
            raise error(f"calibration:{name}: shape {a.shape} is not (N, {', '.join(map(str, shape))})")
        a = a.astype(np.float32)
        if not np.isfinite(a).all():
            raise error(f"calibration:{name}: non-finite values (NaN or Inf) in the calibration samples")
        out[name] = a
    return out


def _intermediates(model, samples, n, sub_models, error):
    import onnx

    names = list(dict.fromkeys(vi.name for m in sub_models for vi in m.graph.input))
    wanted = [t for t in names if t not in samples]
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.output[:]
    m.graph.output.extend(onnx.helper.make_tensor_value_info(t, onnx.TensorProto.FLOAT, None) for t in wanted)
    from ..ort_session import session

    values = {t: [] for t in wanted}
    try:
        if wanted:
            sess = session(m, threads=1)
            for i in range(n):
                for t, v in zip(wanted, sess.run(wanted, {k: a[i] for k, a in samples.items()})):
                    values[t].append(v)
    except Exception as e:  # noqa: BLE001 - ONNX Runtime raises its own kinds
        raise error(f"calibration: ONNX Runtime cannot run the model on it ({str(e).splitlines()[0][:160]})") from None
    stacked = {t: np.stack(v).astype(np.float32) for t, v in values.items()}
    stacked.update({t: samples[t][:n] for t in names if t in samples})
    return [{vi.name: stacked[vi.name] for vi in sm.graph.input} for sm in sub_models]
