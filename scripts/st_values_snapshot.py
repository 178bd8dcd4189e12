"""Snapshot of functional runs of ST Edge AI outputs: SHA-256 of every output buffer and of the whole
simulated memory after every epoch, for the shared compiles with weights, on seeded inputs.

After every epoch the digest covers the compile's writable pools and its weight images (every byte a
program may legally touch or read); after the run, every memory window the run materialised, whole (a stray write outside the
pools shows there).

The bit-exactness check of any change to the functional run (`execute`, `units_exec`, `sw_exec`): write a
snapshot before the change, compare after it; every hash must stay identical.

    python scripts/st_values_snapshot.py --write /tmp/before.json          # all five compiles, seeds 0 and 1
    python scripts/st_values_snapshot.py --check /tmp/before.json          # exit 1 on any difference
    python scripts/st_values_snapshot.py --only st_ic_mnv1_nucleo --check /tmp/before.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "stedgeai"
COMPILES = ("st_ic_mnv1_nucleo", "st_od_yolox480_dk", "st_pose_movenet192_dk", "st_reid_osnet_dk_v113",
            "fallguard_pe_yolov8n_pose256")
SEEDS = (0, 1)


def memory_digest(mem, ranges=None) -> str:
    """SHA-256 over the byte ranges [(address, size)] (None: every materialised memory window, whole)."""
    h = hashlib.sha256()
    if ranges is None:
        ranges = [(s.base, s.size) for s in mem.segments if s.data is not None]
    for addr, size in ranges:
        seg = mem._segment(addr, addr + size)
        h.update(f"{addr:#x}:{size}:".encode())
        h.update(memoryview(seg.data)[addr - seg.base:addr - seg.base + size])
    return h.hexdigest()


def snapshot(name: str, seed: int) -> dict:
    from npusim.importers.stedgeai import load
    from npusim.importers.stedgeai.execute import run
    from npusim.tools.st_validate import seeded_model_inputs, st_inputs

    folder = SHARED / name
    (model,) = folder.glob("*.tflite")
    out = load(folder)
    # read-only pools: their weight image's extent (the rest of a flash pool only shows in the final digest)
    pools = [(p.address, len(out.weights.get(p.name, b"")) if p.read_only else p.size) for p in out.pools]
    epochs: list = []
    t = time.perf_counter()
    res = run(out, st_inputs(out, seeded_model_inputs(str(model), seed)),
              after_epoch=lambda num, mem, bufs: epochs.append([num, memory_digest(mem, pools)]))
    seconds = time.perf_counter() - t
    outputs = {k: hashlib.sha256(v.tobytes()).hexdigest() for k, v in sorted(res.outputs.items())}
    return {"outputs": outputs, "epochs": epochs, "memory": memory_digest(res.memory), "seconds": round(seconds, 3)}


def compare(want: dict, got: dict) -> list[str]:
    """Differences, one line each (empty: identical)."""
    diffs = []
    for key in want:
        if key not in got:
            continue
        w, g = want[key], got[key]
        if w["outputs"] != g["outputs"]:
            diffs.append(f"{key}: outputs differ")
        if w["memory"] != g["memory"]:
            diffs.append(f"{key}: the memory after the run differs")
        if len(w["epochs"]) != len(g["epochs"]):
            diffs.append(f"{key}: {len(g['epochs'])} epochs, {len(w['epochs'])} expected")
        for (n, a), (_, b) in zip(w["epochs"], g["epochs"]):
            if a != b:
                diffs.append(f"{key}: memory differs after epoch {n} (the first)")
                break
    return diffs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", help="a compile of ../shared/stedgeai (repeatable)")
    ap.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", help="write the snapshot to this JSON file")
    mode.add_argument("--check", help="compare with this JSON file; exit 1 on any difference")
    args = ap.parse_args(argv)
    got = {}
    for name in args.only or COMPILES:
        for seed in (int(s) for s in args.seeds.split(",")):
            got[f"{name}/seed{seed}"] = snap = snapshot(name, seed)
            print(f"{name} seed {seed}: {len(snap['epochs'])} epochs, {snap['seconds']:.2f} s", flush=True)
    if args.write:
        Path(args.write).write_text(json.dumps(got, indent=1) + "\n")
        return 0
    diffs = compare(json.loads(Path(args.check).read_text()), got)
    for d in diffs:
        print(d)
    print("identical" if not diffs else f"{len(diffs)} difference(s)")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
