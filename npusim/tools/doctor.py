"""`npusim doctor`: the field engineer's troubleshooting order as one command.

Lowest layer first; each step is one of the tools, run on the user's model and compile options:

  1 versions    driver and firmware: the blob's versions against this runtime and its profile
  2 memory      allocation: every pool's use against its size; the partition of a --context
  3 conversion  the static check (`analysis.check`) of the blob; faults that no alignment of the
                compiler removes are conversion's (the ones an alignment removes are layout's)
  4 operators   each operator compiled and run alone (`bisect`), on the NPU or as CPU fallback
  5 layout      the alignment at which every operator (`bisect`) and the model (`sweep`) run clean
  6 accuracy    outputs against the model's own runtime (`validate`: ONNX Runtime, the TFLite interpreter)
  7 fusion      fused against unfused (`sweep` over --fuse, `validate` of the unfused blob)
  8 stability   a short stress run (`tools.stress`, when this build has it)

The steps run in that order and stop at the first that fails (unless `all_steps`): later ones say
"skipped". Every step measures something and, when it fails, names the fix. The report's exit code is
the first failing step's (65 input, 139 fault, 3 accuracy, or the stress verdict's).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from ..errors import EXIT_FAULT, EXIT_INVALID_INPUT, EXIT_OK, EXIT_VALIDATION_FAILED, NpusimError

STEPS = (("versions", "driver and firmware (version matrix)"), ("memory", "memory allocation and partitions"),
         ("conversion", "model conversion (static check)"), ("operators", "operator compatibility"),
         ("layout", "layout (alignment)"), ("accuracy", "numerical accuracy vs fp32"),
         ("fusion", "fusion on and off"), ("stability", "stability (short stress run)"))
MARKS = {"pass": "✓", "warn": "!", "fail": "✗", "skipped": "-"}  # warn: a finding a later step owns (it passes on)
ALIGNMENTS = (16, 32, 64, 128, 256)
STRESS_RUNS = 20  # per process, of the stability step
ACCURACY_SAMPLES = 4  # calibration samples the accuracy step validates on, at most
STRESS_CHECK_EVERY = 5  # every 5th run computes values (compared bit for bit and with the model's runtime)


@dataclass
class Step:
    name: str
    title: str
    status: str = "skipped"  # pass | warn | fail | skipped (warn: a finding that a later step owns; not a failure)
    measured: str = ""
    fix: str = ""
    exit_code: int = EXIT_OK
    details: dict = field(default_factory=dict)

    def line(self, width: int = 10) -> str:
        text = f"{MARKS[self.status]} {self.name:<{width}} {self.measured}"
        return text + (f" -- fix: {self.fix}" if self.fix else "")


@dataclass
class DoctorReport:
    model: str
    options: dict
    steps: list

    @property
    def failed(self) -> Step | None:
        return next((s for s in self.steps if s.status == "fail"), None)

    @property
    def exit_code(self) -> int:
        f = self.failed
        return f.exit_code if f is not None else EXIT_OK

    def text(self) -> str:
        lines = [s.line() for s in self.steps]
        f = self.failed
        lines.append(f"doctor: {'first failing step: ' + f.name if f else 'every step passed'}"
                     + (f" (exit {f.exit_code})" if f else ""))
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict:
        return {"model": self.model, "options": self.options, "exit_code": self.exit_code,
                "first_failing": self.failed.name if self.failed else None,
                "steps": [dataclasses.asdict(s) for s in self.steps]}

    def markdown(self) -> str:
        out = [f"# npusim doctor: {self.model}", "", "| | step | measured | fix |", "|---|---|---|---|"]
        for s in self.steps:
            cells = [MARKS[s.status], f"{s.name} ({s.title})", s.measured, s.fix]
            out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        out += ["", f"exit code {self.exit_code}; compile options: `{json.dumps(self.options, default=str)}`", ""]
        return "\n".join(out)


class _Case:
    """The model, options and profile the steps share; compiles, checks and bisects once."""

    def __init__(self, model, blob, options, profile_source, overrides, context, executor, stress_runs, inputs):
        from ..compiler.frontends.sources import load_source
        from ..hw import load_profile

        src = load_source(model)
        self.model = src.data if src.kind == "tflite" else src.proto  # what every tool takes (TFLite: its bytes)
        self.profile_source, self.overrides = profile_source, list(overrides)
        self.profile = load_profile(profile_source, self.overrides)
        self.blob, self.options, self.context = blob, options, context
        self.executor, self.stress_runs, self.inputs = executor, stress_runs, inputs
        self._samples = None
        self._program = self._prepared = self._bisect = None

    def prepared(self):
        from ..compiler import prepare

        if self._prepared is None:
            self._prepared = prepare(self.model, self.options, self.profile)
        return self._prepared

    def compiled(self, **changes):
        """The model compiled with the options (changed by `changes`), from one staged front end."""
        from ..compiler import finish

        return finish(self.prepared(), dataclasses.replace(self.options, **changes), self.profile)

    def program(self):
        """The blob under diagnosis: BLOB.npu when given, else the model compiled with the options."""
        from ..runtime import load

        if self._program is None:
            self._program = load(self.blob, self.profile) if self.blob is not None else self.compiled()
        return self._program

    def samples(self):
        """([input dict], what they are) the values are checked on: the user's inputs (`inputs`, in the model's
        own terms), else up to ACCURACY_SAMPLES samples of the calibration set (the inputs the user says the
        model sees), else seeded inputs (`runtime.seeded_inputs`)."""
        from ..errors import DataError
        from ..runtime import seeded_inputs
        from .points import calibration_arrays
        from .variants import check_samples

        if self._samples is None:
            prog = self.program()
            if self.inputs:
                from ..model_inputs import to_program

                given = to_program(prog, self.inputs, self.model, what="--input")  # in the model's own terms
                self._samples = [{**seeded_inputs(prog, 0), **given}], "the --input arrays"
            elif self.options.calibration is not None:
                shapes = {b.name: tuple(int(d) for d in b.shape) for b in prog.buffers_of("input")}
                cal = check_samples(calibration_arrays(self.options.calibration), shapes, DataError)
                n = min(ACCURACY_SAMPLES, min(len(a) for a in cal.values()))
                self._samples = [{k: a[i] for k, a in cal.items()} for i in range(n)], f"{n} calibration sample(s)"
            else:
                self._samples = [seeded_inputs(prog, 0)], "seeded inputs"
        return self._samples

    def bisected(self):
        from .bisect import bisect

        if self._bisect is None:
            self._bisect = bisect(self.model, self.options, self.profile, shrink=False, executor=self.executor)
        return self._bisect


# ------------------------------------------------------------------ the steps

def _versions(case, step):
    from .. import __version__
    from ..program.blob import read_header
    from ..program.spec import load_isa
    from ..program.validate import check_versions, resolve_target_profile

    isa = load_isa()
    if case.blob is None:
        header, where = case.program().header, "the blob compiled here"
    else:
        try:
            header, where = read_header(case.blob).to_header(), "the blob"
        except NpusimError as e:
            return _fail(step, f"the blob cannot be read: {e}", "recompile the model (npusim compile)",
                         EXIT_INVALID_INPUT)
    step.details = dataclasses.asdict(header)
    step.measured = (f"{where}: format {header.format_version}, ISA v{header.isa_version}, needs runtime >= "
                     f"{header.min_runtime}, profile {header.profile or 'default'}, by {header.compiler} "
                     f"{header.compiler_version}; this runtime: npusim {__version__}, ISA v{isa.version}, "
                     f"profile {case.profile.name}")
    try:
        check_versions(header, isa)
        target = resolve_target_profile(header)
        if target.name != case.profile.name:
            raise NpusimError(f"the blob targets profile {target.name!r}, the board here is {case.profile.name!r}")
    except NpusimError as e:
        return _fail(step, f"{step.measured}: {e}", "recompile the model with this toolchain (npusim compile) "
                     "or update the runtime to the blob's version", EXIT_INVALID_INPUT)
    step.status = "pass"


def _memory(case, step):
    from ..runtime import RunOptions, setup_shared

    try:
        prog = case.program()
    except NpusimError as e:
        return _fail(step, f"the model does not fit or cannot be placed: {e}",
                     "move weights elsewhere (--weights-pool), use --mem-plan per-layer, or a smaller model",
                     EXIT_INVALID_INPUT)
    use, outside = _pool_use(prog, case.profile)
    parts = []
    for pool in sorted(use):
        room = case.profile.pool_named(pool).size
        parts.append(f"{pool} {use[pool]:,}/{room:,} B ({use[pool] / room:.0%})")
    step.details = {"pools": use, "outside": outside}
    step.measured = "pools: " + ", ".join(parts)
    if outside:
        name, nbytes = outside[0]
        return _fail(step, f"{step.measured}; '{name}' has {nbytes:,} B outside every pool",
                     "move weights elsewhere (--weights-pool), use --mem-plan per-layer, or a smaller model",
                     EXIT_INVALID_INPUT)
    if case.context is not None:
        try:
            setup_shared([(prog, case.context, None)], case.profile, RunOptions(timing_only=True))
        except NpusimError as e:
            return _fail(step, f"{step.measured}; context '{case.context.name}': {e}",
                         "give the context a partition in every pool the program uses, large and aligned enough",
                         EXIT_INVALID_INPUT)
        step.measured += f"; fits context '{case.context.name}'"
    step.status = "pass"


def _pool_use(prog, profile) -> tuple[dict, list]:
    """({pool: its highest byte in use}, [(buffer, bytes outside every pool)]) by address: a buffer names
    the pool it starts in and may span the contiguous pools after it (npuRAM3..6), each of which it uses."""
    use: dict[str, int] = {}
    outside = []
    for b in [*prog.buffers, *prog.constants]:
        size = b.size if hasattr(b, "size") else len(b.data)
        start = profile.pool_named(b.pool).base + b.offset
        end, covered = start + size, 0
        for p in profile.pools:
            lo, hi = max(start, p.base), min(end, p.end)
            if lo < hi:
                use[p.name] = max(use.get(p.name, 0), hi - p.base)
                covered += hi - lo
        if size and not covered:
            use.setdefault(b.pool, 0)
        if covered < size:
            outside.append((b.name, size - covered))
    return use, outside


def _first_fault(faults) -> str:
    f = faults[0]
    at = f" at {f.address:#x}" if f.address is not None else ""
    return f"{f.cls} in layer '{f.layer or '?'}' ({f.unit}{' ' + f.access if f.access else ''}{at})"


def _conversion(case, step):
    from ..analysis import check

    rep = check(case.program(), case.profile)
    step.details = {"faults": len(rep.faults), "undecided": len(rep.undecided)}
    if rep.ok:
        step.measured = (f"the static check predicts no fault in {rep.epochs} NPU and {rep.host_epochs} CPU epochs"
                         + (f" ({len(rep.undecided)} decisions left to the run)" if rep.undecided else ""))
        step.status = "pass"
        return
    align = case.options.align(case.profile)
    clean = [a for a in ALIGNMENTS if a != align and check(case.compiled(mem_align=a), case.profile).ok]
    step.details["clean_alignments"] = clean
    head = f"{len(rep.faults)} fault(s) predicted at --mem-align {align} (first: {_first_fault(rep.faults)})"
    if clean:
        step.measured = (f"{head}; none at --mem-align {'/'.join(map(str, clean))}: the conversion holds, "
                         "its layout does not (next steps)")
        step.status = "warn"  # faults predicted: not a pass, but the layout step owns them
        return
    fix = rep.faults[0].why or "report the predicted faults (npusim check --json) to the compiler's authors"
    _fail(step, f"{head}; at every alignment", fix, EXIT_FAULT)


def _operators(case, step):
    from ..compiler.driver import cpu_summary

    rep = case.bisected()
    host = set(case.program().host_layers)
    broken = [f for f in rep.findings if f.outcome.status == "error"]
    on_cpu = [f for f in rep.findings if f.node in host]
    step.details = {"operators": len(rep.findings), "cpu": [f.node for f in on_cpu],
                    "errors": {f.node: f.outcome.fault for f in broken}}
    cpu = "; ".join(cpu_summary(case.program(), case.profile))
    step.measured = (f"{len(rep.findings)} operator(s) compiled alone: {len(rep.findings) - len(on_cpu)} on the NPU, "
                     f"{len(on_cpu)} CPU fallback" + (f" ({cpu})" if cpu else ""))
    if broken:
        b = broken[0]
        return _fail(step, f"{step.measured}; {len(broken)} cannot be compiled or run alone, first {b.op_type} "
                     f"{b.node}: {b.outcome.fault}", "the operator's message says what the compiler refuses",
                     EXIT_INVALID_INPUT)
    step.status = "pass"


def _layout(case, step):
    from .sweep import sweep

    rep = case.bisected()
    align = case.options.align(case.profile)
    res = sweep(case.model, "mem_align", list(ALIGNMENTS), options=case.options, profile_source=case.profile_source,
                overrides=case.overrides, progress=False, executor=case.executor)
    clean_model = [p.mem_align for p in res.points if p.status == "ok"]
    best = res.best()
    faulting = rep.faulting
    step.details = {"faulting_operators": [f.node for f in faulting], "model_clean_alignments": clean_model,
                    "fastest": best.mem_align if best else None}
    ops_clean = [a for a in ALIGNMENTS if a != align and all(a in f.clean_alignments for f in faulting)]
    model_line = (f"the model runs clean at --mem-align {'/'.join(map(str, clean_model))} (fastest {best.mem_align})"
                  if clean_model else "the model faults at every alignment")
    if not faulting and align in clean_model:
        step.measured = f"every operator runs clean alone at --mem-align {align}; {model_line}"
        step.status = "pass"
        return
    good = sorted(set(ops_clean if faulting else ALIGNMENTS) & set(clean_model))
    fix = f"compile with --mem-align {min(good, key=lambda a: (a != (best.mem_align if best else a), a))}" if good \
        else "no alignment runs clean: " + rep.verdict
    if faulting:
        f = faulting[0]
        what = (f"{f.op_type} {f.node} ({f.shape}) is the first of {len(faulting)} operator(s) that fault alone at "
                f"--mem-align {align} ({f.outcome.fault})")
        what += (f"; every operator runs clean at --mem-align {'/'.join(map(str, ops_clean))}" if ops_clean else "")
    else:
        what = f"every operator runs clean alone, the model faults at --mem-align {align} ({rep.verdict})"
    _fail(step, f"{what}; {model_line}", fix, EXIT_FAULT)


def _accuracy(case, step):
    from ..reference import reference_kind, validate

    prog = case.program()
    samples, what = case.samples()
    reps = []
    for x in samples:
        rep = validate(prog, case.model, x, profile=case.profile)
        if rep.run_result.faults:
            return _fail(step, f"the run faults: {_first_fault(rep.run_result.faults)}", "see npusim run --keep-going",
                         EXIT_FAULT)
        reps.append(rep)
    rep, (name, worst) = min(((r, kv) for r in reps for kv in r.metrics.items()), key=lambda t: t[1][1].cosine)
    step.details = {"inputs": what, "metrics": {k: m.to_dict() for k, m in rep.metrics.items()}}
    step.measured = (f"{len(rep.metrics)} output(s) vs {rep.reference} ({what}): worst '{name}' cosine "
                     f"{worst.cosine:.4f}, max rel {worst.max_rel:.3g}")
    failed = next((r for r in reps if not r.passed), None)
    if failed is not None:
        if reference_kind(case.model) != "onnx":  # the model's own int8 scales: nothing to calibrate
            fix = ("the simulator's int8 values differ from the model's own runtime: report it with the blob and "
                   "npusim validate --json (exact share and max steps per output)")
        elif case.options.calibration is not None:
            fix = ("compile with --quantization fp16, or calibrate on a set that covers these inputs' range (the "
                   "calibration set given does not hold int8 close enough)")
        else:
            fix = "calibrate on representative inputs (--calibration FILE.npz) or compile with --quantization fp16"
        return _fail(step, f"{step.measured}: " + "; ".join(failed.failures[name] or sum(failed.failures.values(), [])),
                     fix, EXIT_VALIDATION_FAILED)
    step.status = "pass"


def _fusion(case, step):
    from ..reference import validate
    from .sweep import sweep

    fused = case.options.fuse
    res = sweep(case.model, "fuse", [fused, "none"], options=case.options, profile_source=case.profile_source,
                overrides=case.overrides, progress=False, executor=case.executor)
    on, off = res.points
    unfused = case.compiled(fuse="none")
    val = validate(unfused, case.model, case.samples()[0][0], profile=case.profile)  # the accuracy step's inputs
    step.details = {"fused": on.to_dict(), "unfused": off.to_dict(), "unfused_valid": val.passed}
    step.measured = (f"--fuse {fused}: {on.status}, {on.cycles:,} cycles; --fuse none: {off.status}, "
                     f"{off.cycles:,} cycles, {'validates' if val.passed else 'does not validate'}")
    if on.status != "ok" and off.status == "ok" and val.passed:
        return _fail(step, step.measured + ": a fusion bug", "compile with --fuse none (and report the fused "
                     "pattern)", EXIT_FAULT)
    if on.status != off.status or not val.passed:
        return _fail(step, step.measured, "compare the fused and unfused blobs (npusim run --keep-going on each)",
                     EXIT_FAULT if "fault" in (on.status, off.status) else EXIT_VALIDATION_FAILED)
    step.status = "pass"


def _stability(case, step):
    from .stress import load_target, stress
    from .stress_options import StressOptions

    import tempfile
    from pathlib import Path

    import numpy as np

    samples, what = case.samples()
    with tempfile.TemporaryDirectory(prefix="npusim-doctor-") as tmp:
        frames = None
        if what != "seeded inputs":  # the frames are the inputs the accuracy step checked, one .npz each
            from ..model_inputs import from_program

            for i, x in enumerate(samples):  # in the model's own layout, as --inputs takes them
                np.savez(Path(tmp) / f"frame{i:03d}.npz", **from_program(case.program(), x))
            frames = tmp
        opts = StressOptions(runs=case.stress_runs, processes=2, seed=0, check_every=STRESS_CHECK_EVERY,
                             inputs_dir=frames)
        rep = stress([load_target(case.program(), profile=case.profile)], opts, profile=case.profile,
                     reference=case.model)
    step.details = rep.to_json()
    faults = ", ".join(f"{c} x{n}" for c, n in sorted(rep.faults.items())) or "no faults"
    step.measured = (f"{rep.runs} runs of 2 processes sharing the NPU on {what} ({rep.checked} compared with the "
                     f"single-process run): {faults}; verdict: {rep.verdict()}")
    if rep.exhausted:  # the LEAK verdict of a pool that two processes do not fit: say so
        step.measured += f" (the pool is exhausted: {rep.exhausted})"
        return _fail(step, step.measured, "two processes of this program do not fit the pools together: run one at a "
                     "time (npusim stress --processes 1)", rep.exit_code)
    if rep.exit_code:
        return _fail(step, step.measured, "npusim stress with more runs and --keep-going shows the trend and the "
                     "first fault", rep.exit_code)
    step.status = "pass"


RUNNERS = {"versions": _versions, "memory": _memory, "conversion": _conversion, "operators": _operators,
           "layout": _layout, "accuracy": _accuracy, "fusion": _fusion, "stability": _stability}


def _fail(step, measured: str, fix: str, code: int) -> None:
    step.status, step.measured, step.fix, step.exit_code = "fail", measured, fix, code


def doctor(model, blob=None, options=None, profile=None, overrides=(), context=None, all_steps: bool = False,
           executor=None, stress_runs: int = STRESS_RUNS, inputs: dict | None = None) -> DoctorReport:
    """Run the troubleshooting steps in order (module doc) on `model` (ONNX path or ModelProto) with
    compile `options`, or on `blob` (a .npu compiled from it elsewhere); stop at the first failing
    step unless `all_steps`. `profile`: a profile name or path (default n657) with `overrides`
    (--set KEY=VALUE); `context`: a `memory.Context` to fit the program into; `inputs`: {input: array in the
    model's own layout and type (`model_inputs`)} the values are checked on (default: the calibration set's
    samples, else seeded inputs)."""
    from ..compiler import CompileOptions
    from .parallel import Executor

    options = options or CompileOptions()
    case = _Case(model, blob, options, profile, overrides, context, executor or Executor(False), stress_runs, inputs)
    steps = [Step(name, title) for name, title in STEPS]
    stopped = None
    for s in steps:
        if stopped is not None:
            s.measured = f"skipped (stopped at {stopped}; --all runs every step)"
            continue
        RUNNERS[s.name](case, s)
        if s.status == "fail" and not all_steps:
            stopped = s.name
    name = model if isinstance(model, str) else getattr(getattr(model, "graph", None), "name", "model")
    return DoctorReport(str(name), _options_json(options), steps)


def _options_json(options) -> dict:
    return {k: v for k, v in dataclasses.asdict(options).items() if not k.startswith("_")}
