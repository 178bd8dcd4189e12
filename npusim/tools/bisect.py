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

from ..names import fit
from ..errors import NpusimError
from .points import SharedModel, compile_and_run, options_dict, profile_of, run_program, share_model
from .variants import (CHANNEL_STEPS, conv_desc, conv_params, cut_ready, operator_node, search_space, single_op_models,
                       sub_model_calibration)

ALIGNMENTS = (16, 32, 64, 128, 256)
STEM_MOST = 96  # characters of a reproducer's file name taken from its operator's name, at most
CHUNK_MOST = 8  # operators per task at most (each task costs a round trip to a worker, ~10 ms)


@dataclass
class Outcome:
    status: str  # "ok" | "fault" | "error" (could not be compiled or run) | "invalid" | "other"
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
    errors: list = field(default_factory=list)  # TaskError of every operator that could not be tried

    @property
    def faulting(self) -> list[OpFinding]:
        return [f for f in self.findings if f.outcome.faulted]

    def table(self, detail_limit: int | None = None) -> str:
        """One row per operator, then the faulting ones shrunk to minimal configurations
        (the first `detail_limit` of them; the rest are counted by op type)."""
        w, shown = fit((f.node for f in self.findings), limit=32, least=22)  # a long name keeps its end
        head = f"{'node':<{w}} {'op':<18} {'shape':<34} {'result':<8} detail"
        lines = [head, "-" * (w + 88)]
        for f in self.findings:
            detail = f.outcome.fault if f.outcome.faulted else ""
            lines.append(f"{shown[f.node]:<{w}} {f.op_type:<18} {f.shape[:34]:<34} {f.outcome.status:<8} {detail}")
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


def try_model(model, options, profile, calibration=None, programs: dict | None = None):
    """Compile + timing-only run; returns (outcome, program, result). `programs` memoises compiles
    by (model bytes, options) within one task, so a configuration is compiled once."""
    import hashlib

    from ..faults import faults_to_json

    program = None
    if programs is not None:
        raw = model if isinstance(model, bytes) else None if isinstance(model, SharedModel) else model.SerializeToString()
        digest = model.digest if raw is None else hashlib.sha256(raw).hexdigest()
        key = (digest, repr(options))
        program = programs.get(key)
    if program is None:
        program, res = compile_and_run(model, options, profile, calibration)
        if programs is not None:
            programs[key] = program
    else:
        res = run_program(program, profile)
    if not res.faults:
        return Outcome("ok"), program, res
    first = res.faults[0]
    d = faults_to_json([first])[0]
    sig = (d["class"], d["access"], (d.get("region") or {}).get("kind"))
    return Outcome("fault", describe_fault(first), sig, first.why), program, res


def _shrink(finding: OpFinding, start: dict, make, describe, options, profile, programs: dict) -> dict:
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
                o = try_model(m, options, profile, programs=programs)[0] if m is not None else Outcome("invalid")
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


def _clean_alignments(model, options, profile, calibration, programs: dict) -> list[int]:
    """The alignments at which `model` runs clean (its own, known to fault, is not rerun); the front
    end and calibration, which the alignment does not change, run once for all of them."""
    shared = share_model(model, calibration)
    return [a for a in ALIGNMENTS if a != options.mem_align
            and try_model(shared, dataclasses.replace(options, mem_align=a), profile, programs=programs)[0].clean]


# ------------------------------------------------------------ tasks (run on a worker, plain data in and out)

def bisect_task(task: dict, whole: SharedModel, ops: tuple = ()):
    """One unit of bisect work. "whole": the model (and, when it faults, its retries with the options in
    `task["retries"]`); "ops": a chunk of operators alone (`ops[i]`: operator i's model bytes), each one
    that faults investigated at once (shrunk, its clean alignments, its reproducer's bytes). Every run's
    error is caught on its own (`parallel.run_task`), so one operator's bug does not lose its chunk."""
    from .parallel import run_task

    if task["kind"] == "whole":
        out = _whole_task(task, whole)
        if out["outcome"]["status"] == "fault":
            out["retries"] = [run_task(_whole_task, {**task, "options": o}, (whole,)) for o in task.get("retries", ())]
        return out
    done = []
    for item in task["items"]:
        op = {**task, **item}
        r = run_task(_op_task, op, (ops,))
        inv = None
        if r.ok and r.value["outcome"]["status"] == "fault":
            inv = run_task(_investigate_task, {**op, "outcome": r.value["outcome"]}, (ops,))
        done.append((r, inv))
    return done


def _task_setup(task: dict):
    from ..compiler import CompileOptions

    return CompileOptions(**task["options"]), profile_of(task["profile"])


def _whole_task(task: dict, whole: SharedModel) -> dict:
    options, profile = _task_setup(task)
    return {"outcome": dataclasses.asdict(try_model(whole, options, profile)[0])}


def _sub_model(raw: bytes):
    """A single-operator model from its bytes: a ModelProto, or the .tflite bytes themselves."""
    import onnx

    from ..compiler.frontends.tflite_reader import is_tflite

    return raw if is_tflite(raw) else onnx.load_model_from_string(raw)


def _op_task(task: dict, ops: tuple) -> dict:
    options, profile = _task_setup(task)
    m = _sub_model(ops[task["index"]])
    return {"outcome": dataclasses.asdict(try_model(m, options, profile, task.get("calibration"))[0])}


def _investigate_task(task: dict, ops: tuple) -> dict:
    """Shrink a faulting operator (not a TFLite one), list its clean alignments and (with `repro`) its
    reproducer's bytes."""
    options, profile = _task_setup(task)
    m = _sub_model(ops[task["index"]])
    tflite = isinstance(m, bytes)
    cal = task.get("calibration")
    f = OpFinding(node=task["node"], op_type=task["op_type"], shape="", outcome=Outcome(**task["outcome"]))
    programs: dict = {}
    small = m
    space = search_space(operator_node(m), m) if task["shrink"] and not tflite else None
    if space is not None:
        start, make, describe = space
        small = make(_shrink(f, start, make, describe, options, profile, programs)) or m
    f.clean_alignments = _clean_alignments(m, options, profile, cal, programs)
    repro = {}
    if task["repro"]:
        from ..program.blob import encode_blob

        program = try_model(small, options, profile, cal if small is m else None, programs)[1]
        repro = {"tflite" if tflite else "onnx": small if tflite else small.SerializeToString(),
                 "blob": encode_blob(program, profile)}
    return {"minimal": f.minimal, "minimal_fault": f.minimal_fault, "clean_neighbours": f.clean_neighbours,
            "clean_alignments": f.clean_alignments, "repro": repro}


def chunks(n: int, workers: int, most: int = CHUNK_MOST) -> list[range]:
    """Operators 0..n-1 in consecutive chunks, large first and shrinking to 1 at the end (guided
    self-scheduling): few round trips to the workers, and the last tasks are short, so every worker
    is busy to the end. Results never depend on it."""
    out, start = [], 0
    while start < n:
        size = max(1, min(most, -(-(n - start) // (4 * max(workers, 1)))))
        out.append(range(start, start + size))
        start += size
    return out


def _write_reproducer(finding: OpFinding, repro: dict, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in finding.node)
    if len(stem) > STEM_MOST:  # a TFLite layer is named after its tensor, which can be hundreds of characters
        import hashlib

        digest = hashlib.sha256(finding.node.encode()).hexdigest()[:8]
        half = (STEM_MOST - len(digest) - 2) // 2
        stem = f"{stem[:half]}_{digest}_{stem[-half:]}"
    suffix = {"onnx": ".onnx", "tflite": ".tflite", "blob": ".npu"}
    paths = {kind: out_dir / f"repro_{stem}{suffix[kind]}" for kind in repro}
    for kind, path in paths.items():
        path.write_bytes(repro[kind])
    finding.reproducer = {k: str(p) for k, p in paths.items()}


def _outcome(result) -> Outcome:
    return Outcome(**result.value["outcome"]) if result.ok else Outcome("error", result.error.text())


def bisect(model, options=None, profile=None, out_dir: str | Path | None = None, shrink: bool = True,
           progress: bool = False, executor=None, calibration=None) -> BisectReport:
    """Run every operator of `model` alone; shrink the faulting ones; classify the bug.

    The whole model (with its retries when it faults) and chunks of operators (each faulting one
    shrunk in the same task) run as one map of tasks on `executor` (`npusim.tools.parallel`;
    default: in this process); the report does not depend on the executor or the chunking. A calibration set
    (`calibration`, or `options.calibration`: the whole model's inputs) calibrates the whole
    model; each operator alone is calibrated on the values its inputs take inside the whole model
    on that set (shrunk variants, whose shapes differ, on seeded random inputs).
    """
    from ..compiler import CompileOptions
    from ..errors import UsageError
    from ..hw import load_profile
    from .parallel import Executor

    options = options or CompileOptions()
    profile = profile or load_profile()
    if out_dir is not None and Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise UsageError(f"bisect output folder {out_dir}: is an existing file")
    from ..compiler.frontends.sources import load_source

    src = load_source(model)
    whole = share_model(model, calibration if calibration is not None else options.calibration, source=src)
    if src.kind == "tflite":
        from .tflite_cut import single_op_models as tflite_single_op_models

        cases = tflite_single_op_models(src.data, src.where)
        nodes, rows = len(cases), [(op.name, op.op_type, op.shape) for op, _ in cases]
        raw = tuple(data for _, data in cases)
    else:
        from ..compiler.frontends.qonnx import is_qoperator, to_qdq

        model = to_qdq(src.proto) if is_qoperator(src.proto) else src.proto  # QOperator is cut in its QDQ form
        ready = cut_ready(model, options.input_shapes)
        cases = single_op_models(model, ready=ready)
        nodes, rows = len(model.graph.node), [(node.name, node.op_type, _shape_text(node, m)) for node, m in cases]
        raw = tuple(m.SerializeToString() for _, m in cases)
    ex = executor if executor is not None else Executor(progress)
    base = {"options": options_dict(options), "profile": profile.to_dict()}
    items: list[dict] = [{"index": k, "node": name, "op_type": op} for k, (name, op, _) in enumerate(rows)]
    if whole.calibration is not None and cases and src.kind == "onnx":
        for idx, chunk in sub_model_calibration(ready, whole.calibration, cases):
            for k, c in zip(idx, chunk):
                items[k]["calibration"] = c
    # shared once (inherited by forked workers, else sent once); a task names its operators by index
    shared = ex.share(whole), ex.share(raw)
    retries = [options_dict(dataclasses.replace(options, **change))  # a fusion bug? a runtime-buffer bug?
               for change in ({"fuse": "none"}, {"io_pad": profile.alignment.granule})]
    parts = chunks(len(cases), ex.workers)
    tasks = [{"kind": "whole", "retries": retries, **base}]
    tasks += [{"kind": "ops", "items": [items[k] for k in part], "shrink": shrink, "repro": out_dir is not None,
               **base} for part in parts]
    # expected work in single-operator runs: the whole model ~ one run per node (up to 3 runs with its
    # retries); an operator ~ 1 (its shrink search, when it faults, is not known in advance)
    cost = [3 * max(nodes, 1)] + [len(part) for part in parts]
    results = ex.map(bisect_task, tasks, *shared, desc="bisect: operators", cost=cost)
    if not results[0].ok:  # the model itself does not compile: nothing to bisect
        raise results[0].error.failed()
    per_op: list[tuple] = []
    for part, r in zip(parts, results[1:]):
        per_op.extend(r.value if r.ok else [(r, None)] * len(part))  # a lost chunk: each operator's error
    report = BisectReport(model_outcome=_outcome(results[0]), findings=[])
    for (name, op_type, shape), (r, _) in zip(rows, per_op):
        report.findings.append(OpFinding(node=name, op_type=op_type, shape=shape, outcome=_outcome(r)))
    for f, (_, r) in zip(report.findings, per_op):
        if not f.outcome.faulted:
            continue
        if not r.ok:
            f.minimal_fault = f"(shrinking failed: {r.error.text()})"
            report.errors.append(r.error)
            continue
        v = r.value
        f.minimal, f.minimal_fault, f.clean_neighbours, f.clean_alignments = (
            v["minimal"], v["minimal_fault"], v["clean_neighbours"], v["clean_alignments"])
        if v["repro"]:
            _write_reproducer(f, v["repro"], Path(out_dir))
    if report.model_outcome.faulted:
        report.fuse_none, report.io_padded = (_outcome(r) for r in results[0].value["retries"])
    report.errors.extend(r.error for r, _ in per_op if not r.ok)
    report.verdict = _verdict(report)
    return report


def raise_for_errors(report: BisectReport) -> None:
    """After the report is printed: exit 1 naming the first operator that hit a bug or lost its worker."""
    internal = [e for e in report.errors if e.internal]
    if internal:
        raise internal[0].failed(f"{len(internal)} bisect task(s) failed: ")


def _shape_text(node, model) -> str:
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] if model.graph.input else []
    if node.op_type == "Conv" and len(dims) == 4:
        _, w, _ = conv_params(node, model)
        return conv_desc(dims[1], w.shape[0], dims[2], dims[3], tuple(w.shape[2:]))[5:]
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
