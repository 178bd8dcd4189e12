"""Quantization: calibration ranges (ONNX Runtime over sample inputs), per-tensor activation
qparams (asymmetric int8), per-channel symmetric weights, and the unit parameter tables.

Calibration ranges are widened outward to 8 significant bits (`round_range`): the reference
runtime's float kernels differ in the last bits from one CPU to the next, and without that step a
machine with other SIMD kernels would compile other scales, so other int8 outputs and golden hashes.
Widening costs at most 1/128 of a range.

Without a calibration file, int8 calibrates on `calibration_samples` seeded standard-normal inputs
(documented behaviour, no warning). Tensors whose unit cannot rescale (max pool, resize, concat,
reshape) share one scale/zero point with their inputs: their ranges are unified.

Over 500 lines: calibration (ONNX Runtime over the samples, ranges widened to 8 significant bits) and
qparams assignment (scale groups, fixed model scales, tables) are the one int8 stage `driver` calls; a
split along that line (calibrate / assign) is the first to make when it grows.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from ..cores import usable_cores
from ..errors import DataError, ModelError, UsageError
from ..kernels.activation import make_lut
from ..kernels.quant import np_dtype
from ..ort_session import session
from ..kernels import quant as _kq
from .frontends.modelcheck import light_copy
from .ir import Concat, Graph, Layer

QMIN, QMAX = -128, 127
# host operators whose float outputs are some of their float inputs' values: they share one scale
# and zero point (their int8 bytes move unchanged)
SAME_SCALE_OPS = frozenset({"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat",
                            "Split", "Slice", "Gather", "GatherElements", "GatherND", "Tile", "Expand",
                            "DepthToSpace", "SpaceToDepth", "MaxPool", "GlobalMaxPool", "ReduceMax", "ReduceMin"})


# ------------------------------------------------------------------ calibration data

def load_calibration(path, graph: Graph) -> dict[str, np.ndarray]:
    """{input: (N, *shape) float32} from an .npz; DataError naming what is missing or wrong."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: no such calibration file")
    try:
        data = np.load(p, allow_pickle=False)
        arrays = {k: data[k] for k in data.files}
    except Exception as e:
        raise DataError(f"{p}: not a readable .npz file ({type(e).__name__})") from None
    return check_samples(arrays, graph, where=str(p))


def check_samples(arrays: dict, graph: Graph, where: str = "calibration") -> dict[str, np.ndarray]:
    """Validate {input: (N, *shape)} finite samples (a stack along the batch axis is accepted for batch 1)."""
    p = where
    out = {}
    for name in graph.inputs:
        if name not in arrays:
            raise DataError(f"{p}: no array for model input {name!r} (has: {', '.join(sorted(arrays)) or 'none'})")
        a, shape = np.asarray(arrays[name]), graph.shapes[name]
        if a.dtype.kind not in "fiu":
            raise DataError(f"{p}:{name}: dtype {a.dtype} is not numeric")
        if a.shape[1:] == shape:
            pass
        elif shape[0] == 1 and a.shape[1:] == shape[1:] and a.ndim == len(shape):
            a = a.reshape((a.shape[0],) + shape)
        else:
            raise DataError(f"{p}:{name}: shape {a.shape} is not (N, {', '.join(map(str, shape))})")
        if a.shape[0] < 1:
            raise DataError(f"{p}:{name}: no samples")
        a = a.astype(_np_type(graph, name))
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            bad = int(a.size - np.count_nonzero(np.isfinite(a)))
            raise DataError(f"{p}:{name}: {bad} non-finite value(s) (NaN or Inf) in the calibration samples")
        out[name] = a
    return out


MAX_CALIBRATION_BYTES = 1 << 30  # random calibration samples held at once (a stated limit)


def _np_type(graph: Graph, name: str):
    return np_dtype(graph.dtype(name))


def random_calibration(graph: Graph, samples: int, seed: int) -> dict[str, np.ndarray]:
    """{input: (samples, *shape)} seeded standard-normal float samples (integer inputs 0 or 1, booleans
    False or True: the runtime's seeded inputs); the size is checked first."""
    need = samples * sum(4 * int(np.prod(graph.shapes[n], dtype=np.int64)) for n in graph.inputs)
    if need > MAX_CALIBRATION_BYTES:
        raise UsageError(f"calibration_samples={samples}: {need / 2**20:,.0f} MiB of random samples exceed the "
                         f"{MAX_CALIBRATION_BYTES >> 20} MiB limit; use fewer samples or a --calibration file")
    signature = tuple((graph.shapes[n], graph.is_float(n), np.dtype(_np_type(graph, n)).str) for n in graph.inputs)
    key = (samples, seed, signature)
    arrays = _random_memo.pop(key, None)
    if arrays is None:
        rng = np.random.default_rng(seed)
        arrays = []
        for shape, is_float, dtype in signature:
            shape = (samples,) + shape
            a = rng.standard_normal(shape) if is_float else rng.integers(0, 2, size=shape)
            arrays.append(a.astype(dtype))
            arrays[-1].flags.writeable = False  # shared by every compile with this signature
    _random_memo[key] = arrays  # most recently used last
    while len(_random_memo) > 1 and sum(a.nbytes for v in _random_memo.values() for a in v) > RANDOM_MEMO_BYTES:
        del _random_memo[next(iter(_random_memo))]
    return dict(zip(graph.inputs, arrays))


RANDOM_MEMO_BYTES = 256 << 20  # random samples kept for the next compile of the same input shapes
_random_memo: dict[tuple, list[np.ndarray]] = {}  # (samples, seed, inputs' shapes/types) -> arrays


# ops whose constant operands int8 quantizes (weights, biases, BN statistics, scales)
_QUANTIZED_CONST_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "BatchNormalization", "Add", "Sub",
                                  "Mul", "Div", "PRelu", "Sum"})


def check_finite_constants(graph: Graph) -> None:
    """NaN or Inf in a constant that int8 quantizes has no int8 value: refused up front, naming the
    tensor and the node (a constant of an operator that stays float, e.g. a -inf mask, is fine)."""
    for n in graph.nodes:
        if n.op not in _QUANTIZED_CONST_OPS:
            continue
        for t in n.inputs:
            a = graph.consts.get(t)
            if a is None or np.asarray(a).dtype.kind != "f" or np.isfinite(a).all():
                continue
            bad = int(np.size(a) - np.count_nonzero(np.isfinite(a)))
            raise ModelError(f"{n.op} {n.name!r}: constant {t!r} has {bad} NaN or infinite value(s), which int8 "
                             f"cannot hold (compile with --quantization fp16 to keep them)")


RANGE_BITS = 8  # significant bits kept of a calibration bound (module doc)


def _round_away(v: float, up: bool) -> float:
    """v rounded to RANGE_BITS significant bits, toward +inf (up) or -inf."""
    if v == 0.0 or not math.isfinite(v):
        return v
    m, e = math.frexp(v)
    q = m * (1 << RANGE_BITS)
    return math.ldexp(math.ceil(q) if up else math.floor(q), e - RANGE_BITS)


def round_range(lo: float, hi: float) -> tuple[float, float]:
    """(lo, hi) widened outward to RANGE_BITS significant bits."""
    return _round_away(float(lo), up=False), _round_away(float(hi), up=True)


def _ort_message(e: Exception) -> str:
    """ONNX Runtime's message without its '[ONNXRuntimeError] : 2 : INVALID_ARGUMENT :' prefix."""
    import re

    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    text = lines[0] if lines else type(e).__name__
    return re.sub(r"^\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*\w+\s*:\s*", "", text)[:240]


def _session(model: onnx.ModelProto):

    try:  # one thread: the same sums on any core count; the model's own ops, unfused; many runs
        return session(model, threads=1, optimize=False, mem_pattern=False)
    except Exception as e:
        raise ModelError(f"int8 calibration: ONNX Runtime cannot load the model ({_ort_message(e)})") from None


def _float_tensors(clean: onnx.ModelProto) -> list[tuple[str, int]]:
    """(name, elem type) of every float tensor a node of the cleaned model computes (and the outputs)."""
    floats = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)
    out, seen = [], set()
    for vi in list(clean.graph.output) + list(clean.graph.value_info):
        t = vi.type.tensor_type
        empty = t.HasField("shape") and any(d.HasField("dim_value") and d.dim_value == 0 for d in t.shape.dim)
        if t.elem_type in floats and vi.name not in seen and not empty:
            out.append((vi.name, t.elem_type))
            seen.add(vi.name)
    return out


def _channel_max_nodes(clean: onnx.ModelProto, tensors, probes: dict) -> tuple[list, list]:
    """(nodes, (name, elem type) pairs): probe = ReduceMax over axis 1 of tensor y, for {probe: y}."""
    types = dict(tensors)
    opset = next((o.version for o in clean.opset_import if o.domain in ("", "ai.onnx")), 13)
    nodes, named = [], []
    for probe, y in sorted(probes.items()):
        if y not in types:
            continue
        if opset >= 18:
            axes = onnx.helper.make_tensor(probe + "::axes", onnx.TensorProto.INT64, [1], [1])
            nodes.append(onnx.helper.make_node("Constant", [], [probe + "::axes"], value=axes))
            nodes.append(onnx.helper.make_node("ReduceMax", [y, probe + "::axes"], [probe], keepdims=1))
        else:
            nodes.append(onnx.helper.make_node("ReduceMax", [y], [probe], axes=[1], keepdims=1))
        named.append((probe, types[y]))
    return nodes, named


# ops whose float output's extremes follow from their data input's (min and max are invariant under
# moving values; Relu maps them through max(0, .)): calibration derives them instead of probing them
RANGE_MOVES = frozenset({"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose"})
RANGE_DERIVED_OPS = RANGE_MOVES | {"Relu"}
# monotone (non-decreasing) elementwise ops, derived when their parameters are constants: Clip (bounds as
# attributes before opset 11, else constant inputs) and, on float32, LeakyRelu with alpha > 0 (alpha * x
# in float32, as ONNX Runtime computes it)
RANGE_MONOTONE_OPS = frozenset({"Clip", "LeakyRelu"})


def _monotone(n, consts: dict, float32: bool):
    """("Clip", lo, hi) or ("LeakyRelu", alpha) for node n when its output's extremes are its function of
    the input's extremes, else None."""
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
    if n.op_type == "LeakyRelu":
        alpha = float(np.float32(attrs.get("alpha", 0.01)))
        return ("LeakyRelu", alpha) if float32 and alpha > 0 else None
    bounds = [float(attrs.get("min", -np.inf)), float(attrs.get("max", np.inf))]
    for k, name in enumerate(n.input[1:3]):
        if not name:
            continue
        value = consts.get(name)
        if value is None:
            return None
        bounds[k] = value
    return ("Clip", *bounds)


def derived_ranges(model: onnx.ModelProto, tensors) -> dict[str, tuple[str, str | tuple]]:
    """{tensor: (source, op)} for the float `tensors` (names) that calibration derives from their node's
    data input, a model input or another tensor of `tensors` (probed or itself derived), in the model's
    node (topological) order; the rest are probed. `op` is the node's type, or for a monotone op with
    constant parameters `_monotone`'s tuple. Equal to probing for finite extremes."""
    names = set(tensors)
    have = names | {i.name for i in model.graph.input}
    float32 = {name for name, et in _float_tensors(model) if et == onnx.TensorProto.FLOAT}
    consts = None
    out: dict[str, tuple[str, str | tuple]] = {}
    for n in model.graph.node:
        if n.domain not in ("", "ai.onnx") or not n.input or n.input[0] not in have or len(n.output) != 1 \
                or n.output[0] not in names or n.output[0] == n.input[0]:
            continue
        if n.op_type in RANGE_DERIVED_OPS:
            out[n.output[0]] = (n.input[0], n.op_type)
        elif n.op_type in RANGE_MONOTONE_OPS:
            if consts is None:  # scalar initializers (a Clip's bounds)
                consts = {i.name: float(numpy_helper.to_array(i).reshape(-1)[0]) for i in model.graph.initializer
                          if math.prod(i.dims) == 1 and (i.raw_data or i.float_data or i.double_data)}
            op = _monotone(n, consts, n.output[0] in float32)
            if op is not None:
                out[n.output[0]] = (n.input[0], op)
    return out


def _derive(op: str | tuple, a: float, b: float) -> tuple[float, float]:
    """(min, max) of op's output from its data input's finite (min, max)."""
    if op == "Relu":
        return (a if a > 0 else 0.0), (b if b > 0 else 0.0)
    if isinstance(op, tuple) and op[0] == "Clip":
        lo, hi = op[1], op[2]
        return min(max(a, lo), hi), min(max(b, lo), hi)
    if isinstance(op, tuple) and op[0] == "LeakyRelu":
        alpha = np.float32(op[1])
        return tuple(v if v >= 0 else float(alpha * np.float32(v)) for v in (a, b))
    return a, b


def _reduced(clean, tensors, extra=()) -> tuple[onnx.ModelProto, dict]:
    """(model, weights): the cleaned model (onnx_front.Cleaned) whose only outputs are ReduceMin /
    ReduceMax of each tensor (ONNX Runtime hands back two scalars per tensor instead of every
    activation), with its large initializers turned into inputs fed from `weights` (the front end's
    arrays), so the weights are never serialized for the runtime."""
    m, weights = _fed(clean)
    g = m.graph
    g.ClearField("output")
    g.ClearField("value_info")
    g.node.extend(extra)
    for i, (name, et) in enumerate(tensors):
        for op, tag in (("ReduceMin", "min"), ("ReduceMax", "max")):
            out = f"__npusim_{tag}_{i}"
            g.node.append(onnx.helper.make_node(op, [name], [out], name=out, keepdims=0))
            g.output.append(onnx.helper.make_tensor_value_info(out, et, []))
    return m, weights


def _fed(clean) -> tuple[onnx.ModelProto, dict]:
    """(light copy of the cleaned model, {input: array} of the initializers it turned into inputs)."""
    m = light_copy(clean.model)
    small = {i.name for i in m.graph.initializer}
    return m, {i.name: clean.weights[i.name] if i.name in clean.weights else numpy_helper.to_array(i)
               for i in clean.model.graph.initializer if i.name not in small}


def _widen(lo: dict, hi: dict, name: str, a: float, b: float) -> None:
    lo[name] = min(lo.get(name, np.inf), a)
    hi[name] = max(hi.get(name, -np.inf), b)


def calibrate(clean, samples: dict[str, np.ndarray],
              channel_max: dict[str, str] | None = None) -> dict[str, tuple[float, float]]:
    """Min/max of every float tensor of the cleaned model (onnx_front.Cleaned) over the samples (ONNX
    Runtime, fp32, one thread per run, no graph optimizations), ignoring non-finite values;
    `channel_max` {probe: tensor}: also the range of the tensor's maximum over axis 1 (the channel
    Softmax's scales, compiler/recipes/softmax.py).

    The extremes are computed inside the graph (ReduceMin/ReduceMax per tensor, exact whatever the
    order), so each sample returns two scalars per tensor; the tensors `derived_ranges` names take
    their extremes from their source's instead (no reductions). A tensor whose extreme is not finite
    (inf or NaN in it, or in a derived tensor's source) is read back whole once, for the samples that
    need it, to drop those values."""
    tensors = _float_tensors(clean.model)
    n = min(len(v) for v in samples.values()) if samples else 1
    lo: dict[str, float] = {}
    hi: dict[str, float] = {}
    for k, v in samples.items():
        for i in range(n):
            if v[i].size and v[i].dtype.kind == "f":
                _widen(lo, hi, k, float(v[i].min()), float(v[i].max()))
    if not tensors:
        return {k: round_range(lo[k], hi[k]) for k in lo}
    odd: dict[int, set[str]] = {}  # sample -> tensors with a non-finite extreme
    derived = derived_ranges(clean.model, [t for t, _ in tensors])
    probed = [(t, et) for t, et in tensors if t not in derived]
    extra, probes = _channel_max_nodes(clean.model, tensors, channel_max or {})
    if probed or probes:
        model, weights = _reduced(clean, probed + probes, extra)
        try:
            sess = _session(model)
        except ModelError:  # a reduction this runtime lacks (e.g. for float16): read every tensor back
            _finite_extremes(clean, samples, {i: {t for t, _ in tensors} for i in range(n)}, lo, hi)
            return {k: round_range(lo[k], hi[k]) for k in lo}
        runs = _run_samples(sess, weights, samples, n, _elements(clean.model, tensors) >= POOL_MIN_ELEMENTS)
    else:  # every tensor follows from the inputs (a lone Reshape, say): nothing to run
        runs = [()] * n
    for i, vals in enumerate(runs):
        seen = {k: (float(v[i].min()), float(v[i].max())) for k, v in samples.items()
                if v[i].size and v[i].dtype.kind == "f"}  # this sample's extremes (finite: load_calibration)
        for j, (name, _) in enumerate(probed + probes):
            a, b = float(vals[2 * j]), float(vals[2 * j + 1])
            if math.isfinite(a) and math.isfinite(b):
                _widen(lo, hi, name, a, b)
                seen[name] = (a, b)
            elif j < len(probed):
                odd.setdefault(i, set()).add(name)
            else:  # a probe over non-finite values: no range (the Softmax stays on the CPU)
                lo[name], hi[name] = math.nan, math.nan
        for name, (src, op) in derived.items():
            if src in seen:
                seen[name] = _derive(op, *seen[src])
                _widen(lo, hi, name, *seen[name])
            else:  # its source has a non-finite extreme (or no float samples): read back whole
                odd.setdefault(i, set()).add(name)
    if odd:
        _finite_extremes(clean, samples, odd, lo, hi)
    return {k: round_range(lo[k], hi[k]) for k in lo if not math.isnan(lo[k])}


def _cores() -> int:
    """Threads this process may use: OMP_NUM_THREADS when set (a worker process of a cluster, which runs
    one task per core, sets it to 1), else its cores."""
    cores = usable_cores()
    budget = os.environ.get("OMP_NUM_THREADS", "")
    return min(cores, int(budget)) if budget.isdigit() and int(budget) > 0 else cores


POOL_MIN_ELEMENTS = 1 << 20  # float elements a sample computes from which its runs go one per core


def _elements(model: onnx.ModelProto, tensors) -> int:
    """Elements of the float `tensors` ((name, type) pairs) one sample computes, from the model's shapes
    (an unknown dimension counts 1)."""
    names = {t for t, _ in tensors}
    total = 0
    for vi in list(model.graph.value_info) + list(model.graph.output):
        if vi.name in names:
            names.discard(vi.name)
            total += math.prod(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
    return total


def _run_samples(sess, weights: dict, samples: dict, n: int, parallel: bool = True) -> list:
    """The session's outputs for samples 0..n-1, in order. With `parallel` (a model whose samples compute
    at least POOL_MIN_ELEMENTS values: below that a thread pool's start and hand-offs cost more than
    it saves, 0.9 ms a call measured on bisect's one-operator models) up to one run per core at a
    time. Each run is single-threaded (the session's one intra-op thread is the caller's), so every
    sample's sums are the same as in a serial loop; ONNX Runtime releases the GIL while it runs."""
    def one(i):
        try:
            return sess.run(None, {**weights, **{k: v[i] for k, v in samples.items()}})
        except Exception as e:
            raise ModelError(f"int8 calibration: ONNX Runtime cannot run the model ({_ort_message(e)})") from None

    workers = min(n, _cores()) if parallel else 1
    if workers < 2:
        return [one(i) for i in range(n)]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(workers, thread_name_prefix="npusim-calibrate") as pool:
        return list(pool.map(one, range(n)))


def _finite_extremes(clean, samples, odd: dict, lo: dict, hi: dict) -> None:
    """Min/max over the finite values of the tensors `odd` names per sample (read back whole)."""
    names = sorted(set().union(*odd.values()))
    m, weights = _fed(clean)
    have = {o.name for o in m.graph.output}
    types = dict(_float_tensors(clean.model))
    for name in names:
        if name not in have:
            m.graph.output.append(onnx.helper.make_tensor_value_info(name, types[name], None))
    sess = _session(m)
    for i in sorted(odd):
        feeds = {**weights, **{k: v[i] for k, v in samples.items()}}
        try:
            vals = sess.run(sorted(odd[i]), feeds)
        except Exception as e:
            raise ModelError(f"int8 calibration: ONNX Runtime cannot run the model ({_ort_message(e)})") from None
        for name, val in zip(sorted(odd[i]), vals):
            fin = np.asarray(val)[np.isfinite(val)]
            if fin.size:
                _widen(lo, hi, name, float(fin.min()), float(fin.max()))

# ------------------------------------------------------------------ activation qparams

class _Groups:
    def __init__(self):
        self.parent: dict[str, str] = {}

    def find(self, a: str) -> str:
        self.parent.setdefault(a, a)
        while self.parent[a] != a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def qparams_from_range(lo: float, hi: float) -> tuple[float, int]:
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / 255.0
    if not np.isfinite(scale) or scale < 1e-12:
        return 1.0 / 255.0, -128
    zp = int(np.clip(np.round(QMIN - lo / scale), QMIN, QMAX))
    return float(np.float32(scale)), zp


def symmetric_qparams(lo: float, hi: float) -> tuple[float, int]:
    """int8 (scale, 0) covering [lo, hi]: zero point 0 (a map the CA reads as its kernel)."""
    top = max(abs(float(lo)), abs(float(hi)))
    scale = top / 127.0
    if not np.isfinite(scale) or scale < 1e-12:
        return 1.0 / 127.0, 0
    return float(np.float32(scale)), 0


def reciprocal_qparams(rng: tuple[float, float]) -> tuple[float, int]:
    """int8 (scale, zp) of 1 / y for y in the calibrated range `rng`, which excludes 0 (legality)."""
    lo, hi = sorted((1.0 / float(rng[0]), 1.0 / float(rng[1])))
    return qparams_from_range(lo, hi)


def assign_qparams(layers: list[Layer], concats: list[Concat], alias: dict[str, str], graph: Graph,
                   ranges: dict[str, tuple[float, float]]) -> dict[str, tuple[float, int]]:
    """{tensor: (scale, zero_point)} for every tensor the layers touch."""
    g = _Groups()
    tensors: set[str] = set()
    for a, b in alias.items():
        g.union(a, b)
    for t, (whole, *_) in graph.strided.items():  # a phase is part of its whole tensor: one scale
        g.union(t, whole)
        tensors.update((t, whole))
    for t, win in graph.windows.items():  # so is a box read by addressing
        g.union(t, win.whole)
        tensors.update((t, win.whole))
    for t, gs in graph.gathers.items():  # and a side of a permutation piece
        g.union(t, gs.whole)
        tensors.update((t, gs.whole))
    for c in concats:
        for p in c.parts:
            g.union(p, c.out)
        tensors.update(c.parts + [c.out])
    def fixed_differ(a: str, b: str) -> bool:
        return a in graph.qdq and b in graph.qdq and graph.qdq[a] != graph.qdq[b]

    for L in layers:
        if L.kind == "concat":
            continue
        if L.host is not None:
            floats = [t for t in L.reads() + L.writes() if graph.is_float(t) and t not in graph.float_islands]
            tensors.update(floats)
            if L.host.node.op in SAME_SCALE_OPS:
                for t in floats[1:]:
                    if not fixed_differ(floats[0], t):  # the host requantizes between the model's own scales
                        g.union(floats[0], t)
            continue
        prev = L.input
        tensors.add(prev)
        for s in L.steps:
            tensors.add(s.out)
            if s.operand:
                tensors.add(s.operand)
            if s.unit == "RESIZE" or (s.unit == "POOL" and s.params["mode"] in ("max", "global_max")) or \
                    (s.unit == "ARITH" and s.params["op"] in ("copy", "concat")) or \
                    (s.unit == "CONV" and s.params.get("moves")):  # a 0/1 kernel moving values (moveconv)
                g.union(prev, s.out)
                if s.operand:
                    g.union(s.operand, s.out)
            prev = s.out
    # maps a CONV reads as its kernel (MatMul of two maps): the CA takes no weight zero point
    kernels = {s.operand for L in layers if L.kind == "npu" for s in L.steps if s.unit == "CONV" and s.operand}
    symmetric = {g.find(t) for t in kernels}
    members: dict[str, list[str]] = {}
    for t in sorted(tensors | set(alias) | set(alias.values())):
        members.setdefault(g.find(t), []).append(t)
    out: dict[str, tuple[float, int]] = {}
    for root, ts in members.items():
        fixed = [graph.qdq[t] for t in ts if t in graph.qdq]
        if len(set(fixed)) > 1:
            raise ModelError(f"internal: tensors {', '.join(t for t in ts if t in graph.qdq)} share one buffer scale "
                             f"but the model gives them {len(set(fixed))} different scales")
        if fixed:
            q = (float(fixed[0][0]), int(fixed[0][1]))
        else:
            rs = [ranges[t] for t in ts if t in ranges]
            if not rs:
                if graph.prequantized:
                    raise ModelError(f"tensor {ts[0]!r} has no scale and zero point in the quantized model")
                raise DataError(f"calibration produced no range for tensor {ts[0]!r}")
            lo, hi = min(r[0] for r in rs), max(r[1] for r in rs)
            q = symmetric_qparams(lo, hi) if root in symmetric else qparams_from_range(lo, hi)
        if root in symmetric and q[1] != 0:
            raise ModelError(f"internal: tensor {ts[0]!r} is a CONV kernel but the model gives it zero point {q[1]}")
        for t in ts:
            out[t] = q
    return out


# ------------------------------------------------------------------ integer helpers and tables

def quantize_multiplier(real: float) -> tuple[int, int]:
    """(mult, shift) with real ~= mult * 2**-shift (the kernels' definition; 0 -> (0, 0))."""
    if real <= 0:
        return 0, 0
    m, sh = _kq.quantize_multiplier(float(real))
    return int(m), int(sh)


def common_shift(reals, limit: float = 2 ** 31 - 1, max_shift: int = 40) -> int:
    """Largest shift (<= max_shift) that keeps every round(r * 2**shift) within +-limit."""
    peak = max([abs(float(r)) for r in reals] + [1e-30])
    s = int(np.floor(np.log2(limit / peak)))
    return int(np.clip(s, 0, max_shift))


def quantize_weights(w: np.ndarray, scale: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-output-channel symmetric int8 of w[oc, ...] -> (int8 weights, C-contiguous, float64 scales). With
    `scale` (a pre-quantized model's own per-channel scales) the model's integers come back exactly. `w` may
    be a strided view (a transposed kernel): it is read block by block, never copied whole."""
    rest = tuple(range(1, w.ndim))
    if scale is None:
        # max |x| = max(max x, -min x), exact in w's own type (finite: check_finite_constants); two reductions
        # without an |x| copy of the weights
        amax = np.maximum(w.max(axis=rest), -w.min(axis=rest)).astype(np.float64).reshape(-1)
        scale = np.where(amax > 0, amax / 127.0, 1.0)
        lo = -127
    else:
        scale = np.asarray(scale, np.float64).reshape(-1)
        lo = -128
    q = np.empty(w.shape, np.int8)
    per_row = max(1, w.size // max(1, w.shape[0]))
    rows = max(1, QUANT_CHUNK // per_row)
    tmp = np.empty((min(rows, w.shape[0]), *w.shape[1:]), np.float64)
    column = (slice(None),) + (None,) * len(rest)
    for r in range(0, w.shape[0], rows):  # in float64, a cache-sized block of rows at a time
        t = tmp[:min(rows, w.shape[0] - r)]
        np.divide(w[r:r + rows], scale[r:r + rows][column], out=t, dtype=np.float64)
        np.rint(t, out=t)  # np.round to 0 decimals: half to even
        if lo == -128:  # a model's own scale may not cover w; |w| / (amax / 127) <= 127.5 needs no clip
            np.clip(t, lo, 127, out=t)
        q[r:r + rows] = t
    return q, scale


QUANT_CHUNK = 1 << 15  # float64 elements of one block of quantize_weights (256 KiB)


def conv_table_int8(bias: np.ndarray, s_in: float, s_w: np.ndarray, s_out: float, bias_q=None) -> bytes:
    """Per-channel {bias:i32, mult:i32, shift:i32}; `bias_q`: a pre-quantized model's int32 biases, used as
    stored (as TFLite and ONNX Runtime add them to the accumulator)."""
    acc_scale = s_in * s_w
    if bias_q is not None:
        bq = np.clip(np.asarray(bias_q, np.int64), -2 ** 31, 2 ** 31 - 1)
    else:
        bq = np.clip(np.round(bias.astype(np.float64) / acc_scale), -2 ** 31, 2 ** 31 - 1).astype(np.int64)
    r = np.broadcast_to(np.asarray(acc_scale / s_out, np.float64), (len(bias),))
    m, s = _kq.quantize_multipliers(np.where(r <= 0, 0.0, r))  # quantize_multiplier: real <= 0 -> (0, 0)
    return np.stack([bq, m, s], axis=1).astype("<i4").tobytes()


def float_table(values: np.ndarray) -> bytes:
    return np.asarray(values, "<f4").reshape(-1).tobytes()


def arith_table_int8(op: str, c: int, qa, qb, qo, const=None, scale=None, bias=None) -> tuple[bytes, int]:
    """ARITH {ma, mb, shift, bconst} entries and per_channel flag for op (see ISA ARITH doc)."""
    sa, so = qa[0], qo[0]
    if op in ("add", "sub", "max", "min"):  # sub: b's multiplier negated; max / min: each operand rescaled
        ra, rb = sa / so, qb[0] / so
        s = common_shift([ra, rb])
        rows = [(round(ra * 2 ** s), round(rb * 2 ** s) * (-1 if op == "sub" else 1), s, 0)]
    elif op == "prelu":  # y = out_zp + ((a - a_zp) * (a >= a_zp ? ma : mb)) >> shift, mb = slope * ma
        ra, rb = sa / so, np.asarray(const, np.float64) * sa / so
        s = common_shift(np.concatenate([[ra], rb]))
        rows = [(round(ra * 2 ** s), round(rb[i] * 2 ** s), s, 0) for i in range(c)]
    elif op in ("mul", "mul_channel"):
        r = sa * qb[0] / so
        s = common_shift([r])
        rows = [(round(r * 2 ** s), 0, s, 0)]
    elif op == "mul_const":  # y = out_zp + ((a - a_zp) * bconst * ma) >> shift, bconst = 1
        ma = np.asarray(const, np.float64) * sa / so
        s = common_shift(ma)
        rows = [(round(ma[i] * 2 ** s), 0, s, 1) for i in range(c)]
    elif op in ("add_const", "affine"):  # y = out_zp + ((a - a_zp) * ma + bconst * 1) >> shift
        k = np.ones(c) if op == "add_const" else np.asarray(scale, np.float64)
        b = np.asarray(bias if op == "affine" else const, np.float64)
        ma, bc = k * sa / so, b / so
        s = min(common_shift(ma), common_shift(bc))
        rows = [(round(ma[i] * 2 ** s), 1, s, round(bc[i] * 2 ** s)) for i in range(c)]
    elif op in ("copy", "concat"):
        rows = [(1, 1, 0, 0)]
    else:
        raise ValueError(op)
    return np.asarray(rows, "<i4").tobytes(), int(len(rows) > 1)


def act_lut(func: str, params: dict, q_in, q_out) -> bytes:
    """256-byte int8 LUT (kernels.make_lut): out = lut[x + 128], function and requantization baked in."""
    lut = make_lut(func, q_in[0], q_in[1], q_out[0], q_out[1], alpha=params.get("alpha", 0.01),
                   lo=params.get("lo"), hi=params.get("hi"))
    return np.asarray(lut, np.int8).tobytes()


def pool_avg_mult(q_in, q_out, shift: int = 20) -> tuple[int, int]:
    return int(round(q_in[0] / q_out[0] * (1 << shift))), shift
