"""The `npusim` command line: argparse over the public API, no logic of its own.

Add a subcommand with one small function:

    @subcommand("run", "simulate a blob", args=lambda p: (p.add_argument("blob"), add_profile_options(p)))
    def _run(args) -> int:
        from .runtime import run        # heavy imports (numba, onnx) only inside handlers
        ...
        return EXIT_OK

Handlers return an exit code; they raise NpusimError subclasses for errors, which
`main` prints as one line `npusim: error: <msg>` and maps to the error's exit code.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .errors import (EXIT_FAULT, EXIT_INTERNAL, EXIT_OK, EXIT_USAGE, EXIT_VALIDATION_FAILED, NpusimError,
                     UsageError)

EXIT_CODES = (
    (0, "ok"),
    (2, "usage error"),
    (3, "validation failed (outputs differ from the reference)"),
    (65, "invalid input file (blob, model, profile, data)"),
    (139, "simulated NPU fault"),
    (1, "internal error"),
)


@dataclass(frozen=True)
class Subcommand:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], object] | None
    handler: Callable[[argparse.Namespace], int]


SUBCOMMANDS: dict[str, Subcommand] = {}


def subcommand(name: str, help: str, args: Callable[[argparse.ArgumentParser], object] | None = None):
    """Decorator registering `handler(args) -> int` as `npusim NAME` (a later one replaces an earlier)."""

    def deco(handler):
        SUBCOMMANDS[name] = Subcommand(name, help, args, handler)
        return handler

    return deco


def add_profile_options(parser: argparse.ArgumentParser) -> None:
    """`--profile FILE|NAME` and repeatable `--set KEY=VALUE`."""
    parser.add_argument("--profile", metavar="FILE|NAME", default=None,
                        help="hardware profile: a TOML file or a built-in name (default: n657, or the blob's target)")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="set",
                        help="override one profile key, e.g. --set alignment.granule=64 (repeatable)")


def profile_from_args(args: argparse.Namespace, default: str | None = None):
    """The HardwareProfile selected by `add_profile_options` (`default` if --profile is not given)."""
    from .hw import load_profile

    return load_profile(args.profile or default, list(args.set or ()))


def profile_given(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "profile", None) or getattr(args, "set", None))


def _epilog() -> str:
    rows = "\n".join(f"  {code:>3}  {text}" for code, text in EXIT_CODES)
    return f"exit codes:\n{rows}\n\nset NPUSIM_DEBUG=1 to get a traceback on internal errors."


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit code 2
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = _Parser(prog="npusim", description="Cycle-approximate simulator of the STM32N657 Neural-ART NPU.",
                     epilog=_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"npusim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in SUBCOMMANDS:
        sc = SUBCOMMANDS[name]
        p = sub.add_parser(name, help=sc.help, description=sc.help, epilog=_epilog(),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        if sc.add_arguments is not None:
            sc.add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as e:  # --help / --version
            return int(e.code or 0)
        if not args.command:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        return int(SUBCOMMANDS[args.command].handler(args) or EXIT_OK)
    except NpusimError as e:
        print(f"npusim: error: {_one_line(e)}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("npusim: error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as e:  # noqa: BLE001 - the one place that turns bugs into exit code 1
        if os.environ.get("NPUSIM_DEBUG") == "1":
            import traceback

            traceback.print_exc()
        print(f"npusim: internal error: {type(e).__name__}: {_one_line(e)}", file=sys.stderr)
        return EXIT_INTERNAL


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


# ---------------------------------------------------------------- subcommands


def _write_out(path: str | None, text_or_bytes) -> None:
    if path is None or path == "-":
        if isinstance(text_or_bytes, bytes):
            sys.stdout.buffer.write(text_or_bytes)
        else:
            sys.stdout.write(text_or_bytes)
        return
    mode = "wb" if isinstance(text_or_bytes, bytes) else "w"
    try:
        with open(path, mode) as fh:
            fh.write(text_or_bytes)
    except OSError as e:
        raise UsageError(f"{path}: cannot write ({e.strerror or e})") from None


def _read_text(path: str) -> str:
    from .errors import InvalidInputError

    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        raise InvalidInputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidInputError(f"{path}: cannot read ({e})") from None


def _inspect_args(p):
    p.add_argument("blob", help="a .npu blob")
    p.add_argument("--json", action="store_true", help="print the same information as JSON")
    p.add_argument("--no-verify", action="store_true", help="load without running the ISA verifier")
    add_profile_options(p)


@subcommand("inspect", "show a blob's header, memory map and epochs", _inspect_args)
def _inspect(args) -> int:
    from .tools.inspect import inspect_blob, render_json, render_text

    profile = profile_from_args(args) if profile_given(args) else None
    info = inspect_blob(args.blob, profile=profile, verify=not args.no_verify)
    _write_out(None, render_json(info) if args.json else render_text(info))
    return EXIT_OK


def _asm_args(p):
    p.add_argument("source", help="assembly text (.s)")
    p.add_argument("-o", "--output", required=True, help="blob to write (.npu)")
    p.add_argument("--no-verify", action="store_true", help="write the blob even if the verifier complains")
    add_profile_options(p)


@subcommand("asm", "assemble a text program into a blob", _asm_args)
def _asm(args) -> int:
    from .program.asm import assemble
    from .program.blob import encode_blob, load_blob

    profile = profile_from_args(args) if profile_given(args) else None
    prog = assemble(_read_text(args.source), profile)
    if profile is None:
        profile = profile_from_args(args, prog.header.profile)
    blob = encode_blob(prog, profile)
    load_blob(blob, profile, verify=not args.no_verify)  # same checks a loader will make
    _write_out(args.output, blob)
    return EXIT_OK


def _disasm_args(p):
    p.add_argument("blob", help="a .npu blob")
    p.add_argument("-o", "--output", default=None, help="text file to write (default: stdout)")
    p.add_argument("--no-verify", action="store_true", help="load without running the ISA verifier")
    add_profile_options(p)


@subcommand("disasm", "disassemble a blob into text assembly", _disasm_args)
def _disasm(args) -> int:
    from .hw import load_profile
    from .program.asm import disassemble
    from .program.blob import load_blob

    profile = profile_from_args(args) if profile_given(args) else None
    prog = load_blob(args.blob, profile, verify=not args.no_verify)
    _write_out(args.output, disassemble(prog, profile or load_profile(prog.header.profile)))
    return EXIT_OK


# ------------------------------------------------------- compile / run / validate


def _input_options(p):
    p.add_argument("--input", metavar="NAME=FILE.npy", action="append", default=[],
                   help="bind an input (float32 array in the ONNX shape); repeatable")
    p.add_argument("--random-input", action="store_true", help="bind seeded random inputs to unbound inputs")
    p.add_argument("--seed", type=int, default=0, help="seed of --random-input (default 0)")


def _inputs_from_args(args, program) -> dict:
    from .runtime import seeded_inputs
    from .tools.inputs import load_inputs

    inputs = load_inputs(args.input)
    if args.random_input:
        inputs = {**seeded_inputs(program, args.seed), **inputs}
    return inputs


def _compile_args(p):
    from .compiler.cli_args import add_compile_arguments

    p.add_argument("model", help="an ONNX model")
    p.add_argument("-o", "--output", default=None, help="blob to write (default: MODEL.npu)")
    add_compile_arguments(p)
    add_profile_options(p)


@subcommand("compile", "compile an ONNX model into an N657 blob", _compile_args)
def _compile(args) -> int:
    from .compiler import compile as compile_model
    from .compiler.cli_args import options_from_args
    from .program.blob import encode_blob
    from .tools.sweep import footprint_bytes

    profile = profile_from_args(args)
    options = options_from_args(args)
    program = compile_model(args.model, options, profile=profile)
    out = args.output or str(Path(args.model).with_suffix(".npu"))
    _write_out(out, encode_blob(program, profile))
    epochs = sum(1 for c in program.commands if c.op == "EPOCH")
    print(f"npusim: wrote {out}: {epochs} epochs, {len(program.buffers)} buffers, "
          f"{footprint_bytes(program):,} B of RAM, mem_align {options.align(profile)}")
    return EXIT_OK


def _run_args(p):
    p.add_argument("blob", nargs="+", help="a .npu blob; several with one --context each (one shared NPU)")
    p.add_argument("--context", metavar="NAME:POOL=OFF+SIZE,...", action="append", default=[],
                   help="memory context of the blob at the same position (e.g. a:npuRAM3=0x0+0x30000,"
                        "octoFlash=0x0+0x10000); the blobs then run one after another in their partitions, "
                        "with seeded random inputs (--seed); exit 139 if any context faults")
    _input_options(p)
    p.add_argument("--timing-only", action="store_true", help="skip the value kernels (same cycles)")
    p.add_argument("--mode", choices=("fast", "burst"), default="fast", help="timing model (burst: small programs)")
    p.add_argument("--json", metavar="REPORT.json", default=None, help="write the JSON report")
    p.add_argument("--trace", metavar="TRACE.json", default=None, help="write a Chrome/Perfetto trace")
    p.add_argument("--outputs", metavar="DIR", default=None, help="write one .npy per output")
    p.add_argument("--keep-going", action="store_true", help="collect faults instead of stopping at the first")
    add_profile_options(p)


@subcommand("run", "simulate a blob: outputs, cycles, faults", _run_args)
def _run(args) -> int:
    import json

    import numpy as np

    from .runtime import RunOptions, load, run

    profile = profile_from_args(args) if profile_given(args) else None
    opts = RunOptions(timing_only=args.timing_only, keep_going=args.keep_going, trace=bool(args.trace),
                      mode=args.mode)
    if args.context or len(args.blob) > 1:
        return _run_shared(args, profile, opts)
    program = load(args.blob[0], profile)
    res = run(program, _inputs_from_args(args, program), opts, profile=profile)
    if args.json:
        _write_out(args.json, json.dumps(res.report_json(), indent=2) + "\n")
    if args.trace:
        _write_out(args.trace, res.trace_json())
    if args.outputs and res.outputs:
        d = Path(args.outputs)
        d.mkdir(parents=True, exist_ok=True)
        for name, arr in res.outputs.items():
            np.save(d / f"{_safe(name)}.npy", arr)
    _write_out(None, res.report_text() if res.faults else res.summary() + "\n")
    return EXIT_FAULT if res.faults else EXIT_OK


def parse_context(text: str):
    """`NAME:POOL=OFF+SIZE,...` (ints in any Python base) -> memory.Context."""
    from .memory import Context

    name, sep, rest = text.partition(":")
    parts = {}
    try:
        if not (name and sep and rest):
            raise ValueError
        for item in rest.split(","):
            pool, off_size = item.split("=")
            off, size = off_size.split("+")
            if pool.strip() in parts:
                raise UsageError(f"--context {text!r}: pool {pool.strip()!r} given twice")
            parts[pool.strip()] = (int(off, 0), int(size, 0))
    except ValueError:
        raise UsageError(f"--context {text!r}: expected NAME:POOL=OFFSET+SIZE[,POOL=OFFSET+SIZE...]") from None
    return Context(name, parts)


def _run_shared(args, profile, opts) -> int:
    import json

    from dataclasses import replace

    from .runtime import run_shared

    if len(args.context) != len(args.blob):
        raise UsageError(f"{len(args.blob)} blobs need {len(args.blob)} --context options, got {len(args.context)}")
    if args.input or args.trace or args.outputs:
        raise UsageError("--input, --trace and --outputs take one blob (contexts run with seeded random inputs)")
    from .runtime import load, seeded_inputs

    ctxs = [parse_context(c) for c in args.context]
    progs = [load(b, profile) for b in args.blob]
    jobs = [(p, c, seeded_inputs(p, args.seed)) for p, c in zip(progs, ctxs)]
    results = run_shared(jobs, profile=profile, options=replace(opts, trace=False))
    if args.json:
        _write_out(args.json, json.dumps({"contexts": {c.name: r.report_json() for c, r in zip(ctxs, results)}},
                                         indent=2) + "\n")
    for c, r in zip(ctxs, results):
        _write_out(None, f"context {c.name}: " + (r.report_text() if r.faults else r.summary() + "\n"))
    return EXIT_FAULT if any(r.faults for r in results) else EXIT_OK


def _validate_args(p):
    p.add_argument("blob", help="a .npu blob")
    p.add_argument("--reference", required=True, metavar="MODEL.onnx", help="the ONNX model it was compiled from")
    _input_options(p)
    p.add_argument("--max-rel", type=float, default=None, help="max |sim-ref| / max|ref| per output")
    p.add_argument("--min-cosine", type=float, default=None, help="minimum cosine similarity per output")
    p.add_argument("--top1", action="store_true", help="also require top-1 agreement")
    p.add_argument("--json", metavar="REPORT.json", default=None, help="write metrics as JSON")
    add_profile_options(p)


@subcommand("validate", "compare a blob's outputs with ONNX Runtime fp32 (exit 3 on a miss)", _validate_args)
def _validate(args) -> int:
    import dataclasses
    import json

    from .reference import default_thresholds, program_precision, validate
    from .runtime import load

    profile = profile_from_args(args) if profile_given(args) else None
    program = load(args.blob, profile)
    th = default_thresholds(program_precision(program))
    changes = {k: v for k, v in (("max_rel", args.max_rel), ("min_cosine", args.min_cosine)) if v is not None}
    if args.top1:
        changes["require_top1"] = True
    th = dataclasses.replace(th, **changes)
    if not args.input and not args.random_input:
        raise UsageError("validate: give --input NAME=FILE.npy or --random-input")
    rep = validate(program, _model_path(args.reference), _inputs_from_args(args, program), th, profile=profile)
    if args.json:
        doc = {"passed": rep.passed, "status": rep.run_result.status,
               "metrics": {k: m.to_dict() for k, m in rep.metrics.items()}, "failures": rep.failures}
        _write_out(args.json, json.dumps(doc, indent=2) + "\n")
    if rep.run_result.faults:
        _write_out(None, rep.run_result.report_text())
        return EXIT_FAULT
    _write_out(None, rep.text() + "\n")
    return EXIT_OK if rep.passed else EXIT_VALIDATION_FAILED


def _model_path(path: str) -> str:
    from .errors import InvalidInputError

    if not Path(path).is_file():
        raise InvalidInputError(f"{path}: no such file")
    return path


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


# ------------------------------------------------------------ workflows


def _sweep_args(p):
    from .compiler.options import option_fields

    p.add_argument("model", help="an ONNX model")
    group = p.add_argument_group("compile options (give one as a comma list to sweep it)")
    for f in option_fields():
        md = f.metadata
        group.add_argument(md["flag"], dest="sweep_" + f.name, default=None, metavar=md.get("metavar") or "V[,V...]",
                           action="append" if f.name == "input_shapes" else "store", help=md["help"])
    p.add_argument("--sweep-set", metavar="KEY=V1,V2,...", default=None,
                   help="sweep a profile key instead, e.g. --sweep-set pool.npuRAM3.banks=4,8,16")
    p.add_argument("--plot", metavar="FILE.png", default=None, help="plot cycles/conflicts/footprint vs the value")
    p.add_argument("--csv", metavar="FILE.csv", default=None, help="write one row per point")
    p.add_argument("--no-heatmap", action="store_true", help="leave out the per-layer heat map")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_profile_options(p)


@subcommand("sweep", "sweep a compile option or profile key; timing-only cost per point", _sweep_args)
def _sweep(args) -> int:
    from .tools.plots import plot_sweep
    from .tools.sweep import format_table, options_and_param_from_args, sweep, write_csv

    options, param, values = options_and_param_from_args(args)
    res = sweep(_model_path(args.model), param, values, options=options, profile_source=args.profile,
                overrides=args.set, progress=not args.no_progress)
    if args.csv:
        write_csv(res, args.csv)
    if args.plot:
        plot_sweep(res, args.plot, heatmap=not args.no_heatmap)
    _write_out(None, format_table(res) + "\n")
    return EXIT_OK


def _bisect_args(p):
    from .compiler.cli_args import add_compile_arguments

    p.add_argument("model", help="an ONNX model")
    p.add_argument("-o", "--out", metavar="DIR", default="npusim-bisect", help="where minimal reproducers go")
    p.add_argument("--no-shrink", action="store_true", help="only run each operator alone")
    add_compile_arguments(p)
    add_profile_options(p)


@subcommand("bisect", "run each operator alone and shrink the faulting ones to a minimal reproducer", _bisect_args)
def _bisect(args) -> int:
    from .compiler.cli_args import options_from_args
    from .tools.bisect import bisect

    rep = bisect(_model_path(args.model), options_from_args(args), profile_from_args(args), out_dir=args.out,
                 shrink=not args.no_shrink, progress=True)
    _write_out(None, rep.table() + "\n")
    return EXIT_OK


def _demo_args(p):
    p.add_argument("-o", "--out", metavar="DIR", default="npusim-demo", help="folder for the artefacts")
    p.add_argument("--quick", action="store_true", help="skip the bisect's shrinking search")


@subcommand("demo", "the field story: crash at --mem-align 16, bisect, fix at 128, validate, sweep", _demo_args)
def _demo(args) -> int:
    from .tools.demo import run_demo

    run_demo(args.out, quick=args.quick)
    return EXIT_OK
