"""What a functional run of an imported ST program can compute once per program: every epoch's stream
engines placed at the user-I/O addresses, the byte addresses they walk and the shape of each frame's walk
(one contiguous span, rows of equal length at a fixed stride, or scattered), the enabled units' field
dicts (which keep their derived tables: CONVACC geometry and kernels, ARITH coefficients, ACTIV tables),
the switch contexts' gate plans. Nothing here depends on input values or on memory contents, except the
kernels read from read-only memory (the weight images are part of the program), which `execute` caches
only while nothing wrote read-only memory during the run.

A program's plans live in its loaded output's memo (`StOutput.memo`, one per user-I/O placement, the
newest `KEEP_PLANS`), so a repeated `run` of one program (validate, per-layer, benchmarks) skips this work
and the plans go with the output.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ...memory.pattern import byte_addresses
from . import streng as se
from .streng import resolve_symbols
from .model import HwEpoch, StOutput, Unit

KEEP_PLANS = 2  # placements of one output whose plans stay cached (a plan holds its weights' decoded kernels;
# with the parses `load` keeps, KEEP_LOADED x KEEP_PLANS plans at most)


class UnitFields:
    """A unit's configuration with its fields in a dict (read thousands of times per epoch), and a cache
    of what its fields alone decide (`memo`), kept with the program's plan."""

    def __init__(self, u: Unit):
        self.kind, self.index, self.fields = u.kind, u.index, dict(u.fields)
        self.memo: dict = {}

    def get(self, key: str, default=None):
        return self.fields.get(key, default)


@dataclass(frozen=True)
class Walk:
    """The bytes a stream engine walks, in stream order, and how each piece of it lies in memory. A plan's
    walk keeps its byte addresses only when a frame is scattered (rows and spans say where the others lie)."""

    addresses: np.ndarray | None  # int64, every byte in stream order (None: see `frame_spans`, `contiguous`)
    nbytes: int  # bytes walked
    extent: tuple  # (lo, hi): the bytes lie in [lo, hi) (hi == lo: none)
    frame: int  # bytes per frame
    contiguous: bool  # the whole walk is one ascending span from `extent[0]`
    frame_spans: tuple  # per frame: (lo, rows, run, stride) of rows of `run` bytes, or None (scattered)
    read_only: bool = False  # every byte lies in read-only memory (set by the plan)
    # every frame laid out alike: byte j of frame k at starts[k] + offsets[j] (None: frames differ)
    starts: np.ndarray | None = None
    offsets: np.ndarray | None = None
    frame_step: int | None = None  # starts[k] = starts[0] + k * frame_step, each frame rows (frame_spans)

    def grid(self, k0: int, k1: int) -> tuple | None:
        """Frames k0..k1 as (start, (frames, rows, run), (frame_step, stride, 1)): one strided view of memory
        (None when the frames are not rows at a fixed step)."""
        if self.frame_step is None:
            return None
        _, rows, run, stride = self.frame_spans[k0]
        return int(self.starts[k0]), (k1 - k0, rows, run), (self.frame_step, stride, 1)


def walk_bytes(w: Walk, lo: int, hi: int) -> np.ndarray:
    """The addresses of bytes lo..hi of walk `w` in stream order, from its frame table (`starts`, `offsets`)."""
    f = w.frame
    if lo % f == 0 and hi % f == 0:  # whole frames
        return (w.starts[lo // f:hi // f, None] + w.offsets[None, :]).reshape(-1)
    j = np.arange(lo, hi, dtype=np.int64)
    return w.starts[j // f] + w.offsets[j % f]


def frame_span(a: np.ndarray):
    """(lo, rows, run, stride) when the bytes `a` are rows of `run` ascending bytes `stride` apart (rows
    that do not overlap: stride >= run), else None."""
    n = a.size
    if n == 0:
        return None
    d = np.flatnonzero(np.diff(a) != 1)
    run = int(d[0]) + 1 if d.size else n
    if n % run:
        return None
    rows = n // run
    stride = int(a[run] - a[0]) if rows > 1 else run
    if stride < run:
        return None
    grid = a[0] + stride * np.arange(rows, dtype=np.int64)[:, None] + np.arange(run, dtype=np.int64)[None, :]
    if not np.array_equal(a.reshape(rows, run), grid):
        return None
    return int(a[0]), rows, run, stride


def walk_of(s, spans: bool = True) -> Walk:
    """The walk of engine `s`; with `spans`, each frame's shape in memory too, and the byte addresses only
    where neither serves (the walk is not one run, its frames differ in layout and some has no shape): a
    plan keeps the walk."""
    pats = se.walk(s)
    addr = np.concatenate([byte_addresses(p) for p in pats]) if pats else np.zeros(0, np.int64)
    extent = (int(addr.min()), int(addr.max()) + 1) if addr.size else (0, 0)
    frame = se.frame_bytes(s)
    contiguous = bool(addr.size) and extent[1] - extent[0] == addr.size and bool(np.all(np.diff(addr) == 1))
    shapes, starts, offsets, step = (), None, None, None
    if spans and frame and addr.size % frame == 0:
        grid = addr.reshape(-1, frame)
        rel = grid - grid[:, :1]
        if (rel == rel[0]).all():  # every frame the first's layout at its own start: one table, one shape
            starts, offsets = grid[:, 0].copy(), rel[0].copy()
            first = frame_span(grid[0])
            shapes = (None,) * len(starts) if first is None else tuple((int(s0),) + first[1:] for s0 in starts)
            steps = np.diff(starts)
            if first is not None and starts.size > 1 and (steps == steps[0]).all():
                step = int(steps[0])
        else:
            shapes = tuple(frame_span(row) for row in grid)
    keep = not spans or not (contiguous or starts is not None or (shapes and all(sh is not None for sh in shapes)))
    return Walk(addr if keep else None, int(addr.size), extent, frame, contiguous, shapes, starts=starts,
                offsets=offsets, frame_step=step)


@dataclass
class EpochPlan:
    """One hardware epoch as the functional run builds it: engines (resolved), their walks, the enabled
    units (None for a kind that is refused when the epoch runs) and the switch contexts."""

    strengs: dict  # engine -> Streng (placed)
    walks: dict  # engine -> Walk
    units: list  # [(Unit, UnitFields)] of the enabled units, in the epoch's order
    gate_plans: dict
    whole_reads: bool = False  # engines and pools may deliver many frames at once (`independent_frames`)
    kernels: dict = field(default_factory=dict)  # (unit kind, index, frame) -> a CONVACC's decoded kernels


def gate_plans(links) -> dict:
    """{(dst kind, dst index, dst port, src kind, src index): [(passes, frames)]} of switch contexts."""
    by_dst: dict = {}
    for ln in links:
        by_dst.setdefault((ln.dst_kind, ln.dst_index, ln.dst_port), []).append(ln)
    plans = {}
    for dst, lns in by_dst.items():
        timed = [ln for ln in lns if ln.frames]
        for ln in lns:
            key = dst + (ln.src_kind, ln.src_index)
            if timed and ln in timed:
                plans[key] = [(bool(x.context) and (x.src_kind, x.src_index) == (ln.src_kind, ln.src_index),
                               x.frames) for x in sorted(timed, key=lambda x: x.slot)]
            else:
                plans.setdefault(key, [])
    return plans


def epoch_plan(ep: HwEpoch, symbols: dict, read_only, spans: bool = True) -> EpochPlan:
    """The plan of one epoch; `read_only(lo, hi)` says whether bytes [lo, hi) lie in read-only memory;
    `spans`: the walks' frame shapes too."""
    on = set(ep.enabled)
    strengs = {s.engine: resolve_symbols(s, symbols) for s in ep.enabled_strengs()}
    walks = {}
    for i, s in strengs.items():
        w = walk_of(s, spans)
        if w.nbytes and not s.dir:
            w = replace(w, read_only=read_only(*w.extent))
        walks[i] = w
    units = [(u, UnitFields(u)) for u in ep.units if not on or (u.kind, u.index) in on]
    return EpochPlan(strengs, walks, units, gate_plans(ep.links), independent_frames(ep, strengs, walks))


def independent_frames(ep: HwEpoch, strengs: dict, walks: dict) -> bool:
    """Whether the epoch computes the same bytes when a reading engine delivers all its frames at once and a
    pool all the frames at hand:
    no switch context counts frames (a gate counts the chunks a source emits), no reading engine walks
    bytes a writing engine of the epoch writes (it would read them before they are written) and no two
    writing engines write the same bytes (their order would change). Decided from the walks' extents."""
    if any(ln.frames for ln in ep.links):
        return False
    extents = {i: w.extent for i, w in walks.items() if w.nbytes}
    written = sorted(extents[i] for i, s in strengs.items() if s.dir and i in extents)
    if any(a[1] > b[0] for a, b in zip(written, written[1:])):
        return False
    read = [extents[i] for i, s in strengs.items() if not s.dir and i in extents]
    return not any(r[0] < w[1] and w[0] < r[1] for r in read for w in written)


class ProgramPlan:
    """Epoch plans of one program and user-I/O placement, built when an epoch first runs."""

    def __init__(self, out: StOutput, symbols: dict, read_only):
        self.out, self.symbols, self.read_only = out, symbols, read_only
        self.epochs: dict = {}  # id(HwEpoch) -> EpochPlan (the program holds the epochs)

    def epoch(self, ep: HwEpoch) -> EpochPlan:
        p = self.epochs.get(id(ep))
        if p is None:
            p = self.epochs[id(ep)] = epoch_plan(ep, self.symbols, self.read_only)
        return p


def program_plan(out: StOutput, symbols: dict, read_only) -> ProgramPlan:
    """The plan of `out` placed at `symbols`, kept in the output's memo (built on first use)."""
    return out.memo("functional-run plans", tuple(sorted(symbols.items())),
                    lambda: ProgramPlan(out, symbols, read_only), keep=KEEP_PLANS)
