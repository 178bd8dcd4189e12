"""A seeded fuzz campaign through the CLI (run by tests/test_fuzz_cli.py in a subprocess with a
memory limit): blob mutants with a recomputed CRC, assembly operand edits, ONNX attribute and shape
mutations. Every case must end with exit 0, 2, 65 or 139, within a time bound, and an error exit
must print exactly one `npusim: error:` line on stderr (a clean run: nothing, or `npusim:` notes).

    python tests/fuzz_cli.py OUT_DIR SEED CASES_PER_KIND [KINDS: blob,asm,onnx]
        -> OUT_DIR/findings.jsonl: one JSON line per bad case, then a summary line
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import struct
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from npusim import zoo
from npusim.cli import main

CASE_SECONDS = 300  # a hang guard, not a speed limit (cases take 0.1-3 s idle; two suites at once stretched one past 30 s)
OK_CODES = {0, 2, 65, 139}
PROFILE_SET = ["--set", "epoch.timeout_cycles=2000000"]  # a short watchdog bounds every simulated epoch


class _Timeout(BaseException):
    """The hang guard's alarm: a BaseException, so the CLI's internal-error handler does not take it."""


def _alarm(signum, frame):
    raise _Timeout()


@contextlib.contextmanager
def _captured_fds():
    """stdout and stderr at the file-descriptor level (a dependency's C++ logging included)."""
    with tempfile.TemporaryFile(mode="w+b") as out, tempfile.TemporaryFile(mode="w+b") as err:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        got = {}
        try:
            yield got
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            err.seek(0)
            got["stderr"] = err.read().decode("utf-8", "replace")


def run_case(argv: list[str]) -> dict:
    """Run the CLI in-process; exit code, stderr lines, seconds (or a finding)."""
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_SECONDS)
    t0 = time.perf_counter()
    with _captured_fds() as got:
        try:
            code = main(argv)
        except _Timeout:
            code = "timeout"
        except MemoryError:
            code = "MemoryError"
        finally:
            signal.alarm(0)
    lines = [ln for ln in got["stderr"].splitlines() if ln.strip()]
    return {"argv": argv, "code": code, "stderr": lines[:5], "seconds": round(time.perf_counter() - t0, 2)}


def problem(r: dict) -> str | None:
    """Why a case's outcome is a finding, or None."""
    if r["code"] not in OK_CODES:
        return f"exit {r['code']}"
    errors = [ln for ln in r["stderr"] if ln.startswith("npusim: error:") or ln.startswith("npusim: internal")]
    other = [ln for ln in r["stderr"] if not ln.startswith("npusim:")]
    if other:
        return "stray stderr output"
    if r["code"] in (2, 65) and len(errors) != 1:
        return "an error exit must print exactly one error line"
    if r["code"] in (0, 139) and errors:
        return "an error line on a successful run"
    return None


# ------------------------------------------------------------------ blob mutants

def reseal(blob: bytes) -> bytes:
    """Recompute the CRC32 (header word at byte 8, the file hashed with it read as zero)."""
    b = bytearray(blob)
    if len(b) < 12:
        return bytes(b)
    struct.pack_into("<I", b, 8, 0)
    struct.pack_into("<I", b, 8, zlib.crc32(b))
    return bytes(b)


def blob_mutant(rng: random.Random, blob: bytes) -> bytes:
    b = bytearray(blob)
    kind = rng.choice(("flip", "flip", "word", "truncate", "splice"))
    if kind == "flip":
        for _ in range(rng.randint(1, 6)):
            b[rng.randrange(12, len(b))] ^= 1 << rng.randrange(8)
    elif kind == "word":  # a whole 32-bit field set to an interesting value
        at = rng.randrange(12, len(b) - 4) & ~3
        struct.pack_into("<I", b, at, rng.choice((0, 1, 0xFFFFFFFF, 0x7FFFFFFF, 1 << 20, rng.getrandbits(32))))
    elif kind == "truncate":
        b = b[:rng.randrange(12, len(b))]
    else:
        i, j = sorted(rng.randrange(12, len(b)) for _ in range(2))
        b = b[:i] + b[j:] + b[i:j]
    return reseal(bytes(b))


# ------------------------------------------------------------------ assembly edits

_FIELD = re.compile(r"\b([a-z_0-9]+)=(0x[0-9a-fA-F]+|-?\d+)")
_VALUES = (0, 1, -1, 2, 7, 8, 127, 128, 129, 255, 256, 4095, 4096, 65535, 1 << 20, 1 << 31, (1 << 32) - 1, 1 << 40)


def asm_mutant(rng: random.Random, text: str) -> str:
    lines = text.split("\n")
    cmd_lines = [i for i, ln in enumerate(lines) if ln and not ln.startswith((";", "."))]
    for _ in range(rng.randint(1, 3)):
        i = rng.choice(cmd_lines)
        fields = list(_FIELD.finditer(lines[i].split(";")[0]))
        if not fields:
            continue
        m = rng.choice(fields)
        old = int(m.group(2), 0)
        new = rng.choice(_VALUES + (old + 1, old - 1, old * 2, old + 128, old + 8))
        lines[i] = lines[i][:m.start(2)] + str(new) + lines[i][m.end(2):]
    if rng.random() < 0.1:  # drop or duplicate a command line
        i = rng.choice(cmd_lines)
        lines.insert(i, lines[i]) if rng.random() < 0.5 else lines.pop(i)
    return "\n".join(lines)


# ------------------------------------------------------------------ ONNX mutations

def _set_attr(node, name, value):
    for a in list(node.attribute):
        if a.name == name:
            node.attribute.remove(a)
    node.attribute.append(helper.make_attribute(name, value))


def onnx_mutant(rng: random.Random, model: onnx.ModelProto) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    kind = rng.choice(("attr", "attr", "attr", "input_shape", "opset", "init", "output"))
    if kind == "attr":
        node = rng.choice(list(g.node))
        choices = {
            "Conv": [("strides", [0, 1]), ("strides", [3, 3]), ("pads", [-1, 0, 0, 0]), ("pads", [5, 5, 5, 5]),
                     ("dilations", [0, 1]), ("dilations", [2, 2]), ("group", rng.choice((0, 2, 3, 5, 16))),
                     ("group", [2]), ("kernel_shape", [2, 2]), ("kernel_shape", [5, 5]), ("auto_pad", "SAME_UPPER"),
                     ("auto_pad", "BOGUS")],
            "MaxPool": [("kernel_shape", [0, 0]), ("kernel_shape", [15, 15]), ("strides", [0, 2]),
                        ("pads", [-1, 0, 0, 0]), ("ceil_mode", 1), ("dilations", [2, 2])],
            "AveragePool": [("kernel_shape", [9, 9]), ("count_include_pad", 1), ("pads", [4, 4, 4, 4]),
                            ("bogus_attr", 3)],
            "Relu": [("bogus_attr", 1)],
            "LeakyRelu": [("alpha", -5.0), ("alpha", float("nan"))],
            "Concat": [("axis", rng.choice((0, 2, 3, -1, 7)))],
            "Resize": [("mode", "cubic"), ("coordinate_transformation_mode", "align_corners"), ("antialias", 1)],
            "Gemm": [("transB", 0), ("alpha", 2.0)],
            "Softmax": [("axis", rng.choice((0, 1, -1, 5)))],
        }.get(node.op_type, [("bogus_attr", 1)])
        _set_attr(node, *rng.choice(choices))
    elif kind == "input_shape":
        dims = g.input[0].type.tensor_type.shape.dim
        d = rng.randrange(len(dims))
        dims[d].dim_value = rng.choice((0, 1, 2, 3, 7, 5000, 1 << 20))
    elif kind == "opset":
        m.opset_import[0].version = rng.choice((1, 6, 9, 11, 13, 21, 1000))
    elif kind == "init":
        if g.initializer:
            t = rng.choice(list(g.initializer))
            arr = onnx.numpy_helper.to_array(t)
            choice = rng.choice(("int8", "float64", "dims", "nan"))
            if choice == "int8":
                new = onnx.numpy_helper.from_array(np.clip(arr, -127, 127).astype(np.int8), t.name)
            elif choice == "float64":
                new = onnx.numpy_helper.from_array(arr.astype(np.float64), t.name)
            elif choice == "nan":
                a = arr.astype(np.float32).copy()
                a.reshape(-1)[0] = np.nan
                new = onnx.numpy_helper.from_array(a, t.name)
            else:
                new = onnx.TensorProto()
                new.CopyFrom(t)
                if new.dims:  # dims that disagree with the data
                    new.dims[0] += 1
                else:  # a scalar given a shape its single value cannot fill
                    new.dims.append(2)
            t.CopyFrom(new)
    else:
        g.output.append(helper.make_tensor_value_info("nobody_makes_this", onnx.TensorProto.FLOAT, None))
    return m


KINDS = ("blob", "asm", "onnx")


def seeds(d: Path, kinds=None) -> dict:
    """The un-mutated artefacts `kinds` mutate (all by default): a blob and its assembly, small models. Built
    without the campaign's random sequence, so building fewer kinds leaves the other kinds' mutants the same."""
    from npusim.zoo import families

    kinds = KINDS if kinds is None else kinds
    out = {}
    if "onnx" in kinds:
        out["models"] = {"conv": zoo.conv_model(16, 16, 12, 12, 3), "yolo": zoo.yolo_style(size=32),
                         "squeeze": zoo.squeezenet_style(size=32), "resnet": zoo.resnet_style(size=16),
                         # addressing, broadcasting, activation tables and host operators of the model families
                         "yolo_head": families.yolo_head_style(size=16),
                         "transformer": families.transformer_block_style(),
                         "shuffle": families.shufflenet_block_style(size=16)}
        for name, m in out["models"].items():
            onnx.save(m, d / f"{name}.onnx")
    if "blob" in kinds or "asm" in kinds:
        onnx.save(out["models"]["yolo"] if "models" in out else zoo.yolo_style(size=32), d / "yolo.onnx")
        assert run_case(["compile", str(d / "yolo.onnx"), "-o", str(d / "seed.npu")])["code"] == 0
        out["blob"] = (d / "seed.npu").read_bytes()
    if "asm" in kinds:
        assert run_case(["disasm", str(d / "seed.npu"), "-o", str(d / "seed.s")])["code"] == 0
        out["asm"] = (d / "seed.s").read_text()
    return out


def campaign(d: Path, seed: int, per_kind: int, kinds=KINDS):
    rng = random.Random(seed)
    s = seeds(d, kinds)
    for i in range(per_kind if "blob" in kinds else 0):
        f = d / f"m{i}.npu"
        f.write_bytes(blob_mutant(rng, s["blob"]))
        yield run_case(["run", str(f), "--random-input", *PROFILE_SET])
    for i in range(per_kind if "asm" in kinds else 0):
        f = d / f"a{i}.s"
        f.write_text(asm_mutant(rng, s["asm"]))
        r = run_case(["asm", str(f), "-o", str(d / f"a{i}.npu")])
        yield r
        if r["code"] == 0:
            yield run_case(["run", str(d / f"a{i}.npu"), "--random-input", "--keep-going", *PROFILE_SET])
    for i in range(per_kind if "onnx" in kinds else 0):
        name = rng.choice(sorted(s["models"]))
        f = d / f"o{i}.onnx"
        onnx.save(onnx_mutant(rng, s["models"][name]), f)
        q = rng.choice(("int8", "fp16"))
        r = run_case(["compile", str(f), "--quantization", q, "-o", str(d / f"o{i}.npu")])
        yield r
        if r["code"] == 0:
            yield run_case(["run", str(d / f"o{i}.npu"), "--random-input", *PROFILE_SET])


def main_(argv) -> int:
    d, seed, per_kind = Path(argv[0]), int(argv[1]), int(argv[2])
    kinds = tuple(argv[3].split(",")) if len(argv) > 3 else KINDS
    d.mkdir(parents=True, exist_ok=True)
    n, codes, slowest = 0, {}, 0.0
    with open(d / "findings.jsonl", "w") as log:
        for r in campaign(d, seed, per_kind, kinds):
            n += 1
            codes[str(r["code"])] = codes.get(str(r["code"]), 0) + 1
            slowest = max(slowest, r["seconds"])
            why = problem(r)
            if why:
                log.write(json.dumps({"finding": why, **r}) + "\n")
                log.flush()
        log.write(json.dumps({"summary": {"cases": n, "codes": codes, "slowest_s": slowest}}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main_(sys.argv[1:]))
