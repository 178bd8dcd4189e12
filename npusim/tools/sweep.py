"""Sweep one compile option or profile key: compile, run timing-only, record cost per point."""

from __future__ import annotations

import csv
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import NpusimError, UsageError
from .axes import apply, parse_values  # noqa: F401  (parse_values re-exported)
from .points import footprint_bytes  # noqa: F401  (re-exported: npusim.tools.sweep.footprint_bytes)
from .points import SharedModel, compile_and_run, front_key, options_dict, profile_of, share_model, summary, with_prepared

CSV_COLUMNS = ("param", "value", "mem_align", "status", "cycles", "ms", "bank_conflicts", "cross_bank_splits",
               "stall_cycles", "footprint_bytes", "faults", "first_fault", "fault_layer", "error")


@dataclass
class SweepPoint:
    value: object
    mem_align: int
    status: str  # "ok" | "fault" | "error" (the point did not compile or run: see `error`)
    end_reason: str = ""  # "done" | "fault" | "hang" | "cycle-limit" ("" for an error)
    cycles: int = 0
    ms: float = 0.0
    bank_conflicts: int = 0
    cross_bank_splits: int = 0
    stall_cycles: int = 0
    footprint_bytes: int = 0
    faults: int = 0
    first_fault: str = ""
    fault_layer: str = ""  # layer of the first fault: its cycles stop at the fault, later layers never ran
    error: str = ""
    error_code: int = 0  # exit code of the error (npusim.errors): 1 is a bug or a lost worker
    layers: dict = field(default_factory=dict)  # layer name -> cycles

    def row(self, param: str) -> dict:
        d = {k: getattr(self, k) for k in CSV_COLUMNS if hasattr(self, k)}
        d["param"] = param
        return d

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class SweepResult:
    param: str
    points: list[SweepPoint]

    def best(self) -> SweepPoint | None:
        ok = [p for p in self.points if p.status == "ok"]
        return min(ok, key=lambda p: p.cycles) if ok else None

    def layer_names(self) -> list[str]:
        names: list[str] = []
        for p in self.points:
            for n in p.layers:
                if n not in names:
                    names.append(n)
        return names

    def errors(self) -> list[SweepPoint]:
        return [p for p in self.points if p.status == "error"]

    def to_dict(self) -> dict:
        return {"param": self.param, "points": [p.to_dict() for p in self.points]}


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during a sweep: `partial` holds the points that finished (in value order), of `total`."""

    def __init__(self, partial: SweepResult, total: int):
        super().__init__()
        self.partial = partial
        self.total = total


def _option_fields(options) -> dict:
    return {f.name: f for f in dataclasses.fields(options)}


def run_point(model, options, profile, calibration=None):
    """Compile and run one configuration timing-only; returns (program, result)."""
    from ..compiler.frontends.sources import load_source

    src = load_source(model)
    return compile_and_run(src.data if src.kind == "tflite" else src.proto, options, profile, calibration)


def sweep_point(task: dict, model: SharedModel) -> dict:
    """One point on a worker: compile with `task["options"]` for `task["profile"]`, run timing-only."""
    from ..compiler import CompileOptions

    profile = profile_of(task["profile"])
    program, res = compile_and_run(model, CompileOptions(**task["options"]), profile)
    return summary(program, res, profile)


def plan(param: str, values: list, options=None, profile_source=None, overrides=()) -> list[dict]:
    """The tasks of a sweep (plain data), every option and profile checked before any work starts."""
    from ..compiler import CompileOptions
    from ..hw import load_profile

    options = options or CompileOptions()
    if not param.startswith("set:") and param not in _option_fields(options):
        known = ", ".join(sorted(_option_fields(options)))
        raise UsageError(f"cannot sweep {param!r}: not a compile option ({known}) nor set:KEY")
    tasks = []
    for value in values:
        opts, ovr = apply(options, list(overrides), param, value)
        profile = load_profile(profile_source, ovr)
        tasks.append({"value": value, "mem_align": opts.align(profile), "options": options_dict(opts),
                      "profile": profile.to_dict()})
    return tasks


def sweep(model, param: str, values: list, options=None, profile_source=None, overrides=(),
          calibration=None, progress: bool = True, executor=None) -> SweepResult:
    """Sweep `param` over `values`.

    `param` is a CompileOptions field (e.g. "mem_align", "fuse", "mem_plan") or a profile key
    given as "set:KEY" (e.g. "set:pool.npuRAM3.banks"), which is applied with --set semantics.
    The points run on `executor` (`npusim.tools.parallel`; default: in this process), each from
    the same shared model, so the result is the same whatever runs them. A point that fails to
    compile or run is a point with status "error" and its message. Ctrl-C raises `SweepInterrupted`
    with the points that finished.
    """
    from .parallel import Executor, Interrupted

    from ..compiler import CompileOptions
    from ..hw import load_profile

    tasks = plan(param, values, options, profile_source, overrides)
    cal = calibration if calibration is not None else getattr(options, "calibration", None)
    shared = share_model(model, cal)
    point_options = [CompileOptions(**t["options"]) for t in tasks]
    if len({front_key(shared, o) for o in point_options}) == 1:  # one front end for every point: run it once
        try:
            shared = with_prepared(shared, point_options[0], load_profile(profile_source, overrides))
            shared = dataclasses.replace(shared, data=b"")  # every point starts from the Prepared: no need to ship it
        except NpusimError:
            pass  # e.g. the first point's weights pool is too small: each point reports its own error
    ex = executor if executor is not None else Executor(progress)
    try:
        results = ex.map(sweep_point, tasks, ex.share(shared), desc=f"sweep {param}")
    except Interrupted as e:
        raise SweepInterrupted(SweepResult(param, _points(tasks, e.results)), len(tasks)) from None
    return SweepResult(param=param, points=_points(tasks, results))


def _points(tasks: list[dict], results: list) -> list[SweepPoint]:
    """One SweepPoint per finished task (a None result: the task never finished, no point)."""
    points = []
    for t, r in zip(tasks, results):
        if r is None:
            continue
        if r.ok:
            points.append(SweepPoint(value=t["value"], mem_align=t["mem_align"], **r.value))
        else:
            points.append(SweepPoint(value=t["value"], mem_align=t["mem_align"], status="error",
                                     error=r.error.text(),
                                     error_code=r.error.exit_code))
    return points


def progress_bar(values, enabled: bool, desc: str):
    """`values` behind a tqdm progress bar (stderr), or as they are."""
    if not enabled:
        return values
    import sys

    from tqdm import tqdm

    return tqdm(values, desc=desc, unit="point", leave=False, file=sys.stderr)


def write_csv(result: SweepResult, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for p in result.points:
            w.writerow(p.row(result.param))
    return path


def format_table(result: SweepResult) -> str:
    head = f"{result.param:>12} {'status':>7} {'cycles':>12} {'ms':>9} {'conflicts':>10} {'splits':>9} {'footprint':>11}  fault"
    lines = [head, "-" * len(head)]
    for p in result.points:
        lines.append(f"{str(p.value):>12} {p.status:>7} {p.cycles:>12,} {p.ms:>9.3f} {p.bank_conflicts:>10,} "
                     f"{p.cross_bank_splits:>9,} {p.footprint_bytes:>11,}  {p.first_fault or p.error}")
    best = result.best()
    if best is not None:
        lines.append(f"fastest clean point: {result.param}={best.value} ({best.cycles:,} cycles)")
    else:
        lines.append("no point ran clean")
    return "\n".join(lines)


def raise_for_errors(result: SweepResult) -> None:
    """After the output is written: every point failed -> its error (same exit code as one compile);
    some point hit a bug or lost its worker -> exit 1 naming it. Input errors of some points are rows."""
    from .parallel import TaskFailed

    errors = result.errors()
    if not errors:
        return
    internal = [p for p in errors if p.error_code == 1]
    first = (internal or errors)[0]
    if len(errors) == len(result.points) or internal:
        n = len(internal or errors)
        raise TaskFailed(f"{n} of {len(result.points)} point(s) failed ({result.param}={first.value}): {first.error}",
                         first.error_code)


def options_and_param_from_args(args):
    """(CompileOptions, param, values) from `npusim sweep` arguments: exactly one axis
    (`npusim.tools.axes`); several are the product `npusim grid` runs."""
    from ..compiler import CompileOptions
    from .axes import axes_from_args

    fixed, axes = axes_from_args(args)
    if len(axes) != 1:
        hint = (f" (got {len(axes)}: {', '.join(a for a, _ in axes)}; npusim grid runs the product)" if axes else "")
        raise UsageError("sweep varies one thing: give exactly one option several values, e.g. "
                         f"--mem-align 16,32,64,128,256, --fuse 'all|none', or one --sweep-set KEY=V1,V2{hint}")
    param, values = axes[0]
    return CompileOptions(**fixed), param, values
