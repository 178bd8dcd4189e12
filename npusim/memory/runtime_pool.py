"""The runtime library's memory pool over time: a board-like allocator with its own bookkeeping.

    pool = RuntimePool("npuRAM3", lo, hi)
    a = pool.alloc(4096, align=32, pad=64, name="out:det16", owner="a", kind="output")   # None if full
    addr = pool.map(a)                # the NPU-visible address (a live handle only)
    pool.free(a)

The pool keeps a free list of disjoint extents sorted by address (first-fit or best-fit; freed
blocks coalesce with their neighbours), so fragmentation, the high-water mark and exhaustion come
out of the allocation history, not out of a formula. A block is `size + pad` bytes rounded up to
the pool's `granule`; alignment waste in front of it stays free (a fragment).

`short_free` plants the runtime bug "a free that returns the wrong size": every free gives that
many bytes fewer back to the free list, so they are neither free nor held by a live block (`lost`).
"In use" is what a board's pool monitor shows: capacity minus free bytes (live blocks + lost bytes).

This is bookkeeping only: the sanitizer's view of the same bytes (regions, owners, states) is the
RegionTable, kept in step by the caller (`npusim.processes`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from ..errors import UsageError

FITS = ("first-fit", "best-fit")


@dataclass(eq=False)
class Allocation:
    """A live (or freed) block: `addr` is the aligned start, `block` the bytes the pool took."""

    handle: int
    addr: int
    size: int  # bytes asked for
    pad: int  # padding asked for after them
    block: int  # size + pad rounded up to the granule
    name: str
    owner: str | None
    kind: str
    live: bool = True

    @property
    def end(self) -> int:
        return self.addr + self.block


@dataclass(frozen=True)
class PoolStats:
    name: str
    capacity: int
    in_use: int  # capacity - free: live blocks + bytes lost by wrong-size frees
    live: int  # bytes of live blocks
    lost: int
    free: int
    largest_free: int
    extents: int  # free-list length
    fragmentation: float  # 1 - largest free extent / free bytes (0: one free extent or none free)
    high_water: int  # most bytes in use at any time
    high_end: int  # highest byte ever used, from the pool's start (its "high-water address")
    allocs: int
    frees: int
    failed: int  # allocations the pool could not serve

    def to_json(self) -> dict:
        return dict(self.__dict__)


class RuntimePool:
    """Allocator over the absolute byte range [lo, hi) (a pool, a merged stretch, or a partition)."""

    def __init__(self, name: str, lo: int, hi: int, granule: int = 8, fit: str = "first-fit",
                 short_free: int = 0):
        if hi <= lo:
            raise UsageError(f"runtime pool {name!r}: empty range [{lo:#x}, {hi:#x})")
        if granule <= 0 or granule & (granule - 1):
            raise UsageError(f"runtime pool {name!r}: granule {granule} is not a power of two")
        if fit not in FITS:
            raise UsageError(f"runtime pool {name!r}: fit {fit!r} is not one of {', '.join(FITS)}")
        if short_free < 0:
            raise UsageError(f"runtime pool {name!r}: short_free must be >= 0, got {short_free}")
        self.name, self.lo, self.hi = name, lo, hi
        self.granule, self.fit, self.short_free = granule, fit, short_free
        self._starts = [lo]  # free extents [starts[i], ends[i]), sorted, disjoint, never adjacent
        self._ends = [hi]
        self._live: dict[int, Allocation] = {}
        self._next = 0
        self.live_bytes = 0
        self.lost_bytes = 0
        self.held: dict[str | None, int] = {}  # owner -> live + lost bytes
        self.high_water = 0
        self.high_end = 0
        self.allocs = self.frees = self.failed = 0

    @property
    def capacity(self) -> int:
        return self.hi - self.lo

    @property
    def free_bytes(self) -> int:
        return self.capacity - self.live_bytes - self.lost_bytes

    @property
    def in_use(self) -> int:
        return self.live_bytes + self.lost_bytes

    # ------------------------------------------------------------ board API
    def alloc(self, size: int, align: int = 8, pad: int = 0, name: str = "", owner: str | None = None,
              kind: str = "scratch") -> Allocation | None:
        """A block of `size + pad` bytes starting on `align`, or None when no free extent fits."""
        if size <= 0 or pad < 0 or align <= 0 or align & (align - 1):
            raise UsageError(f"alloc {name!r}: size must be > 0, pad >= 0, align a power of two "
                             f"(got size={size}, pad={pad}, align={align})")
        block = -(-(size + pad) // self.granule) * self.granule
        i, at = self._find(block, align)
        if i is None:
            self.failed += 1
            return None
        s, e = self._starts[i], self._ends[i]
        pieces = [(s, at), (at + block, e)]
        del self._starts[i], self._ends[i]
        for k, (a, b) in enumerate(p for p in pieces if p[0] < p[1]):
            self._starts.insert(i + k, a)
            self._ends.insert(i + k, b)
        self._next += 1
        a = Allocation(self._next, at, size, pad, block, name or f"alloc{self._next}", owner, kind)
        self._live[a.handle] = a
        self.allocs += 1
        self.live_bytes += block
        self.held[owner] = self.held.get(owner, 0) + block
        self.high_water = max(self.high_water, self.in_use)
        self.high_end = max(self.high_end, at + block - self.lo)
        return a

    def map(self, a: Allocation) -> int:
        """The NPU-visible address of a live block (the board's mem_map of a handle)."""
        if self._live.get(a.handle) is not a:
            raise UsageError(f"map: {a.name!r} is not a live block of pool {self.name}")
        return a.addr

    def free(self, a: Allocation) -> None:
        """Give the block back (`short_free` bytes fewer, when that bug is planted)."""
        if self._live.get(a.handle) is not a:
            raise UsageError(f"free: {a.name!r} is not a live block of pool {self.name} (double free?)")
        del self._live[a.handle]
        a.live = False
        self.frees += 1
        short = min(self.short_free, a.block)
        self.live_bytes -= a.block
        self.lost_bytes += short
        self.held[a.owner] -= a.block - short
        if a.addr + short < a.end:
            self._insert(a.addr + short, a.end)

    # ------------------------------------------------------------ bookkeeping
    def _find(self, block: int, align: int):
        best = None
        for i, (s, e) in enumerate(zip(self._starts, self._ends)):
            at = -(-s // align) * align
            if at + block > e:
                continue
            if self.fit == "first-fit":
                return i, at
            if best is None or e - s < best[2]:
                best = (i, at, e - s)
        return (best[0], best[1]) if best else (None, None)

    def _insert(self, a: int, b: int) -> None:
        i = bisect.bisect_left(self._starts, a)
        if i > 0 and self._ends[i - 1] == a:  # joins the extent before
            i -= 1
            a = self._starts[i]
            del self._starts[i], self._ends[i]
        if i < len(self._starts) and self._starts[i] == b:  # joins the extent after
            b = self._ends[i]
            del self._starts[i], self._ends[i]
        self._starts.insert(i, a)
        self._ends.insert(i, b)

    def live(self) -> list[Allocation]:
        """Live blocks in allocation order."""
        return sorted(self._live.values(), key=lambda a: a.handle)

    def extents(self) -> list[tuple[int, int]]:
        return list(zip(self._starts, self._ends))

    def stats(self) -> PoolStats:
        free = self.free_bytes
        largest = max((e - s for s, e in zip(self._starts, self._ends)), default=0)
        return PoolStats(self.name, self.capacity, self.in_use, self.live_bytes, self.lost_bytes, free, largest,
                         len(self._starts), 1.0 - largest / free if free else 0.0, self.high_water,
                         self.high_end, self.allocs, self.frees, self.failed)
