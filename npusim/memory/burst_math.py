"""Bursts, beats, bank-line splits and per-bank load of a pattern, in closed form.

The burst rules (as `memory.cost` documents them): a run is cut at every `boundary`-aligned address
(the AXI 4 KiB rule) into pieces; a piece [x, y) is issued as bursts of at most `max_beats` beats
counted from the beat holding x, so it has ceil(y/beat) - floor(x/beat) beats (partial first/last
beats count whole) and ceil(beats / max_beats) bursts, cut at x's beat + j * max_beats. A burst
crossing a bank-line boundary (pool base + j * bank_line) is split by the RAM once per crossing.
Per bank: `bank_bytes[b]` payload bytes, `bank_passes[b]` the (beat, bank-unit) pieces that touch
bank b (the conflict model's passes).

Every one of these is a function F(s) of the run's start s alone (the run length fixed), periodic
with period T = lcm(boundary, beat, interleave, bank period), where the bank period is the bank
line, times `banks` with XOR hashing. So a pattern's totals are sum over residues rho of
count(rho) * F(rho): the residue histogram of its run starts mod T comes from its levels (each
level's strides cycle mod T), and F is evaluated vectorized, with per-bank prefix tables of period
T. No burst, run or byte is enumerated: the work is O(distinct residues) <= O(min(runs, T)).
`stats` returns None when the profile's periods are too large for tables (T > MAX_PERIOD); the
caller then uses the enumerating reference (`_kernels.burst_stats`).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

MAX_PERIOD = 1 << 16  # residues per table
MAX_TABLE = 1 << 22  # banks x period entries per table


class Geometry:
    """Bus and bank parameters of one pool, with the prefix tables of their period."""

    def __init__(self, beat, max_beats, boundary, pool_base, interleave, banks, xor_hash):
        self.beat, self.m, self.g = beat, max_beats, boundary
        self.interleave, self.banks, self.xor = interleave, banks, bool(xor_hash)
        self.line = banks * interleave
        period = self.line * (banks if self.xor else 1)
        self.t = math.lcm(boundary, beat, interleave, period)
        self.pb = pool_base % self.t  # the pool base's phase (bank units are counted from it)
        self.ok = self.t <= MAX_PERIOD and banks * (self.t + 1) <= MAX_TABLE
        if self.ok:
            self._tables()
            self._page_tables()

    def bank(self, x):
        """Bank of address residues x (array), as memory.banks.bank_of."""
        off = (x - self.pb) % self.t
        bank = (off // self.interleave) % self.banks
        if self.xor:
            line = off // self.line
            if self.banks & (self.banks - 1) == 0:
                bank = bank ^ (line % self.banks)
            else:
                bank = (bank + line) % self.banks
        return bank

    def _tables(self):
        x = np.arange(self.t, dtype=np.int64)
        bank = self.bank(x)
        self.bank_tab = bank
        onehot = np.zeros((self.banks, self.t), dtype=np.int64)
        onehot[bank, x] = 1
        self.bytes_pref = np.zeros((self.banks, self.t + 1), dtype=np.int64)
        np.cumsum(onehot, axis=1, out=self.bytes_pref[:, 1:])
        start = (x % self.beat == 0) | ((x - self.pb) % self.interleave == 0) | (x % self.g == 0)
        self.cells_pref = np.zeros((self.banks, self.t + 1), dtype=np.int64)
        np.cumsum(onehot * start, axis=1, out=self.cells_pref[:, 1:])

    def _page_tables(self):
        """Burst cuts that fall on a bank-line boundary inside one full page, per page phase: page k of
        a run starts at g1 + k*g, whose phase mod the bank line cycles with period line/gcd(g, line)."""
        g, line, beat, m = self.g, self.line, self.beat, self.m
        pg = max(g // beat, 1)
        pgu = -(-pg // m)
        u = math.gcd(g, line)
        self.cycle = line // u
        phases = (np.arange(self.cycle, dtype=np.int64) * g) % line  # phase of page k (from phase 0)
        first = 0 if g >= beat else None
        cuts = np.zeros(self.cycle, dtype=np.int64)
        if first is not None:
            j = np.arange(1, pgu, dtype=np.int64)
            cuts = (((phases[:, None] + j[None, :] * m * beat - self.pb) % line) == 0).sum(axis=1)
        self.pos = np.zeros(line // u, dtype=np.int64)  # position in the cycle of phase index (phase / u)
        self.pos[phases // u] = np.arange(self.cycle)
        self.cut_pref = np.concatenate(([0], np.cumsum(np.concatenate((cuts, cuts)))))
        self.cut_total = int(cuts.sum())

    def page_cuts(self, g1, pages):
        """Line-aligned burst cuts inside `pages` full pages from page start g1 (arrays)."""
        k0 = self.pos[(g1 % self.line) // math.gcd(self.g, self.line)]
        q, rem = np.divmod(pages, self.cycle)
        return q * self.cut_total + self.cut_pref[k0 + rem] - self.cut_pref[k0]

    def _pref(self, tab, x):
        """Per bank, the table's count over [0, x) for absolute x >= 0 (array): (banks, len(x))."""
        return (x // self.t)[None, :] * tab[:, -1][:, None] + tab[:, x % self.t]


@lru_cache(maxsize=64)
def geometry(beat, max_beats, boundary, pool_base, interleave, banks, xor_hash) -> Geometry:
    return Geometry(beat, max_beats, boundary, pool_base, interleave, banks, xor_hash)


def _ceil(a, b):
    return -(-a // b)


def _aligned(p0, step: int, n, mod: int, target: int):
    """How many of p0 + j*step (0 <= j < n) are congruent to target mod `mod` (arrays p0, n)."""
    g = math.gcd(step, mod)
    mm = mod // g
    d = (target - p0) % mod
    ok = (d % g == 0) & (n > 0)
    inv = pow((step // g) % mm, -1, mm) if mm > 1 else 0
    j0 = ((d // g) % mm) * inv % mm if mm > 1 else np.zeros_like(d)
    return np.where(ok & (j0 < n), 1 + (n - 1 - j0) // mm, 0)


def residues(p, t: int):
    """(residues, counts): the run starts of `p` modulo t with their multiplicities."""
    res = np.array([p.base % t], dtype=np.int64)
    cnt = np.array([1], dtype=np.int64)
    for n, s in ((p.n1, p.s1), (p.n2, p.s2), (p.n3, p.s3)):
        if n == 1:
            continue
        sm = s % t
        cyc = t // math.gcd(sm, t) if sm else 1
        k = min(n, cyc)
        q, rem = divmod(n, cyc)
        lr = (np.arange(k, dtype=np.int64) * sm) % t
        lc = np.full(k, q, dtype=np.int64) + (np.arange(k) < rem)
        res = ((res[:, None] + lr[None, :]) % t).reshape(-1)
        cnt = (cnt[:, None] * lc[None, :]).reshape(-1)
        if res.size > 64:  # fold equal residues (counts stay exact: < 2**53)
            hc = np.bincount(res, weights=cnt, minlength=t).astype(np.int64)
            res = np.flatnonzero(hc).astype(np.int64)
            cnt = hc[res]
    return res, cnt


def _piece(x, y, beat, m):
    """(beats, bursts, first beat) of pieces [x, y) (arrays, y > x)."""
    fx = x // beat
    beats = _ceil(y, beat) - fx
    return beats, _ceil(beats, m), fx


def run_stats(geo: Geometry, s, run: int):
    """Per run start s (absolute residues, array): bursts, beats, splits, and per-bank bytes and passes
    ((banks, len(s)) arrays)."""
    beat, m, g, line = geo.beat, geo.m, geo.g, geo.line
    d = m * beat
    tgt = geo.pb % line
    e = s + run
    g1 = (s // g + 1) * g  # the first boundary after s
    one = e <= g1
    # head piece [s, min(e, g1)), full pages, tail piece
    h_end = np.where(one, e, g1)
    hb, hbu, hfx = _piece(s, h_end, beat, m)
    pages = np.where(one, 0, (e - g1) // g)
    t0 = g1 + pages * g
    has_tail = ~one & (e > t0)
    tb, tbu, tfx = _piece(t0, np.where(has_tail, e, t0 + 1), beat, m)
    tb, tbu = np.where(has_tail, tb, 0), np.where(has_tail, tbu, 0)
    pg = max(g // beat, 1)
    pgu = _ceil(pg, m)
    beats = hb + pages * pg + tb
    bursts = hbu + pages * pgu + tbu
    # splits: bank-line boundaries strictly inside the run, minus those that are burst cuts
    inside = (e - 1 - geo.pb) // line - (s - geo.pb) // line
    n_g = np.where(one, 0, (e - 1) // g - s // g)
    cut = _aligned(g1, g, n_g, line, tgt)
    cut += _aligned((hfx + m) * beat, d, hbu - 1, line, tgt)
    cut += np.where(has_tail, _aligned((tfx + m) * beat, d, tbu - 1, line, tgt), 0)
    if pgu > 1:  # cuts inside full pages (page k starts at g1 + k*g): by the page's bank-line phase
        cut += geo.page_cuts(g1, pages)
    splits = inside - cut
    bank_bytes = geo._pref(geo.bytes_pref, e) - geo._pref(geo.bytes_pref, s)
    passes = geo._pref(geo.cells_pref, e) - geo._pref(geo.cells_pref, s + 1)
    passes[geo.bank_tab[s % geo.t], np.arange(s.size)] += 1
    return bursts, beats, splits, bank_bytes, passes


def stats(p, geo: Geometry):
    """(bursts, beats, splits, bank_bytes, bank_passes) of pattern `p` (the arrays read-only), or None
    when `geo` has no tables (its period is too large). Memoized: the result depends only on the
    geometry, the base's residue and the run and level fields."""
    if not geo.ok or p.n1 * p.n2 * p.n3 >= 1 << 52:
        return None
    return _stats(geo, p.base % geo.t, p.run, p.n1, p.s1, p.n2, p.s2, p.n3, p.s3)


@lru_cache(maxsize=1 << 14)
def _stats(geo: Geometry, base, run, n1, s1, n2, s2, n3, s3):
    from .pattern import AccessPattern

    banks = geo.banks
    if run <= 0 or n1 * n2 * n3 == 0:
        z = np.zeros(banks, dtype=np.int64)
        out = (0, 0, 0, z, z.copy())
    else:
        res, cnt = residues(AccessPattern(base, run, n1, s1, n2, s2, n3, s3), geo.t)
        bu, be, sp, bb, bp = run_stats(geo, res, run)
        out = (int(bu @ cnt), int(be @ cnt), int(sp @ cnt), bb @ cnt, bp @ cnt)
    out[3].setflags(write=False)
    out[4].setflags(write=False)
    return out
