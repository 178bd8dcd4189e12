"""`npusim doctor`: the troubleshooting order, lowest layer first, one line per step."""

from __future__ import annotations

from .common import add_profile_options, int_in, model_path, output_file, profile_from_args, subcommand, write_out
from .st_options import add_st_options, replay_options


def _doctor_args(p):
    from ..compiler.cli_args import add_compile_arguments
    from ..tools.parallel import add_arguments as add_parallel_arguments

    p.add_argument("model", help="the model (ONNX: float, QDQ or QOperator; or TFLite), or an ST Edge AI Core "
                                 "output (its folder or network.c: the steps that apply to ST's own program)")
    p.add_argument("blob", nargs="?", default=None, help="a .npu compiled from it elsewhere (default: compile it here)")
    p.add_argument("--all", action="store_true", help="run every step, not only up to the first failing one")
    p.add_argument("--json", metavar="REPORT.json", default=None, type=output_file(), help="write the report as JSON")
    p.add_argument("--markdown", metavar="REPORT.md", default=None, type=output_file(),
                   help="write the report as Markdown (to attach to a bug)")
    p.add_argument("--context", metavar="NAME:POOL=OFF+SIZE,...", default=None,
                   help="also check that the program fits this memory context (as for `npusim run --context`)")
    p.add_argument("--input", metavar="NAME=FILE", action="append", default=[],
                   help="check the values on these inputs, .npy arrays in the model's own layout and type (a "
                        "TFLite model's: NHWC uint8/int8) or photos for 8-bit image inputs (default: the --calibration samples, else seeded random "
                        "inputs); repeatable, once per input")
    p.add_argument("--stress-runs", metavar="N", type=int_in(1, 100_000, "stress runs"), default=20,
                   help="runs of the stability step (default: 20)")
    add_compile_arguments(p)
    add_parallel_arguments(p)
    add_profile_options(p)
    add_st_options(p)


@subcommand("doctor", "walk the troubleshooting order (versions, memory, conversion, operators, layout, accuracy, "
            "fusion, stability); exit code of the first failing step", _doctor_args)
def _doctor(args) -> int:
    import json

    from ..importers.stedgeai import is_st_output

    if is_st_output(args.model):
        from ..tools.st_doctor import doctor_st

        rep = doctor_st(args.model, replay_options(args), profile_from_args(args), all_steps=args.all)
    else:
        rep = _doctor_model(args)
    if args.json:
        write_out(args.json, json.dumps(rep.to_json(), indent=2, default=str) + "\n")
    if args.markdown:
        write_out(args.markdown, rep.markdown())
    write_out(None, rep.text())
    return rep.exit_code


def _doctor_model(args):
    from ..compiler.cli_args import options_from_args
    from ..tools import parallel
    from ..tools.doctor import doctor
    from ..model_inputs import image_targets, model_specs
    from ..tools.inputs import load_inputs
    from .run_cmds import parse_context

    options, path = options_from_args(args), model_path(args.model)
    blob = model_path(args.blob) if args.blob else None
    context = parse_context(args.context) if args.context else None
    with parallel.from_args(args, progress=False) as ex:
        rep = doctor(path, blob, options, profile=args.profile, overrides=args.set, context=context,
                     all_steps=args.all, executor=ex, stress_runs=args.stress_runs,
                     inputs=load_inputs(args.input, image_targets(model_specs(path).values()) if args.input else None))
    return rep
