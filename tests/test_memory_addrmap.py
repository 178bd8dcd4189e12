"""Address map, merged pools, Memory helpers, runs, gather/scatter, banks."""

import numpy as np
import pytest

from npusim.errors import NpusimError
from npusim.memory import (AccessPattern, AddressError, AddressMap, Memory, bank_of, banks_of,
                           byte_addresses, covered_intervals, gather, runs, scatter)

NPURAM = [("npuRAM", ["npuRAM3", "npuRAM4", "npuRAM5", "npuRAM6"])]


def test_pools_and_unmapped(profile):
    am = AddressMap(profile)
    assert am.pool_of(0x34200000).name == "npuRAM3"
    assert am.pool_of(0x34270000 - 1).name == "npuRAM3"
    assert am.pool_of(0x34270000).name == "npuRAM4"
    assert am.pool_of(0x34350000 + 448 * 1024) is None  # just past npuRAM6
    assert am.pool_of(0x0) is None
    assert am.pool_of(0x70380000).perms == "r"
    assert am.is_mapped(0x34270000 - 8, 16)  # adjacent pools: contiguous mapped memory
    assert am.is_mapped(0x34200000 - 8, 16)  # cpuRAM2 ends where npuRAM3 starts
    assert not am.is_mapped(0x343C0000 - 8, 16)  # npuRAM6 end -> gap


def test_merge_adjacent_pools(profile):
    am = AddressMap(profile, merge=NPURAM)
    v = am.pool("npuRAM")
    assert (v.base, v.size) == (0x34200000, 4 * 448 * 1024)
    assert am.pool("npuRAM5") is v
    assert am.pool_of(0x342E0010) is v
    assert am.base_of("npuRAM5") == 0x342E0000
    with pytest.raises(NpusimError, match="not adjacent"):
        AddressMap(profile, merge=[("x", ["npuRAM3", "npuRAM5"])])
    with pytest.raises(NpusimError, match="no pool"):
        AddressMap(profile, merge=[("x", ["npuRAM3", "nope"])])
    from npusim.hw import load_profile
    odd = load_profile(overrides=["pool.npuRAM4.banks=4"])
    with pytest.raises(NpusimError, match="differ in banks"):
        AddressMap(odd, merge=[("x", ["npuRAM3", "npuRAM4"])])


def test_memory_lazy_view_read_write(profile):
    mem = Memory(profile)
    assert mem.existing(profile.pool_named("hyperRAM")) is None
    assert mem.read(0x90000000, 4).tolist() == [0, 0, 0, 0]
    assert mem.existing(profile.pool_named("hyperRAM")) is None  # reading does not allocate
    mem.write(0x90000010, b"\x01\x02\x03")
    assert mem.read(0x9000000F, 5).tolist() == [0, 1, 2, 3, 0]
    v = mem.view(0x90000010, 2)
    v[:] = 7
    assert mem.read(0x90000010, 3).tolist() == [7, 7, 3]
    mem.write(0x90000020, np.array([1, -1], dtype=np.int16))
    assert mem.read(0x90000020, 4).tolist() == [1, 0, 255, 255]
    with pytest.raises(AddressError):
        mem.view(0x34270000 - 4, 8)  # a view is one pool's array
    with pytest.raises(AddressError):
        mem.read(0x1000, 1)


def test_memory_read_write_span_adjacent_pools(profile):
    mem = Memory(profile)
    b4 = profile.pool_named("npuRAM4").base
    mem.write(b4 - 3, bytes(range(1, 9)))  # npuRAM3's last 3 bytes, npuRAM4's first 5
    assert mem.read(b4 - 4, 10).tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 0]
    assert mem.array("npuRAM3")[-3:].tolist() == [1, 2, 3]
    assert mem.array("npuRAM4")[:5].tolist() == [4, 5, 6, 7, 8]
    b6 = profile.pool_named("npuRAM6")
    big = np.arange(3 * 448 * 1024 + 100, dtype=np.uint32).view(np.uint8)[:3 * 448 * 1024 + 100]
    mem.write(profile.pool_named("npuRAM3").base + 50, big)  # npuRAM3..6
    assert np.array_equal(mem.read(profile.pool_named("npuRAM3").base + 50, big.size), big)
    assert mem.existing(b6) is not None
    with pytest.raises(AddressError, match="contiguous"):
        mem.write(b6.end - 2, b"abcd")  # runs past npuRAM6 into unmapped memory
    with pytest.raises(AddressError):
        mem.read(profile.pool_named("hyperRAM").end - 1, 2)


def test_runs_order_and_extent():
    p = AccessPattern(1000, 4, n1=3, s1=10, n2=2, s2=100, n3=2, s3=-1000)
    want = [1000 + i3 * -1000 + i2 * 100 + i1 * 10 for i3 in range(2) for i2 in range(2) for i1 in range(3)]
    assert runs(p).tolist() == want
    b = byte_addresses(p)
    assert (min(b), max(b) + 1) == p.extent()
    assert p.run_index(7) == (1, 0, 1)
    iv = covered_intervals(AccessPattern(0, 8, n1=4, s1=4))  # overlapping runs merge
    assert iv.tolist() == [[0, 20]]
    iv = covered_intervals(AccessPattern(0, 4, n1=3, s1=8))
    assert iv.tolist() == [[0, 4], [8, 12], [16, 20]]


def test_gather_scatter_roundtrip_and_order(profile):
    mem = Memory(profile)
    base = 0x34200000
    mem.write(base, np.arange(256, dtype=np.uint8))
    p = AccessPattern(base + 2, 3, n1=2, s1=10, n2=2, s2=100)
    got = gather(mem, p)
    want = np.concatenate([np.arange(a, a + 3) for a in (2, 12, 102, 112)]).astype(np.uint8)
    assert got.tolist() == want.tolist()
    q = AccessPattern(0x34210000, 3, n1=4, s1=16)
    scatter(mem, q, np.arange(12, dtype=np.uint8) + 1)
    assert mem.read(0x34210000, 51).tolist()[16:19] == [4, 5, 6]
    assert gather(mem, q).tolist() == list(range(1, 13))


def test_gather_scatter_across_pools_and_unmapped(profile):
    mem = Memory(profile)
    end6 = 0x34350000 + 448 * 1024
    mem.write(0x34270000 - 2, b"\x05\x06")
    mem.write(0x34270000, b"\x07\x08")
    assert gather(mem, AccessPattern(0x34270000 - 2, 4)).tolist() == [5, 6, 7, 8]
    p = AccessPattern(end6 - 2, 4)  # two bytes fall off the end of the last RAM
    scatter(mem, p, np.array([1, 2, 3, 4], np.uint8))  # must not crash
    assert gather(mem, p).tolist() == [1, 2, 0, 0]
    big = AccessPattern(0x34200000, 448, n1=2400, s1=448)  # ~1 MB over two pools
    data = (np.arange(big.nbytes) % 251).astype(np.uint8)
    scatter(mem, big, data)
    assert np.array_equal(gather(mem, big), data)
    with pytest.raises(NpusimError, match="bytes of data"):
        scatter(mem, big, data[:-1])


def test_bank_of_interleave_and_xor(profile):
    p = profile.pool_named("npuRAM3")
    assert bank_of(p, p.base) == (0, 0)
    assert bank_of(p, p.base + 16) == (1, 0)
    assert bank_of(p, p.base + 127) == (7, 0)
    assert bank_of(p, p.base + 128 + 48) == (3, 1)
    import dataclasses
    x = dataclasses.replace(p, xor_hash=True)
    assert bank_of(x, x.base + 128 + 48) == (3 ^ 1, 1)
    a = p.base + np.arange(0, 4096, 16)
    bk, ln = banks_of(x, a)
    assert [bank_of(x, int(v)) for v in a] == list(zip(bk.tolist(), ln.tolist()))
    # same-bank stride of one bank line: all bank 0 without hashing, spread with it
    col = p.base + np.arange(8) * 128
    assert set(banks_of(p, col)[0].tolist()) == {0}
    assert set(banks_of(x, col)[0].tolist()) == set(range(8))
