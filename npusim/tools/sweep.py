"""Sweep one compile option or profile key: compile, run timing-only, record cost per point."""

from __future__ import annotations

import csv
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UsageError

CSV_COLUMNS = ("param", "value", "mem_align", "status", "cycles", "ms", "bank_conflicts", "cross_bank_splits",
               "stall_cycles", "footprint_bytes", "faults", "first_fault")


@dataclass
class SweepPoint:
    value: object
    mem_align: int
    status: str  # "ok" | "fault"
    cycles: int
    ms: float
    bank_conflicts: int
    cross_bank_splits: int
    stall_cycles: int
    footprint_bytes: int
    faults: int
    first_fault: str = ""
    layers: dict = field(default_factory=dict)  # layer name -> cycles

    def row(self, param: str) -> dict:
        d = {k: getattr(self, k) for k in CSV_COLUMNS if hasattr(self, k)}
        d["param"] = param
        return d


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


def footprint_bytes(program) -> int:
    """Bytes of RAM the plan occupies: per pool, the end of its last non-weight buffer."""
    ends: dict[str, int] = {}
    for b in program.buffers:
        if b.kind != "weight":
            ends[b.pool] = max(ends.get(b.pool, 0), b.offset + b.size)
    return sum(ends.values())


def _option_fields(options) -> dict:
    return {f.name: f for f in dataclasses.fields(options)}


def parse_values(text: str) -> list:
    """"16,32,64" -> [16, 32, 64]; non-numbers stay strings ("all,none")."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            out.append(int(part, 0))
        except ValueError:
            out.append(part)
    if not out:
        raise UsageError(f"empty sweep value list {text!r}")
    return out


def run_point(model, options, profile, calibration=None):
    """Compile and run one configuration timing-only; returns (program, result)."""
    from ..compiler import compile as compile_model
    from ..runtime import RunOptions, run

    program = compile_model(model, options, profile=profile, calibration=calibration)
    result = run(program, options=RunOptions(timing_only=True, keep_going=False, trace=False),
                 profile=profile, random_inputs=True, seed=0)
    return program, result


def sweep(model, param: str, values: list, options=None, profile_source=None, overrides=(),
          calibration=None, progress: bool = True) -> SweepResult:
    """Sweep `param` over `values`.

    `param` is a CompileOptions field (e.g. "mem_align", "fuse", "mem_plan") or a profile key
    given as "set:KEY" (e.g. "set:pool.npuRAM3.banks"), which is applied with --set semantics.
    """
    from ..compiler import CompileOptions
    from ..hw import load_profile

    options = options or CompileOptions()
    is_profile_key = param.startswith("set:")
    if not is_profile_key and param not in _option_fields(options):
        known = ", ".join(sorted(_option_fields(options)))
        raise UsageError(f"cannot sweep {param!r}: not a compile option ({known}) nor set:KEY")
    points = []
    bar = progress_bar(values, progress, f"sweep {param}")
    for value in bar:
        ovr = list(overrides)
        opts = options
        if is_profile_key:
            ovr.append(f"{param[4:]}={value}")
        else:
            opts = dataclasses.replace(options, **{param: value})
        profile = load_profile(profile_source, ovr)
        program, res = run_point(model, opts, profile, calibration)
        st = res.stats
        points.append(SweepPoint(
            value=value, mem_align=opts.align(profile),
            status=res.status, cycles=int(st.cycles), ms=round(profile.cycles_to_ms(st.cycles), 4),
            bank_conflicts=int(st.bank_conflicts), cross_bank_splits=int(st.cross_bank_splits),
            stall_cycles=int(sum(st.stall_cycles.values())), footprint_bytes=footprint_bytes(program),
            faults=len(res.faults), first_fault=res.faults[0].cls if res.faults else "",
            layers={ly.name: int(ly.cycles) for ly in st.layers}))
    return SweepResult(param=param, points=points)


def progress_bar(values, enabled: bool, desc: str):
    """`values` behind a tqdm progress bar (stderr), or as they are."""
    if not enabled:
        return values
    from tqdm import tqdm

    return tqdm(values, desc=desc, unit="point", leave=False)


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
                     f"{p.cross_bank_splits:>9,} {p.footprint_bytes:>11,}  {p.first_fault}")
    best = result.best()
    if best is not None:
        lines.append(f"fastest clean point: {result.param}={best.value} ({best.cycles:,} cycles)")
    else:
        lines.append("no point ran clean")
    return "\n".join(lines)


# Options whose one value is itself a comma list: their sweep values are separated by "|".
LIST_VALUED = ("fuse", "input_shapes")


def options_and_param_from_args(args):
    """(CompileOptions, param, values) from `npusim sweep` arguments.

    The one option given several values is swept: a comma list (`--mem-align 16,32,64`), or for
    options whose value is itself a comma list a "|" list (`--fuse "all|none|conv-bn,conv-act"`,
    `--input-shape "1,3,224,224|1,3,256,256"`). `--sweep-set KEY=V1,V2` sweeps a profile key.
    """
    from ..compiler import CompileOptions
    from ..compiler.options import option_fields, parse_input_shapes

    kw, swept = {}, []
    for f in option_fields():
        raw = getattr(args, "sweep_" + f.name, None)
        if raw is None:
            continue
        if f.name in LIST_VALUED:
            items = raw if isinstance(raw, list) else [raw]
            alternatives = [part for item in items for part in item.split("|")] if any("|" in i for i in items) else None
            if alternatives is None:
                kw[f.name] = parse_input_shapes(items) if f.name == "input_shapes" else ",".join(items)
            else:
                swept.append((f.name, [parse_input_shapes([a]) if f.name == "input_shapes" else a
                                       for a in alternatives]))
            continue
        if f.type == "bool":
            kw[f.name] = True
            continue
        values = parse_values(raw)
        if len(values) > 1:
            swept.append((f.name, values))
        else:
            kw[f.name] = values[0]
    if args.sweep_set:
        key, _, vals = args.sweep_set.partition("=")
        swept.append((f"set:{key.strip()}", parse_values(vals)))
    if len(swept) != 1:
        raise UsageError("sweep: give exactly one option several values, e.g. --mem-align 16,32,64,128,256, "
                         "--fuse 'all|none', or one --sweep-set KEY=V1,V2")
    param, values = swept[0]
    return CompileOptions(**kw), param, values
