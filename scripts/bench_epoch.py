"""Benchmark: the fixed cost of an epoch, as a slope (issue 39).

A chain of N trivial epochs (1 x 1 int8 convolutions of 16 channels on an 8 x 8 map, ReLU between,
built with the zoo's ONNX builder) is compiled once per N; the run time of the same Program is timed
for N = 10, 50, 100, 200, 400, interleaved (N10, N50, ..., N10, N50, ...) after one warm-up run
each, and the times are fitted by least squares against N. The slope is the per-epoch cost
(microseconds per epoch), the intercept the fixed cost of a run. The times are the calling thread's
CPU seconds per run (means; one BLAS thread), which other processes' load disturbs far less than
wall time; the wall-clock medians are in the JSON too.

    python scripts/bench_epoch.py                 # timing-only and functional slopes
    python scripts/bench_epoch.py --repeat 15 --json epoch.json
    python scripts/bench_epoch.py --profile timing --n 200   # cProfile of one mode's runs (top 30)

Functional runs after the first of a Program replay values only (`runtime._timing_memo`), as a
user's repeat inference does: that is what is timed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

SIZES = (10, 50, 100, 200, 400)


def chain_model(n: int, c: int = 16, hw: int = 8, seed: int = 0):
    """n 1 x 1 convolutions of c channels on a hw x hw map, a ReLU after each (fused: one epoch each)."""
    from npusim.zoo import Builder

    b = Builder(seed)
    x = "input"
    for _ in range(n):
        x = b.node("Relu", [b.conv(x, c, c, k=1)])
    return b.model([1, c, hw, hw], [x], f"chain_{n}")


def programs(sizes=SIZES) -> dict:
    from npusim.compiler import CompileOptions, compile as compile_model

    return {n: compile_model(chain_model(n), CompileOptions(quantization="int8", calibration_samples=1))
            for n in sizes}


def fit(xs, ys) -> tuple[float, float]:
    """Least-squares (slope, intercept) of ys against xs."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return slope, my - slope * mx


def measure(progs: dict, repeat: int, modes=("timing", "functional")) -> dict:
    """{mode: {"seconds": {N: CPU seconds}, "wall_seconds": {N: median}, "slope_us", "intercept_ms",
    "epochs": {N: epochs}}}: the slope is fitted to the calling thread's CPU time per run (a busy shared
    machine disturbs it far less than wall time; `bench_timing.interleaved_cpu`)."""
    from bench_timing import interleaved_cpu

    from npusim.runtime import RunOptions, run, seeded_inputs

    opts = {"timing": RunOptions(timing_only=True, trace=False), "functional": RunOptions(trace=False, threads=1)}
    ins = {n: seeded_inputs(p, 0) for n, p in progs.items()}
    out = {}
    for mode in modes:
        epochs = {}
        for n, p in progs.items():  # warm-up (a functional Program's first run fills its timing memo)
            res = run(p, ins[n], opts[mode])
            assert res.status == "ok", res.report_text()
            epochs[n] = len(res.stats.epochs)
        wall, cpu = interleaved_cpu({n: (lambda p=p, n=n: run(p, ins[n], opts[mode])) for n, p in progs.items()},
                                    repeat)
        xs = [epochs[n] for n in progs]
        slope, icpt = fit(xs, [cpu[n] for n in progs])
        out[mode] = {"seconds": cpu, "wall_seconds": wall, "epochs": epochs, "slope_us": slope * 1e6,
                     "intercept_ms": icpt * 1e3}
    return out


def profile(progs: dict, mode: str, n: int, runs: int, top: int = 30) -> None:
    import cProfile
    import pstats

    from npusim.runtime import RunOptions, run, seeded_inputs

    opt = RunOptions(timing_only=mode == "timing", trace=False)
    p = progs[n]
    ins = seeded_inputs(p, 0)
    run(p, ins, opt)
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(runs):
        run(p, ins, opt)
    pr.disable()
    pstats.Stats(pr, stream=sys.stdout).sort_stats("tottime").print_stats(top)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9, help="interleaved timings per N (median)")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="chain lengths N (comma separated)")
    ap.add_argument("--json", metavar="FILE", help="write the figures")
    ap.add_argument("--profile", choices=("timing", "functional"), help="cProfile one mode instead")
    ap.add_argument("--n", type=int, default=200, help="--profile: the chain length")
    args = ap.parse_args(argv)
    sizes = tuple(int(s) for s in args.sizes.split(","))
    if args.profile:
        profile(programs((args.n,)), args.profile, args.n, max(1, args.repeat))
        return 0
    progs = programs(sizes)
    res = measure(progs, args.repeat)
    for mode, r in res.items():
        pts = "  ".join(f"N={n}: {r['seconds'][n] * 1e3:.2f} ms" for n in sizes)
        print(f"{mode:<10} slope {r['slope_us']:7.1f} us/epoch  intercept {r['intercept_ms']:6.2f} ms   {pts}")
    if args.json:
        data = {m: {**r, "seconds": {str(k): v for k, v in r["seconds"].items()},
                    "epochs": {str(k): v for k, v in r["epochs"].items()}} for m, r in res.items()}
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"date": time.strftime("%Y-%m-%d"), "repeat": args.repeat, **data}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
