"""Bisect a faulting model: run every operator alone, then shrink each faulting one.

What an engineer does by hand on the board, automated: each operator is compiled with its real
shapes and run alone; for every one that faults, its channels and spatial size are searched for
the smallest configuration that still faults and the nearest one that runs clean, the alignments
that run clean are listed, and the whole model is retried with fusion off and with padded I/O
buffers to tell a layout bug from a fusion bug from a runtime-buffer bug.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import NpusimError
from .sweep import progress_bar, run_point

ALONE_OPS = {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "Add", "Mul", "Sum", "Concat", "Resize",
             "Upsample", "Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSwish", "Gemm", "MatMul",
             "BatchNormalization", "Softmax"}
CHANNEL_STEPS = (1, 2, 3, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
ALIGNMENTS = (16, 32, 64, 128, 256)


@dataclass
class Outcome:
    status: str  # "ok" | "fault"
    fault: str = ""  # one-line description of the first fault
    signature: tuple = ()  # (class, access, kind of the region) of the first fault
    why: str = ""  # the first fault's explanation (npusim.diagnose), if any

    @property
    def faulted(self) -> bool:
        return self.status == "fault"

    @property
    def clean(self) -> bool:
        return self.status == "ok"


@dataclass
class OpFinding:
    node: str
    op_type: str
    shape: str  # e.g. "Cin=16 Cout=32 52x52 k3x3"
    outcome: Outcome
    minimal: str = ""  # smallest configuration that still faults
    minimal_fault: str = ""
    clean_neighbours: list[str] = field(default_factory=list)  # nearest configurations that run clean
    clean_alignments: list[int] = field(default_factory=list)
    reproducer: dict = field(default_factory=dict)  # {"onnx": path, "blob": path}

    def sentence(self) -> str:
        if not self.outcome.faulted:
            return f"{self.op_type} {self.node} ({self.shape}) runs clean"
        parts = [f"{self.op_type} {self.node} ({self.shape}) faults: {self.outcome.fault}"]
        if self.minimal:
            parts.append(f"smallest faulting: {self.minimal} ({self.minimal_fault})")
        if self.clean_neighbours:
            parts.append("runs clean with one change: " + ", ".join(self.clean_neighbours))
        if self.clean_alignments:
            parts.append("clean with --mem-align " + "/".join(map(str, self.clean_alignments)))
        return "; ".join(parts)


@dataclass
class BisectReport:
    model_outcome: Outcome
    findings: list[OpFinding]
    fuse_none: Outcome | None = None
    io_padded: Outcome | None = None
    verdict: str = ""

    @property
    def faulting(self) -> list[OpFinding]:
        return [f for f in self.findings if f.outcome.faulted]

    def table(self, detail_limit: int | None = None) -> str:
        """One row per operator, then the faulting ones shrunk to minimal configurations
        (the first `detail_limit` of them; the rest are counted by op type)."""
        head = f"{'node':<22} {'op':<18} {'shape':<34} {'result':<8} detail"
        lines = [head, "-" * 110]
        for f in self.findings:
            detail = f.outcome.fault if f.outcome.faulted else ""
            lines.append(f"{f.node[:22]:<22} {f.op_type:<18} {f.shape[:34]:<34} {f.outcome.status:<8} {detail}")
        clean_convs = [f for f in self.findings if f.op_type == "Conv" and not f.outcome.faulted]
        shown = self.faulting if detail_limit is None else self.faulting[:detail_limit]
        if clean_convs or shown:
            lines.append("")
        for f in clean_convs[:3]:
            lines.append("  " + f.sentence())
        for f in shown:
            lines.append("* " + f.sentence())
            for kind, path in f.reproducer.items():
                lines.append(f"    reproducer ({kind}): {path}")
        rest = self.faulting[len(shown):]
        if rest:
            counts: dict[str, int] = {}
            for f in rest:
                counts[f.op_type] = counts.get(f.op_type, 0) + 1
            kinds = ", ".join(f"{k} x{n}" for k, n in sorted(counts.items()))
            lines.append(f"* {len(rest)} more faulting operator(s) ({kinds}), each with its reproducer")
        lines.append("")
        lines.append(f"whole model: {self.model_outcome.status} {self.model_outcome.fault}")
        if self.fuse_none is not None:
            lines.append(f"with --fuse none: {self.fuse_none.status} {self.fuse_none.fault}")
        if self.io_padded is not None:
            lines.append(f"with padded I/O buffers: {self.io_padded.status} {self.io_padded.fault}")
        lines.append(f"verdict: {self.verdict}")
        return "\n".join(lines)


def describe_fault(fault) -> str:
    from ..faults import faults_to_json

    d = faults_to_json([fault])[0]
    rel, reg = d.get("relation") or {}, d.get("region") or {}
    where = rel.get("where", "")
    if reg and where in ("after", "before"):
        return f"{d['class']} {rel.get('offset', 0)} B {where} '{reg.get('name')}' ({d.get('unit')}, {d['access']})"
    if reg:
        return f"{d['class']} in '{reg.get('name')}' ({d.get('unit')}, {d['access']})"
    return f"{d['class']} at {d['address']:#x} ({d.get('unit')}, {d['access']})"


def try_model(model, options, profile) -> tuple[Outcome, object, object]:
    """Compile + timing-only run; returns (outcome, program, result)."""
    from ..faults import faults_to_json

    program, res = run_point(model, options, profile)
    if not res.faults:
        return Outcome("ok"), program, res
    first = res.faults[0]
    d = faults_to_json([first])[0]
    sig = (d["class"], d["access"], (d.get("region") or {}).get("kind"))
    return Outcome("fault", describe_fault(first), sig, first.why), program, res


# ------------------------------------------------------------ single-op models

def _shapes(model):
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    out = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        out[vi.name] = dims
    return out


def _constants_as_initializers(model):
    import onnx
    from onnx import numpy_helper

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


def single_op_models(model, input_shapes=None):
    """[(node, onnx.ModelProto)] for every compute node, with its real shapes."""
    import onnx
    from onnx import TensorProto, helper

    from ..compiler.frontend import fix_input_shapes

    model = fix_input_shapes(model, input_shapes)
    model = _constants_as_initializers(model)
    shapes = _shapes(model)
    inits = {t.name: t for t in model.graph.initializer}
    out = []
    for i, node in enumerate(model.graph.node):
        if node.op_type not in ALONE_OPS:
            continue
        ins, used_inits = [], []
        for name in node.input:
            if not name:
                continue
            if name in inits:
                used_inits.append(inits[name])
            elif name in shapes and all(shapes[name]):
                ins.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shapes[name]))
            else:
                break
        else:
            outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, shapes.get(o)) for o in node.output]
            name = node.name or f"{node.op_type}_{i}"
            n2 = onnx.NodeProto()
            n2.CopyFrom(node)
            n2.name = name
            g = helper.make_graph([n2], f"bisect_{name}", ins, outs, initializer=used_inits)
            m = helper.make_model(g, opset_imports=list(model.opset_import))
            m.ir_version = model.ir_version
            out.append((n2, m))
    return out


def _conv_params(node, model):
    from onnx import helper, numpy_helper

    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    w = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == node.input[1]))
    x = model.graph.input[0]
    dims = [d.dim_value for d in x.type.tensor_type.shape.dim]
    return attrs, w, dims


def conv_variant(node, model, cin: int, cout: int, hw: int, seed: int = 0):
    """The same Conv (kernel, strides, pads, dilations, grouping) with other channels and size."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    attrs, w, dims = _conv_params(node, model)
    group = int(attrs.get("group", 1))
    depthwise = group > 1 and group == dims[1]
    if depthwise:
        cout, group = cin, cin
    elif group > 1:
        group = 1  # grouped convs are shrunk as dense ones
    rng = np.random.default_rng(seed)
    kh, kw = w.shape[2:]
    wt = (rng.standard_normal((cout, cin // group, kh, kw)) * np.sqrt(2.0 / (cin // group * kh * kw)))
    inits = [numpy_helper.from_array(wt.astype(np.float32), "w")]
    ins = ["input", "w"]
    if len(node.input) > 2 and node.input[2]:
        inits.append(numpy_helper.from_array((rng.standard_normal(cout) * 0.05).astype(np.float32), "b"))
        ins.append("b")
    kwargs = {k: v for k, v in attrs.items() if k != "group"}
    conv = helper.make_node("Conv", ins, ["output"], name=node.name, group=group, **kwargs)
    g = helper.make_graph([conv], f"bisect_{node.name}",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, cin, hw, hw])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=list(model.opset_import))
    m.ir_version = model.ir_version
    return onnx.shape_inference.infer_shapes(m)


def _conv_desc(cin, cout, h, w, k) -> str:
    return f"Conv {k[0]}x{k[1]} Cin={cin} Cout={cout} at {h}x{w}"


def generic_variant(node, model, c: int, hw: int, seed: int = 0):
    """The same single-node model with every 4-D input at [1, c, hw, hw] (size-1 dimensions kept); per-channel initializers
    (BatchNormalization parameters, [C,1,1] / [1,C,1,1] constants) are regenerated for c channels."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

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
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in node.output]
    g = helper.make_graph([node], f"bisect_{node.name}", ins, outs, inits)
    m = helper.make_model(g, opset_imports=list(model.opset_import))
    m.ir_version = model.ir_version
    try:
        m = onnx.shape_inference.infer_shapes(m, strict_mode=True)
        onnx.checker.check_model(m)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError):
        return None
    return m


def _search_space(node, model):
    """(dims, make(dims) -> model, describe(dims) -> str, order of dims to shrink) for a node, or None."""
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] if model.graph.input else []
    if len(dims) != 4:
        return None
    if node.op_type == "Conv":
        _, wt, _ = _conv_params(node, model)
        k = tuple(wt.shape[2:])
        start = {"Cin": dims[1], "Cout": wt.shape[0], "size": max(dims[2], dims[3])}
        return (start, lambda d: conv_variant(node, model, d["Cin"], d["Cout"], d["size"]),
                lambda d: _conv_desc(d["Cin"], d["Cout"], d["size"], d["size"], k))
    if generic_variant(node, model, dims[1], max(dims[2], dims[3])) is None:
        return None
    start = {"C": dims[1], "size": max(dims[2], dims[3])}
    return (start, lambda d: generic_variant(node, model, d["C"], d["size"]),
            lambda d: f"{node.op_type} C={d['C']} at {d['size']}x{d['size']}")


def _shrink(finding: OpFinding, start: dict, make, describe, options, profile) -> dict:
    """Greedy per dimension (channels, then size): the smallest value that still gives the *same*
    fault (class, access, kind of region), and the nearest configurations (one dimension changed)
    that run clean. Returns the minimal dims."""
    cache: dict[tuple, Outcome] = {}
    target = finding.outcome.signature

    def outcome(d):
        key = tuple(sorted(d.items()))
        if key not in cache:
            import onnx

            try:
                m = make(d)
                o = try_model(m, options, profile)[0] if m is not None else Outcome("invalid")
            except (NpusimError, onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
                o = Outcome("invalid", str(e))  # e.g. a kernel larger than the map: no such configuration
            if o.faulted and o.signature != target:  # another bug: not a smaller copy of this one
                o = Outcome("other", o.fault, o.signature, o.why)
            cache[key] = o
        return cache[key]

    best, clean, last = dict(start), [], None
    for dim in start:
        steps = (list(range(1, start[dim] + 1)) if dim == "size"
                 else sorted({c for c in CHANNEL_STEPS if c < start[dim]} | {start[dim]}))
        prev = None  # the last value below the smallest faulting one that ran clean
        for v in steps:
            o = outcome({**best, dim: v})
            if o.faulted:
                if prev is not None:
                    clean.append(f"{dim}={prev}" if dim != "size" else f"{prev}x{prev}")
                best[dim], last = v, o
                break
            prev = v if o.clean else None
    size = start["size"]
    for delta in range(1, 17):  # the nearest clean sizes around the real one
        for s_ in (size - delta, size + delta):
            if s_ >= 1 and outcome({**best, "size": s_}).clean:
                clean.append(f"{s_}x{s_}")
        if len(clean) >= 3:
            break
    finding.minimal = describe(best)
    finding.minimal_fault = last.fault if last else ""
    finding.clean_neighbours = list(dict.fromkeys(clean))
    return best


def _clean_alignments(model, options, profile) -> list[int]:
    return [a for a in ALIGNMENTS
            if try_model(model, dataclasses.replace(options, mem_align=a), profile)[0].clean]


def _write_reproducer(finding: OpFinding, model, options, profile, out_dir: Path) -> None:
    import onnx

    from ..compiler import compile as compile_model
    from ..program.blob import encode_blob

    out_dir.mkdir(parents=True, exist_ok=True)
    stem = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in finding.node)
    onnx_path = out_dir / f"repro_{stem}.onnx"
    blob_path = out_dir / f"repro_{stem}.npu"
    onnx.save(model, onnx_path)
    blob_path.write_bytes(encode_blob(compile_model(model, options, profile=profile), profile))
    finding.reproducer = {"onnx": str(onnx_path), "blob": str(blob_path)}


def bisect(model, options=None, profile=None, out_dir: str | Path | None = None, shrink: bool = True,
           progress: bool = False) -> BisectReport:
    """Run every operator of `model` alone; shrink the faulting ones; classify the bug."""
    import onnx

    from ..compiler import CompileOptions
    from ..compiler.frontend import load_model
    from ..hw import load_profile

    options = options or CompileOptions()
    profile = profile or load_profile()
    model = load_model(model)
    whole, _, _ = try_model(model, options, profile)
    findings = []
    cases = single_op_models(model, options.input_shapes)
    for node, m in progress_bar(cases, progress, "bisect"):
        dims = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim] if m.graph.input else []
        shape = _shape_text(node, m, dims)
        o, _, _ = try_model(m, options, profile)
        f = OpFinding(node=node.name, op_type=node.op_type, shape=shape, outcome=o)
        if o.faulted:
            small = m
            space = _search_space(node, m) if shrink else None
            if space is not None:
                start, make, describe = space
                small = make(_shrink(f, start, make, describe, options, profile)) or m
            f.clean_alignments = _clean_alignments(m, options, profile)
            if out_dir is not None:
                _write_reproducer(f, small, options, profile, Path(out_dir))
        findings.append(f)
    report = BisectReport(model_outcome=whole, findings=findings)
    if whole.faulted:
        report.fuse_none = try_model(model, dataclasses.replace(options, fuse="none"), profile)[0]
        report.io_padded = try_model(model, dataclasses.replace(options, io_pad=profile.alignment.granule),
                                     profile)[0]
    report.verdict = _verdict(report)
    return report


def _shape_text(node, model, dims) -> str:
    if node.op_type == "Conv" and len(dims) == 4:
        _, w, _ = _conv_params(node, model)
        return _conv_desc(dims[1], w.shape[0], dims[2], dims[3], tuple(w.shape[2:]))[5:]
    return "x".join(map(str, dims))


def _verdict(r: BisectReport) -> str:
    """A conclusion built from what the runs showed (fault classes, explanations, retries)."""
    if not r.model_outcome.faulted and not r.faulting:
        return "no fault: the model runs clean"
    if r.faulting:
        classes = sorted({f.outcome.signature[0] for f in r.faulting if f.outcome.signature})
        stride = [f for f in r.faulting if "hardware walked" in f.outcome.why]
        needed = [min(f.clean_alignments) for f in r.faulting if f.clean_alignments]
        hint = (f"; every faulting operator runs clean from --mem-align {max(needed)}"
                if len(needed) == len(r.faulting) else "")
        if stride:
            return (f"compiler layout: {len(r.faulting)} operator(s) fault alone ({', '.join(classes)}); "
                    f"{len(stride)} of them because the strides the compiler laid out are not what the hardware "
                    f"walks (its stride granule){hint}")
        return f"{len(r.faulting)} operator(s) fault alone ({', '.join(classes)}){hint}"
    if r.fuse_none is not None and r.fuse_none.clean:
        return "fusion: every operator runs clean alone and the model runs clean with --fuse none"
    if r.io_padded is not None and r.io_padded.clean:
        return "runtime buffers: the model runs clean once its I/O buffers are padded"
    return "interaction: operators run clean alone but the model faults (memory plan / buffer reuse)"
