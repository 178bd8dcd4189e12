"""`npusim inspect`, `asm`, `disasm`, `import`: blobs as data and text."""

from __future__ import annotations

from ..errors import EXIT_OK, StImportError, UsageError
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
    p.add_argument("blob", help="a .npu blob, or an ST Edge AI Core output (its folder, network.c or *_ecblobs.h)")
    p.add_argument("-o", "--output", default=None, help="text file to write (default: stdout)")
    p.add_argument("--no-verify", action="store_true", help="load without running the ISA verifier")
    p.add_argument("--blob", dest="st_blob", metavar="NAME", default=None,
                   help="ST output: one epoch-controller program (e.g. _ec_blob_1); default: all")
    p.add_argument("--names", action="store_true",
                   help="ST output: name each instruction's unit and register in a comment")
    add_profile_options(p, BLOB_TARGET)


def _disasm_st(args) -> int:
    """The epoch-controller programs of an ST output, as ST's own listings print them."""
    from pathlib import Path

    from ..importers.stedgeai.ec_registers import disassemble
    from ..importers.stedgeai.ecblob import read_ecblobs
    from ..importers.stedgeai.reader import find_files
    from ..importers.stedgeai import is_blob
    from ..importers.stedgeai.stblob import ec_programs

    p = Path(args.blob)
    if is_blob(p):
        programs = ec_programs(p)
    else:
        header = p if p.suffix == ".h" else (find_files(p).get("ecblobs") or [None])[0]
        programs = read_ecblobs(header) if header is not None else {}
    if not programs:
        raise UsageError(f"{args.blob}: no epoch-controller programs (*_ecblobs.h): this output programs its "
                         f"epochs with explicit structs; `npusim inspect` shows them")
    if args.st_blob is not None:
        if args.st_blob not in programs:
            raise UsageError(f"--blob {args.st_blob}: no such program (have: {', '.join(programs)})")
        programs = {args.st_blob: programs[args.st_blob]}
        text = "\n".join(disassemble(programs[args.st_blob], names=args.names)) + "\n"
    else:
        text = "".join(f"; {name}\n" + "\n".join(disassemble(prog, names=args.names)) + "\n\n"
                       for name, prog in programs.items())
    write_out(args.output, text)
    return EXIT_OK


@subcommand("disasm", "disassemble a blob (or an ST output's epoch-controller programs) into text", _disasm_args)
def _disasm(args) -> int:
    from ..importers.stedgeai import is_st_output

    if is_st_output(args.blob):
        return _disasm_st(args)
    if args.st_blob is not None or args.names:
        raise UsageError("--blob and --names apply to an ST Edge AI Core output, not to a blob")
    from ..hw import load_profile
    from ..program.asm import disassemble
    from ..program.blob import load_blob

    profile = profile_from_args(args) if profile_given(args) else None
    prog = load_blob(args.blob, profile, verify=not args.no_verify)
    write_out(args.output, disassemble(prog, profile or load_profile(prog.header.profile)))
    return EXIT_OK


def _import_args(p):
    p.add_argument("st_output", metavar="ST_OUTPUT",
                   help="an ST Edge AI Core output: its folder, or its network.c with the companions beside it")
    p.add_argument("-o", "--output", required=True, type=output_file(), help="blob to write (.npu)")


@subcommand("import", "write an ST Edge AI Core output as an npusim blob (weights included when present)",
            _import_args)
def _import(args) -> int:
    import sys

    from ..importers.stedgeai import import_blob, is_st_output

    if not is_st_output(args.st_output):
        raise StImportError(f"{args.st_output}: not an ST Edge AI Core output (a folder, or its network.c)")
    out, blob = import_blob(args.st_output)
    write_out(args.output, blob)
    hw = sum(len(b.epochs) for b in out.blocks)
    weights = ", ".join(f"{pool} {len(w):,} B" for pool, w in out.weights.items()) or "none in the folder"
    print(f"npusim import: '{out.name}' ({out.toolchain.get('atonn', '?')}): {len(out.blocks)} epoch blocks, "
          f"{hw} hardware epochs, {len(out.buffers)} buffers, weights: {weights} -> {args.output} "
          f"({len(blob):,} bytes)", file=sys.stderr)
    return EXIT_OK
