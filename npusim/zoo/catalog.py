"""The zoo's model builders by name, with their parameters: what `npusim zoo` lists and writes.

Every public builder (in `__all__`) of `npusim.zoo` and of its submodules whose return annotation
is an `onnx.ModelProto` (written as .onnx) or a `TFLiteModel` (written as .tflite) is a catalog entry; its keyword parameters with int, float, bool or str
defaults can be set from the command line as `KEY=VALUE`. Nothing is registered by hand, so a
new builder appears in `npusim zoo` by being exported.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from dataclasses import dataclass

from ..errors import UsageError

_SCALARS = (bool, int, float, str)
MAX_PARAM = 1 << 16  # a stated limit on integer parameters (sizes, widths, classes): no builder needs more


@dataclass(frozen=True)
class Entry:
    name: str
    module: str
    builder: object
    params: dict  # name -> default (scalars only)
    summary: str

    def signature(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.params.items())


def _is_model_builder(fn) -> bool:
    """A public function returning a model that can be called with its defaults (no required parameter)."""
    sig = inspect.signature(fn)
    if any(p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
           for p in sig.parameters.values()):
        return False
    ret = sig.return_annotation
    name = ret if isinstance(ret, str) else getattr(ret, "__name__", "")
    return "ModelProto" in name or "TFLiteModel" in name


def suffix(entry: "Entry") -> str:
    """The file suffix of what the builder makes: .tflite for TFLite models, else .onnx."""
    ret = inspect.signature(entry.builder).return_annotation
    name = ret if isinstance(ret, str) else getattr(ret, "__name__", "")
    return ".tflite" if "TFLiteModel" in name else ".onnx"


def catalog() -> dict[str, Entry]:
    """{name: Entry} of every model builder of the zoo package, sorted by name."""
    from .. import zoo

    modules = [zoo] + [importlib.import_module(f"{zoo.__name__}.{m.name}")
                       for m in pkgutil.iter_modules(zoo.__path__) if not m.name.startswith("_")
                       and m.name != "catalog"]
    out: dict[str, Entry] = {}
    for mod in modules:
        for name in getattr(mod, "__all__", ()):
            fn = getattr(mod, name, None)
            if not inspect.isfunction(fn) or not _is_model_builder(fn):
                continue
            if name in out:
                raise UsageError(f"zoo: builder {name!r} is exported by {out[name].module} and {mod.__name__}")
            params = {k: p.default for k, p in inspect.signature(fn).parameters.items()
                      if p.default is not inspect.Parameter.empty and isinstance(p.default, _SCALARS)}
            doc = inspect.getdoc(fn) or ""
            out[name] = Entry(name, mod.__name__, fn, params, doc.split("\n\n")[0].replace("\n", " "))
    return dict(sorted(out.items()))


def _parse(entry: Entry, item: str):
    key, sep, text = item.partition("=")
    if not sep or key not in entry.params:
        known = ", ".join(entry.params) or "none"
        raise UsageError(f"zoo {entry.name}: {item!r}: expected KEY=VALUE with KEY one of: {known}")
    default = entry.params[key]
    try:
        if isinstance(default, bool):
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError
            return key, text.lower() in ("true", "1")
        if isinstance(default, int):
            v = int(text, 0)
            if not 0 <= v <= MAX_PARAM:
                raise UsageError(f"zoo {entry.name}: {key}={v}: must lie in [0, {MAX_PARAM}]")
            return key, v
        if isinstance(default, float):
            return key, float(text)
    except ValueError:
        kind = {bool: "true or false", int: "an integer", float: "a number"}[type(default)]
        raise UsageError(f"zoo {entry.name}: {key}={text!r}: expected {kind}") from None
    return key, text


def build(name: str, settings=()):
    """The ModelProto of builder `name` with `KEY=VALUE` settings (UsageError for a bad one)."""
    cat = catalog()
    if name not in cat:
        raise UsageError(f"zoo: no model {name!r} (models: {', '.join(cat)})")
    entry = cat[name]
    kwargs = dict(_parse(entry, s) for s in settings)
    try:
        return entry.builder(**kwargs)
    except (ValueError, AssertionError, ZeroDivisionError) as e:  # a combination the builder cannot make
        raise UsageError(f"zoo {name}: cannot build with {' '.join(settings)}: {e}") from None
