"""Quantized ONNX models for tests and demos: the zoo's float models through ONNX Runtime's quantizer.

`quantize_onnx(model)` runs `onnxruntime.quantization.quant_pre_process` (shape inference, Conv+BN
folding) and `quantize_static` with a CalibrationDataReader of seeded standard-normal inputs:
QDQ (QuantizeLinear/DequantizeLinear around float ops) or QOperator (QLinearConv, QLinearAdd, ...)
form, int8 or uint8 activations, per-channel or per-tensor int8 weights. It works in a temporary
folder (the quantizer writes files) and returns the ModelProto.

`quantized` (listed by `npusim zoo`) builds any zoo model by name and quantizes it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx

__all__ = ["quantize_onnx", "quantized"]


def _reader(model: onnx.ModelProto, samples: int, seed: int):
    from onnxruntime.quantization import CalibrationDataReader

    inits = {i.name for i in model.graph.initializer}
    ins = [(i.name, [d.dim_value for d in i.type.tensor_type.shape.dim]) for i in model.graph.input
           if i.name not in inits]
    rng = np.random.default_rng(seed)
    data = [{n: rng.standard_normal(s).astype(np.float32) for n, s in ins} for _ in range(samples)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(data)

        def get_next(self):
            return next(self.it, None)

    return Reader()


def quantize_onnx(model: onnx.ModelProto, format: str = "qdq", activations: str = "int8", per_channel: bool = True,
                  samples: int = 4, seed: int = 0) -> onnx.ModelProto:
    """`model` quantized by ONNX Runtime (module doc)."""
    import logging

    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    if format not in ("qdq", "qoperator"):
        raise ValueError(f"format={format!r}: expected qdq or qoperator")
    if activations not in ("int8", "uint8"):
        raise ValueError(f"activations={activations!r}: expected int8 or uint8")
    logging.getLogger().setLevel(logging.ERROR)  # the quantizer logs advice at WARNING on the root logger
    with tempfile.TemporaryDirectory() as tmp:
        src, pre, out = (Path(tmp) / f for f in ("float.onnx", "pre.onnx", "quantized.onnx"))
        onnx.save(model, src)
        quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
        quantize_static(str(pre), str(out), _reader(model, samples, seed),
                        quant_format=QuantFormat.QDQ if format == "qdq" else QuantFormat.QOperator,
                        per_channel=per_channel, weight_type=QuantType.QInt8,
                        activation_type=QuantType.QInt8 if activations == "int8" else QuantType.QUInt8)
        return onnx.load(str(out))


def quantized(name: str = "mobilenet_v2", size: int = 224, format: str = "qdq", activations: str = "int8",
              per_channel: bool = True, seed: int = 0) -> onnx.ModelProto:
    """A zoo model (`name`, with a `size` parameter: resnet50, mobilenet_v2, tiny_yolo_v2, ...) quantized by
    ONNX Runtime: format qdq or qoperator, int8 or uint8 activations."""
    return quantize_onnx(float_model(name, size, seed), format, activations, per_channel, seed=seed)


def float_model(name: str, size: int, seed: int = 0) -> onnx.ModelProto:
    """A float zoo model by name: a builder of `npusim.zoo` or of `npusim.zoo.st` with a `size` parameter."""
    import inspect

    from . import st
    from .catalog import catalog

    entry = catalog().get(name)
    fn = entry.builder if entry is not None else getattr(st, name, None) if name in st.__all__ else None
    if fn is None or "size" not in inspect.signature(fn).parameters or not callable(fn):
        raise ValueError(f"no float zoo model {name!r} with a size parameter")
    return fn(size=size, seed=seed)
