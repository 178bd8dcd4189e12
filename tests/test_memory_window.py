"""`memory.window`: what gather and scatter work out from a pattern and the address map alone, kept by
a caller (the engine keeps one per stream of an epoch plan). Moving bytes with a kept window must do
exactly what moving them without does: dense and strided patterns, runs that overlap, patterns across
pools or off the map, a read-only pool, a pool never written."""

from __future__ import annotations

import numpy as np
import pytest

from npusim.memory import AccessPattern, Memory, gather, scatter, window

RAM3, RAM4, FLASH = 0x34200000, 0x34270000, 0x70380000

PATTERNS = [
    AccessPattern(RAM3 + 64, 1536, n1=24, s1=1536, n2=2, s2=1536 * 24),  # dense: one run of the pool
    AccessPattern(RAM3 + 8, 576, n1=49, s1=640),  # lines with a gap
    AccessPattern(RAM3 + 2, 3, n1=2, s1=10, n2=2, s2=100),
    AccessPattern(RAM3 + 16, 32, n1=4, s1=16),  # runs overlap: not disjoint
    AccessPattern(RAM4 - 100, 64, n1=4, s1=64),  # across two pools
    AccessPattern(0x34350000 + 448 * 1024 - 8, 32),  # off the end of the map
    AccessPattern(RAM3 + 1000, 16, n1=3, s1=-32),  # a negative stride
    AccessPattern(RAM3, 0, n1=5, s1=16),  # empty
    AccessPattern(FLASH + 128, 256, n1=2, s1=512),  # a read-only pool
]


def _memory(profile, seed):
    mem = Memory(profile)
    rng = np.random.default_rng(seed)
    mem.write(RAM3, rng.integers(0, 256, 1 << 16, dtype=np.uint8))
    mem.map_constant(FLASH, rng.integers(0, 256, 4096, dtype=np.uint8).tobytes())
    return mem


@pytest.mark.parametrize("k", range(len(PATTERNS)))
def test_a_kept_window_moves_the_same_bytes(profile, k):
    p = PATTERNS[k]
    win = window(Memory(profile), p)  # kept from another memory of the same map
    a, b = _memory(profile, 1), _memory(profile, 1)
    np.testing.assert_array_equal(gather(a, p, win=win), gather(b, p))
    data = np.random.default_rng(2).integers(0, 256, p.nbytes, dtype=np.uint8)
    scatter(a, p, data, win=win)
    scatter(b, p, data)
    for addr in (RAM3, RAM4):
        np.testing.assert_array_equal(a.read(addr, 1 << 16), b.read(addr, 1 << 16))
    np.testing.assert_array_equal(gather(a, p, win=win), gather(b, p))


def test_windows_of_the_patterns(profile):
    mem = Memory(profile)
    dense, lines, _, overlap, across, off, negative, empty, flash = (window(mem, p) for p in PATTERNS)
    assert dense.dense and dense.disjoint and dense.off == 64
    assert not lines.dense and lines.disjoint and lines.shape == (1, 1, 49, 576)
    assert not overlap.disjoint
    assert off is None and negative is None and empty is None
    assert not across.dense and [(at, n, w.pool.name) for at, n, w in across.pieces] == [
        (0, 64, "npuRAM3"), (64, 36, "npuRAM3"), (100, 28, "npuRAM4"), (128, 128, "npuRAM4")]
    assert not flash.pool.writable


def test_a_pool_never_written_reads_zeros(profile):
    p = PATTERNS[1]
    assert not gather(Memory(profile), p, win=window(Memory(profile), p)).any()
