"""Benchmark: npusim against each model's own runtime (its peer), measured in the same run.

Peers, at the same thread count as npusim (1 thread, and the default: all cores):
- an ONNX model: ONNX Runtime `InferenceSession.run` on a session created once (fp32,
  CPUExecutionProvider, default graph optimizations; thread spinning off, so idle ORT threads do not
  slow the npusim timing that follows them);
- a TFLite model (MoveNet, `../shared/stedgeai/st_pose_movenet192_dk`): the TFLite interpreter
  (`ai_edge_litert`, its default kernels, `num_threads`), `invoke` on an interpreter made once;
- an imported ST Edge AI Core compile (YOLOX-nano 480, `../shared/stedgeai/st_od_yolox480_dk`,
  timing-only: an imported program carries no values): the interpreter running the compile's source
  TFLite model. Its "compile" column is the import (read the C, decode and lift the blobs, weights).
Every figure is timed interleaved (npusim, peer, npusim, peer, ...), so load on a shared machine hits
both alike. At one thread every side runs on the calling thread (npusim's BLAS is limited to it, ORT
and the interpreter get one thread), so the 1-thread figures and ratios are that thread's CPU time
per call (means over the timings; a short callable is called several times per timing, as the CPU
clock may tick coarsely: 4 ms on this VM): other processes' load slows them far less than wall time.
The wall-clock medians are in the JSON too (`*_wall_s`); the all-core figures are wall-clock medians
(several threads), meaningful only on an idle machine.

    python scripts/bench.py                       # the models above, ResNet-50 224, YOLO-style 640,
                                                  # SqueezeNet-style 224, MobileNet v2 1.0 224
    python scripts/bench.py --quick               # small models, a smoke run
    python scripts/bench.py --json docs/benchmark.json --markdown docs/benchmark.md --readme README.md
    python scripts/bench.py --render docs/benchmark.json   # the markdown table of an earlier JSON
    python scripts/bench.py --render docs/benchmark.json --markdown docs/benchmark.md --readme README.md

Per model: compile (median, calibration on one ORT thread, first call of the process reported
apart), timing-only run, functional run at 1 thread and at the default thread count, the peer at
both, the ratios, simulated cycles. Then: the fixed cost of an epoch, as the slope of run time over a
chain of N trivial epochs (`scripts/bench_epoch.py`, its own row and column); the functional int8
kernels by family against one-core peaks measured in the run (`scripts/bench_kernels.py`); the
growth of timing-only cost from a 320 to a 640 px YOLO-style input; a fresh-process `npusim run
--timing-only` of a small blob against a fresh-process ONNX Runtime run of its model (both including
interpreter start and imports); a 5-point `--mem-align` sweep of ResNet-50 through
`npusim.tools.sweep`, and the same points with the staged compile (prepare once, finish per point) run
serially. The machine's load average is recorded. `--readme` rewrites the table of the README's Speed
section (between its `bench:table` markers) from the JSON.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_timing import interleaved_cpu  # noqa: E402


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def interleaved(fns: dict, repeat: int) -> dict:
    """Median wall seconds per call of each callable, timed in turn (a b c a b c ...)."""
    return interleaved_cpu(fns, repeat)[0]


def _ratios(row: dict, wall: dict, cpu: dict, peer: str, runs=("timing", "functional_1")) -> dict:
    """The row's 1-thread figures (CPU seconds per call of the calling thread) and their ratios to the
    peer's; the wall-clock medians beside them (`*_wall_s`)."""
    for k in (*runs, peer):
        row[f"{k}_s"] = cpu[k]
        row[f"{k}_wall_s"] = wall[k]
    for k in runs:
        row[f"{k.split('_')[0]}{'_1' if k.endswith('_1') else ''}_x"] = cpu[k] / cpu[peer]
    return row


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
    """An ONNX model against ONNX Runtime (fp32)."""
    import numpy as np

    from npusim.compiler import CompileOptions, compile as compile_model
    from npusim.runtime import RunOptions, run, seeded_inputs

    opts = CompileOptions(quantization="int8")
    first = _timed(lambda: compile_model(model, opts))
    prog = compile_model(model, opts)
    inputs = seeded_inputs(prog, seed=0)
    feeds = {k: np.asarray(v, dtype=np.float32) for k, v in inputs.items()}
    s1, sd = ort_session(model, 1), ort_session(model, 0)
    compile_s = statistics.median(_timed(lambda: compile_model(model, opts)) for _ in range(max(1, repeat // 2)))
    row = dict(model=name, peer="ONNX Runtime fp32", compile_s=compile_s, compile_first_s=first)
    return _bench_program(row, prog, inputs, lambda: s1.run(None, feeds), lambda: sd.run(None, feeds), repeat)


def _bench_program(row: dict, prog, inputs, peer_1, peer_default, repeat: int) -> dict:
    """Timing-only and functional runs of a compiled Program against its peer (1 thread, then all cores)."""
    from npusim.runtime import RunOptions, run

    cores = os.cpu_count() or 1
    res = run(prog, inputs, RunOptions(trace=False))
    assert res.status == "ok", res.report_text()
    # one thread, then all cores: threads of the second group that linger after a call (OpenBLAS's
    # spin-wait) would otherwise slow the single-threaded timings that follow them
    wall, cpu = interleaved_cpu({
        "timing": lambda: run(prog, inputs, RunOptions(timing_only=True, trace=False)),
        "peer_1": peer_1,
        "functional_1": lambda: run(prog, inputs, RunOptions(trace=False, threads=1)),
    }, repeat)
    _ratios(row, wall, cpu, "peer_1")
    t = interleaved({
        "peer_default": peer_default,
        "functional_default": lambda: run(prog, inputs, RunOptions(trace=False, threads=cores)),
    }, repeat)
    row.update(functional_default_s=t["functional_default"], peer_default_s=t["peer_default"], default_threads=cores,
               functional_default_x=t["functional_default"] / t["peer_default"],
               cycles=int(res.stats.cycles), sim_ms=res.stats.ms, epochs=len(res.stats.epochs))
    return row


def _interpreter(path: Path, threads: int):
    """`invoke` of the TFLite interpreter (default kernels) on `path`, its inputs set to zeros."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(path), num_threads=threads)
    it.allocate_tensors()
    for d in it.get_input_details():
        it.set_tensor(d["index"], np.zeros(d["shape"], dtype=d["dtype"]))
    return it.invoke


def bench_tflite(name: str, path: Path, repeat: int) -> dict:
    """An int8 TFLite model against the TFLite interpreter."""
    from npusim.compiler import compile as compile_model
    from npusim.runtime import seeded_inputs

    first = _timed(lambda: compile_model(path))
    prog = compile_model(path)
    compile_s = statistics.median(_timed(lambda: compile_model(path)) for _ in range(max(1, repeat // 2)))
    row = dict(model=name, peer="TFLite interpreter", compile_s=compile_s, compile_first_s=first)
    return _bench_program(row, prog, seeded_inputs(prog, seed=0), _interpreter(path, 1),
                          _interpreter(path, os.cpu_count() or 1), repeat)


def bench_st(name: str, folder: Path, repeat: int) -> dict:
    """An imported ST Edge AI Core compile, timing-only (the walk of every epoch with its checks, and the
    cycles), against the interpreter running the compile's source TFLite model."""
    from npusim.hw import load_profile
    from npusim.importers.stedgeai import load
    from npusim.importers.stedgeai.reader import read
    from npusim.importers.stedgeai.replay import replay
    from npusim.importers.stedgeai.timing import program_cycles

    profile = load_profile("n657")
    import_s = statistics.median(_timed(lambda: read(folder)) for _ in range(max(1, repeat // 2)))
    out = load(folder)
    source = sorted(folder.glob("*.tflite"))[0]
    cyc = {}
    wall, cpu = interleaved_cpu({"timing": lambda: cyc.update(program_cycles(out, replay(out), profile)),
                                 "peer_1": _interpreter(source, 1)}, repeat)
    row = dict(model=name, peer="TFLite interpreter (source model)", compile_s=import_s, compile_first_s=None,
               epochs=sum(len(b.epochs) for b in out.blocks), cycles=int(sum(cyc.values())),
               sim_ms=profile.cycles_to_ms(sum(cyc.values())))
    return _ratios(row, wall, cpu, "peer_1", runs=("timing",))


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


def _fmt(v, spec: str, unit: str = "", scale: float = 1.0) -> str:
    return "-" if v is None else f"{v * scale:{spec}}{unit}"


def model_table(data: dict, full: bool = True) -> list[str]:
    """The markdown table of the models (one row each, its peer named) and of the per-epoch slope;
    `full=False`: the README's columns (ratios, per epoch, compile, simulated)."""
    cols = ["model", "peer (1 thread)", "epochs", "compile", "timing-only", "per epoch", "functional (1 thread)",
            "peer", "timing / peer", "functional / peer", "functional / peer (all cores)", "simulated"]
    keep = cols if full else ["model", "peer (1 thread)", "epochs", "timing / peer", "functional / peer", "per epoch",
                              "compile", "simulated"]
    rows = []
    for r in data["models"]:
        epochs = max(r["epochs"], 1)
        rows.append({"model": r["model"], "peer (1 thread)": r.get("peer", "ONNX Runtime fp32"), "epochs": str(r["epochs"]),
                     "compile": _fmt(r["compile_s"], ".2f", " s"), "timing-only": _fmt(r["timing_s"], ".1f", " ms", 1e3),
                     "per epoch": _fmt(r["timing_s"] / epochs, ".0f", " us", 1e6),
                     "functional (1 thread)": _fmt(r.get("functional_1_s"), ".1f", " ms", 1e3),
                     "peer": _fmt(r.get("peer_1_s", r.get("ort_1_s")), ".1f", " ms", 1e3),
                     "timing / peer": _fmt(r["timing_x"], ".2f", "x"),
                     "functional / peer": _fmt(r.get("functional_1_x"), ".2f", "x"),
                     "functional / peer (all cores)": _fmt(r.get("functional_default_x"), ".2f", "x"),
                     "simulated": _fmt(r.get("sim_ms"), ".1f", " ms")})
    e = data.get("epoch_slope")
    if e:
        t, f = e["timing"], e["functional"]
        ns = ", ".join(t["seconds"])
        rows.append({"model": f"chain of N 1x1 int8 convs, 16 ch 8x8, N = {ns}: the slope", "epochs": ns.split(", ")[-1],
                     "timing-only": f"{t['intercept_ms']:.2f} ms + N x slope",
                     "per epoch": f"{t['slope_us']:.0f} us (functional {f['slope_us']:.0f} us)"})
    out = ["| " + " | ".join(keep) + " |", "|" + "---|" * len(keep)]
    out += ["| " + " | ".join(row.get(c, "-") for c in keep) + " |" for row in rows]
    return out


def render(data: dict) -> str:
    """The benchmark tables (markdown) of a bench JSON."""
    out = ["<!-- generated by `python scripts/bench.py --render docs/benchmark.json`; do not edit -->",
           "# Benchmark: npusim against each model's runtime", "",
           "`python scripts/bench.py --json docs/benchmark.json --markdown docs/benchmark.md --readme README.md` "
           "(the figures of the README's Speed section).", "",
           f"Measured {data['date']} on {data['machine']} ({data['cores']} cores; load average "
           f"{data['load_before'][0]:.1f} before, {data['load_after'][0]:.1f} after; {data['repeat']} "
           "interleaved timings each). Peers at one thread: ONNX Runtime `InferenceSession.run` on a pre-created "
           "session (fp32) for ONNX models, the TFLite interpreter (`invoke`, default kernels) for TFLite models and "
           "for the source model of an imported ST compile. 1-thread times are CPU seconds of the calling thread "
           "per call (means); compile times and the all-core ratio are wall-clock medians (a busy machine "
           "inflates them); "
           "\"per epoch\" is the timing-only run over its epochs.", ""]
    out += model_table(data)
    k = data.get("kernels")
    if k:
        out += ["", "Functional int8 kernels by family (`scripts/bench_kernels.py`: MobileNet v2 224 layer shapes, one "
                "thread, fastest of the timings; operations = multiply-accumulates, or values requantized):", ""]
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import bench_kernels

        out += bench_kernels.render(k)
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
            "of a process (imports included) is in the JSON (`compile_first_s`). An imported ST compile's "
            "\"compile\" is its import."]
    return "\n".join(out) + "\n"


README_BEGIN, README_END = "<!-- bench:table (scripts/bench.py --readme) -->", "<!-- /bench:table -->"


def readme_block(data: dict) -> str:
    """The README's Speed table: where and when it was measured, then the models and the slope."""
    lines = [README_BEGIN,
             f"Measured {data['date']} on a {data['cores']}-core {data['machine']} VM (load average "
             f"{data['load_before'][0]:.1f} before, {data['load_after'][0]:.1f} after), {data['repeat']} interleaved "
             "timings each; run times are CPU seconds of the calling thread per call at one thread, compile times "
             "wall-clock (a busy machine inflates them):", ""]
    lines += model_table(data, full=False)
    return "\n".join(lines + [README_END])


def write_readme(path: Path, data: dict) -> None:
    """Replace the block between the README's bench:table markers with `readme_block(data)`."""
    text = path.read_text(encoding="utf-8")
    a, b = text.find(README_BEGIN), text.find(README_END)
    if a < 0 or b < a:
        raise SystemExit(f"bench: {path} has no {README_BEGIN} ... {README_END} block")
    path.write_text(text[:a] + readme_block(data) + text[b + len(README_END):], encoding="utf-8")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small models (smoke run)")
    ap.add_argument("--repeat", type=int, default=7, help="interleaved timings per figure")
    ap.add_argument("--json", metavar="FILE", default="bench.json", help="write the figures (default: bench.json)")
    ap.add_argument("--markdown", metavar="FILE", help="also write the markdown tables")
    ap.add_argument("--readme", metavar="FILE", help="also rewrite the table of this README's Speed section")
    ap.add_argument("--render", metavar="JSON", help="only render the tables of an earlier JSON")
    ap.add_argument("--only", metavar="TEXT", action="append",
                    help="only the models whose name contains TEXT (repeatable; case-insensitive): their rows alone, "
                         "printed, and written to --json (no slope, kernels, growth, fresh process or sweep)")
    args = ap.parse_args(argv)
    if args.render:
        data = json.loads(Path(args.render).read_text())
        _write(data, args)
        return 0

    from npusim.compiler import CompileOptions
    from npusim.zoo import resnet50, squeezenet_style, yolo_style
    from npusim.zoo.st import mobilenet_v2

    shared = Path(__file__).resolve().parents[2] / "shared" / "stedgeai"
    load_before = os.getloadavg()
    if args.quick:
        models = [("ResNet-50 112 int8", resnet50(size=112)), ("YOLO-style 256 int8", yolo_style(size=256)),
                  ("SqueezeNet-style 112 int8", squeezenet_style(size=112)),
                  ("MobileNet v2 112 int8", mobilenet_v2(size=112))]
    else:
        models = [("ResNet-50 224 int8", resnet50(size=224)), ("YOLO-style 640 int8", yolo_style(size=640)),
                  ("SqueezeNet-style 224 int8", squeezenet_style(size=224)),
                  ("MobileNet v2 224 int8", mobilenet_v2(size=224))]
    wanted = [t.lower() for t in args.only or ()]

    def chosen(name: str) -> bool:
        return not wanted or any(t in name.lower() for t in wanted)

    rows = []
    for name, m in models:
        if chosen(name):
            rows.append(bench_model(name, m, args.repeat))
            _progress(rows[-1])
    movenet = sorted((shared / "st_pose_movenet192_dk").glob("*.tflite"))
    name = "MoveNet Lightning 192 int8 (TFLite)"
    if movenet and chosen(name):
        rows.append(bench_tflite(name, movenet[0], args.repeat))
        _progress(rows[-1])
    yolox = shared / "st_od_yolox480_dk"
    name = "ST compile: YOLOX-nano 480 int8 (imported)"
    if yolox.is_dir() and chosen(name):
        rows.append(bench_st(name, yolox, args.repeat))
        _progress(rows[-1])
    if wanted:  # the chosen rows alone
        data = {"date": time.strftime("%Y-%m-%d"), "repeat": args.repeat, "load_before": list(load_before),
                "models": rows, "load_after": list(os.getloadavg())}
        Path(args.json).write_text(json.dumps(data, indent=1) + "\n")
        print("\n".join(model_table(data)))
        return 0
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_kernels

    data = {
        "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "cores": os.cpu_count(), "python": platform.python_version(), "repeat": args.repeat,
        "calibration_samples": CompileOptions().calibration_samples, "load_before": list(load_before),
        "models": rows,
        "epoch_slope": epoch_slope(args.repeat),
        "kernels": bench_kernels.measure(),
        "growth": growth(args.repeat, *((160, 320) if args.quick else (320, 640))),
        "fresh_process": fresh_process(max(3, args.repeat // 2)),
        "sweep": sweep_points(models[0][0], models[0][1], (16, 32, 64, 128, 256), args.repeat),
    }
    data["load_after"] = list(os.getloadavg())
    Path(args.json).write_text(json.dumps(data, indent=1) + "\n")
    _write(data, args)
    return 0


def _progress(r: dict) -> None:
    print(f"{r['model']:<44} compile {r['compile_s']:.2f} s  timing {r['timing_s'] * 1e3:.1f} ms "
          f"({r['timing_x']:.2f}x peer)  functional {_fmt(r.get('functional_1_s'), '.1f', ' ms', 1e3)} "
          f"({_fmt(r.get('functional_1_x'), '.2f', 'x')})", file=sys.stderr)


def _write(data: dict, args) -> None:
    text = render(data)
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.readme:
        write_readme(Path(args.readme), data)
    print(text, end="")


if __name__ == "__main__":
    sys.exit(main())
