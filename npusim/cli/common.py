"""Helpers shared by the subcommand modules: the registry, profile options, file I/O."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import InvalidInputError, UsageError


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


BLOB_TARGET = "the blob's target profile"


def add_profile_options(parser: argparse.ArgumentParser, default: str = "n657") -> None:
    """`--profile FILE|NAME` and repeatable `--set KEY=VALUE`; `default` says what applies without them."""
    parser.add_argument("--profile", metavar="FILE|NAME", default=None,
                        help=f"hardware profile: a TOML file or a built-in name (default: {default})")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="set",
                        help="override one profile key, e.g. --set alignment.granule=64 (repeatable)")


def profile_from_args(args: argparse.Namespace, default: str | None = None):
    """The HardwareProfile selected by `add_profile_options` (`default` if --profile is not given)."""
    from ..hw import load_profile

    return load_profile(args.profile or default, list(args.set or ()))


# ---------------------------------------------------------------- argument types
# argparse calls these while parsing, so a bad value is a usage error (exit 2) before any work.

MAX_SEED = 2**63 - 1


def seed_int(text: str) -> int:
    """A seed: an integer in [0, 2^63)."""
    try:
        v = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= v <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"{text!r}: a seed must lie in [0, 2^63)")
    return v


def int_in(lo: int, hi: int, what: str):
    """argparse type: an integer (decimal or 0x...) in [lo, hi]; `what` names it in the error."""

    def parse(text: str) -> int:
        try:
            v = int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{text!r}: {what} must lie in [{lo}, {hi:,}]")
        return v

    parse.__name__ = what
    return parse


def float_in(lo: float, hi: float):
    """argparse type: a finite float in [lo, hi]."""

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (lo <= v <= hi):
            raise argparse.ArgumentTypeError(f"{text!r} must lie in [{lo:g}, {hi:g}]")
        return v

    parse.__name__ = "number"
    return parse


def output_file(*suffixes: str):
    """argparse type: a file path to write (optionally with one of `suffixes`), not a folder itself, whose
    missing folders can be created (the writer creates them, as every output of the CLI does): checked
    before the work, not after."""

    def parse(text: str) -> str:
        p = Path(text)
        if suffixes and p.suffix.lower() not in suffixes:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a {' or '.join(suffixes)} file")
        if p.is_dir():
            raise argparse.ArgumentTypeError(f"{text!r} is a folder, not a file")
        above = next((a for a in p.parents if a.exists()), None)
        if above is not None and not above.is_dir():
            raise argparse.ArgumentTypeError(f"{text!r}: {str(above)!r} is a file, not a folder")
        return text

    parse.__name__ = "output file"
    return parse


def output_dir(text: str) -> str:
    """argparse type: a folder to create or fill (refused if it is an existing file)."""
    p = Path(text)
    if p.exists() and not p.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is an existing file, not a folder")
    return text


output_dir.__name__ = "output folder"


def profile_given(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "profile", None) or getattr(args, "set", None))


def write_out(path: str | None, text_or_bytes) -> None:
    if path is None or path == "-":
        if isinstance(text_or_bytes, bytes):
            sys.stdout.buffer.write(text_or_bytes)
        else:
            sys.stdout.write(text_or_bytes)
        return
    mode = "wb" if isinstance(text_or_bytes, bytes) else "w"
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)  # every output creates its folders
        with open(path, mode) as fh:
            fh.write(text_or_bytes)
    except OSError as e:
        raise UsageError(f"{path}: cannot write ({e.strerror or e})") from None


def read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        raise InvalidInputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidInputError(f"{path}: cannot read ({e})") from None


def model_path(path: str) -> str:
    """`path` if it is an existing file, else InvalidInputError saying what it is instead."""
    if Path(path).is_dir():
        raise InvalidInputError(f"{path}: is a folder, not a model file")
    if not Path(path).is_file():
        raise InvalidInputError(f"{path}: no such file")
    return path


def safe_name(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
