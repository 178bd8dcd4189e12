"""The runtime library's pool: free list, coalescing, alignment, fragmentation, high-water, planted bugs."""

import pytest

from npusim.errors import UsageError
from npusim.memory.runtime_pool import RuntimePool

BASE = 0x34200000


def test_alloc_free_coalesces_and_bookkeeps():
    pool = RuntimePool("p", BASE, BASE + 4096, granule=32)
    a = pool.alloc(100, align=32, name="a")
    b = pool.alloc(200, align=32, name="b")
    c = pool.alloc(50, align=32, pad=14, name="c")
    assert (a.addr, a.block) == (BASE, 128)  # 100 rounded up to the 32 B granule
    assert (b.addr, b.block) == (BASE + 128, 224)
    assert (c.addr, c.block) == (BASE + 352, 64)  # 50 + 14 B of padding
    assert pool.map(b) == b.addr
    st = pool.stats()
    assert (st.in_use, st.live, st.free, st.extents, st.high_water, st.high_end) == (416, 416, 4096 - 416, 1, 416, 416)
    pool.free(b)  # a hole between a and c
    st = pool.stats()
    assert st.extents == 2 and st.largest_free == 4096 - 416
    assert st.fragmentation == pytest.approx(1 - (4096 - 416) / (4096 - 192))
    pool.free(a)  # joins the hole: [BASE, BASE + 352) is one extent
    assert pool.extents() == [(BASE, BASE + 352), (BASE + 416, BASE + 4096)]
    pool.free(c)
    assert pool.extents() == [(BASE, BASE + 4096)]
    st = pool.stats()
    assert (st.in_use, st.fragmentation, st.high_water, st.allocs, st.frees) == (0, 0.0, 416, 3, 3)


def test_alignment_leaves_the_gap_free_and_exhaustion_is_data():
    pool = RuntimePool("p", BASE, BASE + 1024, granule=8)
    pool.alloc(8, align=8)
    big = pool.alloc(256, align=256)
    assert big.addr == BASE + 256
    assert pool.extents()[0] == (BASE + 8, BASE + 256)  # the alignment gap stays free (a fragment)
    assert pool.alloc(1024) is None  # the board's NULL, not an exception
    assert pool.stats().failed == 1
    assert pool.alloc(200, align=8).addr == BASE + 8  # first fit: the gap


def test_best_fit_takes_the_smallest_hole():
    for fit, want in (("first-fit", BASE), ("best-fit", BASE + 768)):
        pool = RuntimePool("p", BASE, BASE + 2048, granule=8, fit=fit)
        x = [pool.alloc(n) for n in (512, 256, 128, 256)]  # [0,512) [512,768) [768,896) [896,1152)
        pool.free(x[0])
        pool.free(x[2])  # holes of 512 and 128 B, and the 896 B tail
        assert pool.alloc(100).addr == want, fit


def test_short_free_loses_bytes_every_free():
    pool = RuntimePool("p", BASE, BASE + 4096, granule=32, short_free=16)
    for _ in range(10):
        a = pool.alloc(64, owner="x")
        pool.free(a)
    st = pool.stats()
    assert (st.live, st.lost, st.in_use) == (0, 160, 160)
    assert pool.held["x"] == 160
    assert pool.extents() == [(BASE + 160, BASE + 4096)]  # the lost bytes are neither live nor free


def test_misuse_is_a_usage_error():
    pool = RuntimePool("p", BASE, BASE + 1024)
    a = pool.alloc(64)
    pool.free(a)
    with pytest.raises(UsageError, match="double free"):
        pool.free(a)
    with pytest.raises(UsageError, match="not a live block"):
        pool.map(a)
    for kw in ({"size": 0}, {"size": 8, "align": 3}, {"size": 8, "pad": -1}):
        with pytest.raises(UsageError):
            pool.alloc(**kw)
    for args in ((BASE, BASE), (BASE, BASE + 8, 3), (BASE, BASE + 8, 8, "worst-fit")):
        with pytest.raises(UsageError):
            RuntimePool("q", *args)
