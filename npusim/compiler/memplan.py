"""Concat placement and the memory plan: buffer geometry (strides at `mem_align`), lifetimes,
placement in the activation pools of the profile (n657: npuRAM3..6 as one contiguous arena, then
cpuRAM2, spilling to hyperRAM) and the constant area of options.weights_pool (weights, parameter
tables, LUTs).

Prefetch guard zones: a stream engine's limit register sits `guard` bytes past a buffer's end
(rounded up to the limit granule) and the engine may prefetch up to there, so the planner keeps
that zone free of other buffers that may be live at the same time: the next buffer starts at
>= round_up(zone end, mem_align), and the zone stays inside its arena. `Buffer.size` excludes it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
from onnx import helper

from ..errors import ModelError
from ..program.layouts import block_size, geometry, required_layout
from ..program.model import Buffer, Constant
from ..program.spec import load_isa
from .ir import Concat, Graph, Layer, Step, hwc
from .recipes.addressing import resolve_spatial
from .storage import activation_pools, round_up, storage_dtype, storage_layout
from .streams import Source, dense_offset, pattern


@dataclass(frozen=True)
class Placement:
    """Where a tensor lives: `offset` bytes into buffer `buffer`, with the compiler's strides."""
    buffer: str
    offset: int
    layout: str
    h: int
    w: int
    c: int
    esize: int
    line: int
    plane: int
    block: int  # blocked16 channels per plane (the ISA's)
    dtype: str = "int8"  # element type in memory
    pixel: int = 0  # bytes between pixels of a line when not dense (a strided phase of a larger map); 0: dense
    se: tuple = ()  # a window's read descriptor (run, n1, s1, n2, s2, n3, s3) in bytes from `offset`; (): none

    def plane_offset(self, channel: int) -> int:
        """Byte offset of the blocked16 plane holding `channel` (a block boundary) from this tensor's start."""
        return (channel // self.block) * self.plane


def resolve_concats(layers: list[Layer], concats: list[Concat], g: Graph, esize: int):
    """Replace concat placeholders: by addressing (producers write into the output's planes) when
    every part starts on a channel block (the ISA's blocked16 block), else ARITH copy/concat epochs.
    Returns (layers, views {tensor: (concat output, channel offset)})."""
    blk = block_size()
    views: dict[str, tuple[str, int]] = {}
    produced = {t for L in layers if L.kind != "concat" for t in L.writes()}
    used_as_part: dict[str, int] = {}
    for c in concats:
        for p in c.parts:
            used_as_part[p] = used_as_part.get(p, 0) + 1
    out: list[Layer] = []
    for L in layers:
        if L.kind != "concat":
            out.append(L)
            continue
        c = next(x for x in concats if x.name == L.name)
        if c.axis != 1 and len(g.shapes[c.out]) >= 2:  # rows or columns: strided write SEs (addressing.py)
            out.extend(resolve_spatial(c, g, layers))
            continue
        h, w, cc = hwc(g.shapes[c.out])
        layout = geometry(h, w, cc, esize).layout
        offs, acc = [], 0
        for p in c.parts:
            offs.append(acc)
            acc += hwc(g.shapes[p])[2]
        aligned = layout == "blocked16" and all(o % blk == 0 for o in offs) and all(
            geometry(*hwc(g.shapes[p]), esize).layout == "blocked16" for p in c.parts)
        if aligned:
            for i, (p, o) in enumerate(zip(c.parts, offs)):
                ph, pw, pc = hwc(g.shapes[p])
                direct = (p in produced and p not in g.outputs and used_as_part[p] == 1 and p not in views
                          and geometry(ph, pw, pc, esize).layout == "blocked16")
                if direct:
                    views[p] = (c.out, o)
                    continue
                tgt = f"{c.out}::part{i}"
                g.shapes[tgt] = g.shapes[p]
                views[tgt] = (c.out, o)
                out.append(Layer(c.name, [c.name], p, [Step("ARITH", tgt, dict(op="copy"))]))
        else:  # ARITH concat of two parts, a chain of them for more: ((a, b), c) ...
            acc_t, acc_c = c.parts[0], hwc(g.shapes[c.parts[0]])[2]
            for k, p in enumerate(c.parts[1:], 1):
                acc_c += hwc(g.shapes[p])[2]
                t = c.out if k == len(c.parts) - 1 else f"{c.out}::cat{k}"
                if t != c.out:
                    g.shapes[t], g.dtypes[t] = (1, acc_c, h, w) if len(g.shapes[c.out]) == 4 else \
                        (1, acc_c, w) if len(g.shapes[c.out]) == 3 else (1, acc_c), g.dtype(c.out)
                out.append(Layer(c.name, [c.name], acc_t, [Step("ARITH", t, dict(op="concat"), operand=p)]))
                acc_t = t
    return out, views


@dataclass
class _Store:
    name: str
    kind: str
    shape: tuple
    first: int
    last: int
    size: int = 0
    layout: str = "linear"
    line: int = 0
    plane: int = 0
    producer: str = ""
    consumers: list = field(default_factory=list)
    pool: str = ""
    offset: int = 0
    dtype: str = "int8"


class MemoryPlan:
    """Buffers, tensor placements and the constant area of one program."""
    def __init__(self, profile, align: int, dtype: str, esize: int, guard: int = 0):
        self.profile, self.align, self.dtype, self.esize = profile, align, dtype, esize
        self.guard = guard
        self.place: dict[str, Placement] = {}
        self.buffers: list[Buffer] = []
        self.constants: list[Constant] = []
        self._const_at: dict[str, int] = {}  # pool -> next free offset for constants
        self._by_name: dict[str, Buffer] = {}  # `buffer`'s index of the first `_indexed` buffers
        self._indexed = 0

    def zone_end(self, end: int) -> int:
        """End of the prefetch guard zone of a buffer ending at `end` (the SE limit)."""
        return guard_end(end, self.guard, self.profile)

    def address(self, tensor: str) -> int:
        p = self.place[tensor]
        return self.buffer(p.buffer).address(self.profile) + p.offset

    def buffer(self, name: str) -> Buffer:
        """The first buffer named `name` (`buffers` only grows: the names of those added since the last look-up
        are indexed then)."""
        for b in self.buffers[self._indexed:]:
            self._by_name.setdefault(b.name, b)
        self._indexed = len(self.buffers)
        return self._by_name[name]

    def buffer_end(self, name: str) -> int:
        b = self.buffer(name)
        return b.address(self.profile) + b.size

    def add_constant(self, name: str, data: bytes, consumer: str, shape=(), dtype="int8", *, pool: str) -> str:
        """Place bytes in `pool` (options.weights_pool) at the next `align` boundary past the previous
        constant's guard zone (in a pool that holds activations: past their zones); returns the buffer name."""
        P = self.profile.pool_named(pool)
        if pool not in self._const_at:
            ends = [self.zone_end(b.address(self.profile) + b.size) - P.base for b in self.buffers
                    if b.address(self.profile) < P.end and P.base < b.address(self.profile) + b.size]
            self._const_at[pool] = max(ends, default=0)
        addr = round_up(P.base + self._const_at[pool], self.align)
        off = addr - P.base
        end = self.zone_end(addr + len(data)) - P.base
        if end > P.size:
            raise ModelError(f"model too big: weights and tables need more than the {P.size} B of {pool}")
        self._const_at[pool] = end
        self.constants.append(Constant(name, pool, off, bytes(data)))
        self.buffers.append(Buffer(name, "weight", pool, off, len(data), self.align, shape=tuple(shape),
                                   dtype=dtype, layout="linear", consumers=(consumer,)))
        return name


def tensor_geometry(g: Graph, t: str, esize: int):
    """Geometry of tensor t in its storage layout (linear tensors: 1 x 1 x numel)."""
    layout = storage_layout(g, t)
    h, w, c = hwc(g.shapes[t]) if layout != "linear" else (1, 1, int(np.prod(g.shapes[t], dtype=np.int64)))
    return geometry(h, w, c, esize, layout)


def _geometry(geo, align: int, pad: int):
    """(geo, line, plane, size) of a buffer holding `geo` with strides at `align`."""
    if geo.layout == "linear":
        return geo, 0, 0, max(geo.stream_bytes, geo.esize) + pad  # an empty tensor still gets an element
    line = round_up(geo.run_bytes, align)
    plane = round_up(geo.h * line, align)
    return geo, line, plane, geo.planes * plane + pad


def guard_end(end: int, guard: int, profile) -> int:
    """Where the prefetch guard zone after a buffer ending at `end` ends: the SE limit register
    value `round_up(end + guard, stream_engine.limit_granule)` (codegen's `limit`)."""
    return round_up(end + guard, profile.stream_engine.limit_granule)


def check_fits(graph: Graph, dtype: str, profile) -> None:
    """Refuse, before any calibration data is allocated, a tensor larger than every activation arena."""
    room = largest_arena(profile)
    isa = load_isa()
    for name, shape in graph.shapes.items():
        if name in graph.consts:
            continue
        need = math.prod(map(int, shape)) * isa.dtype_bytes(storage_dtype(graph, name, dtype))
        if need > room:
            raise ModelError(f"model too big: tensor {name!r} {list(shape)} needs {need} B, more than the largest "
                             f"activation pool run ({room} B of {', '.join(activation_pools(profile))})")


def check_weights(model, esize: int, profile, pool: str) -> None:
    """Refuse, before the model is folded or calibrated, one whose initializers cannot fit the
    weights pool: float weights take `esize` bytes each (the compile dtype), others their own size."""
    room = profile.pool_named(pool).size
    need = 0
    for init in model.graph.initializer:
        n = math.prod(init.dims)
        try:
            dt = np.dtype(helper.tensor_dtype_to_np_dtype(init.data_type))
        except Exception:  # an unknown type: the model check names it
            continue
        need += n * (esize if dt.kind == "f" else dt.itemsize)
    if need > room:
        raise ModelError(f"model too big for {pool}: its weights need {need:,} B at {esize} B per float weight, "
                         f"the pool holds {room:,} B (a larger pool: --set pool.{pool}.size=...)")


def largest_arena(profile) -> int:
    """Bytes of the largest activation arena: no activation tensor may be larger."""
    return max(size for _, _, size in arenas(profile))


def arenas(profile) -> list[tuple[str, int, int]]:
    """Activation arenas [(first pool, base, size)] in preference order: consecutive pools of
    activation_pools() that are contiguous in memory with the same perms form one arena (npuRAM3..6,
    1.75 MiB); a buffer may span the pools of its arena (it names the pool of its start)."""
    out: list[list] = []
    prev = None
    for n in activation_pools(profile):
        p = profile.pool_named(n)
        if prev is not None and prev.end == p.base and prev.perms == p.perms:
            out[-1][2] += p.size
        else:
            out.append([n, p.base, p.size])
        prev = p
    return [tuple(a) for a in out]


def _first_fit(at: int, size: int, busy, align: int, zone) -> int:
    """Lowest aligned address >= at whose [at, zone(at + size)) is clear of every busy
    (start, store)'s [start, zone(start + size))."""
    moved = True
    while moved:
        moved = False
        for start, o in busy:
            z = zone(start + o.size)
            if at < z and start < zone(at + size):
                at, moved = round_up(z, align), True
    return at


def _allocate(stores: list[_Store], profile, align: int, reuse: bool, guard: int = 0) -> None:
    spans = arenas(profile)
    placed: dict[str, list[tuple[int, _Store]]] = {a[0]: [] for a in spans}

    def zone(end: int) -> int:
        return guard_end(end, guard, profile)

    for s in sorted(stores, key=lambda s: (-s.size, s.first, s.name)):
        for first, base, size in spans:
            busy = [o for o in placed[first] if not reuse or (o[1].first <= s.last and s.first <= o[1].last)]
            at = _first_fit(round_up(base, align), s.size, busy, align, zone)
            if zone(at + s.size) <= base + size:
                pool = profile.pool_at(at)
                s.pool, s.offset = pool.name, at - pool.base
                placed[first].append((at, s))
                break
        else:
            raise ModelError(f"model too big: tensor {s.name!r} needs {s.size} B and no activation pool "
                             f"({', '.join(activation_pools(profile))}) has room")


def plan_memory(layers: list[Layer], views: dict, alias: dict, g: Graph, qparams: dict, dtype: str,
                esize: int, options, profile) -> MemoryPlan:
    """Place every activation tensor; returns a MemoryPlan (constants are added later by codegen)."""
    align = options.align(profile)
    guard = options.guard_bytes(profile)
    plan = MemoryPlan(profile, align, dtype, esize, guard)
    out_alias = {}  # storage root -> graph output name that aliases it
    for a, src in alias.items():
        if a in g.outputs:
            out_alias[src] = a

    def root(t):
        for _ in range(len(g.strided) + len(g.windows) + len(g.gathers) + 1):
            t = alias.get(t, t)
            if t in g.strided:  # a phase of a strided write lives in its whole tensor's buffer
                t = g.strided[t][0]
            elif t in g.windows:  # a box read by addressing lives in its whole map's buffer
                t = g.windows[t].whole
            elif t in g.gathers:  # a side of a permutation piece lives in its whole tensor's buffer
                t = g.gathers[t].whole
            else:
                break
        return views[t][0] if t in views else t

    stores: dict[str, _Store] = {}
    n = len(layers)
    isa = load_isa()

    def store(t) -> _Store:
        r = root(t)
        if r not in stores:
            name = out_alias.get(r, r)
            kind = "input" if r in g.inputs else "output" if name in g.outputs else "activation"
            first = -1 if kind == "input" else n
            last = n if kind == "output" else -1
            stores[r] = _Store(name, kind, g.shapes[name], first, last)
        return stores[r]

    # a node lowered to several layers (one name) is one span for the region table (memmap.buffer_live):
    # a tensor it reads stays live, and one it writes is live, over all of that span
    spans: dict[str, tuple[int, int]] = {}
    for i, L in enumerate(layers):
        lo, hi = spans.get(L.name, (i, i))
        spans[L.name] = (min(lo, i), max(hi, i))
    for i, L in enumerate(layers):
        lo, hi = spans[L.name]
        for t in L.reads():
            s = store(t)
            s.last = max(s.last, hi)
            if L.name not in s.consumers:
                s.consumers.append(L.name)
        for t in L.writes():
            s = store(t)
            s.first = min(s.first, lo)
            s.producer = s.producer or L.name
            s.last = max(s.last, hi)
    for t in g.inputs + g.outputs:
        store(t)
    io_pad = options.io_pad
    for r, s in stores.items():
        s.dtype = storage_dtype(g, s.name, dtype)
        geo = tensor_geometry(g, s.name, isa.dtype_bytes(s.dtype))
        geo, s.line, s.plane, s.size = _geometry(geo, align, io_pad if s.kind in ("input", "output") else 0)
        s.layout = geo.layout
    _allocate(list(stores.values()), profile, align, reuse=options.mem_plan == "unified", guard=guard)
    for r, s in sorted(stores.items(), key=lambda kv: (kv[1].pool, kv[1].offset)):
        q = qparams.get(r, (1.0, 0))
        plan.buffers.append(Buffer(s.name, s.kind, s.pool, s.offset, s.size, align, shape=tuple(s.shape),
                                   dtype=s.dtype, layout=s.layout, producer=s.producer,
                                   consumers=tuple(s.consumers), scale=float(q[0]), zero_point=int(q[1]),
                                   line_stride=s.line, plane_stride=s.plane))
    _add_view_buffers(plan, layers, views, stores, g, esize, align)
    tensors = set(alias) | set(views) | set(stores)
    for L in layers:
        tensors.update(L.reads())
        tensors.add(L.output)
    blk = block_size()
    for t in sorted(tensors):
        r = root(t)
        if r not in stores:
            continue
        s = stores[r]
        geo = tensor_geometry(g, t, isa.dtype_bytes(s.dtype))
        pl = Placement(s.name, 0, geo.layout, geo.h, geo.w, geo.c, geo.esize, s.line, s.plane, blk, s.dtype)
        if alias.get(t, t) in views:
            pl = dataclasses.replace(pl, offset=pl.plane_offset(views[alias.get(t, t)][1]))
        plan.place[t] = pl
    for t, (whole, y0, x0, sy, sx) in sorted(g.strided.items()):  # phases: views of their placed tensor
        base = plan.place[whole]
        h, w, c = hwc(g.shapes[t])
        px = (base.block if base.layout == "blocked16" else base.c) * base.esize
        plan.place[t] = dataclasses.replace(base, offset=base.offset + y0 * base.line + x0 * px, h=h, w=w, c=c,
                                            line=base.line * sy, pixel=px * sx)
    _place_windows(plan, g, alias, profile.alignment.word)
    _place_gathers(plan, g, alias)
    return plan


def _place_gathers(plan: MemoryPlan, g: Graph, alias: dict) -> None:
    """Placements of the sides of permutation pieces (Graph.gathers, compiler/recipes/permute.py): a linear
    descriptor from the first element's byte, strides = stride vectors . (esize, line, plane)."""
    top = load_isa().command("SE")
    for t in sorted(g.gathers):
        gs = g.gathers[t]
        whole = plan.place[alias.get(gs.whole, gs.whole)]
        unit = np.array([whole.esize, whole.line, whole.plane], np.int64)
        loops = [(n, int(np.dot(v, unit))) for n, v in gs.loops] + [(1, 0)] * (3 - len(gs.loops))
        if any(s < 0 or s == 0 and n > 1 and v != (0, 0, 0) or s > top.field("s1").mask
               for (n, s), v in zip(loops, [v for _, v in gs.loops] + [(0, 0, 0)] * 3)):
            raise ModelError(f"tensor {t!r}: a permutation stride beyond the SE's fields in this memory plan")
        h, w, c = hwc(g.shapes[t])  # the stream the copy unit sees (permute.stream_shape)
        se = (gs.run * whole.esize,) + tuple(v for lv in loops for v in lv)
        plan.place[t] = dataclasses.replace(whole, offset=whole.offset + int(np.dot(gs.start, unit)),
                                            layout=required_layout(h, w, c), h=h, w=w, c=c, pixel=0, se=se)


def _place_windows(plan: MemoryPlan, g: Graph, alias: dict, word: int) -> None:
    """Placements of the boxes read by addressing (Graph.windows): a dense part of its map keeps the map's
    strides from an offset (a view), any other box gets its read descriptor (Placement.se)."""
    done: set[str] = set()

    def place(t: str) -> Placement | None:
        if t in done:
            return plan.place[t]
        win = g.windows[t]
        name = alias.get(win.whole, win.whole)
        whole = place(name) if name in g.windows else plan.place.get(name)
        if whole is None:  # a box nobody reads of a map never placed
            return None
        src = Source(whole.layout, whole.h, whole.w, whole.c, whole.esize, whole.line, whole.plane, whole.block)
        h, w, c = hwc(g.shapes[t])
        layout = required_layout(h, w, c)
        off = dense_offset(src, win, h, w, c, word)
        if off is not None:
            pl = dataclasses.replace(whole, offset=whole.offset + off, layout=layout, h=h, w=w, c=c)
        else:
            got = pattern(src, win, h, w, c, word)
            if isinstance(got, str):
                raise ModelError(f"tensor {t!r}: no stream-engine read of its box in this memory plan: {got}")
            pl = dataclasses.replace(whole, offset=whole.offset + got[0], layout=layout, h=h, w=w, c=c, se=got[1])
        plan.place[t] = pl
        done.add(t)
        return pl

    for t in sorted(g.windows):
        place(t)
    for t, src in alias.items():  # a reshape of a view is the view
        if src in done and t not in g.windows:
            plan.place[t] = dataclasses.replace(plan.place[src], **dict(zip(("h", "w", "c"), hwc(g.shapes[t]))))


def _add_view_buffers(plan: MemoryPlan, layers, views: dict, stores: dict, g: Graph, esize: int, align: int):
    """A buffer-table entry per concat part, nested in the concat buffer: its producer writes
    exactly those planes and its own consumers read them (the sanitizer's provenance)."""
    blk = block_size()
    for t, (out, c_off) in sorted(views.items()):
        s = stores.get(out)
        if s is None:
            continue
        h, w, c = hwc(g.shapes[t])
        planes = geometry(h, w, c, esize).planes
        producer = next((L.name for L in layers if L.kind != "concat" and L.output == t), "")
        readers = tuple(dict.fromkeys(L.name for L in layers if L.kind != "concat" and t in L.reads()))
        q = plan.buffer(s.name)
        addr = q.address(plan.profile) + (c_off // blk) * s.plane  # may lie in the next pool of a merged arena
        pool = plan.profile.pool_at(addr)
        plan.buffers.append(Buffer(t, "activation", pool.name, addr - pool.base, planes * s.plane,
                                   align, shape=tuple(g.shapes[t]), dtype=plan.dtype, layout="blocked16",
                                   producer=producer, consumers=readers, scale=q.scale, zero_point=q.zero_point,
                                   line_stride=s.line, plane_stride=s.plane))
