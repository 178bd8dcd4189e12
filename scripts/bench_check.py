"""Benchmark: `npusim check` against the simulator's timing-only run of the same blob, in the same run.

    python scripts/bench_check.py                 # ResNet-50 224 int8 (zoo.resnet50)
    python scripts/bench_check.py --model yolo_style --repeat 21 --json check.json

Both are timed interleaved (check, run, check, run, ...) after one warm-up call each, medians of
`--repeat`, so load on a shared machine hits both alike; the ratio is the figure to watch. Two
settings: "warm" times a loaded Program whose per-program memos (decoded commands, epoch plans,
validation) exist, as `scripts/bench.py` times its runs; "cold" loads the blob afresh before each
timed call (the load itself is timed apart), so decoding and planning are included. Wall seconds
and CPU seconds of the process are both reported (CPU time is the steadier one on a loaded machine).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time


def _timed(fn) -> tuple[float, float]:
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def interleaved(fns: dict, repeat: int, before=None) -> dict:
    """{name: (median wall s, median CPU s)}; `before()` (untimed) runs before each call."""
    for fn in fns.values():
        if before is not None:
            before()
        fn()
    times = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            if before is not None:
                before()
            times[k].append(_timed(fn))
    return {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in times.items()}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet50", help="a zoo model name (default: resnet50)")
    ap.add_argument("--repeat", type=int, default=11)
    ap.add_argument("--json", default=None, help="write the figures as JSON")
    args = ap.parse_args(argv)

    from npusim import zoo
    from npusim.analysis import check
    from npusim.compiler import CompileOptions, compile as compile_model
    from npusim.hw import load_profile
    from npusim.program.blob import encode_blob
    from npusim.runtime import RunOptions, load, run

    prof = load_profile()
    prog = compile_model(getattr(zoo, args.model)(), CompileOptions(quantization="int8"), profile=prof)
    blob = encode_blob(prog, prof)
    loaded = load(blob, prof)
    rep = check(loaded, prof)
    timing = RunOptions(timing_only=True, trace=False)
    res = run(loaded, options=timing, profile=prof)
    assert rep.ok and res.status == "ok", rep.text() + res.report_text()

    warm = interleaved({"check": lambda: check(loaded, prof), "timing": lambda: run(loaded, options=timing, profile=prof)},
                       args.repeat)
    fresh = {}

    def reload():
        fresh["p"] = load(blob, prof)

    cold = interleaved({"check": lambda: check(fresh["p"], prof),
                        "timing": lambda: run(fresh["p"], options=timing, profile=prof)}, args.repeat, before=reload)
    load_t = interleaved({"load": lambda: load(blob, prof)}, args.repeat)["load"]
    out = {"model": args.model, "commands": len(loaded.commands), "epochs": rep.epochs, "host_epochs": rep.host_epochs,
           "undecided": len(rep.undecided), "repeat": args.repeat, "load_s": load_t[0],
           "loadavg": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}
    for name, t in (("warm", warm), ("cold", cold)):
        out[f"{name}_check_s"], out[f"{name}_check_cpu_s"] = t["check"]
        out[f"{name}_timing_s"], out[f"{name}_timing_cpu_s"] = t["timing"]
        out[f"{name}_ratio"] = t["check"][0] / t["timing"][0]
        out[f"{name}_cpu_ratio"] = t["check"][1] / t["timing"][1]
    print(f"{args.model}: {out['commands']} commands, {out['epochs']} NPU + {out['host_epochs']} CPU epochs; "
          f"load {load_t[0] * 1e3:.1f} ms (load average {out['loadavg']:.1f})")
    for name in ("warm", "cold"):
        print(f"  {name}: check {out[f'{name}_check_s'] * 1e3:6.1f} ms ({out[f'{name}_check_cpu_s'] * 1e3:.1f} ms CPU), "
              f"timing-only run {out[f'{name}_timing_s'] * 1e3:6.1f} ms ({out[f'{name}_timing_cpu_s'] * 1e3:.1f} ms CPU); "
              f"check/run {out[f'{name}_ratio']:.2f}x (CPU {out[f'{name}_cpu_ratio']:.2f}x)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)
    return out


if __name__ == "__main__":
    main()
