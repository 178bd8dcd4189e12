"""ONNX -> Program compiler (front end, passes, quantize, memory plan, codegen).

Names load lazily (PEP 562): `npusim.compiler.options` / `.cli_args` stay free of numpy/onnx,
so the CLI can build its parser fast.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "driver": ["compile", "prepare", "finish", "Prepared"],
    "cache": ["CompileCache"],
    "frontends.onnx_front": ["SUPPORTED", "fix_input_shapes", "load_model"],
    "options": ["CompileOptions", "FUSIONS", "MEM_PLANS", "QUANTIZATIONS"],
}
_WHERE = {name: mod for mod, names in _EXPORTS.items() for name in names}

__all__ = [name for names in _EXPORTS.values() for name in names]


def __getattr__(name: str):
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'npusim.compiler' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value
