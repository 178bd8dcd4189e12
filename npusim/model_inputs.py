"""Inputs in the source model's own terms: its layout, shape and element type.

A blob's input buffers hold the model's inputs in the compiler's view (ONNX order: NCHW; the int8
storage of a quantized input), and `runtime.run` takes float arrays in that order. A user holds
the model's own arrays: an ONNX model's (NCHW float, or whatever its graph declares), a TFLite
model's (NHWC, uint8 or int8 codes as an image is read from disk, or float32 where the model
quantizes its input itself). This module describes each input as the model takes it
(`InputSpec`) and converts such arrays into what the program binds (`to_program`), checking
shape and type first: a mismatch is one `DataError` line saying the layout, shape and type
expected.

    specs = input_specs(program, "model.tflite")     # or input_specs(program): from the blob alone
    inputs = to_program(program, {"image": img_u8}, "model.tflite")
    npusim.run(program, inputs)

Integer codes of a quantized input are dequantized with the model's scale and zero point; the
program then quantizes them with its input buffer's (the same codes when both agree, as in an
npusim compile; ST's compile may choose other parameters). Without the model, a TFLite blob's
input layout is known (NHWC) but not whether the model took uint8 codes, int8 codes or float32
values: all three are taken (uint8 codes are the int8 ones + 128, as the blob stores a uint8
input); with the model, only its own type.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import DataError

__all__ = ["InputSpec", "ImageTarget", "input_specs", "image_targets", "model_specs", "blob_specs", "to_program", "from_program", "describe"]

_LAYOUTS = {("tflite", 4): "NHWC", ("tflite", 3): "NLC", ("onnx", 4): "NCHW", ("onnx", 3): "NCL"}
_ONNX_TYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
               10: "float16", 11: "float64", 12: "uint32", 13: "uint64"}
_TFLITE_TYPES = {"fp32": "float32", "fp16": "float16", "int32": "int32", "int64": "int64", "int16": "int16",
                 "uint8": "uint8", "int8": "int8", "bool": "bool"}


@dataclass(frozen=True)
class InputSpec:
    """One input as its source model takes it.

    `shape` is in the model's axis order and `layout` names it ("NHWC", "NCHW", "NLC", "NCL"; "" for
    other ranks); the program's (ONNX) order is `np.transpose(model_array, perm)`. `dtypes` are the
    element types taken (one when the model is known). `scale`/`zero_point`: the quantization of integer
    codes (None for float values and plain integers such as indices)."""

    name: str
    shape: tuple[int, ...]
    dtypes: tuple[str, ...]
    layout: str = ""
    perm: tuple[int, ...] = ()
    scale: float | None = None
    zero_point: int | None = None
    codes: tuple[str, ...] = ()  # the dtypes that are quantized codes (the others: values as they are)

    def describe(self) -> str:
        """'NHWC uint8 [1, 192, 192, 3]'; several types: 'uint8, int8 or float32'."""
        head = f"{self.layout} " if self.layout else ""
        types = self.dtypes[0] if len(self.dtypes) == 1 else f"{', '.join(self.dtypes[:-1])} or {self.dtypes[-1]}"
        return f"{head}{types} {list(self.shape)}"


def _perm(kind: str, rank: int) -> tuple[int, ...]:
    if kind == "tflite":
        from .compiler.frontends.tflite_front import ir_perm

        return tuple(ir_perm(rank))
    return tuple(range(rank))


def _model_shape(program_shape, perm) -> tuple[int, ...]:
    """The model-order shape whose transpose by `perm` is `program_shape`."""
    out = [0] * len(perm)
    for i, p in enumerate(perm):
        out[p] = int(program_shape[i])
    return tuple(out)


def _float_buffer(buf) -> bool:
    return buf.dtype in ("int8", "fp16", "fp32")


def blob_specs(program) -> list[InputSpec]:
    """The inputs as far as the blob alone tells (module doc): a TFLite program's in NHWC (rank 4) or NLC
    (rank 3), an int8 one taking uint8 or int8 codes or float32 values; an ONNX program's in ONNX order,
    float32 values for a computed (int8, fp16, fp32) input, else the buffer's own integer type."""
    from .kernels.quant import np_dtype

    kind = "tflite" if getattr(program.header, "source", "") == "tflite" else "onnx"
    out = []
    for b in program.buffers_of("input"):
        perm = _perm(kind, len(b.shape))
        layout = _LAYOUTS.get((kind, len(b.shape)), "")
        shape = _model_shape(b.shape, perm)
        if kind == "tflite" and b.dtype == "int8":
            out.append(InputSpec(b.name, shape, ("uint8", "int8", "float32"), layout, perm, float(b.scale),
                                 int(b.zero_point), codes=("uint8", "int8")))
        elif _float_buffer(b):
            out.append(InputSpec(b.name, shape, ("float32",), layout, perm))
        else:
            out.append(InputSpec(b.name, shape, (np.dtype(np_dtype(b.dtype)).name,), layout, perm))
    return out


def _tflite_specs(data: bytes, where: str) -> dict[str, InputSpec]:
    from .compiler.frontends.tflite_reader import read_tflite

    m = read_tflite(data, where)
    out = {}
    for i in m.inputs:
        t = m.tensors[i]
        dtype = _TFLITE_TYPES.get(t.dtype, t.dtype)
        quant = dtype in ("uint8", "int8") and t.scale is not None and np.size(t.scale) == 1
        perm = _perm("tflite", len(t.shape))
        out[t.name] = InputSpec(t.name, tuple(int(d) for d in t.shape), (dtype,),
                                _LAYOUTS.get(("tflite", len(t.shape)), ""), perm,
                                float(t.scale[0]) if quant else None,
                                int(np.asarray(t.zero_point).reshape(-1)[0]) if quant else None,
                                codes=(dtype,) if quant else ())
    return out


def _onnx_specs(proto) -> dict[str, InputSpec]:
    """Graph inputs (initializers aside); an integer input read by a DequantizeLinear with constant scale and
    zero point is quantized codes."""
    from onnx import numpy_helper

    g = proto.graph
    consts = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    deq = {}
    for n in g.node:
        if n.op_type == "DequantizeLinear" and n.input and n.input[0] not in deq:
            s = consts.get(n.input[1]) if len(n.input) > 1 else None
            z = consts.get(n.input[2]) if len(n.input) > 2 else None
            if s is not None and np.size(s) == 1 and (z is None or np.size(z) == 1):
                deq[n.input[0]] = (float(np.asarray(s).reshape(-1)[0]),
                                   0 if z is None else int(np.asarray(z).reshape(-1)[0]))
    out = {}
    for v in g.input:
        if v.name in consts:
            continue
        tt = v.type.tensor_type
        dtype = _ONNX_TYPES.get(tt.elem_type, f"type {tt.elem_type}")
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim)
        q = deq.get(v.name) if dtype in ("uint8", "int8") else None
        out[v.name] = InputSpec(v.name, dims, (dtype,), _LAYOUTS.get(("onnx", len(dims)), ""),
                                tuple(range(len(dims))), q[0] if q else None, q[1] if q else None,
                                codes=(dtype,) if q else ())
    return out


def model_specs(model) -> dict[str, InputSpec]:
    """{input name: InputSpec} of a model (path, bytes or ONNX ModelProto) as its file declares it (an ONNX
    dimension the file leaves open is -1)."""
    from .compiler.frontends.sources import load_source

    src = load_source(model)
    if src.kind == "tflite":
        return _tflite_specs(src.data, src.where)
    return _onnx_specs(src.proto)


def input_specs(program, model=None) -> list[InputSpec]:
    """The program's inputs (buffer-table order) in the terms of `model` when given, else of the blob alone
    (`blob_specs`). Shapes are the program's (a batch or dimension fixed at compile time included), in the
    model's axis order."""
    blob = blob_specs(program)
    if model is None:
        return blob
    declared = model_specs(model)
    out = []
    for b, spec in zip(program.buffers_of("input"), blob):
        m = declared.get(b.name)
        if m is None:
            raise DataError(f"input {b.name!r} of the program is not an input of the model "
                            f"(the model's: {', '.join(sorted(declared)) or 'none'})")
        if len(m.shape) != len(b.shape):
            raise DataError(f"input {b.name!r}: the model declares rank {len(m.shape)}, the program holds "
                            f"{list(b.shape)}")
        out.append(InputSpec(m.name, _model_shape(b.shape, m.perm), m.dtypes, m.layout, m.perm, m.scale,
                             m.zero_point, m.codes))
    return out


def describe(program, model=None) -> str:
    """'image: NHWC uint8 [1, 192, 192, 3]; ...': what each input takes."""
    return "; ".join(f"{s.name}: {s.describe()}" for s in input_specs(program, model))


@dataclass(frozen=True)
class ImageTarget:
    """What a photo given for one input must become: its shape, axis layout ('NHWC', 'NCHW') and code type."""

    shape: tuple[int, ...]
    layout: str
    dtype: str


def image_targets(specs) -> dict[str, ImageTarget]:
    """{input name: ImageTarget} of `InputSpec`s: the first 8-bit code type each input takes (a float-only
    input keeps its float type, which a photo cannot bind)."""
    out = {}
    for s in specs:
        codes = [d for d in ("uint8", "int8") if d in s.dtypes]
        out[s.name] = ImageTarget(s.shape, s.layout, codes[0] if codes else s.dtypes[0])
    return out


def _values(spec: InputSpec, a: np.ndarray) -> np.ndarray:
    """The array as the program binds it: codes dequantized (float64), integers as given, floats as given."""
    name = a.dtype.name
    if name in spec.codes:
        zp = spec.zero_point + (128 if name == "uint8" and "int8" in spec.codes else 0)
        return (a.astype(np.float64) - zp) * spec.scale
    return a


def _taken(spec: InputSpec, a: np.ndarray) -> bool:
    if a.dtype.name in spec.dtypes:
        return True
    return a.dtype.kind == "f" and any(np.dtype(d).kind == "f" for d in spec.dtypes)  # any float width


def to_program(program, inputs: dict, model=None, what: str = "input") -> dict[str, np.ndarray]:
    """{name: array in the model's own layout and type} -> {name: array in the program's order}, as
    `runtime.run` binds it (module doc). `what` prefixes messages (e.g. '--input'). Names the program does not
    have, or arrays of another shape or type, raise a one-line `DataError` naming what is expected."""
    specs = {s.name: s for s in input_specs(program, model)}
    out = {}
    for name, arr in inputs.items():
        spec = specs.get(name)
        if spec is None:
            raise DataError(f"{what} {name!r}: the program has no such input (its inputs: "
                            f"{'; '.join(s.name + ': ' + s.describe() for s in specs.values()) or 'none'})")
        a = np.asarray(arr)
        wrong = [w for w, bad in (("shape", tuple(a.shape) != spec.shape), ("type", not _taken(spec, a))) if bad]
        if wrong:
            where = "the model" if model is not None else "the blob"
            raise DataError(f"{what} {name!r}: {a.dtype.name} {list(a.shape)} has the wrong {' and '.join(wrong)}: "
                            f"{where} takes {spec.describe()}")
        out[name] = np.transpose(_values(spec, a), spec.perm) if spec.perm else _values(spec, a)
    return out


def from_program(program, inputs: dict) -> dict[str, np.ndarray]:
    """The program's inputs (as `runtime.run` binds them) in the model's axis order, values unchanged (floats
    for a quantized input): what `to_program(program, ...)` takes from the blob alone and gives back."""
    specs = {s.name: s for s in blob_specs(program)}
    return {k: np.transpose(np.asarray(v), np.argsort(specs[k].perm)) if k in specs and specs[k].perm else v
            for k, v in inputs.items()}
