"""Speed of the ST Edge AI Core importer (issue targets: parse + decode + lift of st_od_yolox480_dk <= 1 s, a
timing-only replay of it <= 0.5 s), against the TFLite interpreter running the compile's source model in the
same process (its default kernels, one thread), interleaved, medians.

    python scripts/bench_st.py [--repeat N] [FOLDER ...]     (default: ../shared/stedgeai/*)

Columns: import (read the C, decode and lift the blobs, weights), replay (check + timing of the imported
program, run again on the same import), the interpreter's invoke, and replay / interpreter.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path


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
    from npusim.importers.stedgeai import load
    from npusim.importers.stedgeai.replay import replay
    from npusim.importers.stedgeai.timing import program_cycles

    root = Path(__file__).resolve().parents[2] / "shared" / "stedgeai"
    folders = [Path(f) for f in args.folders] or sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("_"))
    profile = load_profile("n657")
    print("| compile | import s | replay s | interpreter s | replay / interpreter |")
    print("|---|---|---|---|---|")
    for f in folders:
        invoke = _interpreter(f)
        imp, rep, peer = [], [], []
        out = None
        for _ in range(args.repeat):
            t = time.perf_counter()
            out = load(f)
            imp.append(time.perf_counter() - t)
            t = time.perf_counter()
            program_cycles(out, replay(out), profile)
            rep.append(time.perf_counter() - t)
            if invoke is not None:
                t = time.perf_counter()
                invoke()
                peer.append(time.perf_counter() - t)
        mi, mr = statistics.median(imp), statistics.median(rep)
        mp = statistics.median(peer) if peer else None
        print(f"| {f.name} | {mi:.3f} | {mr:.3f} | {f'{mp:.4f}' if mp else '-'} | "
              f"{f'{mr / mp:.1f}x' if mp else '-'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
