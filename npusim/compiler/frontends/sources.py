"""Which front end reads a model: chosen by content, not by file name.

A TFLite flatbuffer carries "TFL3" at byte 4 (tflite_front); anything else must parse as an ONNX
protobuf: a float model (onnx_front), or one that carries its own quantization, QDQ or QOperator
(qonnx rewrites QOperator into QDQ, then onnx_front imports the scales). `front_end` returns the IR
graph and, for ONNX, the cleaned model calibration runs on (None for a TFLite model).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...errors import ModelError, UsageError
from ..options import CompileOptions
from .tflite_reader import is_tflite, read_tflite

MAX_MODEL_BYTES = 2 << 30  # protobuf's own limit; a .tflite beyond it is refused the same way


@dataclass(frozen=True)
class Source:
    kind: str  # "onnx" | "tflite"
    where: str  # the path (or "model") for messages
    proto: object = None  # onnx.ModelProto
    data: bytes = b""  # the .tflite bytes
    onnx_bytes: bytes = b""  # the bytes `proto` was parsed from, when they are the whole model (onnx_front.load_model_file)


def _checked_file(path: Path) -> Path:
    """`path` when it is a model file within MAX_MODEL_BYTES (ModelError otherwise)."""
    if path.is_dir():
        raise ModelError(f"{path}: is a folder, not a model file")
    if not path.is_file():
        raise ModelError(f"{path}: no such model file")
    size = path.stat().st_size
    if size > MAX_MODEL_BYTES:
        raise ModelError(f"{path}: {size} B is larger than the {MAX_MODEL_BYTES} B a model may have")
    return path


def load_source(model) -> Source:
    """The model (a path, bytes, an onnx.ModelProto) with the kind of front end that reads it."""
    from . import onnx_front  # the ONNX front end imports onnx (heavy): only when a model is read

    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
        if is_tflite(data):
            return Source("tflite", "model", data=data)
        import onnx

        try:
            return Source("onnx", "model", proto=onnx.load_model_from_string(data), onnx_bytes=data)
        except Exception as e:
            raise ModelError(f"model: neither a TFLite flatbuffer nor an ONNX model ({type(e).__name__})") from None
    if isinstance(model, (str, Path)):
        path = _checked_file(Path(model))
        with path.open("rb") as f:
            head = f.read(8)  # the TFLite identifier; an ONNX model is read once, by onnx
        if is_tflite(head):
            return Source("tflite", str(path), data=path.read_bytes())
        if path.suffix.lower() == ".tflite":
            raise ModelError(f"{path}: not a TFLite model (no TFL3 flatbuffer identifier)")
        try:
            proto, raw = onnx_front.load_model_file(path)
        except ModelError as e:  # it is not TFLite either (checked above): say both
            raise ModelError(f"{e}; nor a TFLite model (no TFL3 flatbuffer identifier)") from None
        return Source("onnx", str(path), proto=proto, onnx_bytes=raw)
    return Source("onnx", "model", proto=onnx_front.load_model(model))


def check_prequantized(options: CompileOptions, graph, calibration=None) -> None:
    """A model that carries its own quantization compiles as it is: no other precision, no calibration."""
    what = "TFLite int8" if graph.source == "tflite" else "quantized ONNX (QDQ)"
    if options.quantization != "int8":
        raise UsageError(f"--quantization {options.quantization}: the model is {what} with its own scales and zero "
                         f"points; it compiles as int8 (leave --quantization at int8)")
    if options.calibration is not None or calibration is not None:
        raise UsageError(f"--calibration: the model is {what} and carries its own scales; it needs no calibration")


def front_end(src: Source, options: CompileOptions, max_bytes: int):
    """(Graph, cleaned ONNX model (onnx_front.Cleaned) or None) of a source."""
    if src.kind == "tflite":
        from .tflite_front import build_graph as tflite_graph  # imports onnx (heavy): only for a TFLite model

        return tflite_graph(read_tflite(src.data, src.where), src.where, options.input_shapes), None
    from . import onnx_front, qonnx  # import onnx (heavy): only for an ONNX model

    proto = qonnx.to_qdq(src.proto) if qonnx.is_quantized(src.proto) else src.proto
    return onnx_front.build_graph(proto, options.input_shapes, max_bytes=max_bytes, const_inputs=options.const_inputs,
                                  serialized=src.onnx_bytes if proto is src.proto else b"")
