"""Benchmark: npusim against ONNX Runtime on the same machine, in the same run.

Prints, per model: wall time of compile, timing-only run and functional run; ONNX Runtime fp32
wall time on the same input; the ratios (the figures to watch -- absolute times are noisy on shared
machines); simulated cycles. Then the wall time of a 5-point alignment sweep of ResNet-50.

    python scripts/bench.py            # ResNet-50 224 int8 + YOLO-style 640 int8
    python scripts/bench.py --quick    # smaller models, for a smoke run
Goals (not tests): timing-only <= 2x ORT, functional <= 10x ORT, ResNet-50 sweep <= 20 s.
"""

from __future__ import annotations

import argparse
import statistics
import time


def _best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def bench_model(name, model, repeat: int):
    import numpy as np

    from npusim.compiler import CompileOptions, compile as compile_model
    from npusim.reference import ort_run
    from npusim.runtime import RunOptions, run, seeded_inputs

    t = time.perf_counter()
    prog = compile_model(model, CompileOptions(quantization="int8"))
    t_compile = time.perf_counter() - t
    inputs = seeded_inputs(prog, seed=0)
    run(prog, inputs, RunOptions(timing_only=True))  # warm caches (numba, first-touch memory)
    t_timing = _best_of(lambda: run(prog, inputs, RunOptions(timing_only=True, trace=False)), repeat)
    res = run(prog, inputs, RunOptions(trace=False))
    t_func = _best_of(lambda: run(prog, inputs, RunOptions(trace=False)), repeat)
    ort_run(model, inputs)
    t_ort = _best_of(lambda: ort_run(model, inputs), repeat)
    assert res.status == "ok", res.report_text()
    return dict(model=name, compile_s=t_compile, timing_s=t_timing, functional_s=t_func, ort_s=t_ort,
                timing_x=t_timing / t_ort, functional_x=t_func / t_ort, cycles=int(res.stats.cycles),
                ms=res.stats.ms)


def fresh_process(tmpdir) -> tuple[float, float]:
    """Wall seconds of `npusim run small.npu` in a fresh process (warm numba cache), and of a bare
    `python -c pass` as the peer."""
    import subprocess
    import sys
    from pathlib import Path

    from npusim.compiler import compile as compile_model
    from npusim.hw import load_profile
    from npusim.program.blob import encode_blob
    from npusim.zoo import conv_model

    blob = Path(tmpdir) / "small.npu"
    blob.write_bytes(encode_blob(compile_model(conv_model(16, 16, 32, 32)), load_profile()))
    cmd = [sys.executable, "-m", "npusim", "run", str(blob), "--random-input"]
    subprocess.run(cmd, check=True, capture_output=True)  # warm the numba cache
    t_run = _best_of(lambda: subprocess.run(cmd, check=True, capture_output=True), 3)
    t_py = _best_of(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), 3)
    return t_run, t_py


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small models (smoke run)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)

    from npusim.tools.sweep import sweep
    from npusim.zoo import resnet50, yolo_style

    rs, ys = (112, 256) if args.quick else (224, 640)
    models = [(f"resnet50-{rs}", resnet50(size=rs)), (f"yolo-{ys}", yolo_style(size=ys))]
    rows = [bench_model(n, m, args.repeat) for n, m in models]
    head = (f"{'model':<14} {'compile s':>9} {'timing s':>9} {'func s':>8} {'ORT s':>7} "
            f"{'timing/ORT':>10} {'func/ORT':>9} {'sim cycles':>12} {'sim ms':>8}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['model']:<14} {r['compile_s']:>9.2f} {r['timing_s']:>9.3f} {r['functional_s']:>8.3f} "
              f"{r['ort_s']:>7.3f} {r['timing_x']:>10.2f} {r['functional_x']:>9.2f} {r['cycles']:>12,} {r['ms']:>8.2f}")
    t = time.perf_counter()
    res = sweep(models[0][1], "mem_align", [16, 32, 64, 128, 256], progress=False)
    t_sweep = time.perf_counter() - t
    print(f"\n5-point --mem-align sweep of {models[0][0]}: {t_sweep:.1f} s "
          f"({', '.join(f'{p.value}:{p.status}' for p in res.points)})")
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        t_run, t_py = fresh_process(d)
    print(f"fresh process `npusim run small.npu` (warm numba cache): {t_run:.2f} s wall "
          f"({t_run / t_py:.1f}x a bare `python -c pass` at {t_py:.2f} s)")


if __name__ == "__main__":
    main()
