"""SHA-256 of the blob of every zoo model and of the single-operator models the tests build.

    python scripts/blob_hashes.py            # print name, seconds, hash
    python scripts/blob_hashes.py --write    # record them in tests/data/blob_hashes.json
    python scripts/blob_hashes.py --only zoo:alexnet --write   # re-record the cases named so

The compiler must give byte-identical blobs when it is only reorganised: tests/test_blob_hashes.py
recompiles these cases and compares (a fast subset always, every case in the slow run).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import sys
import time

DATA = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "blob_hashes.json"

# zoo builders compiled at other options as well (the rest at the defaults only)
VARIANTS = {
    "resnet_style": ({"quantization": "fp32"}, {"quantization": "fp16"}, {"mem_align": 16}, {"fuse": "none"},
                     {"mem_plan": "per-layer"}, {"conv_units": 1}),
    "mobilenet_style": ({"quantization": "fp32"}, {"mem_align": 16}),
    "unet_style": ({"quantization": "fp32"},),
    "transformer_block_style": ({"quantization": "fp32"},),
}


def cases() -> dict[str, tuple]:
    """{case name: (model builder, CompileOptions keywords)}, sorted; names are stable keys of the data file."""
    from functools import partial

    from npusim import zoo
    from npusim.zoo import tflite
    from npusim.zoo.catalog import catalog

    out: dict[str, tuple] = {}
    for name, entry in catalog().items():
        out[f"zoo:{name}"] = (entry.builder, {})
        for k, opts in enumerate(VARIANTS.get(name, ())):
            out[f"zoo:{name}:" + ",".join(f"{a}={b}" for a, b in opts.items())] = (entry.builder, opts)
    for kind in zoo.OPS:
        out[f"op:{kind}"] = (partial(zoo.op_model, kind), {})
        out[f"op:{kind}:fp32"] = (partial(zoo.op_model, kind), {"quantization": "fp32"})
    for kind in tflite.TFLITE_OPS:
        out[f"tflite_op:{kind}"] = (partial(tflite.tflite_op, kind), {})
    return dict(sorted(out.items()))


def blob_hash(builder, opts: dict) -> str:
    """The blob's SHA-256 (hex), or "refused: <message>" when the compiler refuses the model."""
    from npusim.compiler import CompileOptions, compile
    from npusim.hw import load_profile
    from npusim.program.blob import encode_blob

    model = builder()
    data = model.SerializeToString() if hasattr(model, "SerializeToString") else bytes(model)
    from npusim.errors import NpusimError

    profile = load_profile()
    try:
        blob = encode_blob(compile(data, CompileOptions(**opts), profile), profile)
    except NpusimError as e:  # a refusal is behaviour too: its message must stay the same
        return f"refused: {e}"
    return hashlib.sha256(blob).hexdigest()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help=f"write {DATA.relative_to(DATA.parents[2])}")
    ap.add_argument("--only", default="", help="cases whose name contains this text")
    args = ap.parse_args(argv)
    found = {}
    for name, (builder, opts) in cases().items():
        if args.only not in name:
            continue
        t = time.perf_counter()
        found[name] = {"sha256": blob_hash(builder, opts), "seconds": round(time.perf_counter() - t, 2)}
        print(f"{name:60s} {found[name]['seconds']:7.2f} s  {found[name]['sha256'][:16]}", flush=True)
    if args.write:  # with --only: those cases updated, the others kept
        kept = json.loads(DATA.read_text()) if args.only and DATA.exists() else {}
        DATA.write_text(json.dumps({**kept, **found}, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
