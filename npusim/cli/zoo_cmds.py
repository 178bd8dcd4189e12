"""`npusim zoo`: list the built-in models, or write one as an ONNX or TFLite file (the README's models)."""

from __future__ import annotations

from ..errors import EXIT_OK, UsageError
from .common import output_file, subcommand, write_out


def _zoo_args(p):
    p.add_argument("name", nargs="?", default=None, help="a model of `npusim zoo` (no name: list them)")
    p.add_argument("settings", nargs="*", metavar="KEY=VALUE",
                   help="builder parameters, e.g. size=224 (the list shows each model's parameters and defaults)")
    p.add_argument("-o", "--output", metavar="FILE.onnx|FILE.tflite", default=None,
                   type=output_file(".onnx", ".tflite"),
                   help="where to write the model (default: NAME.onnx, NAME.tflite for the TFLite builders)")


@subcommand("zoo", "list the built-in models (seeded random weights) or write one as ONNX or TFLite", _zoo_args)
def _zoo(args) -> int:
    from ..zoo.catalog import build, catalog, suffix

    if args.name is None:
        if args.settings or args.output:
            raise UsageError("zoo: give a model name (npusim zoo lists them)")
        rows = [f"  {e.name:<20} {e.summary}\n  {'':<20} {e.signature()}" for e in catalog().values()]
        write_out(None, "models (npusim zoo NAME [KEY=VALUE ...] -o FILE.onnx|FILE.tflite):\n" + "\n".join(rows) + "\n")
        return EXIT_OK
    entries = catalog()
    ext = suffix(entries[args.name]) if args.name in entries else ".onnx"
    if args.output and not args.output.lower().endswith(ext):
        raise UsageError(f"zoo {args.name}: writes a {ext} model, not {args.output!r}")
    model = build(args.name, args.settings)
    out = args.output or f"{args.name}{ext}"
    if ext == ".tflite":
        write_out(out, bytes(model))
        print(f"npusim: wrote {out}: {args.name} (TFLite, {len(model):,} B)")
        return EXIT_OK
    write_out(out, model.SerializeToString())
    n = sum(int(__import__("numpy").prod(t.dims)) for t in model.graph.initializer)
    print(f"npusim: wrote {out}: {args.name} ({len(model.graph.node)} nodes, {n:,} weights)")
    return EXIT_OK
