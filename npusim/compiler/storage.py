"""How a tensor is stored, before any address is chosen: its element type and layout in memory, and
which pools hold activations. The memory plan, codegen and the recipes' checks and estimates share it.
"""

from __future__ import annotations

from ..program.layouts import required_layout
from .ir import Graph, hwc


def activation_pools(profile) -> list[str]:
    """Pools that hold activations, in preference order: the writable non-cacheable (internal) pools,
    fastest first (bytes per NPU cycle), then by address; then the writable cacheable ones, likewise.
    On the n657: npuRAM3..6, cpuRAM2, hyperRAM."""
    def key(p):
        return (p.cacheable, -p.bytes_per_cycle, p.base)
    return [p.name for p in sorted((p for p in profile.pools if p.writable), key=key)]


def round_up(x: int, a: int) -> int:
    return -(-x // a) * a


def storage_dtype(g: Graph, t: str, dtype: str) -> str:
    """Element type of a tensor in memory: float tensors in the compile dtype (a quantized model's float
    islands in fp32), others in their own."""
    if t in g.float_islands:
        return "fp32" if dtype == "int8" else dtype
    return dtype if g.is_float(t) else g.dtype(t)


def storage_layout(g: Graph, t: str) -> str:
    """A feature map's layout by the layout rule; any other tensor (batch > 1, rank 5, integer,
    boolean) is `linear`: dense in ONNX order."""
    return required_layout(*hwc(g.shapes[t])) if g.is_map(t) else "linear"
