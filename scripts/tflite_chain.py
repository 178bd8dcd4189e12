"""Where npusim leaves a TFLite model's interpreter, with the interpreter's own kernels (XNNPACK included).

`validate --per-layer` preserves every tensor of one interpreter run, which turns XNNPACK off. This script
gets the default interpreter's intermediate tensors another way: it runs the model's single-operator cuts
(`tools.tflite_cut`) one after another under a kernel set, each fed the previous cuts' outputs (PAD,
QUANTIZE and DEQUANTIZE, which are not cut, in numpy), and first checks that this chain gives the whole
model's outputs bit for bit. Then, per operator, it compiles the cut with npusim and runs it on the
chain's own inputs (differing int8 values: a rounding of the operator itself), and compares every tensor
of the whole compiled model's run with the chain (how those differences spread).

    python scripts/tflite_chain.py MODEL.tflite [--seed N] [--kernels auto|builtin|reference] [--image FILE.npy]

Inputs: the seeded ones (`runtime.seeded_inputs`: uniform over the input's codes), or an array in the
model's own layout and type (`--image`, e.g. an NHWC uint8 photo).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from npusim.compiler import CompileOptions, compile
from npusim.compiler.frontends.tflite_front import ir_perm
from npusim.compiler.frontends.tflite_reader import read_tflite
from npusim.model_inputs import to_program
from npusim.per_layer import capture
from npusim.reference import metrics
from npusim.reference_tflite import tflite_run, to_model_inputs
from npusim.runtime import run, seeded_inputs
from npusim.tools.tflite_cut import single_op_models


def _zp(t) -> int:
    return int(np.asarray(t.zero_point).reshape(-1)[0])


def _numpy_op(m, op, have: dict) -> np.ndarray:
    """The operators the cuts leave out: PAD/PADV2 (constant zero point), DEQUANTIZE, QUANTIZE of one scale."""
    x, y = m.tensors[op.inputs[0]], m.tensors[op.outputs[0]]
    a = have[x.name]
    if op.opcode in ("PAD", "PADV2"):
        pads = m.tensors[op.inputs[1]].data.reshape(-1, 2)
        return np.pad(a, [tuple(int(v) for v in p) for p in pads], constant_values=_zp(y) if y.scale is not None else 0)
    if op.opcode == "DEQUANTIZE":
        return ((a.astype(np.float64) - _zp(x)) * float(x.scale[0])).astype(np.float32)
    if op.opcode == "QUANTIZE" and x.dtype in ("uint8", "int8") and float(x.scale[0]) == float(y.scale[0]):
        return (a.astype(np.int64) - _zp(x) + _zp(y)).astype(np.int8 if y.dtype == "int8" else np.uint8)
    raise SystemExit(f"operator {op.index} ({op.opcode}) is neither cut nor computed here: no chain for this model")


def _codes(a: np.ndarray) -> np.ndarray:
    return a.astype(np.int64) - (128 if a.dtype == np.uint8 else 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kernels", default="auto", choices=("auto", "builtin", "reference"))
    ap.add_argument("--image", default=None, help="an input in the model's own layout and type (.npy)")
    a = ap.parse_args()
    data = Path(a.model).read_bytes()
    m = read_tflite(data, a.model)
    prog = compile(data, CompileOptions(mem_align=128))
    (name,) = [m.tensors[i].name for i in m.inputs]
    if a.image:
        inputs = to_program(prog, {name: np.load(a.image)}, data)
    else:
        inputs = seeded_inputs(prog, a.seed)
    feed = to_model_inputs(data, inputs)
    cuts = {op.index: blob for op, blob in single_op_models(data)}
    have = dict(feed)
    per_op = []
    for op in m.ops:
        out = m.tensors[op.outputs[0]].name
        if op.index not in cuts:
            have[out] = _numpy_op(m, op, have)
            continue
        sm = read_tflite(cuts[op.index], "cut")
        ins = {sm.tensors[i].name: have[sm.tensors[i].name] for i in sm.inputs}
        ref = tflite_run(cuts[op.index], ins, a.kernels)
        have.update(ref)
        cut = compile(cuts[op.index], CompileOptions(mem_align=128))
        sim = run(cut, to_program(cut, ins, cuts[op.index])).raw_outputs[out]
        r = np.transpose(_codes(ref[out]), ir_perm(ref[out].ndim))
        diff = int(np.count_nonzero(sim.astype(np.int64) != r))
        per_op.append((op.opcode, out, diff, r.size, int(np.abs(sim.astype(np.int64) - r).max(initial=0))))
    whole = tflite_run(data, feed, a.kernels)
    same = all(np.array_equal(have[k], v) for k, v in whole.items())
    print(f"chain of {len(cuts)} single-operator cuts under {a.kernels} kernels "
          f"{'equals' if same else 'DIFFERS FROM'} the whole model's run")
    print("operators alone on the chain's inputs (int8 values differing from the interpreter's):")
    for opcode, out, diff, size, steps in per_op:
        if diff:
            print(f"  {opcode:18s} {diff}/{size} values, max {steps} step(s): ...{out[-60:]}")
    print(f"  {sum(1 for p in per_op if not p[2])} of {len(per_op)} operators equal")
    _, got, when = capture(prog, inputs)
    print("the compiled model's run against the chain (first tensors that differ):")
    shown = 0
    for t in sorted(got, key=lambda k: when[k]):
        if t not in have or shown >= 8:
            continue
        ref = np.transpose(have[t], ir_perm(have[t].ndim))
        if ref.dtype.kind == "f":  # a float output: compared below
            continue
        diff = int(np.count_nonzero(got[t].astype(np.int64) != _codes(ref)))
        if diff:
            shown += 1
            print(f"  ...{t[-60:]}: {diff}/{ref.size} values, max {int(np.abs(got[t] - _codes(ref)).max())} step(s)")
    for k, v in whole.items():
        print(f"output {k}: cosine {metrics(run(prog, inputs).outputs[k], _float(m, k, v)).cosine:.6f} "
              f"against the whole model under {a.kernels} kernels")


def _float(m, name: str, v: np.ndarray) -> np.ndarray:
    """An output as float in the program's (NCHW) order."""
    t = next(t for t in m.tensors if t.name == name)
    x = v.astype(np.float64) if v.dtype.kind == "f" else (v.astype(np.float64) - _zp(t)) * float(t.scale[0])
    return np.transpose(x, ir_perm(x.ndim))


if __name__ == "__main__":
    main()
