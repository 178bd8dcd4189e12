"""npusim: cycle-approximate simulator of the STM32N657 Neural-ART NPU."""

__version__ = "0.1.0"

_RUNTIME = ("load", "run", "RunOptions", "RunResult")
__all__ = ["__version__", *_RUNTIME]


def __getattr__(name):
    """Lazy access to the runtime API so `import npusim` stays light."""
    if name in _RUNTIME:
        from . import runtime
        from .engine import RunResult

        return RunResult if name == "RunResult" else getattr(runtime, name)
    raise AttributeError(f"module 'npusim' has no attribute {name!r}")
