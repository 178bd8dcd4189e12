"""Runtime memory API: allocator with quarantine, contexts with pool partitions, monitor.

`alloc` is first-fit inside the caller's partition (the whole pool without a context).
`pad` over-allocates: the extra bytes after the buffer become a `guard` region, so a
runtime that under-sized a buffer can be told apart from a compiler that overran it.
Freed regions are quarantined (kept `freed` in the region table, bytes not reused) until
the quarantine exceeds `quarantine_bytes` or an allocation would otherwise fail; then the
oldest are released (FIFO) and their bytes become reusable.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import UsageError
from ..faults import Fault, Relation
from .addrmap import AddressMap
from .regions import Region, RegionTable


class OutOfMemoryError(UsageError):
    """No free range of the requested size/alignment in the pool or partition."""


@dataclass(frozen=True)
class Context:
    """A process sharing the NPU; `partitions[pool] = (offset from that pool's base, size)`."""

    name: str
    partitions: dict = field(default_factory=dict)


@dataclass(eq=False)
class _Block:
    start: int
    end: int
    region: Region
    guard: Region | None
    context: str | None


class Allocator:
    def __init__(self, address_map: AddressMap, regions: RegionTable | None = None,
                 quarantine_bytes: int = 1 << 20):
        self.map = address_map
        self.regions = regions if regions is not None else RegionTable(address_map)
        self.quarantine_bytes = quarantine_bytes
        self.contexts: dict[str, Context] = {}
        self.partitions: dict[tuple[str, str], tuple[int, int]] = {}  # (ctx, map pool) -> [lo, hi)
        self.faults: list[Fault] = []
        self._blocks: list[_Block] = []  # live + quarantined, any order
        self._quarantine: list[_Block] = []
        self._closed: set[str] = set()
        self.live_bytes = 0
        self.peak_bytes = 0
        self.leaked_bytes = 0
        self.events = 0

    # ------------------------------------------------------------ contexts
    def add_context(self, ctx: Context) -> list[Fault]:
        """Register a context; returns (and records) pool-overlap faults with earlier contexts."""
        if ctx.name in self.contexts:
            raise UsageError(f"context {ctx.name!r} already exists")
        new = []
        for pname, (off, size) in sorted(ctx.partitions.items()):
            pool = self.map.pool(pname)
            lo = self.map.base_of(pname) + off
            hi = lo + size
            if off < 0 or size <= 0 or lo < pool.base or hi > pool.end:
                raise UsageError(f"context {ctx.name!r}: partition {pname}+{off:#x} size {size:#x} "
                                 f"is not inside pool {pool.name}")
            for (other, opool), (olo, ohi) in sorted(self.partitions.items()):
                if opool == pool.name and lo < ohi and olo < hi:
                    first = max(lo, olo)
                    new.append(Fault(
                        "pool-overlap", None, first, min(hi, ohi) - first, "RUNTIME", None, None, "",
                        None, Relation("inside", first - lo),
                        f"partitions of one pool must be disjoint: '{ctx.name}' [{lo:#x}, {hi:#x}) "
                        f"overlaps '{other}' [{olo:#x}, {ohi:#x}) in {pool.name}",
                        f"contexts '{ctx.name}' and '{other}' share {min(hi, ohi) - first} bytes of {pool.name}",
                        context=ctx.name, details={"other_context": other, "pool": pool.name}))
            self.partitions[(ctx.name, pool.name)] = (lo, hi)
        self.contexts[ctx.name] = ctx
        self.faults.extend(new)
        return new

    def close_context(self, name: str) -> list[Region]:
        """End a context: its still-live allocations are leaks (returned, counted in leaked_bytes)."""
        leaks = [b.region for b in self._blocks if b.context == name and b.region.state != "freed"]
        self.leaked_bytes += sum(r.size for r in leaks)
        self._closed.add(name)
        return leaks

    def leaks(self) -> list[Region]:
        """Allocations still live (not freed), in allocation order."""
        return sorted((b.region for b in self._blocks if b.region.state != "freed"), key=lambda r: r.seq)

    # ------------------------------------------------------------ alloc / free
    def _range(self, pool_name: str, context: str | None) -> tuple[int, int]:
        pool = self.map.pool(pool_name)
        if context is None:
            return pool.base, pool.end
        if context not in self.contexts:
            raise UsageError(f"unknown context {context!r}")
        try:
            return self.partitions[(context, pool.name)]
        except KeyError:
            raise UsageError(f"context {context!r} has no partition in pool {pool.name}") from None

    def _fit(self, lo: int, hi: int, size: int, align: int) -> int | None:
        busy = sorted((b.start, b.end) for b in self._blocks if b.start < hi and lo < b.end)
        cur = lo
        for s, e in busy + [(hi, hi)]:
            a = -(-cur // align) * align
            if a + size <= min(s, hi):
                return a
            cur = max(cur, e)
        return None

    def alloc(self, pool: str, size: int, align: int = 8, pad: int = 0, name: str = "",
              kind: str = "scratch", context: str | None = None, producer: str = "") -> Region:
        if size <= 0 or pad < 0 or align <= 0 or align & (align - 1):
            raise UsageError(f"alloc {name!r}: size must be > 0, pad >= 0, align a power of two "
                             f"(got size={size}, pad={pad}, align={align})")
        lo, hi = self._range(pool, context)
        start = self._fit(lo, hi, size + pad, align)
        while start is None and self._quarantine:
            self._release(self._quarantine.pop(0))
            start = self._fit(lo, hi, size + pad, align)
        if start is None:
            raise OutOfMemoryError(f"alloc {name!r}: no free {size + pad} bytes aligned to {align} "
                                   f"in {self.map.pool(pool).name}" + (f" for context {context!r}" if context else ""))
        self.events += 1
        name = name or f"alloc{self.events}"
        self.regions.clear_written(start, size + pad)
        r = self.regions.add(name, kind, start, size, owner=context, producer=producer)
        g = self.regions.add(f"{name}.pad", "guard", start + size, pad, owner=context,
                             origin=f"padding of runtime allocation '{name}'") if pad else None
        self._blocks.append(_Block(start, start + size + pad, r, g, context))
        self.live_bytes += size
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        return r

    def free(self, region: Region) -> None:
        blk = next((b for b in self._blocks if b.region is region), None)
        if blk is None:
            raise UsageError(f"free: {region.name!r} was not allocated by this allocator")
        if region.state == "freed":
            raise UsageError(f"free: {region.name!r} is already freed (double free)")
        self.events += 1
        region.state = "freed"
        if blk.guard is not None:
            blk.guard.state = "freed"
        self.live_bytes -= region.size
        self._quarantine.append(blk)
        while self._quarantine and self.quarantined_bytes > self.quarantine_bytes:
            self._release(self._quarantine.pop(0))

    def _release(self, blk: _Block) -> None:
        self._blocks.remove(blk)
        self.regions.remove(blk.region)
        if blk.guard is not None:
            self.regions.remove(blk.guard)

    @property
    def quarantined_bytes(self) -> int:
        return sum(b.end - b.start for b in self._quarantine)

    def flush_quarantine(self) -> None:
        while self._quarantine:
            self._release(self._quarantine.pop(0))

    def live_by(self) -> tuple[dict, dict]:
        pools: dict[str, int] = {}
        ctxs: dict[str, int] = {}
        for b in self._blocks:
            if b.region.state != "freed":
                pools[b.region.pool] = pools.get(b.region.pool, 0) + b.region.size
                key = b.context or "-"
                ctxs[key] = ctxs.get(key, 0) + b.region.size
        return dict(sorted(pools.items())), dict(sorted(ctxs.items()))


class Monitor:
    """Samples an allocator like a board's `npu_monitor --interval 1`; `history` keeps samples."""

    def __init__(self, allocator: Allocator):
        self.allocator = allocator
        self.history: list[dict] = []

    def sample(self, time: float | None = None) -> dict:
        a = self.allocator
        pools, ctxs = a.live_by()
        s = {"time": len(self.history) if time is None else time, "events": a.events,
             "live_bytes": a.live_bytes, "peak_bytes": a.peak_bytes, "leaked_bytes": a.leaked_bytes,
             "quarantined_bytes": a.quarantined_bytes,
             "live_regions": sum(1 for b in a._blocks if b.region.state != "freed"),
             "pools": pools, "contexts": ctxs}
        self.history.append(s)
        return s
