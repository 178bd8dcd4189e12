"""Thin CLI glue: argparse flags derived from CompileOptions field metadata (one definition)."""

from __future__ import annotations

import argparse

from .options import CompileOptions, option_fields, parse_const_inputs, parse_input_shapes


def _dest(f) -> str:
    return "compile_" + f.name


def add_compile_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per CompileOptions field (flag, help, choices from the field metadata)."""
    group = parser.add_argument_group("compile options")
    for f in option_fields():
        md = f.metadata
        help_text = md["help"]
        if f.default is not None and "default" not in help_text:
            help_text += f" (default: {f.default})"
        kw = {"dest": _dest(f), "help": help_text, "default": None}
        if md.get("metavar"):
            kw["metavar"] = md["metavar"]
        if md.get("choices"):
            kw["choices"] = list(md["choices"])
        if f.name in ("input_shapes", "const_inputs"):
            kw["action"] = "append"
        elif f.type == "bool":
            kw["action"] = "store_true"
        elif f.type in ("int", "int | None"):
            kw["type"] = int
        group.add_argument(md["flag"], **kw)


def options_from_args(args: argparse.Namespace) -> CompileOptions:
    """Build CompileOptions from parsed args; unset flags keep the dataclass defaults."""
    kw = {}
    for f in option_fields():
        v = getattr(args, _dest(f), None)
        if v is None:
            continue
        kw[f.name] = parse_input_shapes(v) if f.name == "input_shapes" else parse_const_inputs(v) \
            if f.name == "const_inputs" else v
    return CompileOptions(**kw)
