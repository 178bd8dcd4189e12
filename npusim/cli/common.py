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


def add_profile_options(parser: argparse.ArgumentParser) -> None:
    """`--profile FILE|NAME` and repeatable `--set KEY=VALUE`."""
    parser.add_argument("--profile", metavar="FILE|NAME", default=None,
                        help="hardware profile: a TOML file or a built-in name (default: n657, or the blob's target)")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="set",
                        help="override one profile key, e.g. --set alignment.granule=64 (repeatable)")


def profile_from_args(args: argparse.Namespace, default: str | None = None):
    """The HardwareProfile selected by `add_profile_options` (`default` if --profile is not given)."""
    from ..hw import load_profile

    return load_profile(args.profile or default, list(args.set or ()))


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
    if not Path(path).is_file():
        raise InvalidInputError(f"{path}: no such file")
    return path


def safe_name(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
