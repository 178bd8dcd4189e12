"""Access checking: every fault class at exact addresses, ordering, and property tests."""


import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from npusim.errors import NpusimError

from npusim.faults import render_text
from npusim.hw import load_profile
from npusim.memory import (AccessPattern, AddressMap, Allocator, Checker, Context, RegionTable,
                           bad_descriptor, byte_addresses, check_alignment, region_overlaps,
                           write_write_races)
from npusim.memory.pattern_math import covered
from npusim.program.model import Buffer

PROFILE = load_profile()
RAM3, RAM6_END, FLASH = 0x34200000, 0x343C0000, 0x70380000


def _setup():
    am = AddressMap(PROFILE)
    t = RegionTable(am)
    return am, t, Checker(am, t)


def _live(t, name, start, size, kind="activation", **kw):
    r = t.add(name, kind, start, size, **kw)
    t.mark_range_written(start, size)
    return r


def test_clean_access_is_none():
    am, t, ck = _setup()
    _live(t, "a", RAM3 + 0x1000, 7200)
    assert ck.check(AccessPattern(RAM3 + 0x1000, 480, n1=15, s1=480), "read", "SE0") is None
    assert ck.check(AccessPattern(RAM3 + 0x1000, 0), "read", "SE0") is None


def test_buffer_overflow_exact_and_relation_text():
    am, t, ck = _setup()
    start = RAM3 + 0x1000
    _live(t, "conv2.in", start, 7200, producer="conv1", origin="buffer 'conv2.in' of the plan")
    # runs at +0, +2416, +4832, +7248: the 4th lies wholly 48 B after the region
    f = ck.check(AccessPattern(start, 48, n1=4, s1=2416), "read", "SE0", 3, 17, "conv2")
    assert f.cls == "buffer-overflow" and f.address == start + 7248
    assert (f.relation.where, f.relation.offset) == ("after", 48)
    assert (f.unit, f.epoch, f.command, f.layer, f.size) == ("SE0", 3, 17, "conv2", 48)
    assert f.details["run"] == 3 and f.details["stream_offset"] == 3 * 48
    assert f.region.name == "conv2.in" and f.region.size == 7200
    text = render_text([f])
    assert "48 bytes after the 7200-byte region 'conv2.in'" in text
    # line stride rounded by the hardware (480 -> 512): 14*512 + 32 = 7200 is the first bad byte
    f = ck.check(AccessPattern(start, 480, n1=15, s1=512), "read", "SE0")
    assert f.cls == "buffer-overflow" and f.address == start + 7200 and f.details["run"] == 14
    assert (f.relation.where, f.relation.offset) == ("after", 0)


def test_buffer_underflow_negative_stride():
    am, t, ck = _setup()
    start = RAM3 + 0x2000
    _live(t, "x", start, 1024)
    f = ck.check(AccessPattern(start + 512, 64, n1=4, s1=-256), "read", "SE1")
    # runs at +512, +256, +0, -256: run 3 is 256 B before the start
    assert f.cls == "buffer-underflow" and f.address == start - 256
    assert (f.relation.where, f.relation.offset) == ("before", 256)


def test_out_of_pool_has_priority_on_the_same_byte():
    am, t, ck = _setup()
    _live(t, "tail", RAM6_END - 256, 256)
    f = ck.check(AccessPattern(RAM6_END - 256, 128, n1=3, s1=128), "read", "SE2")
    assert f.cls == "out-of-pool" and f.address == RAM6_END
    assert f.region.name == "tail" and (f.relation.where, f.relation.offset) == ("after", 0)
    assert "unmapped" in f.rule and f.level == "hardware"
    # no region table at all: still a bus error
    f = Checker(am).check(AccessPattern(0x1000, 4), "write", "SE0")
    assert f.cls == "out-of-pool" and f.address == 0x1000 and f.region is None
    assert Checker(am).check(AccessPattern(RAM3, 4), "write", "SE0") is None


def test_write_to_readonly():
    am, t, ck = _setup()
    _live(t, "w", FLASH + 0x100, 4096, kind="weight")
    assert ck.check(AccessPattern(FLASH + 0x100, 4096), "read", "SE1") is None
    f = ck.check(AccessPattern(FLASH + 0x140, 64), "write", "SE5")
    assert f.cls == "write-to-readonly" and f.address == FLASH + 0x140
    assert (f.relation.where, f.relation.offset) == ("inside", 0x40)
    assert "octoFlash is read-only" in f.rule


def test_use_after_free_and_quarantine():
    am = AddressMap(PROFILE)
    a = Allocator(am)
    ck = Checker(am, a.regions)
    r = a.alloc("npuRAM3", 256, 128, name="tmp", kind="scratch")
    a.regions.mark_range_written(r.start, 256)
    a.free(r)
    f = ck.check(AccessPattern(r.start + 32, 16), "read", "SE3")
    assert f.cls == "use-after-free" and f.address == r.start + 32
    assert f.region.state == "freed" and (f.relation.where, f.relation.offset) == ("inside", 32)


def test_uninitialized_read_first_gap():
    am, t, ck = _setup()
    start = RAM3 + 0x4000
    t.add("act", "activation", start, 1024, producer="relu1")
    f = ck.check(AccessPattern(start, 64), "read", "CA0")
    assert f.cls == "uninitialized-read" and f.address == start and f.region.state == "unwritten"
    t.mark_written(AccessPattern(start, 100, n1=4, s1=128))  # writes [0,100) [128,228) ...
    assert t.named("act").state == "live"
    f = ck.check(AccessPattern(start, 512), "read", "SE0")
    assert f.address == start + 100 and f.cls == "uninitialized-read"
    assert ck.check(AccessPattern(start + 128, 100, n1=3, s1=128), "read", "SE0") is None
    assert ck.check(AccessPattern(start, 1024), "write", "SE5") is None  # writes never read


def test_first_bad_byte_wins_across_classes():
    am, t, ck = _setup()
    start = RAM3 + 0x8000
    t.add("r", "activation", start, 1000)
    t.mark_written(AccessPattern(start, 1000))
    t.clear_written(start + 700, 1)
    # run 0 [0,600) fine, run 1 [600,1200): byte 700 unwritten comes before the overflow at 1000
    f = ck.check(AccessPattern(start, 600, n1=2, s1=600), "read", "SE0")
    assert f.cls == "uninitialized-read" and f.address == start + 700
    # an earlier run that overflows wins over a later run's uninitialized byte
    f = ck.check(AccessPattern(start + 800, 300, n1=2, s1=-200), "read", "SE0")
    assert f.cls == "buffer-overflow" and f.address == start + 1000


def test_cross_context_access():
    am = AddressMap(PROFILE)
    a = Allocator(am)
    a.add_context(Context("cam", {"npuRAM4": (0, 0x8000)}))
    a.add_context(Context("kws", {"npuRAM4": (0x8000, 0x8000)}))
    r = a.alloc("npuRAM4", 512, 32, name="cam.out", kind="output", context="cam")
    a.regions.mark_range_written(r.start, 512)
    ck = Checker(am, a.regions)
    assert ck.check(AccessPattern(r.start, 512), "read", "SE0", context="cam") is None
    f = ck.check(AccessPattern(r.start + 64, 32), "read", "SE0", context="kws")
    assert f.cls == "cross-context-access" and f.address == r.start + 64
    assert f.context == "kws" and f.region.owner == "cam" and "'cam'" in f.rule


def test_overflow_into_padding_guard_and_provenance_by_name():
    am = AddressMap(PROFILE)
    a = Allocator(am)
    r = a.alloc("npuRAM3", 100, 128, pad=28, name="in0", kind="input")
    a.regions.mark_range_written(r.start, 128)
    ck = Checker(am, a.regions)
    f = ck.check(AccessPattern(r.start, 128), "read", "SE0")
    assert f.cls == "buffer-overflow" and f.address == r.start + 100
    assert "padding guard 'in0.pad'" in f.rule and f.details["hit_region"] == "in0.pad"
    # a pattern whose base is in the guard, named by provenance
    f = ck.check(AccessPattern(r.start + 110, 4), "read", "SE0", provenance="in0")
    assert f.cls == "buffer-overflow" and (f.relation.where, f.relation.offset) == ("after", 10)


def test_wild_access_reports_nearest_region():
    am, t, ck = _setup()
    _live(t, "a", RAM3 + 0x1000, 256)
    f = ck.check(AccessPattern(RAM3 + 0x1000 + 256 + 40, 8), "read", "SE0")
    assert f.cls == "buffer-overflow" and f.region.name == "a"
    assert (f.relation.where, f.relation.offset) == ("after", 40)
    f = ck.check(AccessPattern(RAM3 + 0x1000 - 8, 4), "read", "SE0")
    assert f.cls == "buffer-underflow" and (f.relation.where, f.relation.offset) == ("before", 8)


def test_from_program_buffers():
    bufs = [Buffer("x", "input", "npuRAM3", 0, 3072, 32),
            Buffer("w", "weight", "octoFlash", 0x40, 2304, 8),
            Buffer("y", "activation", "npuRAM4", 0x100, 3072, 128, producer="conv0")]
    t = RegionTable.from_program_buffers(bufs, PROFILE)
    ck = Checker(t.map, t)
    assert t.named("x").state == "live" and t.named("w").perms == "r"
    assert ck.check(AccessPattern(FLASH + 0x40, 2304), "read", "SE1") is None
    f = ck.check(AccessPattern(0x34270100, 16), "read", "SE2")
    assert f.cls == "uninitialized-read" and f.region.producer == "conv0"
    assert f.region.origin == "buffer 'y' of the plan"


def test_misaligned_bad_descriptor_race_and_region_overlap():
    am, t, ck = _setup()
    _live(t, "o", RAM3, 4096, kind="output")
    f = check_alignment(RAM3 + 16, 128, "base", "SE0", 2, 9, "conv3", regions=t)
    assert f.cls == "misaligned-access" and f.address == RAM3 + 16
    assert f.rule == "field 'base': required alignment 128, actual residue 16"
    assert check_alignment(RAM3 + 256, 128, "base") is None
    f = check_alignment(832, 128, "s1", is_address=False)
    assert f.address is None and f.details["residue"] == 832 % 128
    d = bad_descriptor("in_layout image but C=16 needs blocked16", "CA0", 1, 4, "conv1",
                       field="in_layout", value="image")
    assert d.cls == "bad-descriptor" and d.details == {"field": "in_layout", "value": "image"}
    w1 = AccessPattern(RAM3, 64, n1=4, s1=256)  # [0,64) [256,320) [512,576) [768,832)
    w2 = AccessPattern(RAM3 + 300, 16, n1=2, s1=400)  # [300,316) [700,716)
    w3 = AccessPattern(RAM3 + 2000, 64)
    races = write_write_races([("SE5", w1), ("SE6", w2), ("SE7", w3)], epoch=4, layer="add1", regions=t)
    assert len(races) == 1
    r = races[0]
    assert (r.cls, r.address, r.unit, r.details["other_unit"]) == ("write-write-race", RAM3 + 300, "SE5", "SE6")
    assert "SE5 and SE6" in r.rule and r.region.name == "o"
    t.add("p", "activation", RAM3 + 100, 64, owner="ctxA")
    ov = region_overlaps(t)
    assert [(f.cls, f.address, f.size) for f in ov] == [("pool-overlap", RAM3 + 100, 64)]


_pat = st.tuples(st.integers(1, 64), st.integers(1, 6), st.integers(-200, 200),
                 st.integers(1, 3), st.integers(-700, 700))


@settings(max_examples=80, deadline=None)
@given(p=_pat, shift=st.integers(0, 3000))
def test_property_in_bounds_never_faults(p, shift):
    run, n1, s1, n2, s2 = p
    am, t, ck = _setup()
    pat = AccessPattern(RAM3 + 5000 + shift, run, n1, s1, n2, s2)
    b = byte_addresses(pat)
    lo, hi = int(b.min()), int(b.max()) + 1
    assume(t.map.pool_of(lo) is not None)
    base_region = _live(t, "r", lo, hi - lo)
    assert ck.check(pat, "read", "SE0", provenance=base_region) is None
    assert ck.check(pat, "write", "SE0", provenance=base_region) is None


@settings(max_examples=80, deadline=None)
@given(p=_pat, shift=st.integers(0, 3000), low=st.booleans())
def test_property_one_byte_out_faults_exactly_there(p, shift, low):
    run, n1, s1, n2, s2 = p
    am, t, ck = _setup()
    pat = AccessPattern(RAM3 + 5000 + shift, run, n1, s1, n2, s2)
    b = byte_addresses(pat)
    lo, hi = int(b.min()), int(b.max()) + 1
    assume(hi - lo >= 2)
    out = lo if low else hi - 1  # the single byte left outside the region
    r = _live(t, "r", lo + 1, hi - lo - 1) if low else _live(t, "r", lo, hi - lo - 1)
    f = ck.check(pat, "read", "SE0", provenance=r)
    assert f is not None and f.address == out
    assert f.cls == ("buffer-underflow" if low else "buffer-overflow")
    assert f.details["stream_offset"] == int(np.flatnonzero(b == out)[0])
    assert f.relation.offset == (1 if low else 0)


def test_big_strided_pattern_checks_clean_and_finds_its_one_bad_byte():
    am, t, ck = _setup()
    hyper = 0x90000000
    _live(t, "big", hyper, 2 << 20)
    assert ck.check(AccessPattern(hyper, 1024, n1=1024, s1=2048), "read", "SE0") is None  # 1 MiB, 1024 runs
    f = ck.check(AccessPattern(hyper, 1024, n1=1025, s1=2048), "read", "SE0")  # run 1024 starts at the end
    assert f.cls == "buffer-overflow" and f.address == hyper + (2 << 20) and f.details["run"] == 1024


def test_bad_access_kind():
    am, t, ck = _setup()
    with pytest.raises(NpusimError, match="access must be"):
        ck.check(AccessPattern(RAM3, 4), "exec", "SE0")


def test_region_spanning_adjacent_pools():
    am, t, ck = _setup()
    edge = 0x34270000  # npuRAM3 | npuRAM4
    t.add("span", "activation", edge - 256, 512)
    t.mark_written(AccessPattern(edge - 256, 256))
    t.mark_written(AccessPattern(edge, 100))
    f = ck.check(AccessPattern(edge - 256, 64, n1=8, s1=64), "read", "SE0")
    assert f.cls == "uninitialized-read" and f.address == edge + 100 and f.details["run"] == 5
    t.mark_written(AccessPattern(edge + 100, 156))
    assert ck.check(AccessPattern(edge - 256, 64, n1=8, s1=64), "read", "SE0") is None
    f = ck.check(AccessPattern(edge - 256, 64, n1=9, s1=64), "read", "SE0")
    assert f.cls == "buffer-overflow" and f.address == edge + 256
    with pytest.raises(NpusimError, match="not inside mapped memory"):
        t.add("off", "scratch", RAM6_END - 8, 16)


def test_marking_an_epochs_writes_at_once_equals_one_by_one():
    """`RegionTable.mark_intervals` of the union of several patterns' covered intervals (what the
    engine marks after an epoch's writes) leaves the written bytes and the region states that
    `mark_written` of each pattern in turn leaves, from random earlier states."""
    from npusim.engine.plan import written_intervals

    rng = np.random.default_rng(7)
    base = PROFILE.pool_named("npuRAM3").base
    for trial in range(60):
        a, b = RegionTable(AddressMap(PROFILE)), RegionTable(AddressMap(PROFILE))
        for t in (a, b):
            for k in range(6):
                t.add(f"r{k}", "activation", base + k * 4096, 4096)
        for _ in range(int(rng.integers(0, 4))):  # an earlier state
            p = AccessPattern(base + int(rng.integers(0, 20000)), int(rng.integers(1, 300)))
            a.mark_written(p)
            b.mark_written(p)
        pats = [AccessPattern(base + int(rng.integers(0, 20000)), int(rng.integers(0, 200)), int(rng.integers(1, 6)),
                              int(rng.integers(150, 700)), int(rng.integers(1, 3)), int(rng.integers(0, 5000)))
                for _ in range(int(rng.integers(1, 5)))]
        for p in pats:
            a.mark_written(p)
        got = written_intervals(pats)
        if got is not None:
            b.mark_intervals(*got)
        for x, y in zip(a.written(), b.written()):
            np.testing.assert_array_equal(x, y, err_msg=str(trial))
        assert [r.state for r in a.regions] == [r.state for r in b.regions], trial


def test_written_window_merge_equals_the_numpy_union():
    """A write meeting a few written intervals is merged in Python (`RegionTable._merge_window`), one meeting
    many with numpy (`_union`): from random states of up to 20 intervals, both leave the same written bytes."""
    from npusim.memory.regions import SMALL_WINDOW

    rng = np.random.default_rng(11)
    base = PROFILE.pool_named("npuRAM3").base
    windows = set()
    for trial in range(200):
        a, b = RegionTable(AddressMap(PROFILE)), RegionTable(AddressMap(PROFILE))
        for _ in range(int(rng.integers(1, 20))):
            lo = base + int(rng.integers(0, 4000))
            hi = lo + int(rng.integers(1, 60))
            for t in (a, b):
                t._insert(lo, hi)
        p = AccessPattern(base + int(rng.integers(0, 2000)), int(rng.integers(1, 40)), int(rng.integers(2, 40)),
                          int(rng.integers(41, 120)))
        cs, ce = covered(p)
        i = int(np.searchsorted(a.written()[1], cs[0], side="left"))
        j = int(np.searchsorted(a.written()[0], ce[-1], side="right"))
        if i >= j:
            continue
        windows.add(min(j - i, SMALL_WINDOW + 1))
        a._union(cs, ce)
        b._merge_window(i, j, cs.tolist(), ce.tolist())
        for x, y in zip(a.written(), b.written()):
            np.testing.assert_array_equal(x, y, err_msg=str(trial))
    assert {1, SMALL_WINDOW + 1} <= windows  # both sizes were met


def test_clones_share_regions_until_one_changes_them():
    """A clone shares its template's Region objects (copy on write): written bytes and frees in one clone
    change neither the template nor another clone, and each clone reads its own states."""
    base = PROFILE.pool_named("npuRAM3").base
    tpl = RegionTable(AddressMap(PROFILE))
    for k in range(4):
        tpl.add(f"r{k}", "activation", base + k * 256, 256)
    a, b = tpl.clone(), tpl.clone()
    assert a.regions[0] is tpl.regions[0]  # shared until changed
    a.mark_written(AccessPattern(base, 300))  # r0 whole, r1 in part: both go live
    a.free(a.named("r3"))
    assert [r.state for r in a.regions] == ["live", "live", "unwritten", "freed"]
    assert [r.state for r in tpl.regions] == ["unwritten"] * 4
    assert [r.state for r in b.regions] == ["unwritten"] * 4
    c = a.clone()  # a clone of a changed clone: both copy on their next change
    c.mark_written(AccessPattern(base + 512, 8))
    a.free(a.named("r0"))
    assert [r.state for r in c.regions] == ["live", "live", "live", "freed"]
    assert [r.state for r in a.regions] == ["freed", "live", "unwritten", "freed"]
    c.remove(c.named("r1"))
    c.free(c.named("r2"))
    assert [(r.name, r.state) for r in c.regions] == [("r0", "live"), ("r2", "freed"), ("r3", "freed")]
    assert a.named("r2").state == "unwritten"


def test_clean_by_a_spec_equals_clean_as_states_change():
    """`Checker.clean_by(clean_spec(...))` equals `Checker.clean` for reads and writes of a clone whose source
    and whose own written bytes change (writes, clears, frees) after the specs were made."""
    rng = np.random.default_rng(21)
    base = PROFILE.pool_named("npuRAM3").base
    for trial in range(40):
        src = RegionTable(AddressMap(PROFILE))
        for k in range(5):
            src.add(f"r{k}", "activation", base + k * 512, 512)
        src.mark_written(AccessPattern(base + int(rng.integers(0, 1500)), int(rng.integers(1, 900))))
        t = src.clone()
        ck = Checker(AddressMap(PROFILE), t)
        accs = [(AccessPattern(base + int(rng.integers(0, 2400)), int(rng.integers(1, 300))),
                 "write" if rng.random() < 0.3 else "read", f"r{int(rng.integers(0, 5))}" if rng.random() < 0.5
                 else None) for _ in range(12)]
        specs = [ck.clean_spec(p, a, prov, *p.extent()) for p, a, prov in accs]
        for step in range(6):
            for (p, a, prov), spec in zip(accs, specs):
                assert spec is not None
                assert ck.clean_by(spec) == ck.clean(p, a, prov, *p.extent()), (trial, step)
            op = int(rng.integers(0, 4))
            lo, n = base + int(rng.integers(0, 2400)), int(rng.integers(1, 400))
            if op == 0:
                t.mark_written(AccessPattern(lo, n))
            elif op == 1:
                t.clear_written(lo, n)
            elif op == 2:
                t.free(t.named(f"r{int(rng.integers(0, 5))}"))
            else:
                src.mark_written(AccessPattern(lo, n))  # the source changes: the clone is not affected
