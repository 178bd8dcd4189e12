"""Stream-engine walks of a map's boxes, before the memory plan: how a whole map lies in memory
(`Source`, at nominal strides), the read descriptor giving a box (`Window`) as a dense stream of its
layout, and whether a part can be written into a map from a row and column (contract: isa/README.md
"Addressing"). Shared by the addressing, moving-CONV and broadcast recipes and the memory plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..program.layouts import block_size, required_layout
from ..program.spec import load_isa
from .ir import Graph, Window, hwc
from .storage import storage_layout


WORD = 8  # the n657's bus word (profile alignment.word); memplan refuses a window off a larger word's grid


NOMINAL_ALIGN = 128  # line/plane alignment assumed when checking field limits before the memory plan


@dataclass(frozen=True)
class Source:
    """How a whole map lies in memory: layout, [H][W][C], element bytes and the buffer's strides."""
    layout: str
    h: int
    w: int
    c: int
    esize: int
    line: int
    plane: int
    block: int

    @property
    def pixel(self) -> int:
        if self.layout == "linear":
            return self.c * self.esize
        return (self.block if self.layout == "blocked16" else self.c) * self.esize

    def addr(self, ch: int, y: int, x: int) -> int:
        """Byte offset of element (ch, y, x) from the map's first byte."""
        if self.layout == "linear":
            return ch * self.esize
        a = y * self.line + x * self.pixel
        if self.layout == "blocked16":
            return a + (ch // self.block) * self.plane + (ch % self.block) * self.esize
        return a + ch * self.esize


def nominal_source(g: Graph, t: str) -> Source:
    """The Source of map `t` before the memory plan (strides at NOMINAL_ALIGN)."""
    h, w, c = hwc(g.shapes[t])
    es = load_isa().dtype_bytes(g.compile_dtype)
    layout = storage_layout(g, t)
    blk = block_size()
    px = (blk if layout == "blocked16" else c) * es
    line = -(-w * px // NOMINAL_ALIGN) * NOMINAL_ALIGN
    return Source(layout, h, w, c, es, line, h * line, blk)


def _limits():
    f = load_isa().command("SE")
    return f.field("run").mask, f.field("n1").mask, f.field("s1").mask


def pattern(src: Source, win: Window, h: int, w: int, c: int, word: int = WORD):
    """(offset, (run, n1, s1, n2, s2, n3, s3)) of a linear read descriptor giving the window's [h][w][c]
    as a dense stream of its layout, or the reason none exists (a string)."""
    es, blk = src.esize, src.block
    out = required_layout(h, w, c)
    dy, dx = (win.sx * src.pixel, win.sy * src.line) if win.swap else (win.sy * src.line, win.sx * src.pixel)
    if src.layout == "linear":
        dx = dy = 0
    last = win.c0 + (c - 1) * win.cs
    if out == "blocked16":
        if src.layout != "blocked16" or win.c0 % blk or win.cs != 1:
            return "a channel box off the 16-channel blocks (the SE moves whole 16-channel pixels)"
        planes = -(-c // blk)
        if dx == blk * es:
            levels, run = [(h, dy), (planes, src.plane)], w * blk * es
        else:
            levels, run = [(w, dx), (h, dy), (planes, src.plane)], blk * es
    else:
        if src.layout == "blocked16" and win.c0 // blk != last // blk:
            return f"{c} channels from {win.c0} (step {win.cs}) span two 16-channel blocks"
        if win.cs == 1:
            run, levels = c * es, []
        else:
            run, levels = es, [(c, win.cs * es)]
        if out == "image":
            if win.cs == 1 and dx == c * es:
                run, levels = w * c * es, [(h, dy)]
            else:
                levels += [(w, dx), (h, dy)]
        if len(levels) > 3:
            return "a box needing more than the SE's three loop levels"
    off = src.addr(win.c0, win.y0, win.x0)
    if off % word:
        return f"its first element lies {off % word} B off the {word} B bus-word grid (the SE ignores those base bits)"
    levels = [lv for lv in levels if lv[0] > 1] or [(1, 0)]
    levels += [(1, 0)] * (3 - len(levels))
    top_run, top_n, top_s = _limits()
    if run > top_run or any(n > top_n or s > top_s for n, s in levels):
        return "a run, count or stride beyond the SE's fields"
    (n1, s1), (n2, s2), (n3, s3) = levels
    return off, (run, n1, s1, n2, s2, n3, s3)


def dense_offset(src: Source, win: Window, h: int, w: int, c: int, word: int = WORD) -> int | None:
    """Byte offset of the window when it is a dense part of the source (read in place with the source's
    strides: whole blocked16 planes, whole pixels, stride-1 rows and columns), else None."""
    if win.swap or win.cs != 1 or win.sy != 1 or win.sx != 1 or required_layout(h, w, c) != src.layout:
        return None
    if src.layout == "blocked16" and win.c0 % src.block or src.layout == "image" and c != src.c:
        return None
    off = src.addr(win.c0, win.y0, win.x0)
    return None if off % word else off


def window_problem(g: Graph, shape, win: Window) -> str | None:
    """Why no read SE gives the window (of ONNX shape `shape`) as a dense stream, or None."""
    got = pattern(nominal_source(g, win.whole), win, *hwc(shape))
    return got if isinstance(got, str) else None


def write_problem(g: Graph, shape, whole: str, y0: int, x0: int) -> str | None:
    """Why a part of ONNX shape `shape` cannot be written into map `whole` from row y0, column x0 (a
    strided write SE, pixel by pixel), or None."""
    lp, lw = required_layout(*hwc(shape)), storage_layout(g, whole)
    if lp != lw:
        return f"a {lp} part of a {lw} map (the write SE keeps the pixel format)"
    if lw == "linear":
        return "a part of a 1 x 1 map"
    off = nominal_source(g, whole).addr(0, y0, x0)
    if off % WORD:
        return f"a part starting {off % WORD} B off the {WORD} B bus-word grid"
    return None
