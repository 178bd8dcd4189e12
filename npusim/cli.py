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
from typing import Callable

from .errors import EXIT_INTERNAL, EXIT_OK, EXIT_USAGE, NpusimError, UsageError

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


@subcommand("demo", "run the built-in demo (not built yet)")
def _demo(args) -> int:
    print("npusim: error: the demo is not built yet", file=sys.stderr)
    return EXIT_INTERNAL
