"""The memory map of a run as plain data: every region the sanitizer knew, per pool.

`memory_map(regions, profile, program)` lists, for each pool a region starts in or reaches, the pool
(`pool, base, end, size, perms, banks, interleave, bank_line`) and its `items`, sorted by
start: every region of the run's `RegionTable` (buffers of the plan, constants, prefetch
guards, runtime allocations; all contexts) as

    {name, kind, start, end, size, state, owner, producer, origin, align}

where `align` is the largest power of two (up to 4096) dividing `start`, plus, for a region
that is a buffer of the program's table at the same address, `align_asked, dtype, layout,
shape, line_stride, plane_stride, consumers` and `live`: `[first, last]` command indices
over which the buffer holds data (its producer's first command -- 0 for inputs and weights --
to its last consumer's last command; the program's last command for outputs and weights); `live` is left
out when a producer or consumer is not the layer of any command. A region's `pool` is the pool
of its start (a region of merged pools runs on past that pool's end, into pools listed with the
regions that start there, maybe none).
"""

from __future__ import annotations

import pickle

MAX_ALIGN = 4096


def achieved_alignment(address: int, cap: int = MAX_ALIGN) -> int:
    """Largest power of two dividing `address`, capped at `cap`."""
    if address == 0:
        return cap
    return min(address & -address, cap)


def layer_spans(program) -> dict[str, tuple[int, int]]:
    """{layer: (first, last) command index} of the commands `program.debug` assigns to each layer
    (a debug entry names the layer of the commands from it up to the next entry)."""
    marks = sorted(program.debug.items())
    spans: dict[str, tuple[int, int]] = {}
    for j, (i, name) in enumerate(marks):
        last = (marks[j + 1][0] if j + 1 < len(marks) else len(program.commands)) - 1
        lo, hi = spans.get(name, (i, last))
        spans[name] = (min(lo, i), max(hi, last))
    return spans


def buffer_live(buf, spans: dict, n_commands: int) -> list[int] | None:
    """[first, last] command over which `buf` holds data (module doc), or None when unknown."""
    if buf.kind in ("input", "weight") or not buf.producer:
        first = 0
    elif buf.producer in spans:
        first = spans[buf.producer][0]
    else:
        return None
    if buf.kind in ("output", "weight"):
        last = n_commands - 1
    elif buf.consumers:
        if any(c not in spans for c in buf.consumers):
            return None
        last = max(spans[c][1] for c in buf.consumers)
    else:
        last = spans[buf.producer][1] if buf.producer in spans else first
    return [first, max(first, last)]


def live_ranges(program) -> dict[str, tuple[int, int]]:
    """{buffer name: (first, last) command} of every buffer whose live range is known."""
    spans, n = layer_spans(program), len(program.commands)
    out = {}
    for b in program.buffers:
        live = buffer_live(b, spans, n)
        if live is not None:
            out[b.name] = tuple(live)
    return out


def memory_map(regions, profile, program=None, memo: dict | None = None) -> list[dict]:
    """Pools and their regions (module docstring) from a RegionTable after (or before) a run.
    `memo`: a dict kept with the program (and profile) that holds the map's layout per region
    geometry, so a repeat run fills in only the regions' states."""
    return _map(list(regions.regions), None, profile, program, memo)


def deferred_memory_map(regions, profile, program=None, memo: dict | None = None):
    """A callable that makes `memory_map(regions, ...)` as the table is now: its regions and their
    states are noted at once, the map is made when called."""
    rs = list(regions.regions)
    states = [r.state for r in rs]
    return lambda: _map(rs, states, profile, program, memo)


def _map(rs: list, states: list | None, profile, program, memo) -> list[dict]:
    if states is None:
        states = [r.state for r in rs]
    if memo is None:
        return _fill(_layout(rs, profile, program), states)
    sig = tuple([(r.name, r.kind, r.start, r.end, r.owner, r.producer, r.origin, r.pool, r.live) for r in rs])
    got = memo.get(sig)
    if got is None:
        if len(memo) >= MEMO_KEPT:
            memo.clear()
        got = memo[sig] = _layout(rs, profile, program)
    return _fill(got, states)


MEMO_KEPT = 4  # memory map layouts kept per program


def _layout(regions: list, profile, program) -> tuple:
    """(the map with every state None, pickled; the index of the region of each item, in order)."""
    buffers, spans, n_commands = {}, {}, 0
    if program is not None:
        for b in program.buffers:
            buffers.setdefault((b.name, profile.pool_named(b.pool).base + b.offset), b)
        spans, n_commands = layer_spans(program), len(program.commands)
    by_pool: dict[str, list] = {}
    for i, r in enumerate(regions):
        item = {"name": r.name, "kind": r.kind, "start": r.start, "end": r.end, "size": r.size, "state": None,
                "owner": r.owner, "producer": r.producer, "origin": r.origin, "align": achieved_alignment(r.start)}
        b = buffers.get((r.name, r.start))
        if b is not None:
            item.update(align_asked=b.align, dtype=b.dtype, layout=b.layout, shape=[int(v) for v in b.shape],
                        line_stride=b.line_stride, plane_stride=b.plane_stride, consumers=list(b.consumers))
            live = buffer_live(b, spans, n_commands)
            if live is not None:
                item["live"] = live
        by_pool.setdefault(r.pool, []).append((i, item))
    out, order = [], []
    for pool in profile.pools:
        items = by_pool.get(pool.name, [])
        if not items and not any(r.start < pool.end and r.end > pool.base for r in regions):
            continue
        items.sort(key=lambda x: (x[1]["start"], x[1]["end"], x[1]["kind"] == "guard", x[1]["name"]))
        order += [i for i, _ in items]
        out.append({"pool": pool.name, "base": pool.base, "end": pool.end, "size": pool.size, "perms": pool.perms,
                    "banks": pool.banks, "interleave": pool.interleave, "bank_line": pool.bank_line,
                    "items": [item for _, item in items]})
    return pickle.dumps(out, pickle.HIGHEST_PROTOCOL), order


def _fill(layout, states: list) -> list[dict]:
    """The map of a `_layout` (fresh dicts and lists), each region's state filled in."""
    data, order = layout
    out = pickle.loads(data)
    items = [item for pool in out for item in pool["items"]]
    for item, i in zip(items, order):
        item["state"] = states[i]
    return out
