"""`npusim grid`: the product of models x compile options x profiles, one row per point."""

from __future__ import annotations

from pathlib import Path

from ..errors import EXIT_OK
from .common import model_path, output_file, subcommand, write_out


def _grid_args(p):
    from ..tools.axes import add_option_arguments
    from ..tools.parallel import add_arguments as add_parallel_arguments

    p.add_argument("models", nargs="+", metavar="MODEL",
                   help="ONNX or TFLite models, or ST Edge AI Core outputs (a folder or its network.c: ST's program "
                        "replayed as compiled, so only --profile, --set and --sweep-set vary it)")
    add_option_arguments(p, "compile options (each takes one value or a comma list; the grid is their product)")
    p.add_argument("--profile", metavar="FILE|NAME", action="append", default=[],
                   help="hardware profile (repeatable: one axis of the grid, e.g. one per firmware version; "
                        "default: n657)")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="set",
                   help="override one profile key at every point (repeatable)")
    p.add_argument("--functional", action="store_true", help="compute values too (default: timing-only)")
    p.add_argument("--validate", action="store_true",
                   help="run functional and compare with ONNX Runtime fp32 at every point (seeded random inputs)")
    p.add_argument("--csv", metavar="FILE.csv", default=None, type=output_file(), help="write one row per point")
    p.add_argument("--json", metavar="FILE.json", default=None, type=output_file(),
                   help="write the rows and the summary as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_parallel_arguments(p)


@subcommand("grid", "run the product of models x compile options x profiles; one CSV/JSON row per point", _grid_args)
def _grid(args) -> int:
    from ..compiler import CompileOptions
    from ..importers.stedgeai import is_st_output
    from ..tools import parallel
    from ..tools.axes import axes_from_args
    from ..tools.grid import format_summary, format_table, grid, raise_for_errors, write_csv, write_json

    fixed, axes = axes_from_args(args)
    options = CompileOptions(**fixed)
    models = [m if Path(m).exists() and is_st_output(m) else model_path(m) for m in args.models]
    with parallel.from_args(args, progress=not args.no_progress) as ex:
        res = grid(models, options, axes, profiles=args.profile or [None], overrides=args.set,
                   functional=args.functional, validate=args.validate, executor=ex)
    if args.csv:
        write_csv(res, args.csv)
    if args.json:
        write_json(res, args.json)
    write_out(None, format_table(res) + "\n\n" + format_summary(res) + "\n")
    raise_for_errors(res)
    return EXIT_OK
