"""Software epochs: the operands of a HOST command, as the host CPU reads and writes them.

A HOST command follows its HTENSOR operands (isa/n657.toml). Each operand is one tensor in
simulated memory: `linear` dense bytes in ONNX order, or a feature map in `image`/`blocked16`
with the operand's byte strides. The host reads an operand as a stream-engine-shaped access
pattern (so every byte goes through the same Checker as the NPU's engines), unpacks it to the
ONNX-order array, converts storage to the operator's element type (int8 storage of a float
operand: (q - zp) * scale; fp32 storage of an fp16 operand: rounded to fp16), and the reverse
for outputs (quantize: round half to even, saturate).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import kernels as K
from ..kernels.quant import np_dtype
from ..memory import AccessPattern

FLOAT_ELEMS = ("fp16", "fp32")
MAX_RANK = 8  # HTENSOR d0..d7


@dataclass(frozen=True)
class Operand:
    """One HTENSOR operand as the hardware decoded it."""

    slot: int
    is_input: bool
    dtype: str  # element type in memory
    elem: str  # element type the operator computes in
    layout: str
    shape: tuple
    addr: int
    line: int
    plane: int
    scale: float
    zp: int
    command: int

    @classmethod
    def from_args(cls, a: dict, command: int) -> "Operand":
        rank = int(a["rank"])
        dims = tuple(int(a[f"d{k}"]) for k in range(min(rank, MAX_RANK))) + (0,) * max(0, rank - MAX_RANK)
        scale = float(np.uint32(int(a["scale"]) & 0xFFFFFFFF).view(np.float32))
        return cls(int(a["slot"]), a["dir"] == "read", a["dtype"], a["elem"], a["layout"], dims, int(a["addr"]),
                   int(a["line"]), int(a["plane"]), scale, int(a["zp"]), command)

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def esize(self) -> int:
        return np.dtype(np_dtype(self.dtype)).itemsize

    def hwc(self) -> tuple[int, int, int]:
        return K.fmap_hwc(self.shape) if self.layout != "linear" else (1, 1, self.numel)

    def pattern(self, block: int) -> AccessPattern:
        """The bytes the host touches, in stream order (as an SE program of this layout would)."""
        h, w, c = self.hwc()
        es = self.esize
        if self.layout == "linear":
            return AccessPattern(self.addr, self.numel * es)
        if self.layout == "image":
            return AccessPattern(self.addr, w * c * es, h, self.line)
        return AccessPattern(self.addr, w * block * es, h, self.line, -(-c // block), self.plane)


def operand_problem(op: Operand, block: int) -> str | None:
    """Why the host cannot use this operand, or None."""
    name = f"{'input' if op.is_input else 'output'} {op.slot}"
    if len(op.shape) > MAX_RANK:
        return f"{name}: rank {len(op.shape)} > {MAX_RANK}"
    if op.layout != "linear" and (len(op.shape) not in (3, 4) or op.shape[0] != 1 or 0 in op.shape):
        return f"{name}: a {op.layout} operand must be a feature map [1, C, H, W] or [1, C, L], not {list(op.shape)}"
    if op.dtype != op.elem and not (op.elem in FLOAT_ELEMS and op.dtype in ("int8", "fp16", "fp32")):
        return f"{name}: {op.elem} values cannot be stored as {op.dtype}"
    if op.dtype == "int8" and op.elem in FLOAT_ELEMS and not (np.isfinite(op.scale) and op.scale > 0):
        return f"{name}: int8 scale {op.scale!r} must be positive and finite"
    if op.layout != "linear":
        h, w, c = op.hwc()
        run = w * (block if op.layout == "blocked16" else c) * op.esize
        if h > 1 and op.line < run:
            return f"{name}: line stride {op.line} B is shorter than a line ({run} B)"
        if op.layout == "blocked16" and c > block and op.plane < (h - 1) * op.line + run:
            return f"{name}: plane stride {op.plane} B is shorter than a plane"
    return None


def to_operator(op: Operand, stream: np.ndarray, block: int) -> np.ndarray:
    """The operand's value in the operator's element type, in ONNX shape, from its stream bytes."""
    h, w, c = op.hwc()
    hwc = K.unpack(stream, op.layout, h, w, c, op.dtype, block=block)
    x = K.hwc_to_onnx(hwc, op.layout, op.shape)
    if op.dtype == "int8" and op.elem in FLOAT_ELEMS:
        x = K.dequantize(x, op.scale, op.zp).astype(np.float32)
    want = np_dtype(op.elem)
    with np.errstate(all="ignore"):
        return x.astype(want) if x.dtype != want else x


def from_operator(op: Operand, y: np.ndarray, block: int) -> np.ndarray:
    """Stream bytes of an output operand from the operator's value `y` (already in ONNX shape)."""
    with np.errstate(all="ignore"):
        y = np.asarray(y).astype(np_dtype(op.elem), copy=False)
        if op.dtype == "int8" and op.elem in FLOAT_ELEMS:
            y = K.quantize(np.nan_to_num(y.astype(np.float64)), op.scale, op.zp)
        else:
            y = y.astype(np_dtype(op.dtype), copy=False)
    return K.pack(K.onnx_to_hwc(y, op.layout), op.layout, block=block)
