"""Exact-match share of npusim's int8 outputs against the models' own runtimes, per operator.

TFLite: one model per supported builtin (npusim.zoo.tflite.tflite_op), several weight seeds and input
seeds, against the TFLite interpreter with each of its kernel sets (auto = the default Interpreter
with XNNPACK, builtin = optimized kernels without delegates, reference = TFLite's reference kernels).
QDQ: single-operator zoo models quantized by onnxruntime.quantization.quantize_static, against ONNX
Runtime on the QDQ model. Prints markdown tables (exact %, max |difference| in quantization steps).

    python scripts/quantized_exactness.py [--seeds N] [--only KIND ...]
"""

from __future__ import annotations

import argparse

import numpy as np

from npusim import zoo
from npusim.compiler import CompileOptions, compile
from npusim.reference import validate
from npusim.runtime import seeded_inputs
from npusim.zoo.quantized import quantize_onnx
from npusim.zoo.tflite import TFLITE_OPS, tflite_op

KERNELS = ("auto", "builtin", "reference")
QDQ_OPS = ("conv", "depthwise", "add", "mul", "gap", "maxpool", "avgpool", "concat", "resize_nearest",
           "resize_bilinear", "gemm", "Sigmoid", "LeakyRelu", "HardSwish")


def _cell(mets) -> str:
    exact = float(np.mean([m.exact for m in mets]))
    steps = max(m.max_steps for m in mets)
    return f"{100 * exact:.3f} % / {steps}"


def tflite_table(kinds, seeds: int) -> list[str]:
    rows = ["| model (builtin) | " + " | ".join(f"{k}: exact / max steps" for k in KERNELS) + " |",
            "|---|" + "---|" * len(KERNELS)]
    print("\n".join(rows), flush=True)
    for kind in kinds:
        got = {k: [] for k in KERNELS}
        for s in range(seeds):
            m = bytes(tflite_op(kind, seed=s))
            prog = compile(m, CompileOptions(mem_align=128))
            for k in KERNELS:
                for i in range(2):
                    got[k].extend(validate(prog, m, seeded_inputs(prog, i), kernels=k).metrics.values())
        rows.append(f"| {kind} | " + " | ".join(_cell(got[k]) for k in KERNELS) + " |")
        print(rows[-1], flush=True)
    return rows


def qdq_table(kinds, seeds: int) -> list[str]:
    rows = ["| zoo.op_model | ONNX Runtime (QDQ): exact / max steps |", "|---|---|"]
    print("\n".join(rows), flush=True)
    for kind in kinds:
        mets = []
        for s in range(seeds):
            m = quantize_onnx(zoo.op_model(kind), seed=s)
            prog = compile(m, CompileOptions(mem_align=128))
            for i in range(2):
                mets.extend(validate(prog, m, seeded_inputs(prog, i)).metrics.values())
        rows.append(f"| {kind} | {_cell(mets)} |")
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3, help="weight/scale seeds per model (default 3)")
    ap.add_argument("--only", nargs="*", default=None, help="TFLite kinds or QDQ op models to measure")
    a = ap.parse_args()
    kinds = [k for k in TFLITE_OPS if a.only is None or k in a.only]
    qkinds = [k for k in QDQ_OPS if a.only is None or k in a.only]
    tflite_table(kinds, a.seeds)
    print()
    qdq_table(qkinds, a.seeds)


if __name__ == "__main__":
    main()
