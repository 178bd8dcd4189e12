"""`npusim zoo`: list the built-in models, or write one as an ONNX file (the README's models)."""

from __future__ import annotations

from ..errors import EXIT_OK, UsageError
from .common import output_file, subcommand, write_out


def _zoo_args(p):
    p.add_argument("name", nargs="?", default=None, help="a model of `npusim zoo` (no name: list them)")
    p.add_argument("settings", nargs="*", metavar="KEY=VALUE",
                   help="builder parameters, e.g. size=224 (the list shows each model's parameters and defaults)")
    p.add_argument("-o", "--output", metavar="FILE.onnx", default=None, type=output_file(".onnx"),
                   help="where to write the model (default: NAME.onnx)")


@subcommand("zoo", "list the built-in models (seeded random weights) or write one as ONNX", _zoo_args)
def _zoo(args) -> int:
    from ..zoo.catalog import build, catalog

    if args.name is None:
        if args.settings or args.output:
            raise UsageError("zoo: give a model name (npusim zoo lists them)")
        rows = [f"  {e.name:<20} {e.summary}\n  {'':<20} {e.signature()}" for e in catalog().values()]
        write_out(None, "models (npusim zoo NAME [KEY=VALUE ...] -o FILE.onnx):\n" + "\n".join(rows) + "\n")
        return EXIT_OK
    model = build(args.name, args.settings)
    out = args.output or f"{args.name}.onnx"
    write_out(out, model.SerializeToString())
    n = sum(int(__import__("numpy").prod(t.dims)) for t in model.graph.initializer)
    print(f"npusim: wrote {out}: {args.name} ({len(model.graph.node)} nodes, {n:,} weights)")
    return EXIT_OK
