"""`npusim inspect`, `asm`, `disasm`: blobs as data and text."""

from __future__ import annotations

from ..errors import EXIT_OK, UsageError
from .st_options import add_st_options, replay_options
from .common import (BLOB_TARGET, add_profile_options, output_file, profile_from_args, profile_given, read_text,
    subcommand, write_out)


def _inspect_args(p):
    p.add_argument("blob", help="a .npu blob, or an ST Edge AI Core output (its folder or network.c)")
    p.add_argument("--json", action="store_true", help="print the same information as JSON")
    p.add_argument("--no-verify", action="store_true", help="load without running the ISA verifier")
    p.add_argument("--epoch", type=int, default=None, metavar="N",
                   help="ST output: show epoch N alone (the epoch_num a board trace prints)")
    p.add_argument("--find-mask", metavar="IN/OUT", default=None,
                   help="ST output: the epoch(s) with these stream-engine masks (as LL_ATON_EB_DBG_INFO prints them)")
    add_profile_options(p, BLOB_TARGET)
    add_st_options(p)


@subcommand("inspect", "show a blob's (or an ST output's) header, memory map and epochs", _inspect_args)
def _inspect(args) -> int:
    from ..importers.stedgeai import is_st_output

    if is_st_output(args.blob):
        from ..tools import st_inspect
        from ..tools.st_run import replay_st

        out, rep, cycles = replay_st(args.blob, replay_options(args), profile_from_args(args))
        doc = st_inspect.info(out, rep, cycles)
        write_out(None, st_inspect.render_json(doc) if args.json else
                  st_inspect.render_text(doc, epoch=args.epoch, find_mask=args.find_mask))
        return EXIT_OK
    if args.epoch is not None or args.find_mask is not None:
        raise UsageError("--epoch and --find-mask apply to an ST Edge AI Core output, not to a blob")
    from ..tools.inspect import inspect_blob, render_json, render_text

    profile = profile_from_args(args) if profile_given(args) else None
    info = inspect_blob(args.blob, profile=profile, verify=not args.no_verify)
    write_out(None, render_json(info) if args.json else render_text(info))
    return EXIT_OK


def _asm_args(p):
    p.add_argument("source", help="assembly text (.s)")
    p.add_argument("-o", "--output", required=True, type=output_file(), help="blob to write (.npu)")
    p.add_argument("--no-verify", action="store_true", help="write the blob even if the verifier complains")
    p.add_argument("--strict", action="store_true",
                   help="refuse a value the hardware cannot hold as written (default: keep it, with a warning "
                        "naming the value the hardware uses)")
    add_profile_options(p, "the assembly's target profile")


@subcommand("asm", "assemble a text program into a blob", _asm_args)
def _asm(args) -> int:
    import sys

    from ..program.asm import assemble
    from ..program.blob import encode_blob, load_blob

    profile = profile_from_args(args) if profile_given(args) else None
    notes: list[str] = []
    prog = assemble(read_text(args.source), profile, strict=args.strict, notes=notes)
    for n in notes:
        print(f"npusim: warning: {args.source}: {n}", file=sys.stderr)
    if profile is None:
        profile = profile_from_args(args, prog.header.profile)
    blob = encode_blob(prog, profile)
    load_blob(blob, profile, verify=not args.no_verify)  # same checks a loader will make
    write_out(args.output, blob)
    return EXIT_OK


def _disasm_args(p):
    p.add_argument("blob", help="a .npu blob")
    p.add_argument("-o", "--output", default=None, help="text file to write (default: stdout)")
    p.add_argument("--no-verify", action="store_true", help="load without running the ISA verifier")
    add_profile_options(p, BLOB_TARGET)


@subcommand("disasm", "disassemble a blob into text assembly", _disasm_args)
def _disasm(args) -> int:
    from ..hw import load_profile
    from ..program.asm import disassemble
    from ..program.blob import load_blob

    profile = profile_from_args(args) if profile_given(args) else None
    prog = load_blob(args.blob, profile, verify=not args.no_verify)
    write_out(args.output, disassemble(prog, profile or load_profile(prog.header.profile)))
    return EXIT_OK
