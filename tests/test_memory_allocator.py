"""Allocator: alignment, padding, contexts and partitions, quarantine, leaks, fragmentation, monitor."""

import pytest
from hypothesis import given, settings, strategies as st

from npusim.errors import NpusimError
from npusim.hw import load_profile
from npusim.memory import AddressMap, Allocator, Context, Monitor, OutOfMemoryError

PROFILE = load_profile()
RAM3 = 0x34200000
MERGE = [("npuRAM", ["npuRAM3", "npuRAM4", "npuRAM5", "npuRAM6"])]


def _alloc():
    return Allocator(AddressMap(PROFILE))


@settings(max_examples=40, deadline=None)
@given(reqs=st.lists(st.tuples(st.integers(1, 3000), st.sampled_from([8, 16, 32, 128, 4096])),
                     min_size=1, max_size=25))
def test_alignment_and_disjoint(reqs):
    a = _alloc()
    got = [a.alloc("npuRAM3", size, align) for size, align in reqs]
    for r, (size, align) in zip(got, reqs):
        assert r.start % align == 0 and r.size == size
        assert RAM3 <= r.start and r.end <= RAM3 + 448 * 1024
    spans = sorted((r.start, r.end) for r in got)
    assert all(e <= s for (_, e), (s, _) in zip(spans, spans[1:]))
    assert a.live_bytes == a.peak_bytes == sum(s for s, _ in reqs)


def test_padding_adds_guard_region():
    a = _alloc()
    r = a.alloc("npuRAM3", 100, 128, pad=128, name="x", kind="input")
    nxt = a.alloc("npuRAM3", 8, 8, name="y")
    assert (r.start, r.end) == (RAM3, RAM3 + 100)
    g = a.regions.named("x.pad")
    assert (g.kind, g.start, g.end) == ("guard", RAM3 + 100, RAM3 + 228)
    assert nxt.start == RAM3 + 232  # 228 rounded up to its 8 B alignment
    assert a.live_bytes == 108  # padding is not counted as live payload


def test_contexts_partitions_and_overlap_fault():
    a = _alloc()
    assert a.add_context(Context("cam", {"npuRAM3": (0, 0x10000)})) == []
    assert a.add_context(Context("kws", {"npuRAM3": (0x10000, 0x8000)})) == []
    r = a.alloc("npuRAM3", 64, 32, context="kws")
    assert r.start == RAM3 + 0x10000 and r.owner == "kws"
    faults = a.add_context(Context("bad", {"npuRAM3": (0xF000, 0x2000)}))
    assert len(faults) == 2  # overlaps cam [0, 0x10000) and kws [0x10000, 0x18000)
    f = faults[0]
    assert f.cls == "pool-overlap" and f.address == RAM3 + 0xF000 and f.size == 0x1000
    assert f.details["other_context"] == "cam" and "'bad'" in f.rule and "'cam'" in f.rule
    assert faults[1].address == RAM3 + 0x10000 and faults[1].size == 0x1000
    assert a.faults == faults
    with pytest.raises(OutOfMemoryError):
        a.alloc("npuRAM3", 0x8001, 8, context="kws")
    with pytest.raises(NpusimError, match="no partition"):
        a.alloc("npuRAM4", 8, context="cam")
    with pytest.raises(NpusimError, match="not inside pool"):
        a.add_context(Context("huge", {"npuRAM3": (0, 0x80000)}))


def test_partition_in_merged_pool_relative_to_member_base():
    a = Allocator(AddressMap(PROFILE, merge=MERGE))
    a.add_context(Context("c", {"npuRAM5": (0x100, 0x1000)}))
    r = a.alloc("npuRAM", 16, 16, context="c")
    assert r.start == 0x342E0100 and r.pool == "npuRAM"


def test_quarantine_then_fragmentation_reuse():
    a = Allocator(AddressMap(PROFILE), quarantine_bytes=4096)
    x = a.alloc("npuRAM3", 1024, 128, name="x")
    y = a.alloc("npuRAM3", 1024, 128, name="y")
    a.alloc("npuRAM3", 1024, 128, name="z")
    a.free(y)
    assert y.state == "freed" and a.quarantined_bytes == 1024
    w = a.alloc("npuRAM3", 512, 128, name="w")
    assert w.start == RAM3 + 3072  # y's hole is quarantined: not reused yet
    a.flush_quarantine()
    v = a.alloc("npuRAM3", 512, 128, name="v")
    assert v.start == y.start  # first fit reuses the hole
    with pytest.raises(NpusimError, match="double free"):
        a.free(x) or a.free(x)


def test_quarantine_released_when_pool_is_full():
    a = Allocator(AddressMap(PROFILE), quarantine_bytes=1 << 30)
    a.add_context(Context("c", {"npuRAM3": (0, 4096)}))
    r = a.alloc("npuRAM3", 4096, 8, context="c")
    a.free(r)
    r2 = a.alloc("npuRAM3", 4096, 8, context="c")  # only possible by releasing the quarantine
    assert r2.start == r.start
    assert r not in a.regions.regions


def test_leaks_and_monitor_history():
    a = _alloc()
    a.add_context(Context("c1", {"npuRAM3": (0, 0x4000)}))
    a.add_context(Context("c2", {"npuRAM3": (0x4000, 0x4000)}))
    mon = Monitor(a)
    r1 = a.alloc("npuRAM3", 1000, 8, context="c1")
    a.alloc("npuRAM3", 300, 8, context="c1")
    a.alloc("npuRAM3", 200, 8, context="c2")
    s1 = mon.sample()
    assert (s1["live_bytes"], s1["peak_bytes"], s1["contexts"]) == (1500, 1500, {"c1": 1300, "c2": 200})
    a.free(r1)
    leaks = a.close_context("c1")
    s2 = mon.sample(time=2.5)
    assert [r.size for r in leaks] == [300]
    assert (s2["live_bytes"], s2["peak_bytes"], s2["leaked_bytes"], s2["time"]) == (500, 1500, 300, 2.5)
    assert [h["live_bytes"] for h in mon.history] == [1500, 500]
    assert [r.size for r in a.leaks()] == [300, 200]


def test_bad_arguments():
    a = _alloc()
    for kw in ({"size": 0}, {"size": 8, "align": 3}, {"size": 8, "pad": -1}):
        with pytest.raises(NpusimError):
            a.alloc("npuRAM3", **{"align": 8, **kw})
    with pytest.raises(NpusimError, match="no pool"):
        a.alloc("nowhere", 8)
    with pytest.raises(NpusimError, match="unknown context"):
        a.alloc("npuRAM3", 8, context="ghost")
