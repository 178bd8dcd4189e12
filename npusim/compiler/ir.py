"""Graph IR of the compiler: ONNX nodes with static shapes and folded constants, then NPU layers."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..kernels.layout import fmap_hwc

FLOAT_ELEMS = ("fp32", "fp16")  # ONNX float types (ISA element names) the compile dtype stores


@dataclass
class Node:
    """One ONNX node (possibly a synthetic one made by a pass, e.g. op="SiLU"). `proto` is the
    node as the model gave it (None for synthetic nodes): a CPU fallback runs exactly that."""

    name: str
    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict = field(default_factory=dict)
    proto: object = None


@dataclass(frozen=True)
class WeightQuant:
    """A constant as a pre-quantized model stores it: its integer values and their scale and zero
    point, per tensor (one entry) or per slice of `axis`. The graph's float constant of the same name
    holds the dequantized values (so every pass that moves weights keeps working)."""

    values: np.ndarray  # the stored integers (int8/uint8 weights, int32 biases), in the constant's shape
    scale: np.ndarray  # float64 holding the model's float32 scales
    zero_point: np.ndarray  # int64
    axis: int | None  # None: per tensor

    def along(self, axis: int, n: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(scale, zero point) per index of `axis` (length n), or None if quantized along another axis."""
        if self.scale.size == 1:
            return np.full(n, float(self.scale[0])), np.full(n, int(self.zero_point.reshape(-1)[0]), np.int64)
        if self.axis != axis or self.scale.size != n:
            return None
        zp = self.zero_point.reshape(-1)
        return self.scale.astype(np.float64), (zp if zp.size == n else np.full(n, int(zp[0]))).astype(np.int64)


@dataclass(frozen=True)
class Window:
    """A box of map `whole` read by stream-engine addressing: element (c, y, x) of the window is
    `whole`'s (c0 + c*cs, y0 + y*sy, x0 + x*sx), or with `swap` (c0 + c*cs, y0 + x*sy, x0 + y*sx)
    (rows and columns exchanged: a transposed read)."""

    whole: str
    c0: int = 0
    y0: int = 0
    x0: int = 0
    cs: int = 1
    sy: int = 1
    sx: int = 1
    swap: bool = False


@dataclass(frozen=True)
class Gather:
    """One side of a piece of an element permutation (compiler/recipes/permute.py), as a vector walk of map
    `whole`: the first element's (element, line, plane) vector, the run in elements and up to three
    loops (count, stride vector), innermost first; byte address = vector . (esize, line, plane)."""

    whole: str
    start: tuple
    run: int
    loops: tuple


@dataclass
class Graph:
    nodes: list[Node]
    shapes: dict[str, tuple[int, ...]]  # every tensor's static shape (ONNX order)
    consts: dict[str, np.ndarray]  # initializers and folded constants (float32 unless index data)
    inputs: list[str]
    outputs: list[str]
    qdq: dict[str, tuple[float, int]] = field(default_factory=dict)  # tensor -> (scale, int8 zp) the model fixes
    dtypes: dict[str, str] = field(default_factory=dict)  # tensor -> ISA element name of its ONNX type
    opset: int = 17  # default-domain opset of the model
    wq: dict[str, WeightQuant] = field(default_factory=dict)  # constant -> its stored quantization
    prequantized: bool = False  # every activation's qparams come from the model (`qdq`): no calibration
    float_islands: set[str] = field(default_factory=set)  # prequantized: float tensors the model leaves float
    source: str = "onnx"  # the front end that built it ("onnx", "onnx-qdq", "tflite"): for messages only
    compile_dtype: str = "int8"  # the compile's dtype (float tensors are stored in it)
    # tensor -> (whole tensor, first row, first column, row step, column step): a phase of a strided write
    strided: dict[str, tuple[str, int, int, int, int]] = field(default_factory=dict)
    # int8 calibration: tensor -> (lo, hi) of its float values, for rules that depend on them (empty otherwise)
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    # tensor -> the box of another map it is read from by addressing (compiler/recipes/addressing.py)
    windows: dict[str, "Window"] = field(default_factory=dict)
    # the target profile, for mapping rules that weigh cycles (set on the passes' copy; None otherwise)
    profile: object = None
    # tensor -> one side of a piece of an element permutation (compiler/recipes/permute.py)
    gathers: dict[str, "Gather"] = field(default_factory=dict)

    def dtype(self, t: str) -> str:
        return self.dtypes.get(t, "fp32")

    def is_float(self, t: str) -> bool:
        return self.dtype(t) in FLOAT_ELEMS

    def is_map(self, t: str) -> bool:
        """A float tensor the NPU units can take: [1, C, H, W], [1, C, L], [1, C], [C] or a scalar."""
        s = self.shapes[t]
        return self.is_float(t) and (len(s) in (3, 4) and s[0] == 1 or len(s) == 2 and s[0] == 1 or len(s) <= 1)

    def consumers(self, tensor: str) -> list[Node]:
        return [n for n in self.nodes if tensor in n.inputs]

    def producer(self, tensor: str) -> Node | None:
        for n in self.nodes:
            if tensor in n.outputs:
                return n
        return None


def add_tensor(g: Graph, added: list, name: str, shape, dtype: str, like: str | None = None, value=None,
               wq: WeightQuant | None = None) -> str:
    """Register a tensor a graph rewrite adds (its shape, element type, constant value and stored
    quantization); `like`: a tensor whose values it moves, whose fixed qparams and int8 range it takes.
    `name` goes into `added`, so `drop_tensors` can undo a rewrite that is not kept."""
    g.shapes[name], g.dtypes[name] = tuple(int(v) for v in shape), dtype
    if like in g.qdq:
        g.qdq[name] = g.qdq[like]
    if like in g.ranges:
        g.ranges[name] = g.ranges[like]
    if value is not None:
        g.consts[name] = value
    if wq is not None:
        g.wq[name] = wq
    added.append(name)
    return name


def drop_tensors(g: Graph, added: list[str]) -> None:
    """Forget the tensors `add_tensor` registered in `added`."""
    for t in added:
        for d in (g.shapes, g.dtypes, g.qdq, g.consts, g.ranges, g.wq):
            d.pop(t, None)


def hwc(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(H, W, C) of a tensor as the units see it: [1, C, H, W] -> (H, W, C), [1, C, L] -> (1, L, C);
    every other shape is a vector of all its elements (1, 1, numel) (kernels.layout.fmap_hwc)."""
    return fmap_hwc(shape)


@dataclass
class Step:
    """One hardware unit of a layer's chain. `out` is the ONNX tensor its result represents."""

    unit: str  # CONV | POOL | RESIZE | ARITH | ACT | HOST
    out: str
    params: dict = field(default_factory=dict)
    operand: str | None = None  # second streamed input, fed on port 1 (ARITH a+b; CONV: a map as its kernel)


@dataclass
class HostOp:
    """A software epoch: the ONNX node runs on the host CPU. Operands in node order ("" = absent)."""

    node: Node
    inputs: list[str]
    outputs: list[str]
    reason: str  # why not the NPU (legality's message)
    consts: frozenset = frozenset()  # inputs that are constants (placed with the weights, not planned)
    implicit: list = field(default_factory=list)  # outer-scope tensors its subgraphs read (the last inputs)


@dataclass
class Layer:
    """One epoch (or HOST call): input -> steps (chained units) -> output."""

    name: str  # ONNX node for the debug map (the primary node)
    nodes: list[str]  # every ONNX node fused into it
    input: str
    steps: list[Step]
    kind: str = "npu"  # npu | host | concat
    host: HostOp | None = None  # kind == "host"
    siblings: list = field(default_factory=list)  # (input, Step) chains of the same epoch (permute.py pieces)

    @property
    def output(self) -> str:
        return self.host.outputs[0] if self.host is not None else self.steps[-1].out

    def reads(self) -> list[str]:
        """Tensors the layer reads from the activation memory (a host op's constant inputs excepted)."""
        if self.host is not None:
            return [t for t in dict.fromkeys(self.host.inputs) if t and t not in self.host.consts]
        return [self.input] + [s.operand for s in self.steps if s.operand] + [t for t, _ in self.siblings]

    def writes(self) -> list[str]:
        if self.host is not None:
            return [t for t in self.host.outputs if t]
        return ([self.steps[-1].out] if self.steps else []) + [s.out for _, s in self.siblings]


@dataclass
class Concat:
    """Concatenation of `parts` into `out` along `axis` (of `out`'s ONNX shape; placed by addressing or
    copied)."""

    name: str
    parts: list[str]
    out: str
    axis: int = 1
