"""Benchmark: npusim against ONNX Runtime steady-state inference, measured in the same run.

The peer is `InferenceSession.run` on a session created once (fp32, CPUExecutionProvider, default
graph optimizations), at the same thread count as npusim: 1 thread, and the default (all cores;
thread spinning off, so idle ORT threads do not slow the npusim timing that follows them).
Every figure is a median of `--repeat` timings taken interleaved (npusim, ORT, npusim, ORT, ...),
so load on a shared machine hits both alike; the ratios are the figures to watch. The 1-thread and
the all-core figures are interleaved in two groups, one after the other.

    python scripts/bench.py                       # ResNet-50 224, YOLO-style 640, SqueezeNet-style 224,
                                                  # MobileNet v2 1.0 224 (depthwise convs)
    python scripts/bench.py --quick               # small models, a smoke run
    python scripts/bench.py --json docs/benchmark.json --markdown docs/benchmark.md
    python scripts/bench.py --render docs/benchmark.json   # the markdown table of an earlier JSON

Per model: compile (median, calibration on one ORT thread, first call of the process reported
apart), timing-only run, functional run at 1 thread and at the default thread count, the ORT peer at
both, the ratios, simulated cycles. Then: the growth of timing-only cost from a 320 to a 640 px
YOLO-style input; a fresh-process `npusim run --timing-only` of a small blob against a fresh-process
ONNX Runtime run of its model (both including interpreter start and imports); a 5-point
`--mem-align` sweep of ResNet-50 through `npusim.tools.sweep`, and the same points with the staged
compile (prepare once, finish per point) run serially; the fixed cost of an epoch, as the slope of
run time over a chain of N trivial epochs (`scripts/bench_epoch.py`). The machine's load average is
recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def interleaved(fns: dict, repeat: int) -> dict:
    """Median seconds of each callable, timed in turn (a b c a b c ...) after one warm-up call each."""
    for fn in fns.values():
        fn()
    times = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            times[k].append(_timed(fn))
    return {k: statistics.median(v) for k, v in times.items()}


def ort_session(model, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads  # 0 = ONNX Runtime's default (all cores)
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    # pool threads that spin after a run would steal the cores from the npusim timing that follows
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def bench_model(name: str, model, repeat: int) -> dict:
    import numpy as np

    from npusim.compiler import CompileOptions, compile as compile_model
    from npusim.runtime import RunOptions, run, seeded_inputs

    opts = CompileOptions(quantization="int8")
    first = _timed(lambda: compile_model(model, opts))
    prog = compile_model(model, opts)
    inputs = seeded_inputs(prog, seed=0)
    feeds = {k: np.asarray(v, dtype=np.float32) for k, v in inputs.items()}
    s1, sd = ort_session(model, 1), ort_session(model, 0)
    cores = os.cpu_count() or 1
    res = run(prog, inputs, RunOptions(trace=False))
    assert res.status == "ok", res.report_text()
    # one thread, then all cores: threads of the second group that linger after a call (OpenBLAS's
    # spin-wait) would otherwise slow the single-threaded timings that follow them
    t = interleaved({
        "timing": lambda: run(prog, inputs, RunOptions(timing_only=True, trace=False)),
        "ort_1": lambda: s1.run(None, feeds),
        "functional_1": lambda: run(prog, inputs, RunOptions(trace=False, threads=1)),
    }, repeat)
    t.update(interleaved({
        "ort_default": lambda: sd.run(None, feeds),
        "functional_default": lambda: run(prog, inputs, RunOptions(trace=False, threads=cores)),
    }, repeat))
    compile_s = statistics.median(_timed(lambda: compile_model(model, opts)) for _ in range(max(1, repeat // 2)))
    return dict(model=name, compile_s=compile_s, compile_first_s=first, timing_s=t["timing"],
                functional_1_s=t["functional_1"], functional_default_s=t["functional_default"],
                ort_1_s=t["ort_1"], ort_default_s=t["ort_default"], default_threads=cores,
                timing_x=t["timing"] / t["ort_1"], functional_1_x=t["functional_1"] / t["ort_1"],
                functional_default_x=t["functional_default"] / t["ort_default"],
                cycles=int(res.stats.cycles), sim_ms=res.stats.ms, epochs=len(res.stats.epochs))


def growth(repeat: int, small: int = 320, big: int = 640) -> dict:
    """Timing-only seconds of the YOLO-style detector at two input sizes (same epochs and commands)."""
    from npusim.compiler import compile as compile_model
    from npusim.runtime import RunOptions, run, seeded_inputs
    from npusim.zoo import yolo_style

    progs = {n: compile_model(yolo_style(size=n)) for n in (small, big)}
    ins = {n: seeded_inputs(p, 0) for n, p in progs.items()}
    t = interleaved({n: (lambda n=n: run(progs[n], ins[n], RunOptions(timing_only=True, trace=False)))
                     for n in progs}, repeat)
    return {"small_px": small, "big_px": big, "small_s": t[small], "big_s": t[big], "growth_x": t[big] / t[small]}


def fresh_process(repeat: int) -> dict:
    """Wall seconds of a fresh `npusim run --timing-only` of a small blob and of a fresh process that
    loads ONNX Runtime and runs the model once (both: interpreter start + imports + work)."""
    from npusim.compiler import compile as compile_model
    from npusim.hw import load_profile
    from npusim.program.blob import encode_blob
    from npusim.zoo import conv_model

    with tempfile.TemporaryDirectory() as d:
        model = conv_model(16, 16, 32, 32)
        onnx_path, blob = Path(d) / "small.onnx", Path(d) / "small.npu"
        onnx_path.write_bytes(model.SerializeToString())
        blob.write_bytes(encode_blob(compile_model(model), load_profile()))
        npu = [sys.executable, "-m", "npusim", "run", str(blob), "--random-input", "--timing-only"]
        code = ("import numpy as np, onnxruntime as ort; so = ort.SessionOptions(); so.intra_op_num_threads = 1; "
                f"s = ort.InferenceSession({str(onnx_path)!r}, so, providers=['CPUExecutionProvider']); "
                "i = s.get_inputs()[0]; s.run(None, {i.name: np.zeros([1, 16, 32, 32], np.float32)})")
        ort_cmd = [sys.executable, "-c", code]
        t = interleaved({"npusim": lambda: subprocess.run(npu, check=True, capture_output=True),
                         "ort": lambda: subprocess.run(ort_cmd, check=True, capture_output=True),
                         "python": lambda: subprocess.run([sys.executable, "-c", "pass"], check=True)}, repeat)
    return {"npusim_run_s": t["npusim"], "ort_run_s": t["ort"], "python_s": t["python"],
            "ratio_x": t["npusim"] / t["ort"]}


def sweep_points(model_name: str, model, values, repeat: int) -> dict:
    """Wall seconds of a 5-point --mem-align sweep: `tools.sweep.sweep` (what the CLI runs), and the
    staged compile (front end and calibration once, back end per point) with timing-only runs, serial."""
    from npusim.compiler import CompileOptions, finish, prepare
    from npusim.hw import load_profile
    from npusim.runtime import RunOptions, run
    from npusim.tools.sweep import sweep

    prof = load_profile()

    def staged():
        prep = prepare(model, CompileOptions(), prof)
        for v in values:
            prog = finish(prep, CompileOptions(mem_align=v), prof)
            run(prog, options=RunOptions(timing_only=True, trace=False), profile=prof, random_inputs=True)

    t_sweep = statistics.median(_timed(lambda: sweep(model, "mem_align", list(values), progress=False))
                                for _ in range(max(1, repeat // 3)))
    t_staged = statistics.median(_timed(staged) for _ in range(max(1, repeat // 3)))
    return {"model": model_name, "points": list(values), "sweep_s": t_sweep, "staged_serial_s": t_staged}


def epoch_slope(repeat: int) -> dict:
    """`scripts/bench_epoch.py`'s slopes (timing-only and functional, us per epoch), JSON-ready."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_epoch

    res = bench_epoch.measure(bench_epoch.programs(), repeat)
    return {m: {**r, "seconds": {str(k): v for k, v in r["seconds"].items()},
                "epochs": {str(k): v for k, v in r["epochs"].items()}} for m, r in res.items()}


def render(data: dict) -> str:
    """The benchmark tables (markdown) of a bench JSON."""
    rows = data["models"]
    out = ["<!-- generated by `python scripts/bench.py --render docs/benchmark.json`; do not edit -->",
           "# Benchmark: npusim against ONNX Runtime", "",
           "`python scripts/bench.py --json docs/benchmark.json --markdown docs/benchmark.md` (the figures of "
           "the README's Speed section).", "",
           f"Measured {data['date']} on {data['machine']} ({data['cores']} cores; load average "
           f"{data['load_before'][0]:.1f} before, {data['load_after'][0]:.1f} after; medians of {data['repeat']} "
           "interleaved timings). Peer: ONNX Runtime `InferenceSession.run` on a pre-created session, fp32, "
           "same thread count.", "",
           "| model | epochs | compile | timing-only | timing-only per epoch | functional (1 thread) | ORT (1 thread) "
           "| timing/ORT | functional/ORT | functional/ORT (all cores) | simulated |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['model']} | {r['epochs']} | {r['compile_s']:.2f} s | {r['timing_s'] * 1e3:.0f} ms | "
                   f"{r['timing_s'] / max(r['epochs'], 1) * 1e6:.0f} us | "
                   f"{r['functional_1_s'] * 1e3:.0f} ms | {r['ort_1_s'] * 1e3:.0f} ms | {r['timing_x']:.2f}x | "
                   f"{r['functional_1_x']:.2f}x | {r['functional_default_x']:.2f}x | {r['sim_ms']:.1f} ms |")
    g = data["growth"]
    f = data["fresh_process"]
    s = data["sweep"]
    out += ["",
            f"- Timing-only cost growth from a {g['small_px']} to a {g['big_px']} px YOLO-style input (4x the "
            f"bytes, same epochs): {g['growth_x']:.2f}x ({g['small_s'] * 1e3:.0f} -> {g['big_s'] * 1e3:.0f} ms).",
            f"- Fresh process `npusim run --timing-only` of a small blob: {f['npusim_run_s']:.2f} s; a fresh process "
            f"running the model in ONNX Runtime: {f['ort_run_s']:.2f} s ({f['ratio_x']:.2f}x); bare "
            f"`python -c pass`: {f['python_s']:.2f} s.",
            f"- 5-point `--mem-align` sweep of {s['model']}: {s['sweep_s']:.1f} s through `npusim sweep`'s code "
            f"path; {s['staged_serial_s']:.1f} s with the staged compile (front end and calibration once), serial.",
            f"- Compile includes calibration on {data['calibration_samples']} seeded samples; the first compile "
            "of a process (imports included) is in the JSON (`compile_first_s`)."]
    e = data.get("epoch_slope")
    if e:
        out.append(f"- Fixed cost of an epoch (`scripts/bench_epoch.py`: least-squares slope of the run time of a chain "
                   f"of N 1x1 int8 convolutions, 16 channels at 8x8, N = {', '.join(e['timing']['seconds'])}): "
                   f"timing-only {e['timing']['slope_us']:.0f} us per epoch, functional (repeat runs) "
                   f"{e['functional']['slope_us']:.0f} us per epoch.")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small models (smoke run)")
    ap.add_argument("--repeat", type=int, default=7, help="interleaved timings per figure (median)")
    ap.add_argument("--json", metavar="FILE", default="bench.json", help="write the figures (default: bench.json)")
    ap.add_argument("--markdown", metavar="FILE", help="also write the markdown tables")
    ap.add_argument("--render", metavar="JSON", help="only print the markdown tables of an earlier JSON")
    args = ap.parse_args(argv)
    if args.render:
        print(render(json.loads(Path(args.render).read_text())), end="")
        return 0

    from npusim.compiler import CompileOptions
    from npusim.zoo import resnet50, squeezenet_style, yolo_style
    from npusim.zoo.st import mobilenet_v2

    load_before = os.getloadavg()
    if args.quick:
        models = [("ResNet-50 112 int8", resnet50(size=112)), ("YOLO-style 256 int8", yolo_style(size=256)),
                  ("SqueezeNet-style 112 int8", squeezenet_style(size=112)),
                  ("MobileNet v2 112 int8", mobilenet_v2(size=112))]
    else:
        models = [("ResNet-50 224 int8", resnet50(size=224)), ("YOLO-style 640 int8", yolo_style(size=640)),
                  ("SqueezeNet-style 224 int8", squeezenet_style(size=224)),
                  ("MobileNet v2 224 int8", mobilenet_v2(size=224))]
    rows = []
    for name, m in models:
        rows.append(bench_model(name, m, args.repeat))
        r = rows[-1]
        print(f"{name:<28} compile {r['compile_s']:.2f} s  timing {r['timing_s'] * 1e3:.0f} ms "
              f"({r['timing_x']:.2f}x ORT)  functional {r['functional_1_s'] * 1e3:.0f} ms ({r['functional_1_x']:.2f}x)",
              file=sys.stderr)
    data = {
        "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "cores": os.cpu_count(), "python": platform.python_version(), "repeat": args.repeat,
        "calibration_samples": CompileOptions().calibration_samples, "load_before": list(load_before),
        "models": rows,
        "growth": growth(args.repeat, *((160, 320) if args.quick else (320, 640))),
        "fresh_process": fresh_process(max(3, args.repeat // 2)),
        "sweep": sweep_points(models[0][0], models[0][1], (16, 32, 64, 128, 256), args.repeat),
        "epoch_slope": epoch_slope(args.repeat),
    }
    data["load_after"] = list(os.getloadavg())
    Path(args.json).write_text(json.dumps(data, indent=1) + "\n")
    text = render(data)
    if args.markdown:
        Path(args.markdown).write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
