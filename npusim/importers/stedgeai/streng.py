"""The addresses a stream engine walks, from its configuration (`model.Streng`), as the hardware
generates them: `AccessPattern`s in stream order, for the checker and the cost model.

Tensor (raster) mode: a frame is `fheight` lines of `fwidth` pixels; a pixel is `batch_depth`
elements of `mem_bits` bits, contiguous in memory; pixels are `batch_offset` bytes apart, lines
`line_offset` bytes (0: `fwidth * batch_offset`, the runtime's default). Raw mode: a frame is
`frame_count` elements, contiguous. Frames: `frame_tot_cnt` of them; inside a repetition loop of
`frame_loop_cnt` frames each starts `frame_offset` bytes after the previous one, and loop k starts
`k * loop_offset` bytes after the first. A loop count of 0 means no repetition loop: every frame
starts `frame_offset` bytes after the previous one (the compiles that ran on boards need both
readings: a loop of 1 with a frame offset re-reads one frame, a count of 0 walks on). With `continuous`, a frame
starts where the previous one ended; with `noinc`, every element is read or written at the same
address. A count of 0 moves nothing.
"""

from __future__ import annotations

import functools
from dataclasses import replace

from ...errors import StImportError, UsageError
from ...memory.pattern import AccessPattern
from ...program.aton import load_aton_map
from .model import Streng
from .unit_tables import one_to_one_units

MAX_PATTERNS = 1 << 16  # distinct repetition loops walked one by one (a frame count is at most 2^16)


@functools.lru_cache(maxsize=1)
def _limit_word() -> int:
    """Bytes the address limiter compares at once: one more than LIMITADDR's read-only low bits (ATON map)."""

    return load_aton_map().register_named("STRENG", "LIMITADDR").field("REG").ro_mask + 1


def hardware_limit(last_byte: int) -> int:
    """The exclusive end the address limiter enforces when LIMITADDR is written `last_byte` (the last
    byte the engine may touch, as ST's runtime writes it): the register's read-only low bits do not
    take the write, so the limiter allows the whole bus word holding that byte."""
    word = _limit_word()
    return (last_byte & ~(word - 1)) + word


def pixel_bytes(s) -> int:
    return (max(s.batch_depth, 1) * s.mem_bits + 7) // 8


def frame_bytes(s) -> int:
    """Bytes of one frame, as moved (not its extent in memory)."""
    if s.raw:
        return (s.frame_count * s.mem_bits + 7) // 8
    return s.fwidth * s.fheight * pixel_bytes(s)


def _frame_levels(s) -> tuple[int, list[tuple[int, int]]]:
    """(run bytes, [(count, stride)] inner first) of one frame."""
    if s.raw:
        run = frame_bytes(s)
        return (1, [(run, 0)]) if s.noinc else (run, [])
    px = pixel_bytes(s)
    line = s.line_offset or s.fwidth * s.batch_offset
    if s.noinc:
        return 1, [(px, 0), (s.fwidth, 0), (s.fheight, 0)]
    if s.batch_offset == px:  # dense pixels: a line is one run
        return px * s.fwidth, [(s.fheight, line)]
    return px, [(s.fwidth, s.batch_offset), (s.fheight, line)]


def _span(run: int, levels) -> int:
    """Bytes from a frame's first byte to one past its last (for `continuous`)."""
    return run + sum((n - 1) * st for n, st in levels if n > 1)


def _refuse(s, what: str):
    return StImportError(f"stream engine {s.engine}{f' ({s.name})' if getattr(s, 'name', '') else ''}: {what}")


def walk(s) -> list[AccessPattern]:
    """The engine's accesses in stream order (empty when it moves nothing). A configuration no
    hardware register can hold (a negative size, an address past 32 bits) is refused (StImportError)."""
    for k in ("fwidth", "fheight", "batch_depth", "frame_count", "frame_tot_cnt", "frame_loop_cnt", "mem_bits"):
        if getattr(s, k) < 0:
            raise _refuse(s, f"{k} = {getattr(s, k)} is negative")
    if not 0 <= s.addr < 1 << 32:
        raise _refuse(s, f"address {s.addr:#x} is outside the 32-bit address space")
    if s.frame_tot_cnt <= 0 or frame_bytes(s) == 0:
        return []
    run, levels = _frame_levels(s)
    levels = [(n, st) for n, st in levels if n > 1]
    tot = s.frame_tot_cnt
    if s.continuous:
        frames = [(tot, _span(run, levels))]
    else:
        inner = s.frame_loop_cnt or tot
        if inner >= tot or s.loop_offset == inner * s.frame_offset:
            frames = [(tot, s.frame_offset)]
        elif inner == 1:
            frames = [(tot, s.loop_offset)]
        else:
            frames = None
    if frames is not None:
        levels = levels + [f for f in frames if f[0] > 1]
        return _patterns(s.addr, run, levels, s)
    # repetition loops that are not one arithmetic series: a pattern per loop
    inner = s.frame_loop_cnt
    loops = -(-tot // inner)
    if loops > MAX_PATTERNS:
        raise StImportError(f"stream engine {s.engine}: {loops} frame repetition loops, more than npusim walks "
                            f"({MAX_PATTERNS})")
    out = []
    for k in range(loops):
        n = min(inner, tot - k * inner)
        lv = levels + ([(n, s.frame_offset)] if n > 1 else [])
        out += _patterns(s.addr + k * s.loop_offset, run, lv, s)
    return out


def _patterns(base: int, run: int, levels, s) -> list[AccessPattern]:
    """AccessPatterns of up to three loop levels over `run`; a fourth level is unrolled."""
    if len(levels) <= 3:
        lv = list(levels) + [(1, 0)] * (3 - len(levels))
        try:
            return [AccessPattern(base, run, lv[0][0], lv[0][1], lv[1][0], lv[1][1], lv[2][0], lv[2][1])]
        except UsageError as e:
            raise _refuse(s, f"no walk: {e}") from None
    outer, rest = levels[-1], levels[:-1]
    if outer[0] > MAX_PATTERNS:
        raise StImportError(f"stream engine {s.engine}: {outer[0]} outer iterations, more than npusim walks "
                            f"({MAX_PATTERNS})")
    out = []
    for i in range(outer[0]):
        out += _patterns(base + i * outer[1], run, rest, s)
    return out


def moved_bytes(s) -> int:
    return frame_bytes(s) * max(s.frame_tot_cnt, 0)


def frame_elements(s) -> int:
    """Stream elements of one frame."""
    return s.frame_count if s.raw else s.fwidth * s.fheight * max(s.batch_depth, 1)


def demanded(ep) -> dict[int, int]:
    """{read engine: the frames its consumers take} where that is fewer than its frame limit.

    An epoch ends when its writing engines have written their frames (the epoch controller polls
    them, then clears every unit and engine): a reading engine whose frame limit is larger than what
    flows to them stops there. Followed only through units that emit one element per input element
    (`one_to_one` in `isa/aton/ec_lift_units.toml`) and links no switch context counts frames on; an
    engine feeding any other unit, or a gated link, keeps its frame limit.
    """
    engines = {s.engine: s for s in ep.enabled_strengs()}
    on = set(ep.enabled)
    one_to_one = one_to_one_units()
    # a switch context that counts frames passes a source's frames in turn with another's (or drops
    # them): what flows on a gated link is not what its source reads, so nothing through it is bounded
    gated = {(lk.src_kind, lk.src_index) for lk in ep.links if lk.frames} | \
            {(lk.dst_kind, lk.dst_index) for lk in ep.links if lk.frames}
    consumers: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for lk in ep.links:
        if lk.context and (not on or (lk.dst_kind, lk.dst_index) in on):
            consumers.setdefault((lk.src_kind, lk.src_index), []).append((lk.dst_kind, lk.dst_index))
    memo: dict = {}

    def need(node, seen=frozenset()):
        """Elements `node` (a unit, or a reading engine's stream) must deliver; None: not bounded."""
        if node in memo:
            return memo[node]
        if node in seen or node in gated:
            return None
        takes = []
        for dst in consumers.get(node, ()):
            kind, idx = dst
            if dst in gated:
                takes.append(None)
            elif kind == "STRENG":
                w = engines.get(idx)
                takes.append(frame_elements(w) * max(w.frame_tot_cnt, 0) if w is not None and w.dir else None)
            elif kind in one_to_one:
                takes.append(need(dst, seen | {node}))
            else:
                takes.append(None)
        got = memo[node] = None if not takes or None in takes else max(takes)
        return got

    out = {}
    for s in engines.values():
        per = frame_elements(s)
        if s.dir or per <= 0:
            continue
        n = need(("STRENG", s.engine))
        if n is not None and -(-n // per) < s.frame_tot_cnt:
            out[s.engine] = -(-n // per)
    return out


def epoch_walks(ep, symbols: dict) -> tuple:
    """((engine placed at `symbols`, its walk), ...) of epoch `ep`'s enabled engines; a reading engine
    walks the frames its consumers take (`demanded`), up to its frame limit."""
    cut = demanded(ep)
    return tuple((s, walk(s)) for s in (replace(resolve_symbols(s, symbols), frame_tot_cnt=cut[s.engine])
                                        if s.engine in cut else resolve_symbols(s, symbols)
                                        for s in ep.enabled_strengs()))


def placed_walks(out, symbols: dict, ep) -> tuple:
    """`epoch_walks` of an epoch of the loaded output `out`, walked once per output and placement
    (`StOutput.memo`), for the replay's checks and the timing alike."""
    kept = out.memo("placed walks", tuple(sorted(symbols.items())), dict)
    got = kept.get(id(ep))  # the epoch records live as long as the output that keeps the memo
    if got is None:
        got = kept[id(ep)] = epoch_walks(ep, symbols)
    return got


def resolve_symbols(s: Streng, symbols: dict[str, int]) -> Streng:
    """A stream engine whose address was given against a relocation symbol, placed at `symbols`."""
    if not s.base_symbol:
        return s
    if s.base_symbol not in symbols:
        raise StImportError(f"stream engine {s.engine}: no address for '{s.base_symbol}'")
    d = symbols[s.base_symbol]
    return replace(s, addr=s.addr + d, limit=None if s.limit is None else s.limit + d,
                   offset_end=None if s.offset_end is None else s.offset_end + d, base_symbol="")
