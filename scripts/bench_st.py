"""Speed of the ST Edge AI Core importer (issue targets: parse + decode + lift of st_od_yolox480_dk <= 1 s, a
timing-only replay of it <= 0.5 s, and <= 1x the interpreter), against the TFLite interpreter running the
compile's source model in the same process (its default kernels, one thread), interleaved.

    python scripts/bench_st.py [--repeat N] [FOLDER ...]     (default: ../shared/stedgeai/*)

Columns: import (read the C, decode and lift the blobs, weights; wall seconds, median), first run (the replay
and timing of a fresh import: they build what they derive from the program, `StOutput.memo`; wall, median),
run (check + timing again on the same import, what a repeat run costs: CPU ms of the calling thread, the
bench's `interleaved_cpu`), per epoch (run / hardware epochs), the interpreter's invoke (CPU ms) and
run / interpreter.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_timing import interleaved_cpu  # noqa: E402


def _interpreter(folder: Path):
    models = sorted(folder.glob("*.tflite"))
    if not models:
        return None
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        return None
    import numpy as np

    it = Interpreter(model_path=str(models[0]), num_threads=1)
    it.allocate_tensors()
    for d in it.get_input_details():
        it.set_tensor(d["index"], np.zeros(d["shape"], dtype=d["dtype"]))
    return it.invoke


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="*")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    from npusim.hw import load_profile
    from npusim.importers.stedgeai.reader import read
    from npusim.importers.stedgeai.replay import replay
    from npusim.importers.stedgeai.timing import program_cycles

    root = Path(__file__).resolve().parents[2] / "shared" / "stedgeai"
    folders = [Path(f) for f in args.folders] or sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("_"))
    profile = load_profile("n657")
    print("| compile | epochs | import s | first run s | run ms | per epoch us | interpreter ms | run / interpreter |")
    print("|---|---|---|---|---|---|---|---|")
    for f in folders:
        imp, first = [], []
        out = None
        for _ in range(max(1, args.repeat // 2)):
            t = time.perf_counter()
            out = read(f)  # a fresh import: nothing derived from it yet
            imp.append(time.perf_counter() - t)
            t = time.perf_counter()
            program_cycles(out, replay(out), profile)
            first.append(time.perf_counter() - t)
        fns = {"run": lambda: program_cycles(out, replay(out), profile)}
        invoke = _interpreter(f)
        if invoke is not None:
            fns["peer"] = invoke
        _, cpu = interleaved_cpu(fns, args.repeat)
        epochs = sum(len(b.epochs) for b in out.blocks)
        run, peer = cpu["run"], cpu.get("peer")
        print(f"| {f.name} | {epochs} | {statistics.median(imp):.3f} | {statistics.median(first):.3f} | "
              f"{run * 1e3:.1f} | {run * 1e6 / max(epochs, 1):.0f} | {f'{peer * 1e3:.1f}' if peer else '-'} | "
              f"{f'{run / peer:.2f}x' if peer else '-'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
