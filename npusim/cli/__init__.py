"""The `npusim` command line: argparse over the public API, no logic of its own.

Subcommands live in modules of their own (`blob_cmds`, `run_cmds`, `workflow_cmds`, ...), each
imported below so it registers itself. Add one with one small function in such a module:

    @subcommand("run", "simulate a blob", args=lambda p: (p.add_argument("blob"), add_profile_options(p)))
    def _run(args) -> int:
        from ..runtime import run       # heavy imports (numba, onnx) only inside handlers
        ...
        return EXIT_OK

Handlers return an exit code; they raise NpusimError subclasses for errors, which
`main` prints as one line `npusim: error: <msg>` and maps to the error's exit code.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

from ..errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, ModelNote, NpusimError, UsageError
from . import (blob_cmds, check_cmds, doctor_cmds, grid_cmds, report_cmds, run_cmds, stress_cmds,  # noqa: F401  (register their subcommands)
               workflow_cmds, zoo_cmds)
from .common import SUBCOMMANDS, Subcommand, add_profile_options, profile_from_args, subcommand  # noqa: F401

EXIT_CODES = (
    (0, "ok"),
    (2, "usage error"),
    (3, "validation failed (outputs differ from the reference)"),
    (4, "memory leak (pool use grows over the runs, or the pool ran out): npusim stress"),
    (65, "invalid input file (blob, model, profile, data)"),
    (139, "simulated NPU fault"),
    (130, "interrupted (Ctrl-C); a sweep first writes the points that finished"),
    (1, "internal error"),
)


def _epilog() -> str:
    rows = "\n".join(f"  {code:>3}  {text}" for code, text in EXIT_CODES)
    return f"exit codes:\n{rows}\n\nset NPUSIM_DEBUG=1 to get a traceback on internal errors."


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit code 2, naming the subcommand ("run: argument --seed: ...")
        where = self.prog.split(" ", 1)[1] + ": " if " " in self.prog else ""
        raise UsageError(f"{where}{message}")


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

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
            args, extra = parser.parse_known_args(argv)
        except SystemExit as e:  # --help / --version
            return int(e.code or 0)
        if extra:
            where = f"{args.command}: " if args.command else ""
            raise UsageError(f"{where}unrecognized arguments: {' '.join(extra)}")
        if not args.command:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        with warnings.catch_warnings():
            warnings.simplefilter("always", ModelNote)
            shown = warnings.showwarning
            warnings.showwarning = lambda msg, cat, *a, **k: print(f"npusim: note: {msg}", file=sys.stderr) \
                if issubclass(cat, ModelNote) else shown(msg, cat, *a, **k)
            return int(SUBCOMMANDS[args.command].handler(args) or EXIT_OK)
    except NpusimError as e:
        print(f"npusim: error: {_one_line(e)}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("npusim: error: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
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
