"""`memory.Split`: a pattern over adjacent pools moved as strided views of each pool, piece by piece. It
must move exactly the bytes the run-by-run loops move (`gather`/`scatter` with no window): runs whole in
one pool, runs cut at a pool boundary (also across three pools), overlapping runs, a pool never written,
a read-only pool, bytes off the map."""

from __future__ import annotations

import numpy as np
import pytest

from npusim.memory import AccessPattern, Memory, Split, Window, gather, scatter, window

RAM3, RAM4, RAM5 = 0x34200000, 0x34270000, 0x342E0000
POOL = 448 * 1024


def _memory(profile, written=(RAM3, RAM4, RAM5)):
    mem = Memory(profile)
    rng = np.random.default_rng(7)
    for addr in written:
        mem.write(addr, rng.integers(0, 256, POOL, dtype=np.uint8))
    return mem


def _random_patterns(n, seed):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        run = int(rng.integers(1, 3000))
        n1, n2, n3 = (int(v) for v in rng.integers(1, 6, 3))
        s1 = int(rng.choice([0, run, run + int(rng.integers(0, 500))]))
        s2 = int(rng.choice([0, n1 * max(s1, run), 50000, 200704]))
        s3 = int(rng.integers(0, 300000))
        # near a pool boundary, so that most of them span two or three pools
        base = int(rng.choice([RAM4, RAM5])) - int(rng.integers(0, 6000))
        out.append(AccessPattern(base, run, n1, s1, n2, s2, n3, s3))
    return out


CASES = _random_patterns(60, 1) + [
    AccessPattern(RAM4 - 100, POOL + 200),  # one run across three pools
    AccessPattern(RAM4 - 8, 16, n1=4, s1=8),  # overlapping runs across a boundary: not disjoint
    AccessPattern(0x34350000 + POOL - 64, 32, n1=4, s1=32),  # off the end of the map
]


@pytest.mark.parametrize("k", range(len(CASES)))
def test_a_split_moves_what_the_run_loops_move(profile, k):
    p = CASES[k]
    win = window(Memory(profile), p)  # kept from another memory of the same map
    for written in ((RAM3, RAM4, RAM5), (RAM3,)):  # RAM4 and RAM5 never written: they read as zeros
        a, b = _memory(profile, written), _memory(profile, written)
        np.testing.assert_array_equal(gather(a, p, win=win), gather(b, p, win=None))
        data = np.random.default_rng(k).integers(0, 256, p.nbytes, dtype=np.uint8)
        scatter(a, p, data, win=win)
        scatter(b, p, data, win=None)
        for addr in (RAM3, RAM4, RAM5):
            np.testing.assert_array_equal(a.read(addr, POOL), b.read(addr, POOL))


def test_which_patterns_split(profile):
    mem = Memory(profile)
    assert isinstance(window(mem, AccessPattern(RAM4 - 64, 32, n1=4, s1=32)), Split)
    assert isinstance(window(mem, AccessPattern(RAM4, 32, n1=4, s1=32)), Window)  # one pool
    assert window(mem, CASES[-1]) is None  # a byte outside every pool: the run loops drop it
    three = window(mem, CASES[-3])
    assert [(n, w.pool.name) for _, n, w in three.pieces] == [(100, "npuRAM3"), (POOL, "npuRAM4"), (100, "npuRAM5")]
    assert not window(mem, CASES[-2]).disjoint
    many_rows = AccessPattern(RAM4 - 64, 16, n1=2, s1=16, n2=65, s2=32)
    assert window(mem, many_rows) is None  # more rows than a split walks
