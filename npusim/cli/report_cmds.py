"""`npusim report`: the HTML page of a saved run report."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import EXIT_OK, UsageError
from .common import output_file, subcommand, write_out


def _report_args(p):
    p.add_argument("report", metavar="REPORT.json", help="a run report written by `npusim run --json`")
    p.add_argument("-o", "--output", metavar="REPORT.html", default=None, type=output_file(),
                   help="page to write (default: REPORT.html beside the report; - for stdout)")


@subcommand("report", "turn a saved run report (npusim run --json) into one self-contained HTML page", _report_args)
def _report(args) -> int:
    from ..tools.html_report import saved_report_html

    out = args.output
    if out is None:  # the default, beside the report: checked like a given -o
        out = str(Path(args.report).with_suffix(".html"))
        try:
            output_file()(out)
        except argparse.ArgumentTypeError as e:
            raise UsageError(f"output {e}") from None
    if out != "-" and Path(out).resolve() == Path(args.report).resolve():
        raise UsageError(f"-o {out}: would overwrite the report it is made from")
    write_out(out, saved_report_html(args.report))
    if out != "-":
        print(f"npusim: wrote {out}")
    return EXIT_OK
