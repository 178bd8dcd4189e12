"""Graph IR of the compiler: ONNX nodes with static shapes and folded constants, then NPU layers."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Node:
    """One ONNX node (possibly a synthetic one made by a pass, e.g. op="SiLU")."""

    name: str
    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict = field(default_factory=dict)


@dataclass
class Graph:
    nodes: list[Node]
    shapes: dict[str, tuple[int, ...]]  # every tensor's static shape (ONNX order)
    consts: dict[str, np.ndarray]  # initializers and folded constants (float32 unless index data)
    inputs: list[str]
    outputs: list[str]
    qdq: dict[str, tuple[float, int]] = field(default_factory=dict)  # tensor -> (scale, zp) from a QDQ model

    def consumers(self, tensor: str) -> list[Node]:
        return [n for n in self.nodes if tensor in n.inputs]

    def producer(self, tensor: str) -> Node | None:
        for n in self.nodes:
            if tensor in n.outputs:
                return n
        return None


def hwc(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(H, W, C) of an ONNX activation shape: NCHW, NC or C."""
    if len(shape) == 4:
        return int(shape[2]), int(shape[3]), int(shape[1])
    if len(shape) == 3:  # N, C, L as a 1 x L map
        return 1, int(shape[2]), int(shape[1])
    if len(shape) == 2:
        return 1, 1, int(shape[1])
    if len(shape) == 1:
        return 1, 1, int(shape[0])
    return 1, 1, 1


@dataclass
class Step:
    """One hardware unit of a layer's chain. `out` is the ONNX tensor its result represents."""

    unit: str  # CONV | POOL | RESIZE | ARITH | ACT | HOST
    out: str
    params: dict = field(default_factory=dict)
    operand: str | None = None  # second streamed input (ARITH a+b), fed on port 1


@dataclass
class Layer:
    """One epoch (or HOST call): input -> steps (chained units) -> output."""

    name: str  # ONNX node for the debug map (the primary node)
    nodes: list[str]  # every ONNX node fused into it
    input: str
    steps: list[Step]
    kind: str = "npu"  # npu | host | concat

    @property
    def output(self) -> str:
        return self.steps[-1].out

    def reads(self) -> list[str]:
        return [self.input] + [s.operand for s in self.steps if s.operand]


@dataclass
class Concat:
    """Channel concatenation of `parts` into `out` (placed by addressing or copied)."""

    name: str
    parts: list[str]
    out: str
