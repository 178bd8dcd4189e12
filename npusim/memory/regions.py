"""Region table: the sanitizer's shadow state.

A region is a known byte range [start, end) with a name, kind, owner context, perms,
state (`live` | `freed` | `unwritten`), producing layer and origin. A region lies in
mapped memory (it may span adjacent pools). Which bytes were written is kept exactly as a set of
sorted disjoint intervals (`mark_written(pattern)` adds the pattern's bytes: one interval for a dense
tensor, one per run when runs leave gaps; `unwritten(lo, hi)` gives the gaps), so a read of
never-written bytes can be found without a per-byte bitmap.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from ..errors import UsageError
from ..faults import RegionRef
from . import pattern_math as pm
from .addrmap import AddressMap
from .pattern import AccessPattern

def _left(seq, x) -> int:
    return bisect.bisect_left(seq, x) if isinstance(seq, list) else int(np.searchsorted(seq, x, side="left"))


def _right(seq, x) -> int:
    return bisect.bisect_right(seq, x) if isinstance(seq, list) else int(np.searchsorted(seq, x, side="right"))


SMALL_WINDOW = 8  # written intervals met by a write, merged in Python up to this many (numpy beyond)
LIST_INTERVALS = 4096  # written intervals kept as Python lists up to this many, as int64 arrays beyond
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
    live: tuple[int, int] | None = None  # commands [first, last] over which it holds data, if known

    @property
    def size(self) -> int:
        return self.end - self.start

    def contains(self, addr: int) -> bool:
        return self.start <= addr < self.end

    def ref(self) -> RegionRef:
        return RegionRef(self.name, self.kind, self.start, self.size, self.state, self.perms,
                         self.owner, self.producer, self.origin, self.pool)


def _copy(r: Region) -> Region:
    """A field-for-field copy of a region (what `dataclasses.replace(r)` gives, without its cost)."""
    c = object.__new__(Region)
    c.__dict__ = r.__dict__.copy()
    return c


class RegionTable:
    def __init__(self, address_map: AddressMap):
        self.map = address_map
        self.regions: list[Region] = []
        self._own = bytearray()  # per region: 1 when this table may change it, 0 when shared with a clone
        self._unwritten: set = set()  # indices of the regions that may still be "unwritten" (a superset)
        self._ws: list[int] = []  # written bytes: sorted disjoint [start, end) intervals
        self._we: list[int] = []
        self._seq = 0
        self._arrays = None
        self._found: dict = {}  # addr -> indices of the regions holding it, until regions change
        self._over: dict = {}  # (lo, hi) -> indices of the regions meeting it, likewise
        self._names = None  # name -> indices of the regions of that name, in table order
        self._ranked: dict = {}  # (addr, include_guard) -> indices holding addr in `find`'s order, states aside
        self._gone_live: dict = {}  # (lo, hi) -> True once every region meeting it left "unwritten"
        self.geometry = object()  # a new token whenever regions are added or removed (clones share it)
        self.written_at = object()  # a new token whenever the written bytes change
        self.born = None  # a clone: its source's `written_at` when it was cloned (the written bytes it started with)
        self.cleared = False  # written bytes were cleared (`clear_written`): the written set did not only grow
        self._source = None  # a clone: the table it was cloned from

    # ------------------------------------------------------------ building
    @classmethod
    def from_program_buffers(cls, buffers, profile_or_map, context: str | None = None,
                             written_kinds=WRITTEN_AT_LOAD) -> "RegionTable":
        """Regions for a program's buffer table; `written_kinds` are marked written (loaded)."""
        amap = profile_or_map if isinstance(profile_or_map, AddressMap) else AddressMap(profile_or_map)
        t = cls(amap)
        t.add_buffers(buffers, context=context, written_kinds=written_kinds)
        return t

    def add_buffers(self, buffers, context: str | None = None, written_kinds=WRITTEN_AT_LOAD,
                    live: dict | None = None) -> list[Region]:
        """Regions for buffers; `live`: {buffer name: (first, last) command} where known (memory reuse
        makes buffers overlap: the one live at a command is the one holding data there)."""
        out = []
        for b in buffers:
            start = self.map.base_of(b.pool) + b.offset
            r = self.add(b.name, b.kind, start, b.size, owner=context, producer=b.producer,
                         origin=f"buffer '{b.name}' of the plan")
            if live and b.name in live:
                r.live = tuple(live[b.name])
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
        self._own.append(1)
        if state == "unwritten":
            self._unwritten.add(len(self.regions) - 1)
        self._changed()
        return r

    def clone(self) -> "RegionTable":
        """An independent copy (regions, states, written bytes) sharing the geometry lookups: a
        program's table is built once and cloned for each run. The two share their Region objects until
        one of them changes one (`_mine`: copy on write); a Region changed by hand, not by a method of
        its table (an Allocator's `free`), must belong to a table that was not cloned since it was added."""
        t = RegionTable(self.map)
        t._source, t.born = self, self.written_at
        t.regions = self.regions.copy()
        t._own = bytearray(len(self.regions))
        self._own = bytearray(len(self.regions))
        t._unwritten = self._unwritten.copy()
        t._ws, t._we = self._ws.copy(), self._we.copy()  # a list or an int64 array
        t._seq = self._seq
        t._arrays = self._arr()
        t._found, t._over = self._found, self._over  # indices into the same geometry
        t._ranked = self._ranked
        t._names = self._name_index()
        t.geometry = self.geometry
        t._shared = True
        return t

    def _changed(self) -> None:
        if getattr(self, "_shared", False):  # stop sharing the template's lookups before changing
            self._found, self._over, self._ranked, self._shared = {}, {}, {}, False
        self._arrays = None
        self._names = None
        self.geometry = object()
        self._ranked.clear()
        self._gone_live = {}
        self._found.clear()
        self._over.clear()

    def remove(self, region: Region) -> None:
        keep = [k for k, r in enumerate(self.regions) if r is not region]
        self.regions = [self.regions[k] for k in keep]
        self._own = bytearray(self._own[k] for k in keep)
        self._unwritten = {i for i, r in enumerate(self.regions) if r.state == "unwritten"}
        self._changed()

    def free(self, region: Region) -> None:
        i = next((k for k, r in enumerate(self.regions) if r is region), None)
        (self._mine(i) if i is not None else region).state = "freed"

    def _mine(self, i: int) -> Region:
        """Region i, copied first when it is shared with a clone (copy on write)."""
        if self._own[i]:
            return self.regions[i]
        r = self.regions[i] = _copy(self.regions[i])
        self._own[i] = 1
        return r

    def named(self, name: str, owner: str | None = None) -> Region:
        """The newest region called `name` (owned by `owner`, when given: contexts reuse names)."""
        regions = self.regions
        for i in reversed(self._name_index().get(name, ())):
            r = regions[i]
            if owner is None or r.owner == owner:
                return r
        raise UsageError(f"no region named {name!r}" + (f" in context {owner!r}" if owner else ""))

    def _name_index(self) -> dict:
        """{name: indices of the regions of that name} (geometry: clones share it)."""
        if self._names is None:
            self._names = {}
            for i, r in enumerate(self.regions):
                self._names.setdefault(r.name, []).append(i)
        return self._names

    # ------------------------------------------------------------ lookup
    def _arr(self):
        if self._arrays is None:
            self._arrays = (np.array([r.start for r in self.regions], dtype=np.int64),
                            np.array([r.end for r in self.regions], dtype=np.int64))
        return self._arrays

    def find_all(self, addr: int) -> list[Region]:
        """Every region holding addr (table order)."""
        holding = self._found.get(addr)
        if holding is None:  # geometry only: states may change, the regions holding addr do not
            if len(self._found) > 1 << 16:
                self._found.clear()
            starts, ends = self._arr()
            holding = self._found[addr] = np.flatnonzero((starts <= addr) & (addr < ends)).tolist()
        regions = self.regions
        return [regions[i] for i in holding]

    def find(self, addr: int, include_guard: bool = True) -> Region | None:
        """The region holding addr: non-freed before freed, then the smallest, then the newest
        (the regions holding addr are ranked by kind, size and age once; the states pick)."""
        key = (addr, include_guard)
        ranked = self._ranked.get(key)
        regions = self.regions
        if ranked is None:
            self.find_all(addr)
            idx = [i for i in self._found[addr] if include_guard or regions[i].kind != "guard"]
            idx.sort(key=lambda i: (regions[i].kind == "guard", regions[i].size, -regions[i].seq))
            if len(self._ranked) > 1 << 16:
                self._ranked.clear()
            ranked = self._ranked[key] = idx
        for i in ranked:
            if regions[i].state != "freed":
                return regions[i]
        return regions[ranked[0]] if ranked else None

    def provenance_candidates(self, name: str | None, addr: int) -> list[int] | None:
        """Indices of the regions that `named(name)` (a name) or `find(addr, include_guard=False)` (None)
        may return, in the order they are tried (the first not freed is the one; all freed: the first);
        geometry only, valid while `geometry` is the same token. None: no region is called `name`."""
        if name is not None:
            idx = self._name_index().get(name)
            return [idx[-1]] if idx else None
        self.find(addr, include_guard=False)
        return list(self._ranked[(addr, False)])

    def find_at(self, addr: int, command: int | None, exclude: Region | None = None) -> Region | None:
        """The region holding addr as the access at `command` meets it: one live at that command
        first (buffers reusing memory overlap; the live one holds the data), then a prefetch guard,
        then `find`'s order; never `exclude`."""
        cands = [r for r in self.find_all(addr) if r is not exclude]
        if not cands:
            return None

        def rank(r):
            live_now = command is not None and r.live is not None and r.live[0] <= command <= r.live[1]
            return (r.state == "freed", not live_now, r.kind != "guard", r.size, -r.seq)

        return min(cands, key=rank)

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
        return [self.regions[i] for i in self._overlapping(lo, hi)]

    def _overlapping(self, lo: int, hi: int) -> list[int]:
        """Indices of the regions meeting [lo, hi) (kept per extent, shared with the clones)."""
        got = self._over.get((lo, hi))
        if got is None:
            if len(self._over) > 1 << 16:
                self._over.clear()
            starts, ends = self._arr()
            got = self._over[(lo, hi)] = np.flatnonzero((starts < hi) & (lo < ends)).tolist()
        return got

    # ------------------------------------------------------------ written bytes
    def mark_written(self, pattern: AccessPattern) -> None:
        """Record that the pattern's bytes were written; touched regions become live."""
        if pattern.nbytes == 0:
            return
        self.mark_covered(pm.covered(pattern), pattern.extent())

    def mark_covered(self, covered, extent) -> None:
        """`mark_written` of a non-empty pattern given its `pattern_math.covered` intervals and extent."""
        cs, ce = covered
        if cs.size == 1:
            self._insert(int(cs[0]), int(ce[0]))
        else:
            self._union(cs, ce)
        self._live(*extent)

    def _live(self, lo: int, hi: int) -> None:
        """Regions meeting [lo, hi) that were unwritten become live. A region never returns to
        "unwritten", so once an extent was marked, marking it again changes nothing (memory reuse
        makes hundreds of buffers meet one extent: they are not visited again)."""
        key = (lo, hi)
        if key in self._gone_live:
            return
        regions = self.regions
        maybe = self._unwritten.intersection(self._overlapping(lo, hi))  # a region never returns to "unwritten"
        for i in maybe:
            if regions[i].state == "unwritten":
                self._mine(i).state = "live"
        self._unwritten -= maybe
        if len(self._gone_live) > 1 << 16:
            self._gone_live.clear()
        self._gone_live[key] = True

    def mark_intervals(self, cs, ce, cs_list: list, ce_list: list, extents) -> None:
        """Record bytes as written: the sorted disjoint intervals (cs, ce) (int64 arrays, and the same
        as lists), merged where they meet or touch; the regions meeting each [lo, hi) of `extents` go
        live. (`mark_written` of several patterns: their intervals' union, their extents.)"""
        if len(cs_list) == 1:
            self._insert(cs_list[0], ce_list[0])
        else:
            i = _left(self._we, cs_list[0])  # first interval ending at or after the first new start
            j = _right(self._ws, ce_list[-1])  # intervals starting at or before the last new end
            if i < j:
                if j - i <= SMALL_WINDOW and isinstance(self._ws, list):
                    self._merge_window(i, j, cs_list, ce_list)
                else:
                    self._union(cs, ce)
            else:  # none of the written intervals meets or touches them: spliced in as they are
                if isinstance(self._ws, list) and len(self._ws) + len(cs_list) > LIST_INTERVALS:
                    self._ws, self._we = np.asarray(self._ws, dtype=np.int64), np.asarray(self._we, dtype=np.int64)
                self._splice(i, i, cs_list, ce_list)
        gone = self._gone_live
        for ext in extents:
            if ext not in gone:  # `_live`'s test, inline: extents marked before change nothing
                self._live(*ext)

    def _insert(self, a: int, b: int) -> None:
        """Add [a, b) to the written intervals (merging the ones it meets or touches)."""
        ws, we = self._ws, self._we
        if ws.__class__ is list:  # `_splice` of the list form, inline
            self.written_at = object()
            i = bisect.bisect_left(we, a)
            j = bisect.bisect_right(ws, b)
            if i < j:
                a, b = min(a, ws[i]), max(b, we[j - 1])
            ws[i:j] = (a,)
            we[i:j] = (b,)
            return
        i = _left(we, a)  # first interval ending at or after a
        j = _right(ws, b)  # intervals starting at or before b
        if i < j:
            a, b = min(a, int(ws[i])), max(b, int(we[j - 1]))
        self._splice(i, j, [a], [b])

    def _splice(self, i: int, j: int, s: list, e: list) -> None:
        """Replace intervals [i, j) by (s, e): lists while small (bisection on lists is fastest),
        int64 arrays once there are many (a write whose runs leave gaps adds one per run)."""
        self.written_at = object()
        if isinstance(self._ws, list):
            self._ws[i:j] = s
            self._we[i:j] = e
        else:
            self._ws = np.concatenate((self._ws[:i], np.array(s, dtype=np.int64), self._ws[j:]))
            self._we = np.concatenate((self._we[:i], np.array(e, dtype=np.int64), self._we[j:]))

    def _merge_window(self, i: int, j: int, cs_list: list, ce_list: list) -> None:
        """`_union` of the sorted disjoint intervals (cs_list, ce_list) when the written intervals they
        meet or touch are the few of the window [i, j) of the list form: each of those is added to a
        copy of the new ones (`pattern_math.add_interval`), and the result replaces the window."""
        s, e = cs_list.copy(), ce_list.copy()
        ws, we = self._ws, self._we
        for k in range(i, j):
            pm.add_interval(s, e, ws[k], we[k])
        if len(ws) - (j - i) + len(s) > LIST_INTERVALS:
            self._ws, self._we = np.asarray(ws, dtype=np.int64), np.asarray(we, dtype=np.int64)
        self._splice(i, j, s, e)

    def _union(self, cs, ce) -> None:
        """Add the sorted disjoint intervals (cs, ce), merged with the written intervals they meet or
        touch only (the window [i, j)); the rest is spliced back unchanged."""
        i = _left(self._we, int(cs[0]))  # first interval ending at or after the first new start
        j = _right(self._ws, int(ce[-1]))  # intervals starting at or before the last new end
        s, e = pm.merge_intervals(np.concatenate((np.asarray(self._ws[i:j], dtype=np.int64), cs)),
                                  np.concatenate((np.asarray(self._we[i:j], dtype=np.int64), ce)))
        if isinstance(self._ws, list) and len(self._ws) - (j - i) + s.size > LIST_INTERVALS:
            self._ws, self._we = np.asarray(self._ws, dtype=np.int64), np.asarray(self._we, dtype=np.int64)
        self._splice(i, j, s.tolist(), e.tolist())

    def mark_range_written(self, start: int, size: int) -> None:
        if size > 0:
            self._insert(start, start + size)
            self._live(start, start + size)

    def clear_written(self, start: int, size: int) -> None:
        """Forget writes of [start, start+size) (a fresh allocation starts unwritten)."""
        if size <= 0:
            return
        self.cleared = True
        a, b = start, start + size
        ws, we = self._ws, self._we
        i = _right(we, a)  # first interval ending after a
        j = _left(ws, b)  # intervals starting before b
        if i >= j:
            return
        keep_s, keep_e = [], []
        if ws[i] < a:
            keep_s.append(int(ws[i]))
            keep_e.append(a)
        if we[j - 1] > b:
            keep_s.append(b)
            keep_e.append(int(we[j - 1]))
        self._splice(i, j, keep_s, keep_e)

    def written(self) -> tuple[np.ndarray, np.ndarray]:
        """The written bytes as sorted disjoint (starts, ends) arrays."""
        return np.array(self._ws, dtype=np.int64), np.array(self._we, dtype=np.int64)

    def is_written(self, lo: int, hi: int) -> bool:
        """Every byte of [lo, hi) was written."""
        if hi <= lo:
            return True
        ws = self._ws
        if ws.__class__ is list:
            i = bisect.bisect_right(ws, lo) - 1
            return i >= 0 and self._we[i] >= hi
        i = _right(ws, lo) - 1
        return i >= 0 and int(self._we[i]) >= hi

    def written_when_cloned(self, lo: int, hi: int):
        """`born` when every byte of [lo, hi) was written in the state this clone started from (asked of its
        source, unchanged since), else None. While `born` is that token and nothing was `cleared`, the bytes
        are still written (the written set only grows)."""
        src = self._source
        if src is not None and src.written_at is self.born and src.is_written(lo, hi):
            return self.born
        return None

    def unwritten(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """The never-written bytes of [lo, hi) as sorted disjoint (starts, ends) arrays."""
        i = _right(self._we, lo)  # intervals ending after lo
        j = _left(self._ws, hi)  # intervals starting before hi
        return pm.complement(np.array(self._ws[i:j], dtype=np.int64), np.array(self._we[i:j], dtype=np.int64), lo, hi)
