"""Region table: the sanitizer's shadow state.

A region is a known byte range [start, end) with a name, kind, owner context, perms,
state (`live` | `freed` | `unwritten`), producing layer and origin. A region lies in
mapped memory (it may span adjacent pools). Which bytes were
written is kept in a per-pool shadow bitmap (np.uint8, 1 = written), so a read of
never-written bytes can be found; `mark_written(pattern)` records writes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import UsageError
from ..faults import RegionRef
from . import _kernels as K
from .addrmap import AddressMap
from .pattern import AccessPattern, runs

REGION_KINDS = ("input", "output", "activation", "weight", "scratch", "guard")
STATES = ("live", "freed", "unwritten")
WRITTEN_AT_LOAD = ("weight", "input")


@dataclass(eq=False)
class Region:
    name: str
    kind: str
    start: int
    end: int
    pool: str
    perms: str = "rw"
    owner: str | None = None
    state: str = "unwritten"
    producer: str = ""
    origin: str = ""  # e.g. "buffer 'conv2.in' of the plan" or "runtime allocation"
    seq: int = 0  # insertion order (newer regions win ties)

    @property
    def size(self) -> int:
        return self.end - self.start

    def contains(self, addr: int) -> bool:
        return self.start <= addr < self.end

    def ref(self) -> RegionRef:
        return RegionRef(self.name, self.kind, self.start, self.size, self.state, self.perms,
                         self.owner, self.producer, self.origin, self.pool)


class RegionTable:
    def __init__(self, address_map: AddressMap):
        self.map = address_map
        self.regions: list[Region] = []
        self._shadow: dict[str, np.ndarray] = {}
        self._seq = 0
        self._arrays = None

    # ------------------------------------------------------------ building
    @classmethod
    def from_program_buffers(cls, buffers, profile_or_map, context: str | None = None,
                             written_kinds=WRITTEN_AT_LOAD) -> "RegionTable":
        """Regions for a program's buffer table; `written_kinds` are marked written (loaded)."""
        amap = profile_or_map if isinstance(profile_or_map, AddressMap) else AddressMap(profile_or_map)
        t = cls(amap)
        t.add_buffers(buffers, context=context, written_kinds=written_kinds)
        return t

    def add_buffers(self, buffers, context: str | None = None, written_kinds=WRITTEN_AT_LOAD) -> list[Region]:
        out = []
        for b in buffers:
            start = self.map.base_of(b.pool) + b.offset
            r = self.add(b.name, b.kind, start, b.size, owner=context, producer=b.producer,
                         origin=f"buffer '{b.name}' of the plan")
            if b.kind in written_kinds:
                self.mark_range_written(r.start, r.size)
            out.append(r)
        return out

    def add(self, name: str, kind: str, start: int, size: int, owner: str | None = None,
            producer: str = "", origin: str = "runtime allocation", perms: str | None = None,
            state: str = "unwritten") -> Region:
        if kind not in REGION_KINDS:
            raise UsageError(f"region {name!r}: kind {kind!r} is not one of {', '.join(REGION_KINDS)}")
        if state not in STATES:
            raise UsageError(f"region {name!r}: state {state!r} is not one of {', '.join(STATES)}")
        pool = self.map.pool_of(start)
        if pool is None or size < 0 or not self.map.is_mapped(start, size):
            raise UsageError(f"region {name!r} [{start:#x}, {start + size:#x}) is not inside mapped memory")
        self._seq += 1
        r = Region(name, kind, start, start + size, pool.name, perms or pool.perms, owner, state,
                   producer, origin, self._seq)
        self.regions.append(r)
        self._arrays = None
        return r

    def remove(self, region: Region) -> None:
        self.regions = [r for r in self.regions if r is not region]
        self._arrays = None

    def free(self, region: Region) -> None:
        region.state = "freed"

    def named(self, name: str, owner: str | None = None) -> Region:
        """The newest region called `name` (owned by `owner`, when given: contexts reuse names)."""
        for r in reversed(self.regions):
            if r.name == name and (owner is None or r.owner == owner):
                return r
        raise UsageError(f"no region named {name!r}" + (f" in context {owner!r}" if owner else ""))

    # ------------------------------------------------------------ lookup
    def _arr(self):
        if self._arrays is None:
            self._arrays = (np.array([r.start for r in self.regions], dtype=np.int64),
                            np.array([r.end for r in self.regions], dtype=np.int64))
        return self._arrays

    def find(self, addr: int, include_guard: bool = True) -> Region | None:
        """The region holding addr: non-freed before freed, then the smallest, then the newest."""
        starts, ends = self._arr()
        idx = np.flatnonzero((starts <= addr) & (addr < ends))
        cands = [self.regions[i] for i in idx if include_guard or self.regions[i].kind != "guard"]
        if not cands:
            return None
        return min(cands, key=lambda r: (r.state == "freed", r.kind == "guard", r.size, -r.seq))

    def nearest(self, addr: int) -> Region | None:
        """The region holding addr, else the closest one (distance to its start or end)."""
        r = self.find(addr, include_guard=False) or self.find(addr)
        if r is not None or not self.regions:
            return r
        starts, ends = self._arr()
        dist = np.where(addr >= ends, addr - ends + 1, starts - addr)
        best = int(dist.min())
        cands = [self.regions[i] for i in np.flatnonzero(dist == best)]
        return min(cands, key=lambda r: (r.state == "freed", r.kind == "guard", -r.seq))

    def overlapping(self, lo: int, hi: int) -> list[Region]:
        starts, ends = self._arr()
        return [self.regions[i] for i in np.flatnonzero((starts < hi) & (lo < ends))]

    # ------------------------------------------------------------ shadow bitmap
    def shadow(self, pool) -> np.ndarray:
        p = self.map.pool(pool) if isinstance(pool, str) else pool
        s = self._shadow.get(p.name)
        if s is None:
            s = self._shadow[p.name] = np.zeros(p.size, dtype=np.uint8)
        return s

    def mark_written(self, pattern: AccessPattern) -> None:
        """Record that the pattern's in-pool bytes were written; touched regions become live."""
        if pattern.nbytes == 0:
            return
        lo, hi = pattern.extent()
        starts = runs(pattern)
        for p in self.map.pools:
            a, b = max(lo, p.base), min(hi, p.end)
            if a < b:
                K.mark_runs(self.shadow(p), p.base, starts, pattern.run, a, b, 1)
        for r in self.overlapping(lo, hi):
            if r.state == "unwritten":
                r.state = "live"

    def mark_range_written(self, start: int, size: int) -> None:
        self.mark_written(AccessPattern(start, size))

    def clear_written(self, start: int, size: int) -> None:
        """Forget writes of [start, start+size) (a fresh allocation starts unwritten)."""
        for p in self.map.pools:
            a, b = max(start, p.base), min(start + size, p.end)
            if a < b:
                self.shadow(p)[a - p.base:b - p.base] = 0

    def first_unwritten(self, starts, run: int, lo: int, hi: int, limit_k: int) -> tuple[int, int]:
        """(run index, address) of the first never-written byte of [lo, hi) among the first
        `limit_k` runs, in stream order; (-1, -1) if none. [lo, hi) may span adjacent pools."""
        best = (-1, -1)
        for p in self.map.pools:
            a, b = max(lo, p.base), min(hi, p.end)
            if a < b:
                k, x = K.first_unset(self.shadow(p), p.base, starts, run, a, b, limit_k)
                if k >= 0 and (best[0] < 0 or (k, x) < best):
                    best = (int(k), int(x))
        return best
