"""What a static walk of the machine (`MachineOptions.static`, `npusim check`) knows.

A static walk evaluates every descriptor and checks every access against the region state exactly
as a run does, but moves no data. Most of what the machine decides needs addresses alone; a few
decisions read bytes of memory: the HOST operator record a software epoch executes, and the
parameter tables whose entries a unit validates before it runs (`units.table_problem`). Before the
run, memory holds the blob's constants and zeros everywhere else, then the inputs: every byte but
an input's is known, until the program writes it. `KnownBytes` keeps the bytes that are not (the
inputs and every byte written so far, as an exact interval set). A decision that needs such bytes,
and the host operator's own execution on its operand values, cannot be made statically: the walk
records it as an `Undecided` note instead of guessing.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from ..memory import AccessPattern
from ..memory import pattern_math as pm


@dataclass(frozen=True)
class Undecided:
    """A decision a static walk could not make (it depends on values known only when running)."""

    command: int
    layer: str
    unit: str
    what: str  # what is not decided and why, one line

    def to_json(self) -> dict:
        return {"command": self.command, "layer": self.layer, "unit": self.unit, "what": self.what}


class KnownBytes:
    """Bytes whose values are known before the run: all but the inputs and what the run wrote.

    The unknown bytes are the input ranges plus the bytes of every write pattern so far, kept as the
    patterns themselves and the merged hull of their extents: a query outside the hull is answered by
    bisection, one inside it exactly by `pattern_math.first_enter` on the writes whose extent meets it."""

    def __init__(self, unknown=()):
        self._hull_s: list[int] = []  # merged [start, end) extents of everything unknown
        self._hull_e: list[int] = []
        self._writes: list[tuple[int, int, object]] = []  # (lo, hi, pattern) of the unknown patterns
        for addr, size in unknown:
            if size > 0:
                self.forget(AccessPattern(int(addr), int(size)))

    @classmethod
    def of_programs(cls, programs, amap) -> "KnownBytes":
        """Known bytes at the start of a run of `programs` (as placed): all but their input buffers."""
        return cls([(amap.base_of(b.pool) + b.offset, b.size) for p in programs for b in p.buffers_of("input")])

    def forget(self, pattern) -> None:
        """The pattern's bytes were written: their values are the run's, no longer known."""
        if pattern.nbytes == 0:
            return
        lo, hi = pm.extent(pattern)
        self._writes.append((lo, hi, pattern))
        pm.add_interval(self._hull_s, self._hull_e, lo, hi)

    def known(self, pattern) -> bool:
        """No byte of `pattern` is an input's or was written by the run."""
        if pattern.nbytes == 0:
            return True
        lo, hi = pm.extent(pattern)
        i = bisect.bisect_right(self._hull_e, lo)
        if i == len(self._hull_s) or self._hull_s[i] >= hi:
            return True  # outside every unknown extent
        cs, ce = pm.covered(pattern)
        return not any(a < hi and lo < b and pm.first_enter_any(w, cs, ce) is not None for a, b, w in self._writes)
