"""The compiler's front ends: a model file in, the graph IR (`compiler/ir.py`) out.

`sources` picks the front end by content: float ONNX (`onnx_front`, with `modelcheck`), QDQ/QOperator
ONNX (`qonnx` to QDQ, then `onnx_front`), TFLite (`tflite_reader`, `tflite_front` with `tflite_lowering`
and `tflite_ops`). Nothing after the front end knows which format a model came from.
"""
