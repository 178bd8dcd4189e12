"""`npusim check`: the static check of one blob, or of several sharing one NPU in contexts."""

from __future__ import annotations

from ..errors import EXIT_FAULT, EXIT_OK, UsageError
from .st_options import add_st_options, replay_options
from .common import BLOB_TARGET, add_profile_options, output_file, profile_from_args, profile_given, subcommand, write_out


def _check_args(p):
    p.add_argument("blob", nargs="+", help="a .npu blob; several with one --context each (one shared NPU)")
    p.add_argument("--context", metavar="NAME:POOL=OFF+SIZE,...", action="append", default=[],
                   help="memory context of the blob at the same position, as for `npusim run`: the blobs are "
                        "checked as they would run one after another in their partitions")
    p.add_argument("--json", metavar="REPORT.json", default=None, type=output_file(),
                   help="write the predicted faults as JSON (the run report's fault records, each static)")
    add_profile_options(p, BLOB_TARGET)
    add_st_options(p)


@subcommand("check", "predict every memory fault of a blob without running it (exit 139 if any)", _check_args)
def _check(args) -> int:
    import json

    from ..analysis import check, check_shared
    from ..runtime import load
    from .run_cmds import parse_context

    from ..importers.stedgeai import is_st_output

    profile = profile_from_args(args) if profile_given(args) else None
    if len(args.blob) == 1 and not args.context and is_st_output(args.blob[0]):
        from ..tools.st_run import check_text, run_st

        res = run_st(args.blob[0], replay_options(args), profile)
        if args.json:
            write_out(args.json, json.dumps(res.report_json(), indent=2) + "\n")
        write_out(None, check_text(res))
        return EXIT_FAULT if res.faults else EXIT_OK
    if args.context or len(args.blob) > 1:
        if len(args.context) != len(args.blob):
            raise UsageError(f"{len(args.blob)} blobs need {len(args.blob)} --context options, got {len(args.context)}")
        ctxs = [parse_context(c) for c in args.context]
        reports = check_shared([(load(b, profile), c) for b, c in zip(args.blob, ctxs)], profile=profile)
        doc = {"static": True, "contexts": {r.context: r.to_json() for r in reports}}
    else:
        reports = [check(load(args.blob[0], profile), profile=profile)]
        doc = reports[0].to_json()
    if args.json:
        write_out(args.json, json.dumps(doc, indent=2) + "\n")
    write_out(None, "\n".join(r.text() for r in reports))
    return EXIT_FAULT if any(r.faults for r in reports) else EXIT_OK
