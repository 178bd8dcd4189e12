"""Interleaved timing for the bench scripts: wall-clock medians and the calling thread's CPU time."""

from __future__ import annotations

import statistics
import time


def interleaved_cpu(fns: dict, repeat: int, sample_s: float = 0.05) -> tuple[dict, dict]:
    """({name: median wall seconds per call}, {name: mean CPU seconds per call of the calling thread}) of
    each callable, timed in turn (a b c a b c ...) after one warm-up call each. A timing calls a short
    callable several times (about `sample_s` of wall time at the warm-up's pace): the clocks' ticks and
    the scheduler's slices then weigh less."""
    calls = {}
    for k, fn in fns.items():
        t = time.perf_counter()
        fn()
        calls[k] = max(1, min(200, round(sample_s / max(time.perf_counter() - t, 1e-6))))
    wall = {k: [] for k in fns}
    cpu = {k: 0.0 for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            c, t = time.thread_time(), time.perf_counter()
            for _ in range(calls[k]):
                fn()
            wall[k].append((time.perf_counter() - t) / calls[k])
            cpu[k] += time.thread_time() - c
    return ({k: statistics.median(v) for k, v in wall.items()},
            {k: v / (repeat * calls[k]) for k, v in cpu.items()})
