"""A small writer of TFLite flatbuffers for test and demo models (the zoo's TFLite builders use it).

It serializes tensors, buffers and operators with the `flatbuffers` Builder and the generated schema
functions of the `tflite` package (`<Table>Start`, `<Table>Add<Field>`, `<Table>End`); it is a writer
only (npusim reads .tflite files with the same package's reader classes). Options are given by their
schema field names in snake case: `op("CONV_2D", [x, w, b], [y], "Conv2DOptions", padding="SAME",
stride_w=1, stride_h=1, fused_activation_function="RELU6")`; enum values may be given by name.
"""

from __future__ import annotations

import importlib

import numpy as np

TFL3 = b"TFL3"
_TYPES = {"float32": 0, "int32": 2, "uint8": 3, "int64": 4, "int16": 7, "int8": 9}
_NP = {"float32": np.float32, "int32": np.int32, "uint8": np.uint8, "int64": np.int64, "int16": np.int16,
       "int8": np.int8}
_ENUMS = {"padding": "Padding", "fused_activation_function": "ActivationFunctionType"}


def _camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in name.split("_"))


def _module(name: str):
    return importlib.import_module(f"tflite.{name}")


class TFLiteWriter:
    """Collects one subgraph's tensors and operators, then `finish()` returns the .tflite bytes."""

    def __init__(self, description: str = "npusim.zoo"):
        self.description = description
        self.tensors: list[dict] = []
        self.buffers: list[bytes] = [b""]  # buffer 0 is the empty buffer by convention
        self.ops: list[tuple] = []
        self.codes: list[tuple[str, str]] = []  # (builtin name, custom code)

    def tensor(self, name: str, shape, dtype: str = "int8", data=None, scale=None, zero_point=None,
               axis: int = 0) -> int:
        """Add a tensor (constant when `data` is given); returns its index. `scale`/`zero_point`: a
        number (per tensor) or a sequence (per axis `axis`)."""
        buf = 0
        if data is not None:
            arr = np.ascontiguousarray(np.asarray(data, dtype=_NP[dtype]).reshape(tuple(shape)))
            self.buffers.append(arr.tobytes())
            buf = len(self.buffers) - 1
        q = None
        if scale is not None:
            s = np.atleast_1d(np.asarray(scale, np.float32))
            z = np.atleast_1d(np.asarray(0 if zero_point is None else zero_point, np.int64))
            if z.size == 1 and s.size > 1:
                z = np.repeat(z, s.size)
            q = (s, z, int(axis))
        self.tensors.append(dict(name=name, shape=[int(d) for d in shape], type=_TYPES[dtype], buffer=buf, q=q))
        return len(self.tensors) - 1

    def op(self, builtin: str, inputs, outputs, options: str | None = None, custom: str = "", **fields) -> None:
        """Add an operator: a builtin by name (BuiltinOperator), or builtin="CUSTOM" with `custom` code."""
        key = (builtin, custom)
        if key not in self.codes:
            self.codes.append(key)
        self.ops.append((self.codes.index(key), list(inputs), list(outputs), options, fields))

    # ------------------------------------------------------------------ serialization

    def _vector(self, b, start, values, kind: str):
        start(b, len(values))
        for v in reversed(values):
            getattr(b, f"Prepend{kind}")(v)
        return b.EndVector()

    def _options(self, b, name: str, fields: dict) -> int:
        mod = _module(name)
        vectors = {}
        for k, v in fields.items():
            if isinstance(v, (list, tuple)):
                vectors[k] = self._vector(b, getattr(mod, f"{name}Start{_camel(k)}Vector"), [int(x) for x in v], "Int32")
        getattr(mod, f"{name}Start")(b)
        for k, v in fields.items():
            if k in vectors:
                v = vectors[k]
            elif isinstance(v, str):
                enum = getattr(_module(_ENUMS[k]), _ENUMS[k])
                v = getattr(enum, v)
            getattr(mod, f"{name}Add{_camel(k)}")(b, v)
        return getattr(mod, f"{name}End")(b)

    def finish(self, inputs, outputs) -> bytes:
        import flatbuffers

        T = _module("Tensor")
        Q = _module("QuantizationParameters")
        B = _module("Buffer")
        O = _module("Operator")
        S = _module("SubGraph")
        M = _module("Model")
        C = _module("OperatorCode")
        BO = _module("BuiltinOperator").BuiltinOperator
        OPT = _module("BuiltinOptions").BuiltinOptions
        b = flatbuffers.Builder(1024)
        tensors = []
        for t in self.tensors:
            name = b.CreateString(t["name"])
            shape = self._vector(b, T.TensorStartShapeVector, t["shape"], "Int32")
            q = None
            if t["q"] is not None:
                s, z, axis = t["q"]
                sv = self._vector(b, Q.QuantizationParametersStartScaleVector, [float(x) for x in s], "Float32")
                zv = self._vector(b, Q.QuantizationParametersStartZeroPointVector, [int(x) for x in z], "Int64")
                Q.QuantizationParametersStart(b)
                Q.QuantizationParametersAddScale(b, sv)
                Q.QuantizationParametersAddZeroPoint(b, zv)
                Q.QuantizationParametersAddQuantizedDimension(b, axis)
                q = Q.QuantizationParametersEnd(b)
            T.TensorStart(b)
            T.TensorAddShape(b, shape)
            T.TensorAddType(b, t["type"])
            T.TensorAddBuffer(b, t["buffer"])
            T.TensorAddName(b, name)
            if q is not None:
                T.TensorAddQuantization(b, q)
            tensors.append(T.TensorEnd(b))
        ops = []
        for code, ins, outs, options, fields in self.ops:
            opts = self._options(b, options, fields) if options else None
            iv = self._vector(b, O.OperatorStartInputsVector, ins, "Int32")
            ov = self._vector(b, O.OperatorStartOutputsVector, outs, "Int32")
            O.OperatorStart(b)
            O.OperatorAddOpcodeIndex(b, code)
            O.OperatorAddInputs(b, iv)
            O.OperatorAddOutputs(b, ov)
            if opts is not None:
                O.OperatorAddBuiltinOptionsType(b, getattr(OPT, options))
                O.OperatorAddBuiltinOptions(b, opts)
            ops.append(O.OperatorEnd(b))
        tv = self._vector(b, S.SubGraphStartTensorsVector, tensors, "UOffsetTRelative")
        iv = self._vector(b, S.SubGraphStartInputsVector, list(inputs), "Int32")
        ov = self._vector(b, S.SubGraphStartOutputsVector, list(outputs), "Int32")
        opv = self._vector(b, S.SubGraphStartOperatorsVector, ops, "UOffsetTRelative")
        gname = b.CreateString("main")
        S.SubGraphStart(b)
        S.SubGraphAddTensors(b, tv)
        S.SubGraphAddInputs(b, iv)
        S.SubGraphAddOutputs(b, ov)
        S.SubGraphAddOperators(b, opv)
        S.SubGraphAddName(b, gname)
        graph = S.SubGraphEnd(b)
        bufs = []
        for data in self.buffers:
            dv = None
            if data:
                dv = b.CreateNumpyVector(np.frombuffer(data, np.uint8))
            B.BufferStart(b)
            if dv is not None:
                B.BufferAddData(b, dv)
            bufs.append(B.BufferEnd(b))
        codes = []
        for builtin, custom in self.codes:
            cc = b.CreateString(custom) if custom else None
            value = getattr(BO, builtin)
            C.OperatorCodeStart(b)
            C.OperatorCodeAddDeprecatedBuiltinCode(b, min(value, 127))
            C.OperatorCodeAddBuiltinCode(b, value)
            C.OperatorCodeAddVersion(b, 1)
            if cc is not None:
                C.OperatorCodeAddCustomCode(b, cc)
            codes.append(C.OperatorCodeEnd(b))
        cv = self._vector(b, M.ModelStartOperatorCodesVector, codes, "UOffsetTRelative")
        sv = self._vector(b, M.ModelStartSubgraphsVector, [graph], "UOffsetTRelative")
        bv = self._vector(b, M.ModelStartBuffersVector, bufs, "UOffsetTRelative")
        desc = b.CreateString(self.description)
        M.ModelStart(b)
        M.ModelAddVersion(b, 3)
        M.ModelAddOperatorCodes(b, cv)
        M.ModelAddSubgraphs(b, sv)
        M.ModelAddDescription(b, desc)
        M.ModelAddBuffers(b, bv)
        b.Finish(M.ModelEnd(b), file_identifier=TFL3)
        return bytes(b.Output())

