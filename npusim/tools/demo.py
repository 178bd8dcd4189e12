"""`npusim demo`: the field story, end to end, on a YOLO-style detector built in code.

1. compile with --mem-align 16 (a "compatible" toolchain default)
2. run: the NPU overruns a buffer -> sanitizer report (exit 139 on the board: a segfault)
3. bisect: which operator, which shapes
4. recompile with --mem-align 128 (the hardware's granule)
5. run clean and validate against ONNX Runtime
6. sweep alignments: what alignment costs in cycles, bank conflicts and cross-bank splits

Every number printed comes from the simulated run; nothing is scripted.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

DEMO_SIZE = 224  # widths 112, 56 (multiples of 8) then 28, 14, 7 (not): the last stages overrun at --mem-align 16
SWEEP_SIZE = 256  # a resolution whose every feature-map width is a multiple of 8: all alignments run
ALIGNMENTS = (16, 32, 64, 128, 256)


def _say(out, text=""):
    print(text, file=out, flush=True)


def run_demo(out_dir: str | Path = "npusim-demo", out=None, quick: bool = False) -> dict:
    """Run the whole story; write artefacts to `out_dir`; return the numbers."""
    import sys

    import onnx

    from ..compiler import CompileOptions, compile as compile_model
    from ..hw import load_profile
    from ..program.blob import encode_blob
    from ..reference import validate
    from ..runtime import RunOptions, run, seeded_inputs
    from ..zoo import yolo_style
    from .bisect import bisect
    from .html_report import run_html, sweep_html
    from .plots import plot_sweep
    from .sweep import format_table, sweep, write_csv

    out = out or sys.stdout
    t0 = time.perf_counter()
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    profile = load_profile()
    numbers: dict = {"out_dir": str(d.resolve())}

    model = yolo_style(size=DEMO_SIZE)
    onnx.save(model, d / "detector.onnx")
    _say(out, f"== npusim demo: YOLO-style detector {DEMO_SIZE}x{DEMO_SIZE}, int8, target {profile.name} ==")
    _say(out, f"   model: {d / 'detector.onnx'} ({len(model.graph.node)} nodes)")

    # 1-2: the toolchain's "compatible" 16 B alignment, and the crash
    _say(out, "\n[1] npusim compile detector.onnx --mem-align 16 -o detector_a16.npu")
    bad_opts = CompileOptions(mem_align=16)
    bad = compile_model(model, bad_opts, profile=profile)
    (d / "detector_a16.npu").write_bytes(encode_blob(bad, profile))
    _say(out, "\n[2] npusim run detector_a16.npu --random-input --seed 0")
    res_bad = run(bad, options=RunOptions(trace=True), profile=profile, random_inputs=True, seed=0)
    report = res_bad.report_text()
    (d / "run_a16_report.txt").write_text(report)
    (d / "run_a16_report.json").write_text(json.dumps(res_bad.report_json(), indent=2))
    (d / "report.html").write_text(run_html(res_bad, "npusim run: detector_a16.npu (--mem-align 16)"))
    _say(out, _indent(report if res_bad.faults else res_bad.summary()))
    _say(out, f"   (the page with the memory map drawn: {d / 'report.html'})")
    if res_bad.faults:
        _say(out, f"   -> status {res_bad.status}: `npusim run` exits 139, like a segfault on the board")
    else:
        _say(out, f"   -> status {res_bad.status}: this compile did not fault")
    numbers["a16_status"] = res_bad.status
    numbers["a16_faults"] = len(res_bad.faults)

    # 3: bisect
    _say(out, "\n[3] npusim bisect detector.onnx --mem-align 16")
    rep = bisect(model, bad_opts, profile, out_dir=d / "repro", shrink=not quick)
    (d / "bisect.txt").write_text(rep.table())
    _say(out, _indent(rep.table(detail_limit=3)))
    _say(out, f"   (every operator in detail: {d / 'bisect.txt'})")
    numbers["bisect_faulting_ops"] = [f.node for f in rep.faulting]

    # 4-5: the hardware's granule, a clean run, validation against ONNX Runtime
    _say(out, f"\n[4] npusim compile detector.onnx --mem-align {profile.alignment.granule} -o detector_a128.npu")
    good_opts = dataclasses.replace(bad_opts, mem_align=profile.alignment.granule)
    good = compile_model(model, good_opts, profile=profile)
    (d / "detector_a128.npu").write_bytes(encode_blob(good, profile))
    _say(out, "\n[5] npusim run detector_a128.npu  +  npusim validate --reference detector.onnx")
    val = validate(good, model, seeded_inputs(good, seed=0), profile=profile)
    res_good = val.run_result
    (d / "trace_a128.json").write_text(res_good.trace_json())
    _say(out, _indent(res_good.summary()))
    _say(out, _indent(val.text()))
    numbers["a128_status"] = res_good.status
    numbers["a128_cycles"] = int(res_good.stats.cycles)
    numbers["validation_passed"] = bool(val.passed)

    # 6: the cost of alignment
    sweep_model = yolo_style(size=SWEEP_SIZE)
    _say(out, f"\n[6] npusim sweep detector.onnx --mem-align {','.join(map(str, ALIGNMENTS))}  "
              f"(at {DEMO_SIZE}, and at {SWEEP_SIZE} where every alignment runs)")
    results = {}
    for size, m in ((DEMO_SIZE, model), (SWEEP_SIZE, sweep_model)):
        r = sweep(m, "mem_align", list(ALIGNMENTS), options=bad_opts, progress=False)
        results[size] = r
        write_csv(r, d / f"sweep_{size}.csv")
        plot_sweep(r, d / f"sweep_{size}.png", title=f"YOLO-style {size}x{size} int8: cost vs --mem-align")
        _say(out, f"\n   {size}x{size}:")
        _say(out, _indent(format_table(r), 3))
    (d / "sweep.html").write_text(sweep_html([(f"YOLO-style {size}x{size} int8: cost vs --mem-align", r)
                                              for size, r in results.items()], "npusim sweep: --mem-align"))
    _say(out, f"\n   (plots and tables of both sweeps: {d / 'sweep.html'})")
    sweep_res = results[SWEEP_SIZE]
    pts = {p.value: p for p in sweep_res.points}
    best = sweep_res.best()
    clean_small = [a for a in ALIGNMENTS if a < profile.alignment.granule and pts[a].status == "ok"]
    if best is not None and clean_small:
        worst = max(clean_small, key=lambda a: pts[a].cycles)
        slow = pts[worst]
        gains = {n: slow.layers[n] / best.layers[n] for n in best.layers if best.layers[n] and n in slow.layers}
        top = max(gains, key=gains.get)
        _say(out, f"\n   At {SWEEP_SIZE}x{SWEEP_SIZE} every alignment runs; the fastest is --mem-align {best.value}: "
                  f"{best.cycles:,} cycles vs {slow.cycles:,} at --mem-align {worst} "
                  f"({100 * (slow.cycles / best.cycles - 1):.2f}% more), "
                  f"{best.cross_bank_splits:,} vs {slow.cross_bank_splits:,} cross-bank splits.")
        _say(out, f"   Per layer the gap reaches {100 * (gains[top] - 1):.1f}% ({top}). " + _bound_by(
            sweep_model, dataclasses.replace(bad_opts, mem_align=best.value), profile))
        numbers["fastest_mem_align"] = best.value
        numbers["speedup_best_vs_worst_clean"] = round(slow.cycles / best.cycles, 5)
        numbers["largest_layer_gain"] = {top: round(gains[top], 4)}
    numbers["sweep"] = {size: [dataclasses.asdict(p) | {"layers": None} for p in r.points] for size, r in results.items()}
    (d / "numbers.json").write_text(json.dumps(numbers, indent=2, default=str))
    _say(out, f"\nArtefacts (reports, blobs, reproducers, trace, plots, CSV): {d.resolve()}")
    _say(out, f"demo took {time.perf_counter() - t0:.1f} s")
    return numbers


def _bound_by(model, options, profile) -> str:
    """What limits each layer, from the stall cycles of a timing-only run."""
    from .sweep import run_point

    _, res = run_point(model, options, profile)
    compute = memory = flash = 0
    for ly in res.stats.layers:
        st = ly.stall_cycles
        mem = st.get("memory", 0) + st.get("bank_conflict", 0) + st.get("external_bandwidth", 0) + st.get("port", 0)
        if st.get("compute", 0) >= mem:
            compute += 1
        else:
            memory += 1
            if ly.pools and max(ly.pools, key=ly.pools.get) == "octoFlash":
                flash += 1
    return (f"Of its {len(res.stats.layers)} layers {compute} are bound by compute and {memory} by memory "
            f"({flash} of those mostly reading weights from octoFlash); alignment only moves the memory-bound ones.")


def _indent(text: str, n: int = 3) -> str:
    pad = " " * n
    return "\n".join(pad + line for line in text.splitlines())
