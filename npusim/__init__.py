"""npusim: cycle-approximate simulator of the STM32N657 Neural-ART NPU.

The public API mirrors the CLI and is loaded lazily, so `import npusim` stays light:

    prog = npusim.compile("model.onnx", npusim.CompileOptions(mem_align=16))
    res = npusim.run(prog, random_inputs=True)          # outputs, faults, stats, trace
    rep = npusim.validate(prog, "model.onnx", inputs)   # vs ONNX Runtime fp32
"""

__version__ = "0.1.0"

_LAZY = {
    "load": ("runtime", "load"), "run": ("runtime", "run"), "RunOptions": ("runtime", "RunOptions"),
    "RunResult": ("engine", "RunResult"), "compile": ("compiler", "compile"),
    "CompileOptions": ("compiler", "CompileOptions"), "validate": ("reference", "validate"),
    "load_profile": ("hw", "load_profile"),
}
# subpackages and modules reachable as attributes (`npusim.runtime.seeded_inputs`) without an import
_SUBMODULES = ("compiler", "diagnose", "engine", "errors", "faults", "golden", "hw", "kernels", "memory",
               "program", "reference", "runtime", "testing", "tools", "zoo")
__all__ = ["__version__", *_LAZY]


def __getattr__(name):
    """Lazy access to the public API and the submodules (numba, onnx and simpy load on first use)."""
    import importlib

    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(f".{module}", __name__), attr)
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'npusim' has no attribute {name!r}")
