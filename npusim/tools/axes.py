"""Axes of a multi-point run: compile options and profile keys given several values.

`npusim sweep` varies one axis, `npusim grid` takes the product of all. Flags are derived from
`CompileOptions` (compiler/options.py), never written here by hand:

- `--mem-align 16,32,64`: a comma list is several values (repeating the flag adds values);
- options whose one value is itself a comma list (`--fuse`, `--input-shape`) separate their
  values with `|` (`--fuse 'all|none|conv-bn,conv-act'`); a comma list that is not one valid
  value but whose parts each are (`--fuse all,none`) is several values too;
- `--sweep-set KEY=V1,V2` varies a profile key (repeatable with different keys).
"""

from __future__ import annotations

import dataclasses

from ..errors import NpusimError, UsageError

LIST_VALUED = ("fuse", "input_shapes")  # one value is itself a comma list


def parse_values(text: str) -> list:
    """"16,32,64" -> [16, 32, 64]; non-numbers stay strings ("all,none")."""
    out = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            out.append(int(part, 0))
        except ValueError:
            out.append(part)
    if not out:
        raise UsageError(f"empty value list {text!r}")
    return out


def _valid(name: str, value) -> bool:
    from ..compiler import CompileOptions

    try:
        CompileOptions(**{name: value})
    except NpusimError:
        return False
    return True


def option_values(name: str, items: list[str]) -> list:
    """The values one option flag was given (`items`: each occurrence of the flag)."""
    from ..compiler.options import parse_const_inputs, parse_input_shapes

    if name == "const_inputs":  # NAME=FILE entries: one value, the same at every point
        return [parse_const_inputs(items)]
    if name == "input_shapes":
        joined = "|".join(items) if any("|" in i for i in items) else None
        if joined is None:
            return [parse_input_shapes(items)]
        return [parse_input_shapes([a]) for a in joined.split("|")]
    if name in LIST_VALUED:
        values = [a.strip() for item in items for a in item.split("|") if a.strip()]
        if len(values) == 1 and not _valid(name, values[0]):
            parts = [p.strip() for p in values[0].split(",") if p.strip()]
            if len(parts) > 1 and all(_valid(name, p) for p in parts):
                return parts  # "all,none": two values, since "all,none" is not one
        return values
    values = [v for item in items for v in parse_values(item)]
    return list(dict.fromkeys(values))


def add_option_arguments(parser, title: str) -> None:
    """One flag per CompileOptions field, each taking one or several values (see the module doc)."""
    from ..compiler.options import option_fields

    group = parser.add_argument_group(title)
    for f in option_fields():
        md = f.metadata
        if f.type == "bool":  # a switch: the same at every point
            group.add_argument(md["flag"], dest="axis_" + f.name, action="store_const", const=["true"], default=None,
                               help=md["help"])
            continue
        one = md.get("metavar") or "V"
        sep = "|" if f.name in LIST_VALUED else ","  # a value that is itself a comma list is varied with '|'
        group.add_argument(md["flag"], dest="axis_" + f.name, default=None, action="append",
                           metavar=f"{one}[{sep}{one}...]", help=md["help"])
    parser.add_argument("--sweep-set", metavar="KEY=V1,V2,...", default=[], action="append",
                        help="vary a profile key, e.g. --sweep-set pool.npuRAM3.banks=4,8,16")


def axes_from_args(args):
    """(fixed CompileOptions fields, axes [(param, values)]) from `add_option_arguments` flags.

    An option with several values is an axis named by its field; a profile key is `set:KEY`."""
    from ..compiler.options import option_fields

    fixed, axes = {}, []
    for f in option_fields():
        items = getattr(args, "axis_" + f.name, None)
        if not items:
            continue
        if f.type == "bool":
            fixed[f.name] = True
            continue
        values = option_values(f.name, items)
        if len(values) > 1:
            axes.append((f.name, values))
        else:
            fixed[f.name] = values[0]
    seen = set()
    for item in args.sweep_set or ():
        key, eq, vals = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise UsageError(f"--sweep-set {item!r}: expected KEY=V1,V2,...")
        if key in seen:
            raise UsageError(f"--sweep-set {key} given twice: give its values as one list, KEY=V1,V2")
        seen.add(key)
        axes.append((f"set:{key}", parse_values(vals)))
    return fixed, axes


def apply(options, profile_overrides: list, param: str, value):
    """(options, overrides) with `param` set to `value` (a CompileOptions field or `set:KEY`)."""
    if param.startswith("set:"):
        return options, [*profile_overrides, f"{param[4:]}={value}"]
    return dataclasses.replace(options, **{param: value}), profile_overrides
