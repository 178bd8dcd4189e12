"""ONNX Runtime sessions as npusim uses them (the reference, calibration, bisect, the zoo): one place
that sets the threads and optimisation level and keeps ONNX Runtime's own logging off stderr (its
errors come back as exceptions, which the callers turn into one-line npusim errors).
"""

from __future__ import annotations

QUIET = 4  # ONNX Runtime's FATAL: errors are raised as exceptions, not also printed in colour


def session(model, threads: int = 1, optimize: bool | str = True, mem_pattern: bool = True):
    """An InferenceSession on the CPU for a ModelProto or serialized model bytes; exceptions pass
    through (callers name what failed). `optimize`: True (every graph optimisation), "basic" (only
    semantics-preserving rewrites such as constant folding: no fusion of DequantizeLinear -> op ->
    QuantizeLinear into ONNX Runtime's integer kernels) or False (none). `mem_pattern=False`: no
    memory-pattern block per run (the arena serves each tensor from memory it keeps), so repeated
    runs take no fresh pages; the values computed are the same."""
    import onnxruntime as ort

    ort.set_default_logger_severity(QUIET)  # messages logged while a session initialises
    so = ort.SessionOptions()
    so.intra_op_num_threads = max(1, int(threads))
    so.inter_op_num_threads = 1
    so.log_severity_level = QUIET
    so.enable_mem_pattern = bool(mem_pattern)
    if optimize == "basic":
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    elif not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    data = model if isinstance(model, (bytes, bytearray)) else model.SerializeToString()
    return ort.InferenceSession(bytes(data), so, providers=["CPUExecutionProvider"])
