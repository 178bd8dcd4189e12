"""`npusim compile`, `run` (one blob or several in contexts) and `validate`."""

from __future__ import annotations

from pathlib import Path

from ..errors import EXIT_FAULT, EXIT_OK, EXIT_VALIDATION_FAILED, UsageError
from .st_options import add_st_options, replay_options
from .common import (BLOB_TARGET, add_profile_options, float_in, int_in, model_path, output_dir, output_file,
    profile_from_args, profile_given, safe_name, seed_int, subcommand, write_out)


def _input_options(p):
    p.add_argument("--input", metavar="NAME=FILE", action="append", default=[],
                   help="bind an input: a .npy array in the model's own layout and type (a TFLite model's: NHWC, "
                        "uint8/int8 codes as an image is read from disk; an ONNX model's: as its graph declares, "
                        "NCHW float32), or a photo (PNG, JPEG, ...) for an 8-bit image input, resized to it; "
                        "repeatable, once per input")
    p.add_argument("--random-input", action="store_true",
                   help="bind seeded random inputs to unbound inputs (the default, with a note on stderr): uniform "
                        "over the int8 codes of a model quantized by itself (TFLite), else standard normal")
    p.add_argument("--seed", type=seed_int, default=0, help="seed of the random inputs (default: 0)")


def _inputs_from_args(args, program, timing_only: bool = False, model=None) -> dict:
    """--input files in the model's own terms (`model_inputs.to_program`; `model`: the source model when the
    command has it, else what the blob tells), as the program binds them; every unbound input gets seeded
    random values (noted on stderr unless --random-input asked for them). Timing-only runs move no values,
    so they bind nothing else."""
    import sys

    from ..model_inputs import image_targets, input_specs, to_program
    from ..runtime import own_quantization, seeded_inputs
    from ..tools.inputs import load_inputs

    given = load_inputs(args.input, image_targets(input_specs(program, model)))
    inputs = to_program(program, given, model, what="--input")
    if timing_only:
        return inputs
    unbound = [b.name for b in program.buffers_of("input") if b.name not in inputs]
    if unbound and not args.random_input:
        how = "uniform over the int8 codes" if own_quantization(program) else "standard normal"
        print(f"npusim: no --input for {', '.join(repr(n) for n in unbound)}: seeded random values, {how} "
              f"(seed {args.seed})", file=sys.stderr)
    return {**seeded_inputs(program, args.seed), **inputs}


def _compile_args(p):
    from ..compiler.cli_args import add_compile_arguments

    p.add_argument("model", help="a model: ONNX (float, QDQ or QOperator) or an int8 .tflite")
    p.add_argument("-o", "--output", default=None, type=output_file(), help="blob to write (default: MODEL.npu)")
    add_compile_arguments(p)
    add_profile_options(p)


@subcommand("compile", "compile an ONNX or TFLite model into an N657 blob", _compile_args)
def _compile(args) -> int:
    from ..compiler import compile as compile_model
    from ..compiler.cli_args import options_from_args
    from ..compiler.driver import cpu_summary
    from ..program.blob import encode_blob
    from ..tools.sweep import footprint_bytes

    from ..progress import Bar

    profile = profile_from_args(args)
    options = options_from_args(args)
    stages: dict = {}
    with Bar("compile") as bar:
        program = compile_model(args.model, options, profile=profile, progress=bar, timings=stages)
    out = args.output or str(Path(args.model).with_suffix(".npu"))
    write_out(out, encode_blob(program, profile))
    epochs = sum(1 for c in program.commands if c.op == "EPOCH")
    hosts = sum(1 for c in program.commands if c.op == "HOST")
    calibration = stages.get("calibration", 0.0)
    print(f"npusim: wrote {out}: {epochs} NPU epochs, {hosts} CPU epochs, {len(program.buffers)} buffers, "
          f"{footprint_bytes(program):,} B of RAM, mem_align {options.align(profile)}; compiled in "
          f"{sum(stages.values()):.2f} s" + (f" (calibration {calibration:.2f} s)" if calibration >= 0.005 else ""))
    for line in cpu_summary(program, profile):
        print(f"  {line}")
    return EXIT_OK


def _run_args(p):
    p.add_argument("blob", nargs="+", help="a .npu blob; several with one --context each (one shared NPU)")
    p.add_argument("--context", metavar="NAME:POOL=OFF+SIZE,...", action="append", default=[],
                   help="memory context of the blob at the same position (e.g. a:npuRAM3=0x0+0x30000,"
                        "octoFlash=0x0+0x10000); the blobs then run one after another in their partitions, "
                        "with seeded random inputs (--seed); exit 139 if any context faults")
    _input_options(p)
    p.add_argument("--timing-only", action="store_true", help="skip the value kernels (same cycles)")
    p.add_argument("--mode", choices=("fast", "burst"), default="fast", help="timing model (burst: small programs)")
    p.add_argument("--json", metavar="REPORT.json", default=None, type=output_file(),
                   help="write the JSON report")
    p.add_argument("--trace", metavar="TRACE.json", default=None, type=output_file(),
                   help="write a Chrome/Perfetto trace")
    p.add_argument("--html", metavar="REPORT.html", default=None, type=output_file(),
                   help="write the report as one self-contained HTML page (memory map, layers, banks, timeline)")
    p.add_argument("--outputs", metavar="DIR", default=None, type=output_dir,
                   help="write one .npy per output (not with --timing-only, which computes none); an ST output: "
                        "its program run on its weight image, each output buffer's raw content")
    p.add_argument("--keep-going", action="store_true", help="collect faults instead of stopping at the first")
    p.add_argument("--stalls", action="store_true", help="print the stall cycles by cause, per layer")
    p.add_argument("--threads", type=int_in(1, 256, "BLAS threads"), default=1, metavar="N",
                   help="BLAS threads of the value kernels (default: 1; results do not depend on it)")
    p.add_argument("--steps", type=int_in(1, 10_000, "steps"), default=1, metavar="N",
                   help="generative loop: run N times, each step's output fed back as the next input (default: 1)")
    add_profile_options(p, BLOB_TARGET)
    add_st_options(p)


def _run_st(args) -> int:
    """`npusim run ST_OUTPUT`: the timing and memory replay of ST's own program; with --outputs, also its
    functional run on the weight image (`tools.st_values`)."""
    import json

    from ..tools.st_run import run_st

    if args.context or args.steps > 1 or args.mode != "fast":
        raise UsageError("--context, --steps and --mode burst apply to npusim blobs, not to an ST output")
    if args.timing_only and (args.outputs or args.input):
        raise UsageError("--outputs and --input: a --timing-only run computes no values")
    if args.input and not args.outputs:
        raise UsageError("--input: the replay computes timing and memory traffic; add --outputs DIR to run "
                         "the program's values on these inputs")
    res = run_st(args.blob[0], replay_options(args, keep_going=True),
                 profile_from_args(args) if profile_given(args) else None)
    if args.outputs:
        _write_st_outputs(args, res.out)
    if args.json:
        write_out(args.json, json.dumps(res.report_json(), indent=2) + "\n")
    if args.trace:
        write_out(args.trace, res.trace_json())
    if args.html:
        write_out(args.html, res.html(f"npusim run: {Path(args.blob[0]).name}"))
    values = bool(args.outputs)
    write_out(None, res.report_text(values) if res.faults else res.summary(values) + "\n")
    if args.timing_only:
        write_out(None, res.blocks_text())
    if args.stalls:
        write_out(None, res.stalls_text())
    return EXIT_FAULT if res.faults else EXIT_OK


def _write_st_outputs(args, out) -> None:
    """--outputs for an ST output: one .npy per output buffer, from the functional run (`tools.st_values`)."""
    import sys

    from ..tools.st_values import load_st_inputs, st_output_values

    values, seeded = st_output_values(out, load_st_inputs(out, args.input), args.seed)
    for note in out.weight_notes:
        print(f"npusim: note: not attached: {note} (if that is the image flashed, the board reads other bytes)",
              file=sys.stderr)
    if seeded and not args.random_input:
        print(f"npusim: no --input for {', '.join(repr(n) for n in seeded)}: seeded random codes (seed {args.seed})",
              file=sys.stderr)
    _save_outputs(args.outputs, values)
    print(f"npusim: wrote {len(values)} output(s) to {args.outputs} (ST's program run on its weight image)",
          file=sys.stderr)


def _save_outputs(folder: str, outputs: dict) -> None:
    """One .npy per output, named after it."""
    import numpy as np

    d = Path(folder)
    d.mkdir(parents=True, exist_ok=True)
    for name, arr in outputs.items():
        np.save(d / f"{safe_name(name)}.npy", arr)


@subcommand("run", "simulate a blob (or replay an ST Edge AI output): outputs, cycles, faults", _run_args)
def _run(args) -> int:
    import json

    from ..importers.stedgeai import is_st_output
    from ..runtime import RunOptions, load, run

    if len(args.blob) == 1 and is_st_output(args.blob[0]):
        return _run_st(args)

    if args.timing_only and args.outputs:
        raise UsageError("--outputs: a --timing-only run computes no output values")
    profile = profile_from_args(args) if profile_given(args) else None
    opts = RunOptions(timing_only=args.timing_only, keep_going=args.keep_going, trace=bool(args.trace),
                      mode=args.mode, threads=args.threads)
    if args.context or len(args.blob) > 1:
        if args.steps > 1:
            raise UsageError("--steps runs one blob (several processes with steps: npusim stress --steps)")
        return _run_shared(args, profile, opts)
    from ..progress import Bar

    program = load(args.blob[0], profile)
    inputs = _inputs_from_args(args, program, args.timing_only)
    if args.steps > 1:
        res = _run_steps(args, program, inputs, opts, profile)
    else:
        with Bar("run", unit="epoch") as bar:
            res = run(program, inputs, opts, profile=profile, progress=bar)
    if args.json:
        write_out(args.json, json.dumps(res.report_json(), indent=2) + "\n")
    if args.trace:
        write_out(args.trace, res.trace_json())
    if args.html:
        from ..tools.html_report import run_html

        write_out(args.html, run_html(res, f"npusim run: {Path(args.blob[0]).name}"))
    if args.outputs and res.outputs:
        _save_outputs(args.outputs, res.outputs)
    write_out(None, res.report_text() if res.faults else res.summary() + "\n")
    if args.stalls and not res.faults:
        write_out(None, res.stalls_text())
    return EXIT_FAULT if res.faults else EXIT_OK


def _run_steps(args, program, inputs, opts, profile):
    """`run --steps N`: one summary line per step on stdout; the last step's result is reported."""
    from ..generative import run_steps
    from ..progress import Bar

    with Bar("run", unit="step") as bar:
        def step(k, res):
            bar("step", k + 1, args.steps)
            bar.write(f"step {k}: {res.summary().removeprefix('npusim: ')}")

        return run_steps(program, inputs, args.steps, opts, profile=profile, on_step=step)


def parse_context(text: str):
    """`NAME:POOL=OFF+SIZE,...` (ints in any Python base) -> memory.Context."""
    from ..memory import Context

    name, sep, rest = text.partition(":")
    parts = {}
    try:
        if not (name and sep and rest):
            raise ValueError
        for item in rest.split(","):
            pool, off_size = item.split("=")
            off, size = off_size.split("+")
            if pool.strip() in parts:
                raise UsageError(f"--context {text!r}: pool {pool.strip()!r} given twice")
            parts[pool.strip()] = (int(off, 0), int(size, 0))
    except ValueError:
        raise UsageError(f"--context {text!r}: expected NAME:POOL=OFFSET+SIZE[,POOL=OFFSET+SIZE...]") from None
    return Context(name, parts)


def _run_shared(args, profile, opts) -> int:
    import json
    from dataclasses import replace

    from ..runtime import run_shared

    if len(args.context) != len(args.blob):
        raise UsageError(f"{len(args.blob)} blobs need {len(args.blob)} --context options, got {len(args.context)}")
    if args.input or args.trace or args.outputs:
        raise UsageError("--input, --trace and --outputs take one blob (contexts run with seeded random inputs)")
    from ..runtime import load, seeded_inputs

    ctxs = [parse_context(c) for c in args.context]
    progs = [load(b, profile) for b in args.blob]
    jobs = [(p, c, seeded_inputs(p, args.seed)) for p, c in zip(progs, ctxs)]
    results = run_shared(jobs, profile=profile, options=replace(opts, trace=False))
    doc = {"contexts": {c.name: r.report_json() for c, r in zip(ctxs, results)}}
    if args.json:
        write_out(args.json, json.dumps(doc, indent=2) + "\n")
    if args.html:
        from ..tools.html_report import run_html

        write_out(args.html, run_html(doc, "npusim run: " + ", ".join(Path(b).name for b in args.blob)))
    for c, r in zip(ctxs, results):
        write_out(None, f"context {c.name}: " + (r.report_text() if r.faults else r.summary() + "\n"))
    return EXIT_FAULT if any(r.faults for r in results) else EXIT_OK


def _validate_args(p):
    from ..tools.parallel import add_arguments as add_parallel_arguments

    p.add_argument("blob", nargs="+", help="a .npu blob (several: each is validated against the same reference, "
                                           "one line per blob; they run as parallel tasks)")
    p.add_argument("--reference", required=True, metavar="MODEL.onnx|MODEL.tflite",
                   help="the model it was compiled from, run by its own runtime: ONNX Runtime (float, QDQ or "
                        "QOperator) or the TFLite interpreter (needs npusim[tflite])")
    _input_options(p)
    p.add_argument("--max-rel", type=float_in(0.0, float("inf")), default=None,
                   help="max |sim-ref| / max|ref| per output, >= 0 (default: by the blob's precision)")
    p.add_argument("--min-cosine", type=float_in(-1.0, 1.0), default=None,
                   help="minimum cosine similarity per output, in [-1, 1] (default: by the blob's precision)")
    p.add_argument("--top1", action="store_true", help="also require top-1 agreement")
    p.add_argument("--min-exact", type=float_in(0.0, 1.0), default=None,
                   help="quantized references: minimum share of int8 outputs equal to the reference's, in [0, 1]")
    p.add_argument("--kernels", choices=("auto", "builtin", "reference"), default="auto",
                   help="TFLite reference: the interpreter's kernels (auto: as Interpreter() runs the model, with "
                        "XNNPACK; builtin: optimized kernels without delegates; reference: TFLite's reference kernels)")
    p.add_argument("--per-layer", action="store_true",
                   help="also compare every tensor the blob keeps with the reference's (each layer alone, fed the "
                        "reference's inputs, and in the run); names the first layer outside its operator's tolerance "
                        "in quantization steps (a TFLite reference then runs without XNNPACK: builtin kernels)")
    p.add_argument("--json", metavar="REPORT.json", default=None, type=output_file(), help="write metrics as JSON")
    add_parallel_arguments(p)
    add_profile_options(p, BLOB_TARGET)


@subcommand("validate", "compare a blob's outputs with the model's own runtime (exit 3 on a miss)", _validate_args)
def _validate(args) -> int:
    import dataclasses
    import json

    from ..reference import default_thresholds, program_precision, validate
    from ..runtime import load

    from ..importers.stedgeai import is_st_output

    if len(args.blob) == 1 and is_st_output(args.blob[0]):
        return _validate_st(args)
    profile = profile_from_args(args) if profile_given(args) else None
    changes = {k: v for k, v in (("max_rel", args.max_rel), ("min_cosine", args.min_cosine),
                                 ("min_exact", args.min_exact)) if v is not None}
    if args.top1:
        changes["require_top1"] = True
    if len(args.blob) > 1:
        if args.per_layer:
            raise UsageError("--per-layer takes one blob")
        return _validate_many(args, profile, changes)
    program = load(args.blob[0], profile)
    th = default_thresholds(program_precision(program))
    th = dataclasses.replace(th, **changes)
    reference = model_path(args.reference)
    rep = validate(program, reference, _inputs_from_args(args, program, model=reference), th, profile=profile,
                   kernels=args.kernels, per_layer=args.per_layer)
    if args.json:
        write_out(args.json, json.dumps(rep.to_dict(), indent=2) + "\n")
    if rep.run_result.faults:
        write_out(None, rep.run_result.report_text())
        return EXIT_FAULT
    write_out(None, rep.text() + "\n")
    return EXIT_OK if rep.passed else EXIT_VALIDATION_FAILED


def _validate_st(args) -> int:
    """`npusim validate ST_OUTPUT --reference MODEL`: ST's program run functionally on its weights."""
    import json

    from ..tools.st_validate import load_model_inputs, per_layer, validate_st

    if args.top1 or args.max_rel is not None or args.min_exact is not None:
        raise UsageError("--top1, --max-rel and --min-exact apply to npusim blobs; an ST output is judged by "
                         "--min-cosine per output")
    reference = model_path(args.reference)
    arrays = load_model_inputs(args.input, reference)
    rep = validate_st(args.blob[0], reference, arrays, args.seed, 0.99 if args.min_cosine is None else args.min_cosine)
    doc = rep.to_dict()
    text = rep.text()
    if args.per_layer:
        layers = per_layer(args.blob[0], reference, arrays, args.seed)
        doc["per_layer"] = layers.to_dict()
        text += "\n" + layers.text()
    if args.json:
        write_out(args.json, json.dumps(doc, indent=2) + "\n")
    write_out(None, text + "\n")
    return EXIT_OK if rep.passed else EXIT_VALIDATION_FAILED


def _validate_many(args, profile, changes) -> int:
    import dataclasses
    import json

    from ..errors import EXIT_INTERNAL
    from ..reference import default_thresholds, program_precision
    from ..tools import parallel
    from ..tools.validate_many import validate_blobs

    def inputs_for(program):
        inputs = _inputs_from_args(args, program, model=model_path(args.reference))
        args.random_input = True  # the note on unbound inputs once, not once per blob
        return inputs

    def thresholds_for(program):
        return dataclasses.replace(default_thresholds(program_precision(program)), **changes)

    with parallel.from_args(args, tasks=len(args.blob)) as ex:
        rows = validate_blobs([model_path(b) for b in args.blob], model_path(args.reference), inputs_for,
                              thresholds_for, profile, executor=ex)
    if args.json:
        write_out(args.json, json.dumps(rows, indent=2) + "\n")
    lines = []
    for r in rows:
        if "error" in r:
            lines.append(f"{r['blob']}: error: {r['error']}")
        elif r["first_fault"]:
            lines.append(f"{r['blob']}: FAULT {r['first_fault']} in {r['fault_layer']}")
        else:
            worst = min(r["metrics"].values(), key=lambda m: m["cosine"]) if r["metrics"] else {}
            fails = "; ".join(f for fs in r["failures"].values() for f in fs)
            lines.append(f"{r['blob']}: {'PASS' if r['passed'] else 'FAIL ' + fails} "
                         f"(cosine {worst.get('cosine', 0):.6f}, max_rel {worst.get('max_rel', 0):.4g})")
    passed = sum(1 for r in rows if r.get("passed"))
    lines.append(f"validate: {passed} of {len(rows)} blob(s) pass")
    write_out(None, "\n".join(lines) + "\n")
    errors = [r for r in rows if "error" in r]
    if errors:
        internal = [r for r in errors if r["error_code"] == EXIT_INTERNAL]
        raise parallel.TaskFailed(f"{(internal or errors)[0]['blob']}: {(internal or errors)[0]['error']}",
                                  (internal or errors)[0]["error_code"])
    if any(r["first_fault"] for r in rows):
        return EXIT_FAULT
    return EXIT_OK if passed == len(rows) else EXIT_VALIDATION_FAILED


def _warmup_args(p):
    pass


@subcommand("warmup", "compile the Numba kernels into their cache once (after installing)", _warmup_args)
def _warmup(args) -> int:
    from ..tools.warmup import warm_numba_cache

    got = warm_numba_cache()
    n = sum(got["kernels"].values())
    write_out(None, f"npusim: {len(got['kernels'])} kernels ({n} signatures) compiled or loaded from Numba's cache "
                    f"in {got['seconds']:.1f} s\n")
    return EXIT_OK
