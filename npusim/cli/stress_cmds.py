"""`npusim stress`: repeated runs, overnight soaks and several processes on one NPU (`tools.stress`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import UsageError
from .st_options import add_st_options
from .common import add_profile_options, float_in, int_in, output_file, profile_from_args, profile_given, seed_int, \
    subcommand, write_out

PLANTS = {"leak-output": "leak_output_every", "short-free": "short_free"}


def _duration(text: str) -> float:
    from ..tools.stress_options import MAX_DURATION_S, parse_duration

    try:
        v = parse_duration(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if not 0 < v <= MAX_DURATION_S:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration must lie in (0, 7 days]")
    return v


def _seeds(text: str) -> list[int]:
    from ..tools.stress_options import parse_seeds

    try:
        return parse_seeds(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _plant(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if name not in PLANTS or not sep:
        raise argparse.ArgumentTypeError(f"{text!r}: expected leak-output=K (every K-th inference leaves its output "
                                         f"buffers allocated) or short-free=BYTES (every free returns BYTES too few)")
    return PLANTS[name], int_in(1, 1 << 24, name)(value)


def _stress_args(p):
    from ..compiler.cli_args import add_compile_arguments
    from ..sharing import BUFFERING, POLICIES, POOL_STRATEGIES
    from ..tools.stress_options import MAX_FRAMES, MAX_RUNS, MAX_STEPS

    p.add_argument("model", nargs="+", help="blobs (.npu) or ONNX models (compiled first), or ST Edge AI Core "
                                            "outputs (their epoch blocks interleaved on one NPU: which process writes "
                                            "into another's buffers); process i runs model i mod their number")
    g = p.add_argument_group("runs")
    g.add_argument("-n", "--runs", type=int_in(1, MAX_RUNS, "runs"), default=1000,
                   help="runs per process (default: 1000)")
    g.add_argument("--duration", type=_duration, default=None, metavar="TIME",
                   help="overnight mode: run until TIME has passed (8h, 30m, 90s; --runs is then ignored), "
                        "writing a CSV and a PNG (default names npusim-stress.csv / .png)")
    g.add_argument("--frames", type=int_in(1, MAX_FRAMES, "frames"), default=8,
                   help="distinct seeded random frames per program (default: 8)")
    g.add_argument("--inputs", metavar="DIR", default=None,
                   help="frames from the .npy (single-input models) or .npz (one array per input) files of DIR, "
                        "in the model's own layout and type (a TFLite model's: NHWC uint8/int8); a file's shape "
                        "picks the program")
    g.add_argument("--shapes", metavar="HxW[,HxW...]", default=None,
                   help="ONNX models: compile one program per input shape and vary them (where the model allows)")
    g.add_argument("--steps", type=int_in(1, MAX_STEPS, "steps"), default=1,
                   help="generative loop: each run is N inferences, each step's output fed back as the next input")
    g.add_argument("--check-every", type=int_in(0, MAX_RUNS, "check-every"), default=1, metavar="N",
                   help="compute values and compare them every N-th run (default: 1); the others run timing-only")
    g.add_argument("--timing-only", action="store_true", help="no values at all (same as --check-every 0)")
    g.add_argument("--reference", metavar="MODEL", default=None,
                   help="also compare outputs with the model's own runtime: ONNX Runtime for an ONNX model, the "
                        "TFLite interpreter for a .tflite (exit 3 below the precision's thresholds)")
    g.add_argument("--monitor", type=float_in(0.001, 3600), default=None, metavar="SECONDS",
                   help="print a monitor line every SECONDS: NPU utilisation, pool in use, inferences/s")
    g.add_argument("--keep-going", action="store_true", help="an inference runs on past its faults")
    m = p.add_argument_group("processes and the runtime's pool")
    m.add_argument("--processes", type=int_in(1, 16, "processes"), default=None,
                   help="processes sharing the NPU (default: one per model)")
    m.add_argument("--pool-strategy", choices=POOL_STRATEGIES, default="shared",
                   help="shared: one correct pool; misconfigured: every process is handed the same range; "
                        "partitioned: one partition each; serialised: misconfigured, but whole inferences one at "
                        "a time (default: shared)")
    m.add_argument("--schedule", choices=POLICIES, default="round-robin",
                   help="who runs the next epoch (priority: the first process highest; default: round-robin)")
    m.add_argument("--seed", type=seed_int, default=0, help="seed of the frames, arrivals and scheduler (default: 0)")
    m.add_argument("--seeds", type=_seeds, default=None, metavar="A-B|A,B,...",
                   help="a fleet: one independent board per seed, run in parallel (--workers); a table per seed")
    m.add_argument("--period", type=float_in(0, 1e6), default=0.0, metavar="MS",
                   help="mean simulated time between a process's runs (default: 0, back to back)")
    m.add_argument("--jitter", type=float_in(0, 1), default=0.5, metavar="FRACTION",
                   help="seeded +- fraction of --period (default: 0.5)")
    m.add_argument("--buffers", choices=BUFFERING, default="per-run",
                   help="per-run: allocate and free every inference's buffers; fixed: allocate once, reuse")
    m.add_argument("--alloc-align", type=int_in(1, 1 << 20, "alignment"), default=32, metavar="BYTES",
                   help="alignment of the runtime's I/O buffers (a power of two; default: 32)")
    m.add_argument("--alloc-pad", type=int_in(0, 1 << 24, "padding"), default=0, metavar="BYTES",
                   help="bytes the runtime pads after each I/O buffer (default: 0)")
    m.add_argument("--plant", type=_plant, action="append", default=[], metavar="BUG=N",
                   help="plant a runtime bug: leak-output=K or short-free=BYTES (repeatable)")
    o = p.add_argument_group("output")
    o.add_argument("--csv", type=output_file(".csv"), default=None, metavar="FILE.csv", help="one row per inference")
    o.add_argument("--plot", type=output_file(".png"), default=None, metavar="FILE.png",
                   help="pool use and cycles over the inferences")
    o.add_argument("--json", type=output_file(".json"), default=None, metavar="FILE.json", help="the report as JSON")
    from ..tools.parallel import add_arguments as add_parallel_arguments

    add_parallel_arguments(p)
    add_compile_arguments(p)
    add_profile_options(p, "the blob's target profile")
    add_st_options(p)


@subcommand("stress", "stress / soak runs, several processes on one NPU: faults, drift, pool use, leak trend "
                      "(exit 139 fault, 4 leak, 3 drift)", _stress_args)
def _stress(args) -> int:
    import json
    import sys
    from dataclasses import replace

    from ..compiler.cli_args import options_from_args
    from ..importers.stedgeai import is_st_output
    from ..progress import Bar
    from ..tools.stress import StressOptions, load_target, parse_shapes, stress
    from .common import model_path

    st = [Path(m).exists() and is_st_output(m) for m in args.model]
    if any(st):
        if not all(st):
            raise UsageError("stress: ST Edge AI outputs and npusim blobs/models cannot share one stress "
                             "(ST's programs have fixed addresses, npusim's runtime allocates): stress them apart")
        return _stress_st(args)
    if args.user_io or args.reserve or args.board_ram_off:
        raise UsageError("stress: --user-io, --reserve and --board-ram-off are for ST Edge AI outputs")

    plants = dict(args.plant)
    csv, plot = args.csv, args.plot
    if args.duration is not None:
        csv, plot = csv or "npusim-stress.csv", plot or "npusim-stress.png"
    opts = StressOptions(runs=args.runs, duration=args.duration, processes=args.processes,
                         strategy=args.pool_strategy, schedule=args.schedule, seed=args.seed, frames=args.frames,
                         inputs_dir=args.inputs, steps=args.steps,
                         check_every=0 if args.timing_only else args.check_every, period_ms=args.period,
                         jitter=args.jitter, monitor=args.monitor, buffering=args.buffers,
                         alloc_align=args.alloc_align, alloc_pad=args.alloc_pad,
                         leak_output_every=plants.get("leak_output_every", 0), short_free=plants.get("short_free", 0),
                         keep_going=args.keep_going, csv=csv, plot=plot)
    if args.reference and opts.check_every == 0:
        raise UsageError("--reference compares values: not with --timing-only / --check-every 0")
    if args.seeds is not None and (args.csv or args.plot or args.monitor or args.duration is not None and
                                   (csv or plot)):
        if args.csv or args.plot or args.monitor:
            raise UsageError("--seeds runs a fleet: --csv, --plot and --monitor follow one run (give --seed)")
        csv = plot = None
        opts = replace(opts, csv=None, plot=None)
    profile = profile_from_args(args) if profile_given(args) else None
    shapes = parse_shapes(args.shapes) if args.shapes else None
    compile_options = options_from_args(args)
    targets = [load_target(model_path(m), shapes, compile_options, profile) for m in args.model]
    reference = model_path(args.reference) if args.reference else None
    if args.seeds is not None:
        return _fleet(args, targets, opts, profile, reference)
    with Bar("stress", unit="run") as bar:
        rep = stress(targets, opts, profile=profile, reference=reference, progress=bar,
                     monitor=(lambda line: bar.write(line)) if args.monitor else None)
    if args.json:
        write_out(args.json, json.dumps(rep.to_json(), indent=2) + "\n")
    write_out(None, rep.text())
    if csv:
        print(f"npusim: wrote {csv}" + (f" and {plot}" if plot else ""), file=sys.stderr)
    elif plot:
        print(f"npusim: wrote {plot}", file=sys.stderr)
    return rep.exit_code


# options of an npusim stress that mean nothing to a replay of ST's program (no values, no runtime allocator)
NOT_FOR_ST = {"duration": None, "inputs": None, "shapes": None, "steps": 1, "timing_only": False, "reference": None,
              "monitor": None, "keep_going": False, "pool_strategy": "shared", "seeds": None, "period": 0.0,
              "buffers": "per-run", "alloc_align": 32, "alloc_pad": 0, "plant": [], "csv": None, "plot": None,
              "frames": 8, "check_every": 1}


def _stress_st(args) -> int:
    """Several ST Edge AI outputs (or instances of one) on one NPU (`tools.st_stress`)."""
    import json

    from ..tools.st_stress import st_stress
    from .st_options import replay_options

    from ..compiler import CompileOptions
    from ..compiler.cli_args import options_from_args

    given = [k for k, default in NOT_FOR_ST.items() if getattr(args, k) != default]
    if options_from_args(args) != CompileOptions():
        raise UsageError("stress: compile options do not apply to ST Edge AI outputs (their program is ST's)")
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise UsageError(f"stress: {flag} does not apply to ST Edge AI outputs (their replay moves no values and "
                         f"ST's runtime allocates nothing): give --runs, --processes, --schedule, --seed, --json")
    profile = profile_from_args(args) if profile_given(args) else None
    rep = st_stress(args.model, runs=args.runs,
                    processes=args.processes, seed=args.seed, schedule=args.schedule, profile=profile,
                    options=replay_options(args))
    if args.json:
        write_out(args.json, json.dumps(rep.to_json(), indent=2) + "\n")
    write_out(None, rep.text())
    return rep.exit_code


SEVERITY = (139, 4, 3, 65, 2, 1)  # a fleet's exit code: the most severe of its seeds'


def _fleet(args, targets, opts, profile, reference) -> int:
    import json
    import sys

    from ..tools import parallel
    from ..tools.stress_fleet import fleet, table

    with parallel.from_args(args, tasks=len(args.seeds), progress=sys.stderr.isatty()) as ex:
        rows = fleet(targets, opts, args.seeds, profile=profile, reference=reference, executor=ex)
    if args.json:
        write_out(args.json, json.dumps([{k: v for k, v in r.items() if k != "text"} for r in rows], indent=2) + "\n")
    write_out(None, table(rows))
    bad = next((r for r in rows if r.get("exit_code") and "text" in r), None)
    if bad is not None:
        write_out(None, f"\nseed {bad['seed']}:\n" + bad["text"])
    codes = {r.get("exit_code", 0) for r in rows}
    return next((c for c in SEVERITY if c in codes), 0)
