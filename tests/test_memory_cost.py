"""Access cost: bursts, beats, cross-bank splits, bank load, conflicts, NPU cache."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from npusim.hw import load_profile
from npusim.memory import AccessPattern, NpuCache, conflict_cycles, pattern_cost, runs

PROFILE = load_profile()
RAM = PROFILE.pool_named("npuRAM3")


def _reference(pool, p, profile):
    """Slow, obvious per-byte burst splitter: the semantics pattern_cost must match."""
    beat, mb, bnd = profile.bus.beat_bytes, profile.bus.max_burst_beats, profile.bus.burst_boundary
    bursts = beats = splits = 0
    bank_bytes = [0] * pool.banks
    for s in runs(p).tolist():
        a, e = s, s + p.run
        while a < e:
            b = a
            while b < e and (b // beat) - (a // beat) < mb and (b == a or b % bnd):
                b += 1
            bursts += 1
            beats += len({x // beat for x in range(a, b)})
            lines = {(x - pool.base) // pool.bank_line for x in range(a, b)}
            splits += len(lines) - 1
            for x in range(a, b):
                bank_bytes[((x - pool.base) // pool.interleave) % pool.banks] += 1
            a = b
    return bursts, beats, splits, bank_bytes


@settings(max_examples=60, deadline=None)
@given(off=st.integers(0, 5000), run=st.integers(0, 700), n1=st.integers(1, 4), s1=st.integers(-300, 5000),
       n2=st.integers(1, 3), s2=st.integers(0, 9000))
def test_matches_slow_reference(off, run, n1, s1, n2, s2):
    base = RAM.base + 20000 + off
    p = AccessPattern(base, run, n1, s1, n2, s2)
    c = pattern_cost(RAM, p, PROFILE)
    bursts, beats, splits, bank_bytes = _reference(RAM, p, PROFILE)
    assert (c.bursts, c.beats, c.cross_bank_splits) == (bursts, beats, splits)
    assert c.bank_bytes.tolist() == bank_bytes
    assert c.bytes == p.nbytes == sum(bank_bytes)


def test_aligned_bursts_have_no_splits_and_shift_costs_more():
    aligned = AccessPattern(RAM.base, 128, n1=32, s1=256)
    a = pattern_cost(RAM, aligned, PROFILE)
    assert a.bursts == 32 and a.beats == 32 * 16 and a.cross_bank_splits == 0
    s = pattern_cost(RAM, dataclasses.replace(aligned, base=RAM.base + 16), PROFILE)
    assert s.cross_bank_splits == 32  # every 128 B burst now straddles a bank line
    assert s.cycles > a.cycles
    assert s.cycles - a.cycles == 32 * PROFILE.timing.cross_bank_penalty_cycles


def test_cycles_formula_and_monotonic():
    p = AccessPattern(RAM.base, 128, n1=64, s1=128)
    c = pattern_cost("npuRAM3", p, PROFILE)
    want = max(1024, 8192 / (8 / 1.25)) + 64 * PROFILE.bus.burst_overhead_cycles
    assert c.cycles == want
    prev = -1.0
    for n in (1, 2, 5, 10, 40, 100):
        cyc = pattern_cost(RAM, AccessPattern(RAM.base, 96, n1=n, s1=200), PROFILE).cycles
        assert cyc > prev
        prev = cyc


def test_burst_rules():
    # 4 KiB boundary: [4032, 4288) -> [4032,4096) + [4096,4224) + [4224,4288)
    c = pattern_cost(RAM, AccessPattern(RAM.base + 4032, 256), PROFILE)
    assert (c.bursts, c.beats) == (3, 8 + 16 + 8)
    # partial first/last beats: bytes 4..13 touch two beats
    c = pattern_cost(RAM, AccessPattern(RAM.base + 4, 10), PROFILE)
    assert (c.bursts, c.beats) == (1, 2)
    # shorter max burst from the profile
    short = load_profile(overrides=["bus.max_burst_beats=8"])
    c = pattern_cost(short.pool_named("npuRAM3"), AccessPattern(RAM.base, 128), short)
    assert c.bursts == 2 and c.cross_bank_splits == 0


def test_conflicts_same_banks_cost_more_than_different_banks():
    # 16 B runs with a 128 B stride all hit one bank: bank 0 vs bank 1
    a = pattern_cost(RAM, AccessPattern(RAM.base, 16, n1=50, s1=128), PROFILE)
    b_same = pattern_cost(RAM, AccessPattern(RAM.base + 8192, 16, n1=50, s1=128), PROFILE)
    b_diff = pattern_cost(RAM, AccessPattern(RAM.base + 16, 16, n1=50, s1=128), PROFILE)
    assert a.bank_passes.tolist() == [100] + [0] * 7
    same = conflict_cycles([a, b_same], RAM, PROFILE)
    diff = conflict_cycles([a, b_diff], RAM, PROFILE)
    assert diff == (0.0, 0)
    assert same.bank_conflicts == 100 and same.cycles == 100 * PROFILE.timing.bank_conflict_cycles
    assert same.cycles >= diff.cycles
    three = conflict_cycles([a, b_same, a], RAM, PROFILE)  # 3-way: 3 serialized passes
    assert three.bank_conflicts == 200
    assert conflict_cycles([a], RAM, PROFILE) == (0.0, 0)


def test_xor_hash_spreads_a_bank_column():
    x = dataclasses.replace(RAM, xor_hash=True)
    col = AccessPattern(RAM.base, 16, n1=64, s1=128)
    assert np.count_nonzero(pattern_cost(RAM, col, PROFILE).bank_passes) == 1
    assert np.count_nonzero(pattern_cost(x, col, PROFILE).bank_passes) == 8


def test_cache_lru_and_miss_bytes():
    cache = NpuCache(PROFILE)
    sets, ways = PROFILE.cache.sets, PROFILE.cache.ways
    # ways+1 lines of one set, cycled: LRU evicts each line before its reuse -> all misses
    lines = np.tile(np.arange(ways + 1) * sets, 3)
    r = cache.access_lines(lines)
    assert (r.hits, r.misses) == (0, 3 * (ways + 1))
    cache.reset()
    r = cache.access_lines(np.tile(np.arange(ways) * sets, 3))  # fits: hits after the first round
    assert (r.hits, r.misses) == (2 * ways, ways)
    hyper = PROFILE.pool_named("hyperRAM")
    cache.reset()
    p = AccessPattern(hyper.base, 4096)
    cold = pattern_cost(hyper, p, PROFILE, cache=cache)
    warm = pattern_cost(hyper, p, PROFILE, cache=cache)
    assert (cold.cache_misses, cold.mem_bytes) == (64, 4096)
    assert (warm.cache_hits, warm.mem_bytes) == (64, 0)
    assert warm.cycles < cold.cycles
    w = pattern_cost(hyper, p, PROFILE, cache=cache, access="write")  # write-through
    assert w.mem_bytes == 4096


def test_cache_handles_millions_of_lines():
    cache = NpuCache(PROFILE)
    lines = (np.arange(2_000_000, dtype=np.int64) * 7919) % 100_000
    r = cache.access_lines(lines)
    assert r.hits + r.misses == 2_000_000


def test_closed_form_matches_the_enumerating_reference_on_odd_geometries():
    """burst_math against _kernels.burst_stats: random patterns on profiles with other beats, burst
    lengths, boundaries, bank counts (also not powers of two), XOR hashing and pool phases."""
    from npusim.memory import burst_math
    from npusim.memory import _kernels as K

    rng = np.random.default_rng(7)
    for _ in range(300):
        beat = int(2 ** rng.integers(0, 5))
        m = int(rng.integers(1, 20))
        bnd = int(2 ** rng.integers(max(3, int(np.log2(beat))), 11))
        il = int(2 ** rng.integers(0, 6))
        banks = int(rng.integers(1, 10))
        xor = bool(rng.integers(0, 2))
        pb = int(rng.integers(0, 4)) * 64 + (1 << 20)
        geo = burst_math.Geometry(beat, m, bnd, pb, il, banks, xor)
        if not geo.ok:
            continue
        p = AccessPattern(pb + int(rng.integers(0, 3000)), int(rng.integers(0, 900)), int(rng.integers(1, 5)),
                          int(rng.integers(-500, 3000)), int(rng.integers(1, 4)), int(rng.integers(-3000, 9000)),
                          int(rng.integers(1, 3)), int(rng.integers(0, 20000)))
        if p.extent()[0] < 0:
            continue
        bb = np.zeros(banks, dtype=np.int64)
        bp = np.zeros(banks, dtype=np.int64)
        want = K.burst_stats(runs(p), p.run, beat, m, bnd, banks * il, il, banks, xor, pb, bb, bp)
        got = burst_math.stats(p, geo)
        assert got[:3] == tuple(int(v) for v in want), (p, beat, m, bnd, il, banks, xor)
        assert got[3].tolist() == bb.tolist() and got[4].tolist() == bp.tolist()


@pytest.mark.parametrize("span", [40, 4000])
def test_npu_cache_equals_the_line_by_line_reference(span):
    """The vectorized LRU (chunks of `sets` lines) against _kernels.cache_access, line by line, on
    random mixes of long streams, re-reads, overlapping and strided patterns of a small cache
    (span: lines the bases spread over; wide spreads make most segments fresh, never seen before)."""
    from npusim.memory import _kernels as K

    import npusim.memory.cache as cache_mod

    prof = load_profile(overrides=["cache.size=4KiB"])  # 8 sets x 8 ways of 64 B
    rng = np.random.default_rng(11)
    for trial in range(60):
        cache_mod.MAX_PENDING = [256, 3][trial % 2]  # also rebuild the state from the history often
        cache, ref = NpuCache(prof), NpuCache(prof)
        for _ in range(16):
            base = int(rng.integers(0, span)) * 64 + int(rng.integers(0, 64))
            p = AccessPattern(base, int(rng.integers(1, 3000)), int(rng.integers(1, 5)), int(rng.integers(-700, 4000)),
                              int(rng.integers(1, 3)), int(rng.integers(0, 9000)))
            if p.extent()[0] < 0:
                continue
            got = cache.access(p)
            lines = K.run_lines(runs(p), p.run, ref.line)
            h, m, ref.clock = K.cache_access(ref.tags, ref.stamps, lines, ref.clock)
            assert (got.lines, got.hits, got.misses) == (lines.size, h, m), (trial, p)
        np.testing.assert_array_equal(np.sort(cache.tags * 1000 + cache.stamps, axis=1),
                                      np.sort(ref.tags * 1000 + ref.stamps, axis=1))
    cache_mod.MAX_PENDING = 256


def test_cache_fills_a_batch_of_fresh_segments_as_one_by_one():
    """`NpuCache._fill_all` (consecutive all-miss segments in one pass) leaves tags and stamps, way by
    way, as `_fill` of each segment in turn (the state rebuilt from many small weight reads)."""
    prof = load_profile(overrides=["cache.size=4KiB"])  # 8 sets x 8 ways of 64 B
    rng = np.random.default_rng(5)
    for trial in range(40):
        a, b = NpuCache(prof), NpuCache(prof)
        for c in (a, b):  # the same partly filled state, stamps with ties
            c._tags[:, :3] = np.arange(24).reshape(8, 3)
            c._stamps[:, :3] = rng.integers(0, 2, size=(8, 3)) if c is a else a._stamps[:, :3]
        clock, batch, line = 10, [], 1000
        for _ in range(int(rng.integers(2, 12))):
            n = int(rng.integers(1, 150))  # past ways x sets (64) too: the segment's own lines evict
            batch.append((line, n, clock))
            line += n + int(rng.integers(0, 20))
            clock += n
        a._fill_all(batch)
        for seg in batch:
            b._fill(*seg)
        np.testing.assert_array_equal(a._tags, b._tags, err_msg=str(trial))
        np.testing.assert_array_equal(a._stamps, b._stamps, err_msg=str(trial))


def test_cache_following_a_transcript_answers_as_the_cache_itself():
    """A cache following an earlier cache's transcript gives the same answers and counters, for the
    same look-ups and for look-ups that leave the transcript part way (the state is then rebuilt),
    and its state (tags, stamps) is the state of a cache that made the look-ups itself."""
    prof = load_profile(overrides=["cache.size=4KiB"])
    rng = np.random.default_rng(3)

    def pats(n):
        return [AccessPattern(int(rng.integers(0, 200)) * 64 + int(rng.integers(0, 64)), int(rng.integers(1, 900)),
                              int(rng.integers(1, 4)), int(rng.integers(0, 3000))) for _ in range(n)]

    seq = [(p, "write" if rng.random() < 0.2 else "read") for p in pats(40)]
    rec = NpuCache(prof)
    rec.record()
    want = [rec.access(p, a) for p, a in seq]
    t = rec.transcript()
    assert len(t) == len(seq)
    for cut in (len(seq), 25, 0):  # the same look-ups, leaving the transcript at 25 and at once
        other = seq[:cut] + [(p, "read") for p in pats(10)]
        live, fol = NpuCache(prof), NpuCache(prof)
        live.record()
        fol.record()
        fol.follow(t)
        for p, a in other:
            assert fol.access(p, a) == live.access(p, a)
            assert (fol.clock, fol.hits, fol.misses, fol.writes) == (live.clock, live.hits, live.misses, live.writes)
        np.testing.assert_array_equal(fol.tags, live.tags)
        np.testing.assert_array_equal(fol.stamps, live.stamps)
        assert [e[:3] for e in fol.transcript()] == [e[:3] for e in live.transcript()]
    same = NpuCache(prof)
    same.record()
    same.follow(t)
    assert [same.access(p, a) for p, a in seq] == want and same.transcript() is None  # nothing new


def test_cache_look_ups_in_groups_answer_as_one_by_one():
    """`NpuCache.access_all` of groups of look-ups (following a transcript, leaving it part way, or not
    following) gives the answers, counters and transcript of `access` one by one."""
    prof = load_profile(overrides=["cache.size=4KiB"])
    rng = np.random.default_rng(5)
    seq = [(AccessPattern(int(rng.integers(0, 200)) * 64, int(rng.integers(1, 900)), int(rng.integers(1, 4)),
                          int(rng.integers(0, 3000))), "write" if rng.random() < 0.2 else "read") for _ in range(30)]
    rec = NpuCache(prof)
    rec.record()
    for p, a in seq:
        rec.access(p, a)
    t = rec.transcript()
    other = seq[:17] + seq[20:] + seq[17:20]  # leaves the transcript at 17
    for follow in (True, False):
        for looks in (seq, other):
            one, grouped = NpuCache(prof), NpuCache(prof)
            for c in (one, grouped):
                c.record()
                if follow:
                    c.follow(t)
            want = [one.access(p, a) for p, a in looks]
            got, i = [], 0
            for n in (0, 3, 1, 5, 2, 30):
                got += grouped.access_all(looks[i:i + n])
                i += n
            assert got == want
            assert (grouped.clock, grouped.hits, grouped.misses, grouped.writes) == (
                one.clock, one.hits, one.misses, one.writes)
            assert (grouped.transcript() is None) == (one.transcript() is None)
            if one.transcript() is not None:
                assert [e[:3] for e in grouped.transcript()] == [e[:3] for e in one.transcript()]
