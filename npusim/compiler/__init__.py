"""ONNX -> Program compiler (front end, passes, quantize, memory plan, codegen)."""

from .driver import compile
from .frontend import SUPPORTED, fix_input_shapes, load_model
from .options import FUSIONS, MEM_PLANS, QUANTIZATIONS, CompileOptions

__all__ = ["compile", "CompileOptions", "SUPPORTED", "fix_input_shapes", "load_model", "FUSIONS", "MEM_PLANS", "QUANTIZATIONS"]
