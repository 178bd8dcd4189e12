"""Numba kernels of the memory model: moving bytes (gather/scatter), and the line-by-line and
burst-by-burst references the closed forms are tested against (`cache_access`, `run_lines`,
`burst_stats`, also the fallbacks for streams or profiles the closed forms do not table)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def gather_pool(arr, pool_base, starts, run, out):
    """Copy the bytes of each run that fall inside `arr` (pool at pool_base) into `out`."""
    n = arr.shape[0]
    for k in range(starts.shape[0]):
        s = starts[k] - pool_base
        lo = max(s, 0)
        hi = min(s + run, n)
        if hi > lo:
            o = k * run - s
            out[o + lo:o + hi] = arr[lo:hi]


@njit(cache=True)
def scatter_pool(arr, pool_base, starts, run, data):
    """Write `data` (the stream) into the bytes of each run that fall inside `arr`; later runs win."""
    n = arr.shape[0]
    for k in range(starts.shape[0]):
        s = starts[k] - pool_base
        lo = max(s, 0)
        hi = min(s + run, n)
        if hi > lo:
            o = k * run - s
            arr[lo:hi] = data[o + lo:o + hi]


@njit(cache=True)
def burst_stats(starts, run, beat, max_beats, boundary, bank_line, interleave, banks, xor_hash,
                pool_base, bank_bytes, bank_passes):
    """Split each run into bursts; return (bursts, beats, cross-bank splits).

    A burst starts at the run's (or the previous burst's) end, holds at most `max_beats`
    beats and never crosses a `boundary`-aligned address. Beats are `beat`-aligned, so a run
    that does not start/end on a beat has partial first/last beats. `bank_bytes[b]` gets the
    payload bytes per bank, `bank_passes[b]` the beats that touch bank b.
    """
    bursts = 0
    beats = 0
    splits = 0
    for k in range(starts.shape[0]):
        s = starts[k]
        e = s + run
        if run <= 0:
            continue
        a = s
        while a < e:
            first_beat = a // beat
            limit = (first_beat + max_beats) * beat
            nb = (a // boundary + 1) * boundary
            b = min(e, limit, nb)
            bursts += 1
            last_beat = (b - 1) // beat
            beats += last_beat - first_beat + 1
            splits += (b - 1 - pool_base) // bank_line - (a - pool_base) // bank_line
            # bytes per bank, one interleave chunk at a time
            c = a
            while c < b:
                off = c - pool_base
                chunk_end = min(b, pool_base + (off // interleave + 1) * interleave)
                bank = (off // interleave) % banks
                if xor_hash:
                    line = off // bank_line
                    if banks & (banks - 1) == 0:
                        bank = bank ^ (line % banks)
                    else:
                        bank = (bank + line) % banks
                bank_bytes[bank] += chunk_end - c
                bank_passes[bank] += (chunk_end - 1) // beat - c // beat + 1
                c = chunk_end
            a = b
    return bursts, beats, splits


@njit(cache=True)
def run_lines(starts, run, line):
    """Cache-line indices touched by the runs, in stream order (consecutive repeats dropped)."""
    total = 0
    for k in range(starts.shape[0]):
        if run > 0:
            total += (starts[k] + run - 1) // line - starts[k] // line + 1
    out = np.empty(total, dtype=np.int64)
    n = 0
    prev = -1
    for k in range(starts.shape[0]):
        if run <= 0:
            continue
        for ln in range(starts[k] // line, (starts[k] + run - 1) // line + 1):
            if ln != prev:
                out[n] = ln
                n += 1
                prev = ln
    return out[:n]


@njit(cache=True)
def cache_access(tags, stamps, lines, clock):
    """Set-associative LRU lookup of `lines`; returns (hits, misses, new clock)."""
    sets, ways = tags.shape
    hits = 0
    misses = 0
    for i in range(lines.shape[0]):
        ln = lines[i]
        st = ln % sets
        tag = ln // sets
        clock += 1
        found = -1
        for w in range(ways):
            if tags[st, w] == tag:
                found = w
                break
        if found >= 0:
            hits += 1
            stamps[st, found] = clock
        else:
            misses += 1
            victim = 0
            for w in range(1, ways):
                if stamps[st, w] < stamps[st, victim]:
                    victim = w
            tags[st, victim] = tag
            stamps[st, victim] = clock
    return hits, misses, clock
