"""Which values `validate` compares depend on bytes read before anything wrote them.

The replay (`importers.stedgeai.replay`) finds each `uninitialized-read` statically: the epoch, the unit,
the buffer and the bytes. Here those bytes are followed forward through the program, epoch by epoch: they
are tainted until something writes them; an epoch that reads a tainted buffer (or is itself the faulting
read) taints what it writes; an epoch that writes from clean inputs cleans what it overwrites. A buffer whose bytes are tainted when it is compared
depends on the read. In the functional run the compile's RAM pools start with a seeded pattern
(`execute.Memory.fill_uninitialised`); other memory reads as zeros. A compile without the full buffer table
(`--all-buffers-info` off) records no reads per buffer: only the faulting epoch's own writes are followed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class UninitRead:
    epoch: int | None
    unit: str
    buffer: str
    address: int
    size: int
    seed: int | None  # the seeded pattern's seed; None: memory outside the compile's pools (zeros)

    def line(self) -> str:
        held = ("the seeded pattern (seed %d)" % self.seed if self.seed is not None
                else "zeros (memory outside the compile's pools)")
        return (f"depends on bytes read before any epoch wrote them: epoch {self.epoch}, {self.unit} read "
                f"{self.size} B of '{self.buffer}' at {self.address:#x}; they hold {held}, so a mismatch "
                f"here is not a rounding question")

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def lines(found: list, indent: str = "    ") -> list:
    """Report lines of `UninitRead.to_dict()` records."""
    return [indent + UninitRead(**d).line() for d in found]


def _merged(intervals) -> list:
    out: list = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


class _Taint:
    """Tainted byte ranges, each with the reads it comes from."""

    def __init__(self):
        self.spans: list = []  # (lo, hi, frozenset of read indices)

    def origins(self, lo: int, hi: int) -> set:
        return {o for a, b, org in self.spans if a < hi and lo < b for o in org}

    def cover(self, lo: int, hi: int, origins: frozenset) -> None:
        """[lo, hi) now holds values from `origins` (empty: clean values)."""
        kept = []
        for a, b, org in self.spans:
            if b <= lo or hi <= a:
                kept.append((a, b, org))
                continue
            if a < lo:
                kept.append((a, lo, org))
            if hi < b:
                kept.append((hi, b, org))
        if origins:
            kept.append((lo, hi, origins))
        self.spans = kept


class UninitDependence:
    """`of(buffer, epoch)`: the uninitialised reads a buffer's bytes depend on after an epoch."""

    def __init__(self, out, seed: int = 0, rep=None):
        from ..importers.stedgeai.replay import replay

        rep = replay(out) if rep is None else rep
        faults = [f for f in rep.faults if f.cls == "uninitialized-read"]
        pattern = [(p.address, p.end) for p in out.pools if not p.read_only]
        self.reads = [UninitRead(f.epoch, f.unit, f.region.name if f.region else "?", int(f.address or 0), f.size,
                                 seed if any(a <= (f.address or 0) < b for a, b in pattern) else None)
                      for f in faults]
        self.after: dict = {}  # epoch -> the taint after it
        self.final: list = []
        if not faults:
            return
        span = {}
        for b in out.buffers:
            base = b.addr_base + rep.placements[b.base_symbol][0] if b.base_symbol in rep.placements else b.addr_base
            span[b.name] = (base + b.offset_start, base + b.offset_end)
        taint = _Taint()  # the bytes read unwritten hold the pattern until something writes them
        for k, f in enumerate(faults):
            if f.address is not None and f.size:
                taint.cover(int(f.address), int(f.address) + int(f.size), frozenset({k}))
        for t in rep.epochs:
            origins = {k for k, f in enumerate(faults)
                       if f.epoch == t.epoch and f.command == t.block and (f.unit == "CPU") == t.sw}
            for name in t.reads:
                if name in span:
                    origins |= taint.origins(*span[name])
            for lo, hi in _merged((lo, hi) for lo, hi, _ in t.written):
                taint.cover(lo, hi, frozenset(origins))
            self.after[t.epoch] = list(taint.spans)
        self.final = list(taint.spans)
        self.span = span

    def of(self, buffer: str, epoch: int | None = None) -> list[UninitRead]:
        """The reads `buffer`'s bytes depend on after `epoch` (None: at the end of the run)."""
        if not self.after or buffer not in self.span:
            return []
        spans = self.after.get(epoch) if epoch is not None else self.final
        if spans is None:
            return []
        lo, hi = self.span[buffer]
        return [self.reads[k] for k in sorted({o for a, b, org in spans if a < hi and lo < b for o in org})]
