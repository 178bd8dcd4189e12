"""Feature-map layouts of the hardware contract (from the ISA's [layouts] table).

The hardware picks the layout of a [H][W][C] tensor by its shape:
  linear     H = W = 1 (vectors; strides in bytes)
  image      C <= 4    (packed pixels; strides in 8 B words)
  blocked16  otherwise ([ceil(C/B)][H][W][B], B = [layouts.blocked16] block = 16; strides in 128 B granules)
A unit configured with another layout is refused (bad-descriptor).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .spec import IsaSpec, load_isa


def block_size(isa: IsaSpec | None = None) -> int:
    """Channels per plane of the blocked16 layout (the ISA's [layouts.blocked16] block)."""
    return int((isa or load_isa()).layouts["blocked16"]["block"])


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
    channel_block: int = field(default_factory=block_size)  # blocked16 channels per plane (the ISA's)

    @property
    def block(self) -> int:
        """Channels of one pixel in the stream: the channel block in blocked16, else C."""
        return self.channel_block if self.layout == "blocked16" else self.c

    @property
    def planes(self) -> int:
        return -(-self.c // self.channel_block) if self.layout == "blocked16" else 1

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


def geometry(h: int, w: int, c: int, esize: int, layout: str | None = None, isa: IsaSpec | None = None) -> Geometry:
    return Geometry(layout or required_layout(h, w, c, isa), h, w, c, esize, block_size(isa))
