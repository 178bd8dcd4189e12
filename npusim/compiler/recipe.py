"""What a recipe module declares for each operator it maps to the NPU (the registry's entries).

A `Recipe` names the operator, says in words what the NPU runs (the docs table), lists its checks
(`checks.py`: (graph, node) -> None or the reason the node runs on the CPU; the first failing one
decides) and lowers a node the checks passed into layers (`lower(ctx, node, x)`, `x` the node's first
input after aliases). The cost estimate against the host is a check like any other (it returns
"faster on the CPU (...)"; `costed` says so). Code generation follows from the steps a lowering emits (the units' steps
of `ir.Step`; codegen turns each unit's step into commands).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .ir import Concat, Graph, Layer, Node, Step


@dataclass
class Lowering:
    """What a lowering sees of the pass: the graph, the layer names of the node being lowered (itself and
    the nodes fused into it), the aliases (tensor -> the tensor whose bytes it names) and the concats so far."""

    g: Graph
    names: list[str] = field(default_factory=list)
    alias: dict[str, str] = field(default_factory=dict)
    concats: list[Concat] = field(default_factory=list)

    def source(self, t: str) -> str:
        """The tensor whose bytes `t` names."""
        return self.alias.get(t, t)

    def layer(self, n: Node, x: str, steps: list[Step]) -> list[Layer]:
        """One layer of node `n` reading `x` through the chain of `steps`."""
        return [Layer(n.name, self.names, x, steps)]


@dataclass(frozen=True)
class Recipe:
    op: str
    recipe: str  # what the NPU runs (docs)
    checks: tuple[Callable, ...]
    lower: Callable[[Lowering, Node, str], list[Layer]]
    costed: bool = False  # a check weighs NPU against host cycles: the passes are memoized per profile


def one_step(make_step: Callable[[Graph, Node], Step]) -> Callable[[Lowering, Node, str], list[Layer]]:
    """The lowering of an operator that is one unit's step on its first input."""
    def lower(ctx: Lowering, n: Node, x: str) -> list[Layer]:
        return ctx.layer(n, x, [make_step(ctx.g, n)])
    lower.__doc__ = f"one layer: {make_step.__name__}"
    return lower
