"""`npusim sweep`, `bisect` and `demo`: workflows over many compiles and runs."""

from __future__ import annotations

from pathlib import Path

import sys

from ..errors import EXIT_INTERRUPTED, EXIT_OK
from .common import add_profile_options, model_path, output_dir, output_file, profile_from_args, subcommand, write_out


def _sweep_args(p):
    from ..tools.axes import add_option_arguments
    from ..tools.parallel import add_arguments as add_parallel_arguments

    p.add_argument("model", help="an ONNX model")
    add_option_arguments(p, "compile options (give one as a comma list to sweep it)")
    p.add_argument("--plot", metavar="FILE.png", default=None, type=output_file(),
                   help="plot cycles/conflicts/footprint vs the value (any image format matplotlib writes)")
    p.add_argument("--csv", metavar="FILE.csv", default=None, type=output_file(), help="write one row per point")
    p.add_argument("--html", metavar="FILE.html", default=None, type=output_file(),
                   help="write the plots and tables as one HTML page")
    p.add_argument("--no-heatmap", action="store_true", help="leave out the per-layer heat map")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_parallel_arguments(p)
    add_profile_options(p)


@subcommand("sweep", "sweep a compile option or profile key; timing-only cost per point", _sweep_args)
def _sweep(args) -> int:
    from ..tools import parallel
    from ..tools.plots import check_plot_path, plot_sweep
    from ..tools.sweep import (SweepInterrupted, format_table, options_and_param_from_args, raise_for_errors, sweep,
                               write_csv)

    options, param, values = options_and_param_from_args(args)
    if args.plot:
        check_plot_path(args.plot)
    path = model_path(args.model)
    try:
        with parallel.from_args(args, tasks=len(values), progress=not args.no_progress) as ex:
            res = sweep(path, param, values, options=options, profile_source=args.profile, overrides=args.set,
                        executor=ex)
    except SweepInterrupted as e:  # the points that finished are kept; one line, no traceback
        done = f"{len(e.partial.points)} of {e.total} point(s) finished"
        if args.csv:
            write_csv(e.partial, args.csv)
            done += f", written to {args.csv}" if e.partial.points else f"; {args.csv} has the header only"
        print(f"npusim: interrupted: {done}", file=sys.stderr)
        return EXIT_INTERRUPTED
    if args.csv:
        write_csv(res, args.csv)
    if args.plot:
        plot_sweep(res, args.plot, heatmap=not args.no_heatmap)
    if args.html:
        from ..tools.html_report import sweep_html

        write_out(args.html, sweep_html([(None, res)], f"npusim sweep: {Path(args.model).name}",
                                        heatmap=not args.no_heatmap))
    write_out(None, format_table(res) + "\n")
    raise_for_errors(res)
    return EXIT_OK


def _bisect_args(p):
    from ..compiler.cli_args import add_compile_arguments
    from ..tools.parallel import add_arguments as add_parallel_arguments

    p.add_argument("model", help="the model: ONNX (float, QDQ or QOperator) or TFLite (its operators are run alone, "
                                 "not shrunk)")
    p.add_argument("-o", "--out", metavar="DIR", default="npusim-bisect", type=output_dir,
                   help="where minimal reproducers go (default: npusim-bisect)")
    p.add_argument("--no-shrink", action="store_true", help="only run each operator alone")
    p.add_argument("--html", metavar="FILE.html", default=None, type=output_file(),
                   help="write the verdicts as one HTML page, linking each reproducer and its report page")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_compile_arguments(p)
    add_parallel_arguments(p)
    add_profile_options(p)


@subcommand("bisect", "run each operator alone and shrink the faulting ones to a minimal reproducer", _bisect_args)
def _bisect(args) -> int:
    from ..compiler.cli_args import options_from_args
    from ..tools import parallel
    from ..tools.bisect import bisect, raise_for_errors

    options, profile, path = options_from_args(args), profile_from_args(args), model_path(args.model)
    with parallel.from_args(args, progress=not args.no_progress) as ex:
        rep = bisect(path, options, profile, out_dir=args.out, shrink=not args.no_shrink, executor=ex)
    if args.html:
        from ..tools.html_report import bisect_html

        page_dir = Path(args.html).parent if args.html != "-" else Path(".")
        write_out(args.html, bisect_html(rep, page_dir, profile, f"npusim bisect: {Path(args.model).name}"))
    write_out(None, rep.table() + "\n")
    raise_for_errors(rep)
    return EXIT_OK


def _demo_args(p):
    p.add_argument("-o", "--out", metavar="DIR", default="npusim-demo", type=output_dir,
                   help="folder for the artefacts (default: npusim-demo)")
    p.add_argument("--quick", action="store_true", help="skip the bisect's shrinking search")


@subcommand("demo", "the field story: crash at --mem-align 16, bisect, fix at 128, validate, sweep", _demo_args)
def _demo(args) -> int:
    from ..tools.demo import run_demo

    run_demo(args.out, quick=args.quick)
    return EXIT_OK
