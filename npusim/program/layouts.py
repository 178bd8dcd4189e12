"""Feature-map layouts of the hardware contract (from the ISA's [layouts] table).

The hardware picks the layout of a [H][W][C] tensor by its shape:
  linear     H = W = 1 (vectors; strides in bytes)
  image      C <= 4    (packed pixels; strides in 8 B words)
  blocked16  otherwise ([ceil(C/16)][H][W][16]; strides in 128 B granules)
A unit configured with another layout is refused (bad-descriptor).
"""

from __future__ import annotations

from dataclasses import dataclass

from .spec import IsaSpec, load_isa


def required_layout(h: int, w: int, c: int, isa: IsaSpec | None = None) -> str:
    isa = isa or load_isa()
    if h == 1 and w == 1:
        return "linear"
    if c <= int(isa.layouts["image"]["max_channels"]):
        return "image"
    return "blocked16"


@dataclass(frozen=True)
class Geometry:
    """Dense stream geometry of an [H][W][C] tensor in a layout (no strides yet)."""

    layout: str
    h: int
    w: int
    c: int
    esize: int  # bytes per element

    @property
    def block(self) -> int:
        return 16 if self.layout == "blocked16" else self.c

    @property
    def planes(self) -> int:
        return -(-self.c // 16) if self.layout == "blocked16" else 1

    @property
    def pixel_bytes(self) -> int:
        return self.block * self.esize

    @property
    def run_bytes(self) -> int:
        """Contiguous bytes of one line (the SE `run`)."""
        if self.layout == "linear":
            return self.h * self.w * self.c * self.esize
        return self.w * self.pixel_bytes

    @property
    def lines(self) -> int:
        return 1 if self.layout == "linear" else self.h

    @property
    def stream_bytes(self) -> int:
        return self.run_bytes * self.lines * self.planes


def geometry(h: int, w: int, c: int, esize: int, layout: str | None = None) -> Geometry:
    return Geometry(layout or required_layout(h, w, c), h, w, c, esize)
