"""The operator recipes: one module per family of NPU mappings, and the registry of them all.

Each family module lists `RECIPES` (`compiler/recipe.py`: the operator, what the NPU runs, its checks,
its lowering). `MAPPINGS` gathers them, operator -> Recipe; the mapping table (`legality`) decides from
it and the passes lower through it. A new family module is added to `FAMILIES`.
"""

from __future__ import annotations

from ..recipe import Recipe
from . import activations, addressing, conv, convtranspose, eltwise, lrn, lut_ops, matmul, pooling, resize, softmax

FAMILIES = (conv, convtranspose, matmul, activations, lut_ops, eltwise, pooling, resize, addressing, softmax, lrn)


def _registry() -> dict[str, Recipe]:
    out: dict[str, Recipe] = {}
    for family in FAMILIES:
        for r in family.RECIPES:
            if r.op in out:
                raise ValueError(f"operator {r.op} has two recipes ({family.__name__} and another family)")
            out[r.op] = r
    return out


MAPPINGS = _registry()
