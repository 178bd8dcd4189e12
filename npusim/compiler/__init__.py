"""ONNX -> Program compiler (front end, passes, quantize, memory plan, codegen)."""

from .driver import compile
from .frontend import SUPPORTED
from .options import FUSIONS, MEM_PLANS, QUANTIZATIONS, CompileOptions

__all__ = ["compile", "CompileOptions", "SUPPORTED", "FUSIONS", "MEM_PLANS", "QUANTIZATIONS"]
