"""Access checking: the first bad byte of a pattern, in access order, as a `Fault`.

Per byte, checks run in this order (the first failing one names the fault):
  1. out-of-pool        byte outside every pool (hardware bus error)
  2. write-to-readonly  write to a read-only pool (hardware)
  2b. cross-context-access  byte of another context's partition (none of the checking context's own),
     when the Checker knows the partitions (`partitions=`, as `Allocator.partitions`)
  3. buffer-overflow / buffer-underflow   byte outside the provenance region
     (the region holding the pattern's base, or the one named), after its end / before its start
  4. use-after-free     byte of a freed (quarantined) region
  5. uninitialized-read read of a byte never written
  6. cross-context-access  byte of a region owned by another context: the provenance region, or any
     live (non-freed, non-guard) region of another context the access touches (two processes handed
     the same bytes by a misconfigured pool), naming both contexts
Each class is a set of byte intervals (unmapped gaps, read-only pools, the outside of the
provenance region, its never-written gaps, ...); `pattern_math.first_enter_any` finds the first run
(stream order) entering each set and the first byte of it in closed form, and the first run over all
classes wins (lowest address, then the order above). The pattern's extent decides most classes
before any search: nothing is enumerated per byte, and per run only where runs leave gaps in the
written-bytes set.
"""

from __future__ import annotations

import bisect
from dataclasses import replace


from ..errors import UsageError
from ..faults import PATTERN_FIELDS, Fault, Relation
from . import pattern_math as pm
from .addrmap import AddressMap
from .pattern import AccessPattern
from .regions import Region, RegionTable

BIG = pm.BIG
# rows of the per-run table; the cross-context-access of row 2 is a byte of a foreign partition
_ORDER = ("out-of-pool", "write-to-readonly", "cross-context-access", "buffer-underflow", "buffer-overflow",
          "use-after-free", "uninitialized-read", "cross-context-access")
_PART, _UNDER, _OVER, _UAF, _UNINIT, _XREG = 2, 3, 4, 5, 6, 7


def _merged(pairs):
    """Sorted disjoint (starts, ends) lists of the union of [lo, hi) pairs."""
    pairs = sorted((a, b) for a, b in pairs if a < b)
    out: list[list[int]] = []
    for a, b in pairs:
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [a for a, _ in out], [b for _, b in out]


def _within(starts, ends, lo: int, hi: int):
    """The intervals of sorted disjoint (starts, ends) that meet [lo, hi)."""
    i = bisect.bisect_right(ends, lo)
    j = bisect.bisect_left(starts, hi)
    return starts[i:j], ends[i:j]


def relation(region: Region | None, addr: int) -> Relation:
    """Where addr lies relative to region: after its end, before its start, or inside."""
    if region is None:
        return Relation("unmapped", 0)
    if addr < region.start:
        return Relation("before", region.start - addr)
    if addr >= region.end:
        return Relation("after", addr - region.end)
    return Relation("inside", addr - region.start)


def nearest_region(regions: RegionTable | None, addr: int) -> Region | None:
    return None if regions is None else regions.nearest(addr)


def _ref(r: Region | None):
    return None if r is None else r.ref()


class Checker:
    """`partitions`: {(context, pool name): (lo, hi)} absolute byte ranges (`Allocator.partitions`);
    with them, a byte of another context's partition (outside the checking context's own) is
    cross-context-access whatever region it lies in."""

    def __init__(self, address_map: AddressMap, regions: RegionTable | None = None, partitions=None):
        self.map = address_map
        self.regions = regions
        self._ro = [p for p in address_map.pools if not p.writable]
        self.partitions = {k: (int(lo), int(hi)) for k, (lo, hi) in dict(partitions or {}).items()}
        self._foreign_cache: dict[str, tuple] = {}
        self._ro_iv = _merged((p.base, p.end) for p in self._ro)

    def _foreign(self, context: str):
        """Byte ranges of other contexts' partitions minus the context's own, merged (starts, ends)."""
        got = self._foreign_cache.get(context)
        if got is None:
            own = sorted(v for (c, _), v in self.partitions.items() if c == context)
            out = []
            for (c, _), (lo, hi) in self.partitions.items():
                if c == context:
                    continue
                pieces = [(lo, hi)]
                for a, b in own:
                    pieces = [q for x, y in pieces for q in ((x, min(y, a)), (max(x, b), y)) if q[0] < q[1]]
                out += pieces
            got = self._foreign_cache[context] = _merged(out) if out else None
        return got

    def _partition_owner(self, addr: int, context: str):
        """(context, pool, lo, hi) of the foreign partition holding addr."""
        for (c, pool), (lo, hi) in sorted(self.partitions.items()):
            if c != context and lo <= addr < hi:
                return c, pool, lo, hi
        return None

    def _provenance(self, pattern: AccessPattern, provenance) -> Region | None:
        if isinstance(provenance, Region):
            return provenance
        if isinstance(provenance, str):
            return self.regions.named(provenance)
        if provenance is not None:
            raise UsageError(f"provenance must be a Region or a region name, not {provenance!r}")
        return self.regions.find(pattern.base, include_guard=False)

    def bus_clean(self, lo: int, hi: int, access: str) -> bool:
        """Every byte of [lo, hi) is mapped, and, for a write, in no read-only pool: an access within
        that extent meets neither hardware class (geometry only: callers keep the verdict)."""
        if not self.map.is_mapped(lo, hi - lo):
            return False
        return access != "write" or not len(_within(*self._ro_iv, lo, hi)[0])

    def clean(self, pattern: AccessPattern, access: str, provenance, lo: int, hi: int) -> bool:
        """True when `check(pattern, access, provenance=provenance)` (no context, every class) finds
        nothing, for an access whose extent [lo, hi) passed `bus_clean`: it lies inside its
        provenance region, which is not freed, and a read finds every byte written. False: it may
        fault, run `check`."""
        regions = self.regions
        if regions is None or not regions.regions:
            return True
        if provenance is None:
            P = regions.find(pattern.base, False)
        elif provenance.__class__ is str:
            P = regions.named(provenance)
        else:
            P = self._provenance(pattern, provenance)
        return (P is not None and P.start <= lo and hi <= P.end and P.state != "freed"
                and (access == "write" or regions.is_written(lo, hi)))

    def clean_spec(self, pattern: AccessPattern, access: str, provenance: str | None, lo: int, hi: int):
        """What `clean` of this access decides from geometry alone, for `clean_by`: (every byte clean
        whatever the state, [(region index, whether [lo, hi) lies inside it)] in the order `clean` tries the
        provenance candidates, whether a read, lo, hi, the table's `born` token when a read's bytes were
        written in the state it was cloned from (`RegionTable.written_when_cloned`) else None); None where
        `clean` itself must be asked. Valid while the region table's `geometry` token is the same."""
        regions = self.regions
        if regions is None or not regions.regions:
            return (True, (), False, lo, hi, None)
        if provenance is not None and provenance.__class__ is not str:
            return None
        cands = regions.provenance_candidates(provenance, pattern.base)
        if cands is None:
            return None
        rs = regions.regions
        read = access != "write"
        return (False, tuple((k, rs[k].start <= lo and hi <= rs[k].end) for k in cands), read, lo, hi,
                regions.written_when_cloned(lo, hi) if read else None)

    def clean_by(self, spec) -> bool:
        """`clean` of an access from its `clean_spec` and the region table's state now."""
        always, cands, read, lo, hi, born = spec
        if always:
            return True
        regions = self.regions
        rs = regions.regions
        for k, inside in cands:
            if rs[k].state != "freed":
                if not inside or not read:
                    return inside
                if born is not None and born is regions.born and not regions.cleared:
                    return True  # written when the table was cloned, and the written set only grew since
                return regions.is_written(lo, hi)
        return False

    def check(self, pattern: AccessPattern, access: str = "read", unit: str = "", epoch: int | None = None,
              command: int | None = None, layer: str = "", provenance=None,
              context: str | None = None, only: tuple[str, ...] | None = None) -> Fault | None:
        """First bad byte of `pattern` (see module docstring) as a Fault, or None.
        `only`: consider these classes alone (e.g. ("write-to-readonly",): bytes the bus refuses)."""
        if access not in ("read", "write"):
            raise UsageError(f"access must be 'read' or 'write', not {access!r}")
        if only is not None and set(only) - set(_ORDER):
            raise UsageError(f"unknown fault classes {sorted(set(only) - set(_ORDER))}")
        if pattern.nbytes == 0:
            return None
        p = pattern
        lo, hi = pm.extent(p)
        m = self.map
        hits = []  # (run, address, row)

        def allow(row: int) -> bool:
            return only is None or _ORDER[row] in only

        def enter(row: int, starts, ends) -> None:
            got = pm.first_enter_any(p, starts, ends)
            if got is not None:
                hits.append((got[0], got[1], row))

        if allow(0) and not m.is_mapped(lo, hi - lo):
            enter(0, *pm.complement(m.segment_starts, m.segment_ends, lo, hi))
        if access == "write" and allow(1):
            rs, re = _within(*self._ro_iv, lo, hi)
            if len(rs):
                enter(1, rs, re)
        if context is not None and self.partitions and allow(_PART):
            fr = self._foreign(context)
            if fr is not None:
                fs, fe = _within(*fr, lo, hi)
                if len(fs):
                    enter(_PART, fs, fe)
        P = None
        sanitize = self.regions is not None and bool(self.regions.regions) and (
            only is None or bool(set(only) & set(_ORDER[_UNDER:])))
        if sanitize:
            P = self._provenance(pattern, provenance)
            if P is None:  # a wild access: every run is outside any provenance
                near = self.regions.nearest(pattern.base)
                if near is None:
                    hits.append((0, pattern.base, _OVER))
                else:  # runs starting below the nearest region under-, the others overflow it
                    for row, a, b in ((_UNDER, -BIG, near.start - 1), (_OVER, near.start, BIG)):
                        got = pm.first_start_in(p, a, b)
                        if got is not None:
                            hits.append((got[0], got[1], row))
            else:
                if lo < P.start:
                    got = pm.first_start_in(p, -BIG, P.start - 1)
                    hits.append((got[0], got[1], _UNDER))
                if hi > P.end:
                    enter(_OVER, [P.end], [BIG])
                inside = lo < P.end and P.start < hi
                if inside and P.state == "freed":
                    enter(_UAF, [P.start], [P.end])
                if inside and context is not None and P.owner is not None and P.owner != context:
                    enter(_XREG, [P.start], [P.end])
                if inside and access == "read" and P.state != "freed" and allow(_UNINIT):
                    a, b = max(lo, P.start), min(hi, P.end)
                    if not self.regions.is_written(a, b):
                        enter(_UNINIT, *self.regions.unwritten(a, b))
            if context is not None and allow(_XREG):
                theirs = self._foreign_regions(context, lo, hi)
                if theirs:
                    enter(_XREG, *_merged((r.start, r.end) for r in theirs))
        hits = [h for h in hits if allow(h[2])]
        if not hits:
            return None
        k0 = min(h[0] for h in hits)
        addr, row, _ = min((h[1], h[2], h[0]) for h in hits if h[0] == k0)
        f = self._fault(_ORDER[row], pattern, access, k0, pm.run_start(p, k0), addr, P, unit, epoch,
                        command, layer, context, foreign=row == _PART)
        if context is not None and f.cls in ("buffer-overflow", "buffer-underflow"):
            f = self._reaches_other_context(f, p, context)
        return f

    def _foreign_regions(self, context: str, lo: int, hi: int) -> list[Region]:
        """Live (non-freed, non-guard) regions of other contexts meeting [lo, hi)."""
        return [r for r in self.regions.overlapping(lo, hi)
                if r.owner is not None and r.owner != context and r.state != "freed" and r.kind != "guard"]

    def _reaches_other_context(self, f: Fault, p: AccessPattern, context: str) -> Fault:
        """An overflow that runs on into another context's region names that region and context
        (details other_context / other_region / other_address, and the rule): the first byte, in
        stream order, of a non-freed region of another context (first such region in table order)."""
        others = [r for r in self.regions.regions
                  if r.owner is not None and r.owner != context and r.state != "freed"]
        if not others:
            return f
        lo, hi = pm.extent(p)
        near = [(r.start, r.end) for r in others if r.start < hi and lo < r.end]
        got = pm.first_enter_any(p, *_merged(near)) if near else None
        if got is None:
            return f
        x = int(got[1])
        r = next(r for r in others if r.start <= x < r.end)
        details = {**f.details, "other_context": r.owner, "other_region": r.name, "other_address": x}
        rule = f.rule + f"; the access runs on into {r.kind} region '{r.name}' of context '{r.owner}' at {x:#x}"
        return replace(f, rule=rule, details=details)

    def _fault(self, cls, pattern, access, k, run_start, addr, P, unit, epoch, command, layer, context,
               foreign: bool = False):
        regions = self.regions
        details = {"run": k, "run_index": pattern.run_index(k), "run_start": run_start,
                   "stream_offset": k * pattern.run + (addr - run_start), "pattern_bytes": pattern.nbytes}
        region = P
        if cls == "out-of-pool":
            region = nearest_region(regions, addr)
            near = min(self.map.pools, key=lambda p: min(abs(addr - p.base), abs(addr - p.end)))
            rule = (f"every byte must lie inside a pool; {addr:#x} is unmapped "
                    f"(nearest pool {near.name} [{near.base:#x}, {near.end:#x}))")
        elif cls == "write-to-readonly":
            region = (regions.find(addr) if regions else None) or nearest_region(regions, addr)
            pool = self.map.pool_of(addr)
            rule = f"pool {pool.name} is read-only (perms '{pool.perms}'); writes are bus errors"
        elif cls in ("buffer-overflow", "buffer-underflow"):
            if region is None:
                region = nearest_region(regions, addr)
                rule = "every access must start inside a known region; the base lies in none"
            else:
                rule = (f"an access must stay inside its region '{region.name}' "
                        f"[{region.start:#x}, {region.end:#x})")
            other = regions.find_at(addr, command, exclude=region) if regions else None
            if other is not None:
                how = "padding guard" if other.kind == "guard" else f"{other.kind} region"
                rule += f"; the byte lies in {how} '{other.name}'" + \
                    (f" of context '{other.owner}'" if other.owner else "")
                details["hit_region"] = other.name
        elif cls == "use-after-free":
            rule = f"region '{region.name}' was freed (quarantined); no access after free"
        elif cls == "uninitialized-read":
            rule = f"bytes must be written before they are read; {addr:#x} of '{region.name}' never was"
        elif foreign:
            other, pool, lo, hi = self._partition_owner(addr, context)
            region = (regions.find(addr) if regions else None) or nearest_region(regions, addr)
            rule = (f"{addr:#x} lies in the {pool} partition [{lo:#x}, {hi:#x}) of context '{other}', "
                    f"not in one of context '{context}'")
            if region is not None and region.contains(addr) and region.owner == other:
                rule += f"; region '{region.name}' belongs to context '{other}', not to '{context}'"
            details.update(other_context=other, other_partition=pool)
        else:
            theirs = self._foreign_regions(context, addr, addr + 1)
            if region is not None and region.owner not in (None, context):
                theirs = [region]
            other = min(theirs, key=lambda r: (r.size, -r.seq)) if theirs else region
            if other is not region:
                rule = (f"{addr:#x} lies in {other.kind} region '{other.name}' of context '{other.owner}' "
                        f"[{other.start:#x}, {other.end:#x}), allocated to it while '{context}' uses the same bytes")
                if region is not None:
                    rule += f" for its region '{region.name}'"
                    details["own_region"] = region.name
                region = other
            else:
                rule = f"region '{region.name}' belongs to context '{region.owner}', not to '{context}'"
            details["other_context"] = region.owner
            details["other_region"] = region.name
        rel = relation(region, addr)
        message = (f"{access} of run {k} ({pattern.run} bytes at {run_start:#x}) by {unit or '?'}"
                   f" reaches {addr:#x}")
        return Fault(cls, access, addr, pattern.run, unit, epoch, command, layer, _ref(region), rel,
                     rule, message, context=context, details=details,
                     pattern=tuple(int(getattr(pattern, k)) for k in PATTERN_FIELDS))


def check_alignment(value: int, required: int, field: str, unit: str = "", epoch: int | None = None,
                    command: int | None = None, layer: str = "", regions: RegionTable | None = None,
                    is_address: bool = True, access: str | None = None) -> Fault | None:
    """misaligned-access Fault if `value` (a strict descriptor field) is not a multiple of `required`."""
    if required <= 0:
        raise UsageError(f"check_alignment: required alignment must be positive, got {required}")
    residue = value % required
    if residue == 0:
        return None
    region = nearest_region(regions, value) if is_address else None
    return Fault("misaligned-access", access, value if is_address else None, 0, unit, epoch, command,
                 layer, _ref(region), relation(region, value) if is_address else Relation("unmapped", 0),
                 f"field '{field}': required alignment {required}, actual residue {residue}",
                 f"{field}={value:#x} is not a multiple of {required}",
                 details={"field": field, "value": value, "required": required, "residue": residue})


def bad_descriptor(reason: str, unit: str = "", epoch: int | None = None, command: int | None = None,
                   layer: str = "", field: str | None = None, value=None, rule: str = "") -> Fault:
    """A descriptor the hardware refuses (bad layout, unknown enum, impossible geometry...)."""
    details = {} if field is None else {"field": field, "value": value}
    return Fault("bad-descriptor", None, None, 0, unit, epoch, command, layer, None,
                 Relation("unmapped", 0), rule or reason, reason, details=details)


def write_write_races(writes, epoch: int | None = None, command: int | None = None, layer: str = "",
                      regions: RegionTable | None = None) -> list[Fault]:
    """Faults for each pair of units of one epoch whose write patterns share bytes.

    `writes`: sequence of (unit, AccessPattern). Each fault names both units and the
    lowest shared address.
    """
    writes = list(writes)
    ext = [pm.extent(p) for _, p in writes]
    ivs: dict[int, tuple] = {}
    out = []
    for i in range(len(writes)):
        for j in range(i + 1, len(writes)):
            (a0, a1), (b0, b1) = ext[i], ext[j]
            if a1 <= b0 or b1 <= a0 or a0 == a1 or b0 == b1:
                continue  # disjoint extents: no shared byte
            for n in (i, j):
                if n not in ivs:
                    ivs[n] = pm.covered(writes[n][1])
            x = pm.first_overlap(ivs[i], ivs[j])
            if x is None:
                continue
            ua, ub = writes[i][0], writes[j][0]
            region = None
            if regions is not None:
                region = regions.find(x) or regions.nearest(x)
            out.append(Fault(
                "write-write-race", "write", x, writes[i][1].run, ua, epoch, command, layer, _ref(region),
                relation(region, x),
                f"units of one epoch must not write the same bytes; {ua} and {ub} both write {x:#x}",
                f"{ua} and {ub} race on {x:#x}", details={"other_unit": ub}))
    return out




def region_overlaps(regions: RegionTable) -> list[Fault]:
    """pool-overlap Faults for non-freed regions of different contexts that share bytes."""
    rs = sorted((r for r in regions.regions if r.state != "freed"), key=lambda r: (r.start, r.seq))
    out = []
    for i, a in enumerate(rs):
        for b in rs[i + 1:]:
            if b.start >= a.end:
                break
            if a.owner != b.owner:
                x = b.start
                out.append(Fault(
                    "pool-overlap", None, x, min(a.end, b.end) - x, "RUNTIME", None, None, "", a.ref(),
                    relation(a, x), f"regions of different contexts must not overlap: '{a.name}' "
                    f"({a.owner}) and '{b.name}' ({b.owner})", f"'{a.name}' and '{b.name}' overlap at {x:#x}",
                    context=b.owner, details={"other_region": b.name}))
    return out
