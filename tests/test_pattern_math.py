"""The closed forms of memory/pattern_math against brute force over every run and byte, and the
Checker against a byte-by-byte reference of its rules, on seeded random patterns (negative, zero,
overlapping and non-nested strides included)."""

import numpy as np
import pytest

from npusim.hw import load_profile
from npusim.memory import AccessPattern, AddressMap, Checker, RegionTable, runs
from npusim.memory import pattern_math as pm

PROFILE = load_profile()
RAM3 = PROFILE.pool_named("npuRAM3").base


def _random_pattern(rng, base=0):
    n = [int(rng.integers(1, 6)) for _ in range(3)]
    kind = rng.integers(0, 4)
    run = int(rng.integers(1, 40))
    if kind == 0:  # nested, increasing (a tensor)
        s1 = run + int(rng.integers(0, 16))
        s2 = s1 * n[0] + int(rng.integers(0, 64))
        s3 = s2 * n[1] + int(rng.integers(0, 64))
        s = [s1, s2, s3]
    elif kind == 1:  # mirrored: decreasing
        s1 = run + int(rng.integers(0, 16))
        s2 = s1 * n[0] + int(rng.integers(0, 64))
        s = [-s1, -s2, -(s2 * n[1] + int(rng.integers(0, 9)))]
    else:  # anything: overlapping, zero, mixed signs, non-nested
        s = [int(rng.integers(-90, 90)) for _ in range(3)]
        if kind == 3:
            s[int(rng.integers(0, 3))] = 0
    return AccessPattern(base + int(rng.integers(0, 400)), run, n[0], s[0], n[1], s[1], n[2], s[2])


def _brute_first_enter(p, los, his):
    for k, st in enumerate(runs(p).tolist()):
        xs = [max(st, lo) for lo, hi in zip(los, his) if lo < hi and st < hi and st + p.run > lo]
        if xs:
            return k, min(xs)
    return None


@pytest.mark.parametrize("seed", range(6))
def test_closed_forms_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    for _ in range(150):
        p = _random_pattern(rng)
        st = runs(p)
        assert [pm.run_start(p, k) for k in range(st.size)] == st.tolist()
        b = (st[:, None] + np.arange(p.run)[None, :]).reshape(-1)
        assert pm.extent(p) == (int(b.min()), int(b.max()) + 1) == p.extent()
        m = int(rng.integers(1, 4))
        los = sorted(int(x) for x in rng.integers(-100, 1200, m))
        his = [lo + int(rng.integers(0, 120)) for lo in los]
        assert pm.first_enter_any(p, los, his) == _brute_first_enter(p, los, his)
        lo, hi = los[0], his[0]
        want = _brute_first_enter(p, [-pm.BIG, hi], [lo, pm.BIG])
        assert pm.first_leave(p, lo, hi) == want
        a = int(rng.integers(-50, 1000))
        bb = a + int(rng.integers(0, 200))
        hit = np.flatnonzero((st >= a) & (st <= bb))
        assert pm.first_start_in(p, a, bb) == ((int(hit[0]), int(st[hit[0]])) if hit.size else None)
        cs, ce = pm.covered(p)
        got = set()
        for s, e in zip(cs.tolist(), ce.tolist()):
            got.update(range(s, e))
        assert got == set(b.tolist()) and (cs[1:] > ce[:-1]).all()


def test_monotone_patterns_are_solved_without_enumeration(monkeypatch):
    """A huge tensor-like pattern is answered from its counts: no run is ever materialised."""
    import npusim.memory.pattern as pattern_mod

    monkeypatch.setattr(pattern_mod, "runs", None)
    p = AccessPattern(0, 448, n1=4000, s1=512, n2=4000, s2=4000 * 512 + 128, n3=7, s3=4000 * (4000 * 512 + 128))
    k = 3 * 4000 * 4000 + 17 * 4000 + 9
    s = pm.run_start(p, k)
    assert pm.first_enter(p, s + 100, s + 101) == (k, s + 100)
    assert pm.first_enter(p, s + 448, s + 512) is None or pm.first_enter(p, s + 448, s + 512)[0] > k
    cs, ce = pm.covered(AccessPattern(0, 512, n1=4000, s1=512, n2=4000, s2=4000 * 512))
    assert (cs.tolist(), ce.tolist()) == ([0], [4000 * 4000 * 512])


# ------------------------------------------------------------------ the Checker, byte by byte

_ORDER = ("out-of-pool", "write-to-readonly", "cross-context-access", "buffer-underflow", "buffer-overflow",
          "use-after-free", "uninitialized-read", "cross-context-access")


def _reference(ck, p, access, P, near, context, written, only=None):
    """(class, run, address) of the first bad byte: every byte of every run, in stream order."""
    amap = ck.map
    foreign = []
    if context is not None and ck.partitions:
        own = [v for (c, _), v in ck.partitions.items() if c == context]
        for (c, _), (lo, hi) in ck.partitions.items():
            if c != context:
                foreign.append((lo, hi))
    for k, s in enumerate(runs(p).tolist()):
        for x in range(s, s + p.run):
            bad = []
            if not amap.is_mapped(x, 1):
                bad.append(0)
            if access == "write" and any(q.base <= x < q.end for q in ck._ro):
                bad.append(1)
            if any(lo <= x < hi for lo, hi in foreign) and not any(lo <= x < hi for lo, hi in own):
                bad.append(2)
            if ck.regions.regions:
                if P is None:
                    bad.append(3 if near is not None and s < near.start else 4)
                else:
                    if x < P.start:
                        bad.append(3)
                    if x >= P.end:
                        bad.append(4)
                    if P.start <= x < P.end:
                        if P.state == "freed":
                            bad.append(5)
                        elif access == "read" and x not in written:
                            bad.append(6)
                        if context is not None and P.owner is not None and P.owner != context:
                            bad.append(7)
            bad = [b for b in bad if only is None or _ORDER[b] in only]
            if bad:
                return _ORDER[min(bad)], k, x
    return None


@pytest.mark.parametrize("seed", range(4))
def test_checker_matches_a_byte_by_byte_reference(seed):
    rng = np.random.default_rng(100 + seed)
    ram6 = PROFILE.pool_named("npuRAM6")
    flash = PROFILE.pool_named("octoFlash")
    for case in range(60):
        am = AddressMap(PROFILE)
        t = RegionTable(am)
        where = int(rng.integers(0, 3))
        base = [RAM3, ram6.end - 600, flash.base][where]  # inside, at the end of mapped memory, read-only
        written: set[int] = set()
        regs = []
        for i in range(int(rng.integers(0, 4))):
            st = base + int(rng.integers(0, 500))
            owner = ["a", "b", None][int(rng.integers(0, 3))]
            state = ["live", "freed", "unwritten"][int(rng.integers(0, 3))]
            size = int(rng.integers(1, 300))
            if not am.is_mapped(st, size):
                continue
            regs.append(t.add(f"r{i}", "activation", st, size, owner=owner, state=state))
        for _ in range(int(rng.integers(0, 4))):
            w = _random_pattern(rng, base)
            t.mark_written(w)
            for s in runs(w).tolist():
                written.update(range(s, s + w.run))
        if rng.integers(0, 3) == 0:
            lo, hi = base + int(rng.integers(0, 300)), base + int(rng.integers(300, 900))
            t.clear_written(lo, hi - lo)
            written -= set(range(lo, hi))
        parts = None
        context = None
        if rng.integers(0, 2):
            context = "a"
            parts = {("a", "p"): (base, base + 300), ("b", "p"): (base + 250, base + 700)}
        ck = Checker(am, t, partitions=parts)
        p = _random_pattern(rng, base)
        access = ["read", "write"][int(rng.integers(0, 2))]
        only = None if rng.integers(0, 4) else (_ORDER[int(rng.integers(0, 8))],)
        prov = regs[int(rng.integers(0, len(regs)))] if regs and rng.integers(0, 2) else None
        P = prov if prov is not None else (t.find(p.base, include_guard=False) if t.regions else None)
        near = t.nearest(p.base) if t.regions else None
        want = _reference(ck, p, access, P, near, context, written, only)
        f = ck.check(p, access, "SE0", provenance=prov, context=context, only=only)
        got = None if f is None else (f.cls, f.details["run"], f.address)
        assert got == want, (case, p, access, only)
        if f is not None:
            assert f.details["run_start"] == pm.run_start(p, f.details["run"])


def test_covered_remembers_patterns_read_only_and_bounded(monkeypatch):
    """A repeated pattern gets the same intervals back, which callers cannot modify; the memo never
    holds more than COVERED_KEPT patterns."""
    monkeypatch.setattr(pm, "COVERED_KEPT", 8)
    monkeypatch.setattr(pm, "_COVERED", {})
    p = AccessPattern(RAM3, 16, 4, 64, 3, 512)
    cs, ce = pm.covered(p)
    assert pm.covered(AccessPattern(RAM3, 16, 4, 64, 3, 512))[0].tolist() == cs.tolist()
    with pytest.raises(ValueError):
        cs[0] = 0
    for k in range(20):
        pm.covered(AccessPattern(RAM3 + 64 * k, 16, 4, 64))
        assert len(pm._COVERED) <= 8
