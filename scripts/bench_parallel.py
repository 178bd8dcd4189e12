"""Throughput of the execution layer: `--workers 2` against `--workers 1`, measured interleaved.

    python scripts/bench_parallel.py [--repeat 3] [--bisect [--bisect-repeat 1]] [--json out.json]

1. a 5-point ResNet-50 `--mem-align` sweep from the CLI, fresh processes (cluster start included);
2. the same points on a warm executor (2 LocalCluster workers vs in-process): the steady-state
   throughput of the per-point work, front end shared, inherited by the forked workers (the local
   default) and sent to them once (as on an existing cluster);
3. the ceiling on this machine now: the same points on a plain `multiprocessing` pool of 2 forked
   processes against 1 (no Dask), so a loaded machine's limit is not read as the layer's;
4. with --bisect, `npusim bisect` of ResNet-50 at --mem-align 16 (long: --bisect-repeat pairs, default 1),
   and its ceiling on this machine: one in-process bisect alone against two run side by side (the
   throughput two cores give this work when nothing is shared; "speedup" is 2 x alone / side by side).
Every figure is a median over interleaved runs (A B A B ...), so a loaded machine slows both sides.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ALIGNS = [16, 32, 64, 128, 256]


def _cli(args: list[str], cwd: Path) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "npusim", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def _cli_side_by_side(args: list[str], cwd: Path, n: int = 2) -> float:
    """Wall seconds of `n` identical CLI processes started together (each in its own output folder)."""
    t = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-m", "npusim", *args, "-o", str(cwd / f"side{i}")], cwd=cwd,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(n)]
    codes = [p.wait() for p in procs]
    if any(codes):
        raise subprocess.CalledProcessError(max(codes), args)
    return time.perf_counter() - t


def _pair(run_a, run_b, repeat: int) -> dict:
    a, b, load = [], [], [round(os.getloadavg()[0], 2)]
    for _ in range(repeat):
        a.append(run_a())
        b.append(run_b())
        load.append(round(os.getloadavg()[0], 2))
    ma, mb = statistics.median(a), statistics.median(b)
    return {"workers_1_s": round(ma, 3), "workers_2_s": round(mb, 3), "speedup": round(ma / mb, 3),
            "runs_1": [round(x, 3) for x in a], "runs_2": [round(x, 3) for x in b],
            "loadavg_1min": load}  # before, then after each pair: other work on the machine slows both sides


_POOL_SHARED = None


def _pool_point(task):
    from npusim.tools.sweep import sweep_point

    return sweep_point(task, _POOL_SHARED)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--points", type=int, default=20, help="points of the steady-state measurement")
    ap.add_argument("--bisect", action="store_true")
    ap.add_argument("--bisect-repeat", type=int, default=1, help="pairs of bisect runs (each ~20 s per side)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import onnx

    from npusim import zoo
    from npusim.compiler import CompileOptions
    from npusim.hw import load_profile
    from npusim.tools.parallel import Executor, executor
    from npusim.tools.points import share_model, with_prepared
    from npusim.tools.sweep import plan, sweep_point

    out = {}
    with tempfile.TemporaryDirectory(prefix="npusim-bench-") as tmp:
        tmp = Path(tmp)
        model = tmp / "resnet50.onnx"
        onnx.save(zoo.resnet50(), model)
        sweep = ["sweep", str(model), "--mem-align", ",".join(map(str, ALIGNS)), "--no-progress"]
        out["sweep_cli"] = _pair(lambda: _cli([*sweep, "--workers", "1"], tmp),
                                 lambda: _cli([*sweep, "--workers", "2"], tmp), args.repeat)
        print("sweep (CLI, fresh process):", out["sweep_cli"], flush=True)

        profile = load_profile()
        shared = with_prepared(share_model(str(model)), CompileOptions(), profile)
        tasks = (plan("mem_align", ALIGNS) * (args.points // len(ALIGNS) + 1))[:args.points]
        here = Executor(progress=False)

        def timed(e, h):
            t = time.perf_counter()
            res = e.map(sweep_point, tasks, h)
            assert all(r.ok for r in res), [r.error for r in res if not r.ok]
            return time.perf_counter() - t

        # the local default: the model shared before the workers fork, so they inherit it
        with executor(workers=2, progress=False) as ex:
            handle = ex.share(shared)
            ex.ready()
            ex.map(sweep_point, tasks[:2], handle)  # the workers load their kernels
            out["sweep_points_warm"] = _pair(lambda: timed(here, shared), lambda: timed(ex, handle), args.repeat)
        out["sweep_points_warm"]["points"] = args.points
        print("sweep points (warm, inherited model):", out["sweep_points_warm"], flush=True)
        # as on an existing cluster: the model sent to the workers once (scattered)
        with executor(workers=2, progress=False) as ex:
            ex.ready()
            handle = ex.share(shared)
            ex.map(sweep_point, tasks[:2], handle)  # the workers parse, load kernels, receive the model
            out["sweep_points_warm_sent"] = _pair(lambda: timed(here, shared), lambda: timed(ex, handle), args.repeat)
        print("sweep points (warm, model sent):", out["sweep_points_warm_sent"], flush=True)

        import multiprocessing as mp

        global _POOL_SHARED
        _POOL_SHARED = shared
        ctx = mp.get_context("fork")
        with ctx.Pool(1) as p1, ctx.Pool(2) as p2:
            for p in (p1, p2):
                p.map(_pool_point, tasks[:4], chunksize=1)  # warm

            def pooled(p):
                t = time.perf_counter()
                p.map(_pool_point, tasks, chunksize=1)
                return time.perf_counter() - t

            out["ceiling_fork_pool"] = _pair(lambda: pooled(p1), lambda: pooled(p2), args.repeat)
        print("ceiling (plain fork pool, 1 vs 2 processes):", out["ceiling_fork_pool"], flush=True)

        if args.bisect:
            bis = ["bisect", str(model), "--mem-align", "16", "--no-progress", "-o", str(tmp / "repro")]
            out["bisect_cli"] = _pair(lambda: _cli([*bis, "--workers", "1"], tmp),
                                      lambda: _cli([*bis, "--workers", "2"], tmp), args.bisect_repeat)
            print("bisect (CLI):", out["bisect_cli"], flush=True)
            alone = ["bisect", str(model), "--mem-align", "16", "--no-progress", "--workers", "1"]
            pair = _pair(lambda: _cli([*alone, "-o", str(tmp / "alone")], tmp),
                         lambda: _cli_side_by_side(alone, tmp), args.bisect_repeat)
            ceiling = {"alone_s": pair["workers_1_s"], "side_by_side_s": pair["workers_2_s"],
                       "speedup": round(2 * pair["workers_1_s"] / pair["workers_2_s"], 3),
                       "runs_alone": pair["runs_1"], "runs_side_by_side": pair["runs_2"],
                       "loadavg_1min": pair["loadavg_1min"]}
            out["bisect_ceiling_side_by_side"] = ceiling
            print("bisect ceiling (1 alone vs 2 side by side, in-process):", ceiling, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
