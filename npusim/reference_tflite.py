"""The TFLite interpreter as the reference of a .tflite model (`ai-edge-litert`, extra `npusim[tflite]`).

`tflite_run(model, inputs)` feeds the model's own inputs (its dtypes, NHWC) and returns its outputs
as the interpreter computes them. `kernels` picks the interpreter's kernel set: "auto" (the default
interpreter, as `Interpreter(model_path)` gives it: XNNPACK for the operators it takes, TFLite's
optimized builtins for the rest), "builtin" (optimized builtins, no delegate) or "reference"
(TFLite's reference kernels). The simulator's side of a comparison (NCHW floats in, raw int8 out)
is converted at the boundary by `to_model_inputs` / `to_ir`, with the model's own scales.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from pathlib import Path

import numpy as np

from .errors import DataError, ModelError, UsageError

KERNELS = ("auto", "builtin", "reference")


class MissingDependency(UsageError):
    """An optional dependency a command needs is not installed."""


def _interpreter_module():
    try:
        from ai_edge_litert import interpreter
    except ImportError:
        raise MissingDependency("validating against a .tflite model needs the TFLite interpreter: "
                                "pip install 'npusim[tflite]' (ai-edge-litert)") from None
    return interpreter


def model_bytes(model) -> bytes:
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model)
    p = Path(model)
    if not p.is_file():
        raise ModelError(f"{p}: no such model file")
    return p.read_bytes()


def io_tensors(model) -> tuple[list, list]:
    """(inputs, outputs) of the model as tflite_reader tensors (name, shape, dtype, scale, zero point)."""
    from .compiler.frontends.tflite_reader import read_tflite

    m = read_tflite(model_bytes(model), str(model) if isinstance(model, (str, Path)) else "model")
    return [m.tensors[i] for i in m.inputs], [m.tensors[i] for i in m.outputs]


@contextlib.contextmanager
def _quiet_stderr():
    """The interpreter's C++ log lines ("INFO: Created TensorFlow Lite XNNPACK delegate") go to fd 2:
    hold them back (errors come back as exceptions)."""
    import os
    import sys
    import tempfile

    fd = 2  # the C++ library writes to the process's fd 2, whatever Python's sys.stderr is (a test's capture)
    try:
        sys.stderr.flush()
    except (AttributeError, ValueError, OSError):
        pass
    try:
        saved = os.dup(fd)
    except OSError:  # no fd 2 at all
        yield
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), fd)
        try:
            yield
        finally:
            os.dup2(saved, fd)
            os.close(saved)


def _interpreter(data: bytes, kernels: str, preserve: bool = False):
    mod = _interpreter_module()
    kind = {"auto": mod.OpResolverType.AUTO, "builtin": mod.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
            "reference": mod.OpResolverType.BUILTIN_REF}[kernels]
    with _quiet_stderr():
        it = mod.Interpreter(model_content=data, experimental_op_resolver_type=kind, num_threads=1,
                             experimental_preserve_all_tensors=preserve)
        it.allocate_tensors()
    return it


def tflite_run(model, inputs: dict, kernels: str = "auto", ran: list | None = None,
               tensors: dict | None = None) -> dict[str, np.ndarray]:
    """{output name: array} of the interpreter on `inputs` ({input name: array in the model's dtype and shape}).

    With kernels="auto", a model the XNNPACK delegate refuses to prepare (the interpreter itself then
    fails) runs on the builtin kernels; `ran` (a list) receives the kernel set that ran. `tensors` (a dict)
    receives every tensor the run computed ({index: array as the model holds it}): the interpreter then
    preserves all tensors, which turns its default delegates off, so "auto" runs the builtin kernels."""
    if kernels not in KERNELS:
        raise DataError(f"kernels={kernels!r}: expected one of {', '.join(KERNELS)}")
    data = model_bytes(model)
    preserve = tensors is not None
    if preserve and kernels == "auto":
        kernels = "builtin"
    try:
        it = _interpreter(data, kernels, preserve)
    except (ValueError, RuntimeError) as e:
        if kernels != "auto" or "XNNPack" not in str(e):
            raise ModelError(f"reference model: the TFLite interpreter cannot load it "
                             f"({str(e).splitlines()[0][:160]})") from None
        kernels = "builtin"
        try:
            it = _interpreter(data, kernels)
        except (ValueError, RuntimeError) as e2:
            raise ModelError(f"reference model: the TFLite interpreter cannot load it "
                             f"({str(e2).splitlines()[0][:160]})") from None
    if ran is not None:
        ran.append(kernels)
    for d in it.get_input_details():
        if d["name"] not in inputs:
            raise DataError(f"reference run: missing input {d['name']!r}")
        a = np.asarray(inputs[d["name"]])
        if tuple(a.shape) != tuple(d["shape"]) or a.dtype != d["dtype"]:
            raise DataError(f"reference run: input {d['name']!r} is {a.dtype} {list(a.shape)}, the model takes "
                            f"{np.dtype(d['dtype'])} {list(d['shape'])}")
        it.set_tensor(d["index"], a)
    try:
        with _quiet_stderr():
            it.invoke()
    except RuntimeError as e:
        raise DataError(f"reference run failed: {str(e).splitlines()[0][:160]}") from None
    if preserve:
        for d in it.get_tensor_details():
            try:
                tensors[d["index"]] = it.get_tensor(d["index"]).copy()
            except ValueError:  # a tensor the interpreter holds no data for
                continue
    return {d["name"]: it.get_tensor(d["index"]).copy() for d in it.get_output_details()}


def _ir(a: np.ndarray) -> np.ndarray:
    from .compiler.frontends.tflite_front import ir_perm

    return np.ascontiguousarray(np.transpose(a, ir_perm(a.ndim)))


def to_model_inputs(model, inputs: dict) -> dict[str, np.ndarray]:
    """The simulator's inputs (float, NCHW) as the model takes them: quantized with the model's scale
    and zero point the way the runtime quantizes them (round half to even), in NHWC."""
    from .compiler.frontends.tflite_front import ir_perm

    ins, _ = io_tensors(model)
    out = {}
    for t in ins:
        if t.name not in inputs:
            raise DataError(f"reference run: missing input {t.name!r}")
        x = np.asarray(inputs[t.name], np.float64)
        want = tuple(t.shape[p] for p in ir_perm(len(t.shape)))
        if x.shape != want:
            raise DataError(f"input {t.name!r}: shape {list(x.shape)} is not the blob's {list(want)} (NCHW)")
        x = np.transpose(x, np.argsort(ir_perm(x.ndim)))  # back to NHWC
        if t.dtype in ("int8", "uint8"):
            lo, hi = (-128, 127) if t.dtype == "int8" else (0, 255)
            q = np.clip(np.rint(x / float(t.scale[0])) + int(t.zero_point.reshape(-1)[0]), lo, hi)
            out[t.name] = q.astype(np.int8 if t.dtype == "int8" else np.uint8)
        else:
            out[t.name] = x.astype(np.float32)
    return out


def reference_outputs(model, inputs: dict, kernels: str = "auto", ran: list | None = None) -> dict[str, np.ndarray]:
    """{output: array in NCHW}: the interpreter's outputs for the simulator's inputs, int8/uint8 as they
    come (float for a DEQUANTIZE output)."""
    return {k: _ir(v) for k, v in tflite_run(model, to_model_inputs(model, inputs), kernels, ran).items()}


def reference_tensors(model, inputs: dict, kernels: str = "builtin", ran: list | None = None) -> tuple[dict, dict]:
    """(outputs as `reference_outputs` gives them, {tensor name: {value (IR order), scale, zero_point, op,
    inputs}}) of one interpreter run preserving every tensor (builtin kernels for "auto": see `tflite_run`).
    Tensors are the outputs of the model's operators (constants aside); `op` is the builtin that computes
    it, `inputs` the names of that operator's computed operands; scale and zero point are None for a float
    tensor. A name held by two tensors is left out (no tensor of the simulator can be matched to it)."""
    m = _model(model)
    held: dict = {}
    outs = tflite_run(model, to_model_inputs(model, inputs), kernels, ran, tensors=held)
    names = [t.name for t in m.tensors]
    counts = Counter(names)
    twice = {n for n, k in counts.items() if k > 1}
    out = {}
    for op in m.ops:
        ins = [names[i] for i in op.inputs if i >= 0 and m.tensors[i].data is None]
        for i in op.outputs:
            t = m.tensors[i]
            if i < 0 or t.name in twice or i not in held:
                continue
            q = t.dtype in ("int8", "uint8") and t.scale is not None and t.scale.size == 1
            out[t.name] = {"value": _ir(held[i]),
                           "scale": float(t.scale[0]) if q else None,
                           "zero_point": int(t.zero_point.reshape(-1)[0]) if q else None,
                           "op": op.opcode if op.opcode != "CUSTOM" else op.custom, "inputs": ins}
    return {k: _ir(v) for k, v in outs.items()}, out


def _model(model):
    from .compiler.frontends.tflite_reader import read_tflite

    return read_tflite(model_bytes(model), str(model) if isinstance(model, (str, Path)) else "model")
