"""Regression grids: the product of models x compile options x profiles x profile keys.

Every point compiles one model with one set of options for one profile, runs it (timing-only,
or functional; validated against ONNX Runtime when asked) and becomes one row: status, cycles,
ms, bank conflicts, splits, footprint, faults, the first fault's class and layer, validation
metrics, or the error that stopped it. The summary says which points fault, which fail
validation, and the fastest clean point per model. This is the regression matrix of a compiler
release; with one profile per toolchain/firmware version (`profiles`), the version matrix.

    res = grid(["a.onnx", "b.onnx"], axes=[("mem_align", [16, 128]), ("quantization", ["int8", "fp16"])],
               validate=True, executor=ex)
    write_csv(res, "grid.csv"); print(format_summary(res))
"""

from __future__ import annotations

import csv
import itertools
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import UsageError
from ..importers.stedgeai import is_st_output
from .axes import apply
from .points import SharedModel, compile_and_run, compile_point, options_dict, parsed, profile_of, share_model, summary

MAX_POINTS = 100_000  # a grid is refused past this many points (before any work)
RESULT_COLUMNS = ("status", "end_reason", "cycles", "ms", "bank_conflicts", "cross_bank_splits", "stall_cycles",
                  "footprint_bytes", "faults", "first_fault", "fault_layer", "validated", "max_abs", "max_rel",
                  "cosine", "top1", "error")


@dataclass
class GridRow:
    model: str
    profile: str
    params: dict  # axis name -> value of this point
    options: dict  # every CompileOptions field of this point
    status: str = "error"  # "ok" | "fault" | "error"
    end_reason: str = ""
    cycles: int = 0
    ms: float = 0.0
    bank_conflicts: int | None = 0  # None: not counted (an ST output's replay times pools, it does not count)
    cross_bank_splits: int | None = 0
    stall_cycles: int | None = 0
    footprint_bytes: int = 0
    faults: int = 0
    first_fault: str = ""
    fault_layer: str = ""
    validated: str = ""  # "pass" | "fail" | "" (not validated)
    max_abs: float | None = None
    max_rel: float | None = None
    cosine: float | None = None
    top1: bool | None = None
    error: str = ""
    error_code: int = 0

    def label(self) -> str:
        parts = [f"{k}={_text(v)}" for k, v in self.params.items()]
        return " ".join([self.model, *([f"profile={self.profile}"] if self.profile else []), *parts])

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class GridResult:
    axes: list[str]  # names of the varied parameters (CompileOptions fields, set:KEY)
    rows: list[GridRow]
    profiles: list[str] = field(default_factory=list)

    def faulting(self) -> list[GridRow]:
        return [r for r in self.rows if r.status == "fault"]

    def failing_validation(self) -> list[GridRow]:
        """Points that ran clean but whose outputs miss the reference (a faulting run never passes)."""
        return [r for r in self.rows if r.validated == "fail" and r.status == "ok"]

    def errors(self) -> list[GridRow]:
        return [r for r in self.rows if r.status == "error"]

    def fastest_clean(self) -> dict[str, GridRow]:
        """Per model: the clean point (no fault, validation not failed) with the fewest cycles."""
        best: dict[str, GridRow] = {}
        for r in self.rows:
            if r.status == "ok" and r.validated != "fail" and (r.model not in best or r.cycles < best[r.model].cycles):
                best[r.model] = r
        return best

    def columns(self) -> list[str]:
        return ["model", "profile", *self.axes, *RESULT_COLUMNS]

    def table_rows(self) -> list[dict]:
        return [{"model": r.model, "profile": r.profile, **{a: _text(r.params.get(a)) for a in self.axes},
                 **{c: getattr(r, c) for c in RESULT_COLUMNS}} for r in self.rows]

    def to_dict(self) -> dict:
        return {"axes": self.axes, "profiles": self.profiles, "rows": [r.to_dict() for r in self.rows],
                "summary": {"points": len(self.rows), "faulting": [r.label() for r in self.faulting()],
                            "failing_validation": [r.label() for r in self.failing_validation()],
                            "errors": [r.label() for r in self.errors()],
                            "fastest_clean": {m: r.label() for m, r in self.fastest_clean().items()}}}


def _text(v) -> str:
    if isinstance(v, (tuple, list)):
        return "x".join(map(str, v))
    if isinstance(v, dict):
        return ";".join(f"{k}={_text(x)}" for k, x in v.items())
    return "" if v is None else str(v)


# ------------------------------------------------------------------ planning and the point task

def plan(names: list[str], options, axes, profiles, overrides) -> list[dict]:
    """Every point of the product as a task (plain data); options and profiles are checked here,
    before any work. `profiles`: sources (None = the default); `overrides`: --set for all."""
    from ..hw import load_profile

    n = len(names) * len(profiles)
    for _, values in axes:
        n *= len(values)
    if n > MAX_POINTS:
        raise UsageError(f"grid of {n:,} points: more than {MAX_POINTS:,}; split it")
    tasks = []
    for mi, _ in enumerate(names):
        for src in profiles:
            for combo in itertools.product(*[values for _, values in axes]):
                opts, ovr = options, list(overrides)
                for (param, _), value in zip(axes, combo):
                    opts, ovr = apply(opts, ovr, param, value)
                profile = load_profile(src, ovr)
                tasks.append({"model": mi, "profile": profile.to_dict(), "profile_name": str(src or profile.name),
                              "params": {param: value for (param, _), value in zip(axes, combo)},
                              "options": options_dict(opts)})
    return tasks


@dataclass(frozen=True)
class StModel:
    """An ST Edge AI Core output in a grid: its path (each worker reads it once, `stedgeai.load`)."""

    path: str


def _st_point(model: StModel, profile) -> dict:
    """One point of an ST output: its program replayed and timed on `profile` (no compile step)."""
    from .st_run import point_summary, run_st

    return point_summary(run_st(model.path, profile=profile))


def grid_point(task: dict, *models: SharedModel) -> dict:
    """One point on a worker: compile, run (functional when validating), validate when asked; an ST
    output is replayed as ST compiled it."""
    from ..compiler import CompileOptions

    model = models[task["model"]]
    profile = profile_of(task["profile"])
    if isinstance(model, StModel):
        return _st_point(model, profile)
    options = CompileOptions(**task["options"])
    if not task["validate"]:
        program, res = compile_and_run(model, options, profile, functional=task["functional"])
        return summary(program, res, profile)
    from ..reference import validate
    from ..runtime import RunOptions, seeded_inputs

    program = compile_point(model, options, profile)
    rep = validate(program, parsed(model), seeded_inputs(program, 0), run_options=RunOptions(trace=False),
                   profile=profile)
    out = summary(program, rep.run_result, profile)
    if rep.metrics:
        ms = list(rep.metrics.values())
        out.update(validated="pass" if rep.passed else "fail", max_abs=max(m.max_abs for m in ms),
                   max_rel=max(m.max_rel for m in ms), cosine=min(m.cosine for m in ms), top1=all(m.top1 for m in ms))
    else:
        out["validated"] = "fail"  # a faulting run never passes
    return out


def grid(models, options=None, axes=(), profiles=(None,), overrides=(), functional: bool = False,
         validate: bool = False, calibration=None, progress: bool = True, executor=None) -> GridResult:
    """Run the product of `models` (paths or ModelProtos) x `profiles` x `axes` ([(param, values)],
    param a CompileOptions field or "set:KEY") on `executor` (default: in this process)."""
    from ..compiler import CompileOptions
    from .parallel import Executor

    options = options or CompileOptions()
    profiles = list(profiles) or [None]
    axes = [(p, list(v)) for p, v in axes]
    names = [str(Path(m).name) if isinstance(m, (str, Path)) else (m.graph.name or f"model{i}")
             for i, m in enumerate(models)]
    if len(set(names)) != len(names):
        names = [str(m) if isinstance(m, (str, Path)) else n for m, n in zip(models, names)]
    st = [isinstance(m, (str, Path)) and is_st_output(m) for m in models]
    if any(st):
        _check_st_axes([n for n, s in zip(names, st) if s][0], axes, functional or validate)
    tasks = plan(names, options, axes, profiles, overrides)
    cal = calibration if calibration is not None else options.calibration
    shared_models = [StModel(str(m)) if s else share_model(m, cal, name) for m, name, s in zip(models, names, st)]
    for t in tasks:
        t.update(functional=functional or validate, validate=validate)
        if st[t["model"]]:
            t["options"] = {}  # ST compiled it: npusim's compile options play no part
    ex = executor if executor is not None else Executor(progress)
    handles = [ex.share(m) for m in shared_models]
    results = ex.map(grid_point, tasks, *handles, desc="grid")
    rows = []
    for t, r in zip(tasks, results):
        row = GridRow(model=names[t["model"]], profile=t["profile_name"] if len(profiles) > 1 or profiles[0] else "",
                      params=t["params"], options=t["options"])
        if r.ok:
            for k, v in r.value.items():
                if hasattr(row, k):
                    setattr(row, k, v)
        else:
            row.error, row.error_code = r.error.text(), r.error.exit_code
        rows.append(row)
    return GridResult(axes=[p for p, _ in axes], rows=rows, profiles=[str(p or "") for p in profiles])


def _check_st_axes(name: str, axes, values: bool) -> None:
    """An ST output's program is ST's: compile options do not apply to it, and it has no values yet."""
    compile_axes = [p for p, _ in axes if not p.startswith("set:")]
    if compile_axes:
        raise UsageError(f"grid: compile options ({', '.join(compile_axes)}) do not apply to the ST Edge AI output "
                         f"'{name}' (its program is ST's); vary --profile, --set and --sweep-set, or grid it apart")
    if values:
        raise UsageError(f"grid: --functional/--validate compute values, which a replay of the ST Edge AI output "
                         f"'{name}' does not (timing and memory only)")


# ------------------------------------------------------------------ output

def write_csv(result: GridResult, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=result.columns())
        w.writeheader()
        w.writerows(result.table_rows())
    return path


def write_json(result: GridResult, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.to_dict(), indent=1, default=_text) + "\n", encoding="utf-8")
    return path


def format_table(result: GridResult) -> str:
    keys = ["model", *(["profile"] if any(r.profile for r in result.rows) else []), *result.axes]
    rows = result.table_rows()
    width = {k: max(len(k), *(len(str(r[k])) for r in rows)) for k in keys} if rows else {k: len(k) for k in keys}
    head = "  ".join(f"{k:<{width[k]}}" for k in keys) + f"  {'status':>6} {'cycles':>12} {'conflicts':>10} " \
                                                           f"{'splits':>8} {'footprint':>10}  detail"
    lines = [head, "-" * len(head)]
    for r, row in zip(result.rows, rows):
        detail = r.error or (f"{r.first_fault} in {r.fault_layer}" if r.first_fault else "")
        if r.validated:
            detail = (detail + "; " if detail else "") + (f"validation {r.validated}" + (
                f" (cosine {r.cosine:.5f}, max_rel {r.max_rel:.3g})" if r.cosine is not None else ""))
        lines.append("  ".join(f"{str(row[k]):<{width[k]}}" for k in keys) +
                     f"  {r.status:>6} {r.cycles:>12,} {_count(r.bank_conflicts):>10} {_count(r.cross_bank_splits):>8} "
                     f"{r.footprint_bytes:>10,}  {detail}")
    return "\n".join(lines)


def _count(v) -> str:
    return "-" if v is None else f"{v:,}"


def format_summary(result: GridResult) -> str:
    n = len(result.rows)
    counts = {s: sum(r.status == s for r in result.rows) for s in ("ok", "fault", "error")}
    dims = " x ".join([f"{len({r.model for r in result.rows})} model(s)"] +
                      [f"{len({_text(r.params.get(a)) for r in result.rows})} {a}" for a in result.axes])
    lines = [f"grid: {n} point(s) ({dims}): {counts['ok']} ok, {counts['fault']} fault, {counts['error']} error"]
    validated = [r for r in result.rows if r.validated]
    if validated:
        lines[0] += f"; validation: {sum(r.validated == 'pass' for r in validated)} pass, " \
                    f"{sum(r.validated == 'fail' for r in validated)} fail"
    for title, rows in (("faulting points", result.faulting()), ("failing validation", result.failing_validation()),
                        ("errors", result.errors())):
        if rows:
            lines.append(f"{title}:")
            lines.extend(f"  {r.label()}: " + (r.error or (f"{r.first_fault} in {r.fault_layer}" if r.first_fault
                                                             else f"cosine {r.cosine}")) for r in rows)
    best = result.fastest_clean()
    lines.append("fastest clean point per model:")
    models = list(dict.fromkeys(r.model for r in result.rows))
    for m in models:
        r = best.get(m)
        lines.append(f"  {m}: " + (f"{' '.join(r.label().split(' ')[1:]) or '(the only point)'} ({r.cycles:,} cycles)"
                                   if r else "no clean point"))
    return "\n".join(lines)


def raise_for_errors(result: GridResult) -> None:
    """After the output is written: exit 1 if some point hit a bug or lost its worker; every point
    failing with the same kind of input error exits with that error's code."""
    from .parallel import TaskFailed

    errors = result.errors()
    internal = [r for r in errors if r.error_code == 1]
    if internal or (errors and len(errors) == len(result.rows)):
        first = (internal or errors)[0]
        raise TaskFailed(f"{len(internal or errors)} of {len(result.rows)} grid point(s) failed ({first.label()}): "
                         f"{first.error}", first.error_code)
