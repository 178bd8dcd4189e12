"""Benchmark: a functional run of an ST Edge AI output (ST's program computed unit by unit) against the
TFLite interpreter on the source model, one thread each, measured in the same run.

Every figure is a median of `--repeat` timings taken interleaved (npusim, TFLite default, TFLite builtin,
npusim, ...), so load on a shared machine hits all alike; the ratios are the figures to watch. The ST output
is parsed once (the parse is cached by `npusim.importers.stedgeai.load`, as a repeated `validate` run
reuses it) and run once before timing (the program's plan is built then, as a repeated run reuses it);
the npusim figure is `execute.run` on seeded inputs: memory set-up, weights, every epoch, every software
operator. The interpreter figures are `invoke()` on interpreters created once, one thread each: "default" is
`Interpreter(num_threads=1)` (XNNPACK where it applies: issue 36's goal, <= 3x, is judged on it), "builtin"
the builtin kernels without delegates (what `validate` compares against).

    python scripts/bench_st_values.py                          # st_od_yolox480_dk, 3 repeats
    python scripts/bench_st_values.py --compile st_ic_mnv1_nucleo --repeat 5 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "stedgeai"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compile", default="st_od_yolox480_dk", help="a folder of ../shared/stedgeai")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    from ai_edge_litert import interpreter as tfl

    from npusim.importers.stedgeai import load
    from npusim.importers.stedgeai.execute import run
    from npusim.tools.st_validate import seeded_model_inputs, st_inputs

    folder = SHARED / args.compile
    (model,) = folder.glob("*.tflite")
    out = load(folder)
    arrays = seeded_model_inputs(str(model), 0)
    feed = st_inputs(out, arrays)
    kernels = {"default": tfl.Interpreter(model_path=str(model), num_threads=1),
               "builtin": tfl.Interpreter(model_path=str(model), num_threads=1,
                                          experimental_op_resolver_type=tfl.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)}
    for it in kernels.values():
        it.allocate_tensors()
        for d, a in zip(it.get_input_details(), arrays):
            it.set_tensor(d["index"], a)
        it.invoke()  # warm-up
    run(out, feed)
    load_before = os.getloadavg()[0]
    times: dict = {"npusim": [], **{k: [] for k in kernels}}
    for _ in range(args.repeat):
        t = time.perf_counter()
        run(out, feed)
        times["npusim"].append(time.perf_counter() - t)
        for k, it in kernels.items():
            t = time.perf_counter()
            it.invoke()
            times[k].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    res = {"compile": args.compile, "repeat": args.repeat, "npusim_s": med["npusim"],
           "tflite_default_s": med["default"], "tflite_builtin_s": med["builtin"],
           "ratio_default": med["npusim"] / med["default"], "ratio_builtin": med["npusim"] / med["builtin"],
           "goal": "ratio_default <= 3 (issue 36)", "loadavg": [load_before, os.getloadavg()[0]]}
    print(f"{args.compile}: npusim functional run {med['npusim']:.3f} s; TFLite invoke (1 thread) default "
          f"{med['default']:.4f} s, builtin {med['builtin']:.4f} s; ratio {res['ratio_default']:.1f}x default "
          f"(the goal's, <= 3x), {res['ratio_builtin']:.1f}x builtin (medians of {args.repeat}, interleaved; "
          f"load {load_before:.1f} -> {os.getloadavg()[0]:.1f})")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
