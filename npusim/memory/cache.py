"""NPU cache in front of the external memories: set-associative, LRU, 64 B lines.

Reads allocate lines; writes are modelled write-through, no-allocate (every written
byte goes to memory): they are counted as `writes`, neither hits nor misses, so hits/misses
are honest read statistics. State persists across calls until `reset()`.

Exact LRU (a hit renews the line; a miss replaces the way with the oldest stamp), computed without
Numba and without a step per line. A stream's look-ups (each run's lines, a run's first line
dropped when it repeats the line before) form ascending segments of consecutive lines. By the LRU
stack property, a look-up hits iff the line was looked up before and fewer than `ways` other
lines of its set were looked up since. So the cache keeps a history of segments: a segment none
of whose lines was ever looked up (weights streamed once) misses throughout and is only recorded;
a segment that meets a few lines of the history (the line two constants share) decides each of
them by counting, in closed form, the lines of its set in the segments since. The per-set state
(`tags`, `stamps`) is rebuilt from the history only when needed, replaying just the segments that
can still be resident, a chunk of `sets` consecutive lines at a time (one look-up per set, so
they vectorize). Equal to the line-by-line `_kernels.cache_access` (tested); a stream of more than
MAX_SEGMENTS segments (many short runs) and `access_lines` (any sequence) use that kernel.

Transcripts: a cache's answers are a function of the look-ups made since `reset`. `record()` keeps
them, in order, with the counters after each (`transcript()`); `follow(t)` makes a fresh cache
answer from an earlier transcript `t` while the look-ups are the same (pattern and access, one by
one), touching no state. At the first look-up that differs, or when the state is read (`tags`,
`stamps`, `access_lines`), the state is rebuilt by making the look-ups followed so far, and the
cache goes on by itself. A program's repeat runs make the same look-ups from a fresh cache: the
engine keeps one transcript per program (`Machine`).
"""

from __future__ import annotations

import bisect
from typing import NamedTuple

import numpy as np

from ..hw.profile import HardwareProfile
from .pattern import AccessPattern
from .pattern_math import add_interval


MAX_SEGMENTS = 64  # a stream of more look-up segments goes line by line (Numba) instead
HOT_MAX = 32  # lines of a segment decided from the history; more rebuild the state first
MAX_PENDING = 256  # history segments kept before the state is rebuilt


class CacheResult(NamedTuple):  # a tuple: hashed and compared in C (timing memo keys, engine/machine.py)
    lines: int  # line look-ups (consecutive repeats within a stream count once)
    hits: int
    misses: int
    miss_bytes: int  # bytes moved to/from the external memory (misses x line; all bytes of a write)
    writes: int = 0  # line look-ups of a write (write-through, no allocate)


class Transcript(list):
    """A cache's look-ups since reset (`NpuCache.transcript`), with their (pattern, access) keys and answers
    as columns, so that a following cache compares and takes a group of them at once (`access_all`)."""

    __slots__ = ("keys", "answers")

    def __init__(self, entries=()):
        super().__init__(entries)
        self.keys = [(e[0], e[1]) for e in self]
        self.answers = [e[2] for e in self]


class NpuCache:
    def __init__(self, profile: HardwareProfile):
        c = profile.cache
        self.line = c.line
        self.ways = c.ways
        self.sets = c.sets
        self.hit_cycles = c.hit_cycles
        self.reset()

    def reset(self) -> None:
        self._follow = None  # a transcript being followed (its look-ups were not made)
        self._at = 0  # look-ups of it followed so far
        self._log = None  # the look-ups made since reset, when recording
        self._diverged = False
        self._reset_state()

    def _reset_state(self) -> None:
        self._tags = np.full((self.sets, self.ways), -1, dtype=np.int64)
        self._stamps = np.zeros((self.sets, self.ways), dtype=np.int64)
        # since _tags: [first line, count, clock before, re-read lines, fresh (no line looked up before)]
        self._pending: list[list] = []
        self._seen_s: list[int] = []  # every line looked up since reset: sorted disjoint [s, e)
        self._seen_e: list[int] = []
        self.clock = 0
        self.hits = 0
        self.misses = 0
        self.writes = 0

    # ------------------------------------------------------------ transcripts
    def record(self) -> None:
        """Keep every look-up from now on (a fresh cache: from reset) for `transcript()`."""
        self._log = []

    def follow(self, transcript) -> None:
        """On a fresh recording cache: answer from `transcript` (of an earlier cache recorded from
        reset) while the look-ups are the same as its (module docstring)."""
        if transcript:
            self._follow, self._at = transcript, 0

    def transcript(self):
        """The look-ups made since reset, in order, when recorded and not all followed from an
        earlier transcript (else None): [(pattern, access, CacheResult, clock, hits, misses, writes)]."""
        if self._log is None or (self._follow is not None and not self._diverged):
            return None
        return Transcript(self._log)

    def _leave(self) -> None:
        """Stop following: make the look-ups followed so far (the state is theirs)."""
        t, k = self._follow, self._at
        self._follow = None
        self._diverged = True
        self._reset_state()
        log, self._log = self._log, None
        for e in t[:k]:
            self._access(e[0], e[1])
        if log is not None:
            self._log = list(t[:k])

    @property
    def tags(self) -> np.ndarray:
        """Tag held by each (set, way), -1 when empty."""
        if self._follow is not None:
            self._leave()
        self._materialize()
        return self._tags

    @property
    def stamps(self) -> np.ndarray:
        """Clock of each (set, way)'s last look-up, 0 when empty."""
        if self._follow is not None:
            self._leave()
        self._materialize()
        return self._stamps

    def access_lines(self, lines: np.ndarray) -> CacheResult:
        """Look up line indices (address // line) in order, line by line (`_kernels.cache_access`)."""
        if self._follow is not None:
            self._leave()
        self._log = None  # not a pattern's look-up: no transcript
        return self._access_lines(lines)

    def _access_lines(self, lines: np.ndarray) -> CacheResult:
        from . import _kernels as K

        lines = np.ascontiguousarray(lines, dtype=np.int64).reshape(-1)
        self._materialize()
        h, m, self.clock = K.cache_access(self._tags, self._stamps, lines, self.clock)
        if lines.size:  # the history must know these lines were looked up
            u = np.unique(lines)
            brk = np.flatnonzero(np.diff(u) != 1) + 1
            for s0, s1 in zip(np.concatenate(([0], brk)).tolist(), np.concatenate((brk, [u.size])).tolist()):
                self._see(int(u[s0]), int(u[s1 - 1]) + 1)
        self.hits += h
        self.misses += m
        return CacheResult(int(lines.size), int(h), int(m), int(m) * self.line)

    # ------------------------------------------------------------ streams
    def _segments(self, pattern: AccessPattern):
        """(first line, count) of the stream's ascending look-up segments."""
        if pattern.run <= 0 or pattern.n_runs == 0:
            return []
        L = self.line
        if pattern.n_runs == 1:
            a = pattern.base // L
            return [(a, (pattern.base + pattern.run - 1) // L - a + 1)]
        from .pattern import runs

        st = runs(pattern)
        first, last = st // L, (st + pattern.run - 1) // L
        if first.size > 1:  # a run whose first line is the line just looked up skips it
            first[1:] += first[1:] == last[:-1]
        keep = first <= last
        first, last = first[keep], last[keep]
        if first.size > 1:  # runs that continue the previous one extend its segment
            brk = np.flatnonzero(first[1:] != last[:-1] + 1) + 1
            first, last = first[np.concatenate(([0], brk))], last[np.concatenate((brk, [first.size])) - 1]
        return list(zip(first.tolist(), (last - first + 1).tolist()))

    def access(self, pattern: AccessPattern, access: str = "read") -> CacheResult:
        t = self._follow
        if t is not None:
            k = self._at
            if k < len(t):
                e = t[k]
                if (e[0] is pattern or e[0] == pattern) and e[1] == access:
                    self._at = k + 1
                    self.clock, self.hits, self.misses, self.writes = e[3], e[4], e[5], e[6]
                    return e[2]
            self._leave()
        r = self._access(pattern, access)
        if self._log is not None:
            self._log.append((pattern, access, r, self.clock, self.hits, self.misses, self.writes))
        return r

    def access_all(self, lookups: list) -> tuple:
        """`access` of each (pattern, access) tuple of the list `lookups` in turn: their CacheResults. While
        following a transcript that makes the same look-ups, its answers are taken at once."""
        t = self._follow
        if t is not None and t.__class__ is Transcript:
            k = self._at
            n = len(lookups)
            if t.keys[k:k + n] == lookups:  # a list of (pattern, access), like the keys
                if n:
                    self._at = k + n
                    self.clock, self.hits, self.misses, self.writes = t[k + n - 1][3:7]
                return tuple(t.answers[k:k + n])
        return tuple([self.access(p, a) for p, a in lookups])

    def _access(self, pattern: AccessPattern, access: str) -> CacheResult:
        segs = self._segments(pattern)
        lines = sum(n for _, n in segs)
        if access == "write":
            self.writes += lines
            return CacheResult(lines, 0, 0, pattern.nbytes, lines)
        if len(segs) > MAX_SEGMENTS:  # many short runs: line by line is cheaper (same LRU)
            from . import _kernels as K
            from .pattern import runs

            return self._access_lines(K.run_lines(runs(pattern), pattern.run, self.line))
        h = 0
        for a, n in segs:
            h += self._segment(a, n)
        m = lines - h
        self.hits += h
        self.misses += m
        return CacheResult(lines, h, m, m * self.line)

    # ------------------------------------------------------------ one segment
    def _see(self, a: int, b: int) -> None:
        add_interval(self._seen_s, self._seen_e, a, b)

    def _hot(self, a: int, b: int) -> list[int] | None:
        """Lines of [a, b) looked up before (ascending), or None when more than HOT_MAX."""
        ss, se = self._seen_s, self._seen_e
        i = bisect.bisect_right(se, a)
        out: list[int] = []
        while i < len(ss) and ss[i] < b:
            lo, hi = max(a, ss[i]), min(b, se[i])
            if len(out) + hi - lo > HOT_MAX:
                return None
            out.extend(range(lo, hi))
            i += 1
        return out

    def _in_set(self, lo: int, hi: int, x: int) -> int:
        """Lines of set x in [lo, hi)."""
        S = self.sets
        return (hi - 1 - x) // S - (lo - 1 - x) // S if hi > lo else 0

    def _segment(self, a: int, n: int) -> int:
        """Look up lines a .. a+n-1 in order; returns the hits."""
        t0 = self.clock
        self.clock += n
        hot = self._hot(a, a + n)
        if hot is None:
            return self._replay(a, n, t0)
        if not hot:  # no line looked up before: all miss (recorded only)
            self._record(a, n, t0, True)
            return 0
        last = []
        P = self._pending
        for ln in hot:  # the history entry of each hot line's last look-up
            j = next((k for k in range(len(P) - 1, -1, -1)
                      if P[k][0] <= ln < P[k][0] + P[k][1] and ln not in P[k][3]), None)
            if j is None:  # looked up before the history began: decide from the state
                return self._replay(a, n, t0)
            last.append(j)
        hits = 0
        S, W = self.sets, self.ways
        for q, (ln, j) in enumerate(zip(hot, last)):
            x = ln % S
            e = P[j]
            d = self._in_set(a, ln, x)  # this segment's lines of set x before it
            d += self._in_set(ln + 1, e[0] + e[1], x) - sum(1 for z in e[3] if z > ln and z % S == x)
            for k in range(j + 1, len(P)):
                ek = P[k]
                d += self._in_set(ek[0], ek[0] + ek[1], x) - sum(1 for z in ek[3] if z % S == x)
            d -= sum(1 for y, jy in zip(hot[:q], last[:q]) if y % S == x and jy > j)  # counted twice
            hits += d < W
        for ln, j in zip(hot, last):
            P[j][3].add(ln)
        self._record(a, n, t0, False)
        return hits

    def _record(self, a: int, n: int, t0: int, fresh: bool) -> None:
        """Append the segment to the history (state rebuilt when it grows past MAX_PENDING)."""
        self._pending.append([a, n, t0, set(), fresh])
        self._see(a, a + n)
        if len(self._pending) > MAX_PENDING:
            self._materialize()

    def _replay(self, a: int, n: int, t0: int) -> int:
        """The segment looked up on the rebuilt state, chunk by chunk; returns its hits."""
        self._materialize()
        self._see(a, a + n)
        return self._exact(a, n, t0)

    # ------------------------------------------------------------ the per-set state
    def _materialize(self) -> None:
        """Bring tags/stamps up to date with the history: only segments that can still hold a
        resident line are replayed (the later ones give every set `ways` other lines otherwise)."""
        P = self._pending
        if not P:
            return
        S, W = self.sets, self.ways
        start, cover = 0, 0
        for k in range(len(P) - 1, -1, -1):
            if cover >= W:  # segments before k + 1 are evicted whatever they held
                start = k + 1
                break
            cover += P[k][1] // S - len(P[k][3])
        if start:
            self._tags[:] = -1
            self._stamps[:] = 0
        self._pending = []
        batch: list = []  # consecutive fresh segments: all misses, filled together
        for a, n, t0, _, fresh in P[start:]:
            if fresh:  # none of its lines was resident when it was looked up: all missed
                batch.append((a, n, t0))
                continue
            self._fill_all(batch)
            batch = []
            self._exact(a, n, t0)
        self._fill_all(batch)

    def _fill_all(self, batch: list) -> None:
        """`_fill` of each (a, n, t0) in turn, in one pass: their lines (distinct: each segment's lines
        were never looked up before it) all miss, in time order. Of set x's k lines, the r-th takes
        way order[x, r % ways] (the ways by ascending stamp, stable: each miss replaces the least
        recently used, and the new stamps are the newest), so only the last `ways` of them stay."""
        if len(batch) <= 1:
            for a, n, t0 in batch:
                self._fill(a, n, t0)
            return
        S, W = self.sets, self.ways
        parts = []
        for a, n, t0 in batch:
            skip = max(0, n - W * S)  # evicted by the segment's own later lines
            parts.append((a + skip, n - skip, t0 + skip))
        ln = np.concatenate([np.arange(a, a + n, dtype=np.int64) for a, n, _ in parts])
        ts = np.concatenate([np.arange(t0 + 1, t0 + 1 + n, dtype=np.int64) for _, n, t0 in parts])
        x = ln % S
        by_set = np.argsort(x, kind="stable")  # grouped by set, in time order within a set
        xs = x[by_set]
        first = np.flatnonzero(np.concatenate(([True], xs[1:] != xs[:-1])))
        counts = np.diff(np.concatenate((first, [xs.size])))
        rank = np.arange(xs.size) - np.repeat(first, counts)
        keep = rank >= np.repeat(counts, counts) - W
        sel, r = by_set[keep], rank[keep]
        rows = x[sel]
        way = np.argsort(self._stamps[rows], axis=1, kind="stable")[np.arange(rows.size), r % W]
        self._tags[rows, way] = ln[sel] // S
        self._stamps[rows, way] = ts[sel]

    def _exact(self, a: int, n: int, t0: int) -> int:
        """Look up lines a..a+n-1 (times t0+1..) on tags/stamps directly; returns the hits."""
        S = self.sets
        tags = self._tags
        resident = tags * S + np.arange(S)[:, None]  # line held by each way (tag -1: none)
        if not ((resident >= a) & (resident < a + n) & (tags >= 0)).any():
            self._fill(a, n, t0)
            return 0
        hits = 0
        for c0 in range(0, n, S):
            hits += self._chunk(a + c0, min(S, n - c0), t0 + c0)
        return hits

    def _chunk(self, a: int, k: int, t0: int) -> int:
        """k <= sets consecutive lines from a, looked up at times t0+1.. (one per set): hits."""
        S = self.sets
        ln = np.arange(a, a + k, dtype=np.int64)
        st, tg = ln % S, ln // S
        ts = t0 + 1 + np.arange(k, dtype=np.int64)
        match = self._tags[st] == tg[:, None]
        hit = match.any(axis=1)
        hw = np.argmax(match, axis=1)
        self._stamps[st[hit], hw[hit]] = ts[hit]
        miss = ~hit
        if miss.any():
            ms = st[miss]
            victim = np.argmin(self._stamps[ms], axis=1)
            self._tags[ms, victim] = tg[miss]
            self._stamps[ms, victim] = ts[miss]
        return int(hit.sum())

    def _fill(self, a: int, n: int, t0: int) -> None:
        """Lines a..a+n-1 (times t0+1..), none resident, all missing: only the last W x S decide the state."""
        skip = max(0, n - self.ways * self.sets)
        self._misses_only(a + skip, n - skip, t0 + skip)

    def _misses_only(self, a: int, n: int, t0: int) -> None:
        """Lines a..a+n-1 (times t0+1..), none resident, n <= ways x sets: set x takes its m <= W
        lines in turn on its ways from the least recently used (the ways argmin would pick one
        after the other: stamps ascending, ties by way)."""
        S, W = self.sets, self.ways
        if n <= 0:
            return
        off = (np.arange(S, dtype=np.int64) - a) % S  # first line of set x is a + off[x]
        m = np.maximum(0, (n - off + S - 1) // S)  # lines of set x in the segment (<= W)
        order = np.argsort(self._stamps, axis=1, kind="stable")
        for r in range(int(m.max())):
            sel = np.flatnonzero(m > r)
            ln = a + off[sel] + r * S
            way = order[sel, r]
            self._tags[sel, way] = ln // S
            self._stamps[sel, way] = t0 + 1 + ln - a
