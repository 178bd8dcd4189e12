"""Address map (pools, permissions, optional merged virtual pools) and the pools' bytes.

Everything outside the pools of the profile is unmapped. `Memory.read`/`write` accept a range
spanning adjacent pools (one mapped segment), as a buffer may span npuRAM3..6. Adjacent pools may be merged
into one contiguous virtual pool (as vendor tools allow for npuRAM3..6):
`AddressMap(profile, merge=[("npuRAM", ["npuRAM3", "npuRAM4", "npuRAM5", "npuRAM6"])])`.
"""

from __future__ import annotations

import bisect
import dataclasses

import numpy as np

from ..errors import UsageError
from ..hw.profile import HardwareProfile, Pool


class AddressError(UsageError):
    """A host-side memory helper was given an address range outside the pools."""


_SAME = ("width", "clock_ratio", "perms", "cacheable", "banks", "interleave", "xor_hash")


def _merge_pools(name: str, members: list[Pool]) -> Pool:
    members = sorted(members, key=lambda p: p.base)
    for a, b in zip(members, members[1:]):
        if a.end != b.base:
            raise UsageError(f"merge {name!r}: pools {a.name} and {b.name} are not adjacent")
        for key in _SAME:
            if getattr(a, key) != getattr(b, key):
                raise UsageError(f"merge {name!r}: pools {a.name} and {b.name} differ in {key}")
    return dataclasses.replace(members[0], name=name, size=members[-1].end - members[0].base)


class AddressMap:
    """Pools as the NPU sees them; `pools` are sorted by base address."""

    def __init__(self, profile: HardwareProfile, merge=()):
        self.profile = profile
        self.members: dict[str, str] = {}  # profile pool name -> virtual pool name
        by_name = {p.name: p for p in profile.pools}
        pools = dict(by_name)
        for vname, names in merge:
            if vname in pools and vname not in names:
                raise UsageError(f"merge {vname!r}: name already used by a pool")
            group = []
            for n in names:
                if n not in by_name:
                    raise UsageError(f"merge {vname!r}: no pool {n!r} in profile {profile.name!r}")
                if n in self.members:
                    raise UsageError(f"merge {vname!r}: pool {n!r} is already merged")
                group.append(pools.pop(n))
                self.members[n] = vname
            pools[vname] = _merge_pools(vname, group)
        self.pools: tuple[Pool, ...] = tuple(sorted(pools.values(), key=lambda p: p.base))
        self._by_name = {p.name: p for p in self.pools}
        self.bases = np.array([p.base for p in self.pools], dtype=np.int64)
        self.ends = np.array([p.end for p in self.pools], dtype=np.int64)
        # mapped segments: runs of adjacent pools coalesced (a byte is mapped iff inside one)
        segs: list[list[int]] = []
        for p in self.pools:
            if segs and segs[-1][1] == p.base:
                segs[-1][1] = p.end
            else:
                segs.append([p.base, p.end])
        self.seg_starts = np.array([s[0] for s in segs], dtype=np.int64)
        self.seg_ends = np.array([s[1] for s in segs], dtype=np.int64)
        # the same as Python lists: scalar lookups by bisection (numpy's per-call cost is ~10x)
        self._bases = [p.base for p in self.pools]
        self.segment_starts = [s[0] for s in segs]
        self.segment_ends = [s[1] for s in segs]

    def pool(self, name: str) -> Pool:
        """A pool of the map by name; a merged member's name gives its virtual pool."""
        name = self.members.get(name, name)
        try:
            return self._by_name[name]
        except KeyError:
            raise UsageError(f"no pool {name!r} in the address map "
                             f"(known: {', '.join(self._by_name)})") from None

    def base_of(self, name: str) -> int:
        """Base address of a pool name as the profile (or the map) knows it."""
        if name in self._by_name:
            return self._by_name[name].base
        return self.profile.pool_named(name).base

    def pool_of(self, addr: int) -> Pool | None:
        i = bisect.bisect_right(self._bases, addr) - 1
        if i >= 0 and addr < self.pools[i].end:
            return self.pools[i]
        return None

    def is_mapped(self, addr: int, size: int = 1) -> bool:
        i = bisect.bisect_right(self.segment_starts, addr) - 1
        return i >= 0 and addr + size <= self.segment_ends[i]

    def __repr__(self) -> str:
        return "AddressMap(" + ", ".join(f"{p.name}@{p.base:#x}+{p.size:#x}" for p in self.pools) + ")"


class Memory:
    """The pools' bytes: one np.uint8 array per pool of the map, created (zeroed) on first use.

    `map_constant(addr, data)` places bytes without copying them: they are copied into the pool's
    array only when something reads or writes the range they cover (a timing-only run, which moves
    no values, never copies its weights). Pending constants never overlap (a constant overlapping one
    is copied at once, in order); `constant_view` reads one of a read-only pool without a copy."""

    def __init__(self, profile_or_map):
        self.map = profile_or_map if isinstance(profile_or_map, AddressMap) else AddressMap(profile_or_map)
        self._arrays: dict[str, np.ndarray] = {}
        self._lazy: dict[str, list] = {}  # pool -> [(offset, bytes)] mapped, not yet copied
        self._lazy_end: dict[str, int] = {}  # pool -> end of the mapped constants seen so far
        self._lazy_index: dict[str, tuple] = {}  # pool -> (pending list, its length, sorted offsets, entries)

    def map_constant(self, addr: int, data) -> None:
        """Place `data` at `addr` (it may span adjacent pools); copied on first access."""
        data = bytes(data)
        at = 0
        for p, off, n in self._chunks(addr, len(data)):
            if n:
                pending = self._lazy.setdefault(p.name, [])
                ascending = not pending or off >= self._lazy_end.get(p.name, 0)  # the usual order: no search
                self._lazy_end[p.name] = max(self._lazy_end.get(p.name, 0), off + n)
                if not ascending and any(o < off + n and off < o + len(d) for o, d in pending):
                    self._materialize(p)  # overlapping constants: copy in order (later ones win)
                    self._lazy[p.name].append((off, data[at:at + n] if n != len(data) else data))
                    self._materialize(p)
                else:
                    pending.append((off, data[at:at + n] if n != len(data) else data))
            at += n

    def pending(self):
        """The mapped constants not yet copied, as state `adopt` gives a fresh Memory of the same map
        ({pool: (pending entries, end)}), or None when some were copied already."""
        if self._arrays:
            return None
        return {k: (tuple(v), self._lazy_end.get(k, 0)) for k, v in self._lazy.items()}

    def adopt(self, pending) -> bool:
        """Take `pending` (of `pending()` on a memory of the same map after `map_constant` calls): the
        state those calls leave. Only on a fresh memory (else False: map them one by one)."""
        if self._arrays or self._lazy or pending is None:
            return False
        for k, (entries, end) in pending.items():
            self._lazy[k] = list(entries)
            self._lazy_end[k] = end
        return True

    def _materialize(self, p: Pool, lo: int = 0, hi: int | None = None) -> None:
        """Copy the mapped constants of pool `p` that meet offsets [lo, hi) into its array."""
        pending = self._lazy.get(p.name)
        if not pending:
            return
        hi = p.size if hi is None else hi
        a = self._arrays.get(p.name)
        if a is None:
            a = self._arrays[p.name] = np.zeros(p.size, dtype=np.uint8)
        keep = []
        for off, data in pending:
            if off < hi and lo < off + len(data):
                a[off:off + len(data)] = np.frombuffer(data, dtype=np.uint8)
            else:
                keep.append((off, data))
        self._lazy[p.name] = keep

    def constant_view(self, addr: int, size: int) -> np.ndarray | None:
        """A read-only view of [addr, addr+size) when it lies inside one mapped constant of a
        read-only pool not yet copied (such bytes never change during a run), else None."""
        p = self.map.pool_of(addr)
        if p is None or p.writable or size <= 0:
            return None
        off = addr - p.base
        pending = self._lazy.get(p.name)
        if not pending:
            return None
        idx = self._lazy_index.get(p.name)
        if idx is None or idx[0] is not pending or idx[1] != len(pending):  # (re)build on change
            entries = sorted(pending, key=lambda t: t[0])
            idx = self._lazy_index[p.name] = (pending, len(pending), [o for o, _ in entries], entries)
        i = bisect.bisect_right(idx[2], off) - 1  # pending constants never overlap: one candidate
        if i >= 0:
            o, data = idx[3][i]
            if off + size <= o + len(data):  # nor do they overlap anything copied
                return np.frombuffer(data, dtype=np.uint8, count=size, offset=off - o)
        return None

    def array(self, pool: Pool | str) -> np.ndarray:
        p = self.map.pool(pool) if isinstance(pool, str) else pool
        self._materialize(p)
        a = self._arrays.get(p.name)
        if a is None:
            a = self._arrays[p.name] = np.zeros(p.size, dtype=np.uint8)
        return a

    def existing(self, pool: Pool, lo: int = 0, hi: int | None = None) -> np.ndarray | None:
        """The pool's array if it was ever created or holds mapped constants meeting offsets
        [lo, hi) (they are copied in first); None means all zeros."""
        self._materialize(pool, lo, hi)
        return self._arrays.get(pool.name)

    def _locate(self, addr: int, size: int) -> tuple[Pool, int]:
        p = self.map.pool_of(addr)
        if p is None or size < 0 or addr + size > p.end:
            raise AddressError(f"memory range [{addr:#x}, {addr + max(size, 0):#x}) is not inside one pool")
        return p, addr - p.base

    def _chunks(self, addr: int, size: int) -> list[tuple[Pool, int, int]]:
        """[(pool, offset in pool, bytes)] covering [addr, addr+size): one run of adjacent pools."""
        if size < 0 or not self.map.is_mapped(addr, max(size, 1)):
            raise AddressError(f"memory range [{addr:#x}, {addr + max(size, 0):#x}) is not inside "
                               f"contiguous mapped memory")
        out, at, end = [], addr, addr + size
        while at < end or not out:
            p = self.map.pool_of(at)
            n = min(end, p.end) - at
            out.append((p, at - p.base, n))
            at += n
            if n == 0:
                break
        return out

    def view(self, addr: int, size: int) -> np.ndarray:
        """Writable view of `size` bytes at `addr` (must lie in one pool; see read/write for spans)."""
        got = self.view_or_none(addr, size)
        if got is None:
            self._locate(addr, size)  # raises
        return got

    def view_or_none(self, addr: int, size: int) -> np.ndarray | None:
        """`view`, or None when the range does not lie inside one pool."""
        p = self.map.pool_of(addr)
        if p is None or size < 0 or addr + size > p.end:
            return None
        return self.array(p)[addr - p.base:addr - p.base + size]

    def read(self, addr: int, size: int) -> np.ndarray:
        """A copy of `size` bytes at `addr`; the range may span adjacent pools."""
        parts = []
        for p, off, n in self._chunks(addr, size):
            a = self.existing(p, off, off + n)
            parts.append(np.zeros(n, np.uint8) if a is None else a[off:off + n].copy())
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def write(self, addr: int, data) -> None:
        """Store bytes at `addr`; the range may span adjacent pools."""
        buf = np.frombuffer(bytes(data), dtype=np.uint8) if isinstance(data, (bytes, bytearray, memoryview)) \
            else np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        at = 0
        for p, off, n in self._chunks(addr, buf.size):
            self.array(p)[off:off + n] = buf[at:at + n]
            at += n
