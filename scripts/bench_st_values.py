"""Benchmark: a functional run of an ST Edge AI output (ST's program computed unit by unit) against the
TFLite interpreter on the source model, one thread each, measured in the same run.

Every figure is a median of `--repeat` timings taken interleaved (npusim, TFLite, npusim, TFLite, ...),
so load on a shared machine hits both alike; the ratio is the figure to watch. The ST output is parsed
once (the parse is cached by `npusim.importers.stedgeai.load`, as a repeated `validate` run reuses it);
the npusim figure is `execute.run` on seeded inputs: memory set-up, weights, every epoch, every
software operator. The interpreter figure is `invoke()` on an interpreter created once.

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
    it = tfl.Interpreter(model_path=str(model), num_threads=1)
    it.allocate_tensors()
    for d, a in zip(it.get_input_details(), arrays):
        it.set_tensor(d["index"], a)
    it.invoke()  # warm-up of both
    run(out, feed)
    sim, ref = [], []
    for _ in range(args.repeat):
        t = time.perf_counter()
        run(out, feed)
        sim.append(time.perf_counter() - t)
        t = time.perf_counter()
        it.invoke()
        ref.append(time.perf_counter() - t)
    res = {"compile": args.compile, "repeat": args.repeat, "npusim_s": statistics.median(sim),
           "tflite_s": statistics.median(ref), "loadavg": os.getloadavg()[0]}
    res["ratio"] = res["npusim_s"] / res["tflite_s"]
    print(f"{args.compile}: npusim functional run {res['npusim_s']:.3f} s, TFLite invoke (1 thread) "
          f"{res['tflite_s']:.4f} s, ratio {res['ratio']:.1f}x (medians of {args.repeat}, interleaved; "
          f"load {res['loadavg']:.1f})")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
