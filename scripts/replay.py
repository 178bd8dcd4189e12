"""Replay guard for refactors that claim to change nothing: blobs, cycles, stats, faults and output
hashes over a corpus of zoo models (and the bench's: MobileNet v2 224, MoveNet), written to JSON and
diffed against an earlier run.

    python scripts/replay.py -o before.json               # on the old code
    python scripts/replay.py -o after.json --compare before.json   # on the new code: exit 1 on a diff
    python scripts/replay.py --quick ...                   # a smaller corpus

Every case records the sha256 of its blob, and for a timing-only and a functional run: status,
end reason, the exact cycle count (repr of the float), per-epoch cycles/stages/bursts/splits/
conflicts/cache hits and misses, the faults (class, address, unit, epoch, command, layer) and the
sha256 of every raw output (the functional run twice: a repeat run replays the values with the
Program's memos); small cases also run in burst mode. Float fields are compared exactly.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time


def _shared_tflite() -> list:
    """The bench's TFLite model (MoveNet) from `../shared/stedgeai`, when that folder is there."""
    from pathlib import Path

    shared = Path(__file__).resolve().parents[2] / "shared" / "stedgeai"
    return sorted((shared / "st_pose_movenet192_dk").glob("*.tflite"))[:1]


def _cases(quick: bool):
    from npusim import zoo
    from npusim.compiler import CompileOptions as O
    from npusim.zoo.st import mobilenet_v2

    ops = ["conv", "conv_stride_asym", "depthwise", "grouped", "dilated", "add", "se_mul", "sum3", "maxpool",
           "maxpool_ceil", "avgpool", "gap", "concat", "concat_misaligned", "concat_image", "resize_nearest",
           "resize_bilinear", "gemm", "softmax", "mul_const", "bn", "LeakyRelu", "silu"]
    out = [(f"op-{k}", zoo.op_model(k), O()) for k in ops]
    out += [(f"op-{k}-fp16", zoo.op_model(k), O(quantization="fp16")) for k in ("conv", "depthwise", "add", "softmax")]
    out += [
        ("resnet-style", zoo.resnet_style(), O()),
        ("resnet-style-a16", zoo.resnet_style(), O(mem_align=16)),
        ("mobilenet", zoo.mobilenet_style(), O()),
        ("mobilenet-fp16", zoo.mobilenet_style(), O(quantization="fp16")),
        ("mobilenet-v3", zoo.mobilenet_v3_style(), O()),
        ("squeezenet", zoo.squeezenet_style(), O()),
        ("unet", zoo.unet_style(), O()),
        ("yolo-224-a16", zoo.yolo_style(size=224), O(mem_align=16)),
        ("yolo-224-a128", zoo.yolo_style(size=224), O(mem_align=128)),
        ("yolo-256-a16", zoo.yolo_style(size=256), O(mem_align=16)),
        ("yolo-256-hyper", zoo.yolo_style(size=256), O(weights_pool="hyperRAM")),
        ("yolo-256-perlayer", zoo.yolo_style(size=256), O(mem_plan="per-layer", fuse="none")),
        ("conv-cu1", zoo.conv_model(32, 64, 28, 28), O(conv_units=1)),
        ("conv-hyper", zoo.conv_model(32, 64, 28, 28), O(weights_pool="hyperRAM")),
        ("conv-cpuram", zoo.conv_model(16, 32, 20, 20), O(weights_pool="cpuRAM2")),
    ]
    if not quick:
        out += [
            ("resnet50-224", zoo.resnet50(224), O()),
            ("yolo-640", zoo.yolo_style(size=640), O()),
            ("squeezenet-224", zoo.squeezenet_style(size=224), O()),
            ("mobilenet-v2-224", mobilenet_v2(size=224), O()),
        ]
        out += [(f"tflite-{p.parent.name}", p, O()) for p in _shared_tflite()]
    return out


def _run_record(res) -> dict:
    s = res.stats
    return {
        "status": res.status, "end_reason": res.end_reason, "cycles": repr(float(s.cycles)),
        "bank_conflicts": int(s.bank_conflicts), "cross_bank_splits": int(s.cross_bank_splits),
        "bytes_read": int(s.bytes_read), "bytes_written": int(s.bytes_written),
        "stall": {k: repr(float(v)) for k, v in sorted(s.stall_cycles.items())},
        "epochs": [[e.id, e.layer, repr(float(e.cycles)), e.bursts, e.cross_bank_splits, e.bank_conflicts,
                    e.cache_hits, e.cache_misses, e.status, {k: repr(float(v)) for k, v in e.stages.items()}]
                   for e in s.epochs],
        "faults": [[f.cls, f.address, f.unit, f.epoch, f.command, f.layer, f.count] for f in res.faults],
        "outputs": {k: hashlib.sha256(v.tobytes()).hexdigest() for k, v in sorted(res.raw_outputs.items())},
    }


def replay(quick: bool, modes=("timing", "functional", "keep-going")) -> dict:
    from npusim.compiler import compile as compile_model
    from npusim.hw import load_profile
    from npusim.program.blob import encode_blob
    from npusim.runtime import RunOptions, run, seeded_inputs

    prof = load_profile()
    out = {}
    for name, model, opts in _cases(quick):
        t = time.perf_counter()
        prog = compile_model(model, opts, profile=prof)
        rec = {"blob": hashlib.sha256(encode_blob(prog, prof)).hexdigest()}
        inputs = seeded_inputs(prog, 0)
        if "timing" in modes:
            rec["timing"] = _run_record(run(prog, inputs, RunOptions(timing_only=True, trace=False), profile=prof))
        if "functional" in modes:
            rec["functional"] = _run_record(run(prog, inputs, RunOptions(trace=False), profile=prof))
            # a repeat run of the same Program: the values replayed with what the first run memoised
            rec["functional_repeat"] = _run_record(run(prog, inputs, RunOptions(trace=False), profile=prof))
        if "keep-going" in modes:
            rec["keep_going"] = _run_record(run(prog, inputs, RunOptions(timing_only=True, keep_going=True,
                                                                         trace=False), profile=prof))
        if name.startswith(("op-", "conv-")):
            rec["burst"] = _run_record(run(prog, inputs, RunOptions(timing_only=True, mode="burst", trace=False),
                                           profile=prof))
        out[name] = rec
        print(f"{name:<22} {time.perf_counter() - t:6.2f} s", file=sys.stderr)
    return out


def diff(old: dict, new: dict, path: str = "") -> list[str]:
    out = []
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new), key=str):
            if k not in old or k not in new:
                out.append(f"{path}/{k}: only in {'new' if k in new else 'old'}")
            else:
                out += diff(old[k], new[k], f"{path}/{k}")
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            out += diff(a, b, f"{path}[{i}]")
    elif old != new:
        out.append(f"{path}: {old!r} -> {new!r}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", help="write the records to this JSON file")
    ap.add_argument("--compare", help="diff against this earlier JSON; exit 1 on any difference")
    ap.add_argument("--quick", action="store_true", help="leave out the large models")
    args = ap.parse_args(argv)
    rec = replay(args.quick)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(rec, f, indent=1, sort_keys=True)
    if args.compare:
        with open(args.compare, encoding="utf-8") as f:
            old = json.load(f)
        old = {k: v for k, v in old.items() if k in rec}
        d = diff(old, rec)
        for line in d[:200]:
            print(line)
        print(f"{len(rec)} cases, {len(d)} differences")
        return 1 if d else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
