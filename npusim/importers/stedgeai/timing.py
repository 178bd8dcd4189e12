"""Cycles of an imported ST program on npusim's timing model: ST's own epochs and units.

Per hardware epoch: setup (the profile's `epoch.setup_cycles`, plus `epoch.register_cycles` per
configuration register the epoch programs: each stream engine, unit and switch link's fields, or the
epoch-controller program's instructions where that program is decoded) plus the slowest stage:
- each stream engine: `memory.cost.pattern_cost` of its walk on its pool (bursts, beats, bank-line
  splits, pool bandwidth; the NPU cache on cacheable pools), engines sharing a pool adding their bank
  conflicts (`conflict_cycles`), engines sharing a bus port their beats;
- each CONVACC: output pixels x kernel taps x kernels x input depth per frame, times the frames its
  input engine streams, at `compute.mac_per_cycle` (8-bit; 16-bit inputs at half the rate);
- each ARITH / POOL / ACTIV: its frame's elements at `compute.elems_per_cycle`.
Software blocks: the host cost model (`cpu.cost`) of each library operator on its buffers' shapes.
Pools keep ST's addresses; their bandwidth and bank geometry come from the profile's pool of the same
name (calibrated), or from ST's description (byte width, clock ratio) for a pool the profile lacks.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ...cpu.cost import host_cycles
from ...hw.profile import Pool as HwPool
from ...memory.cost import conflict_cycles, pattern_cost
from . import streng as se
from .cstructs import resolve_symbols

# the ONNX operator whose host cost class fits each runtime-library operator
SW_AS_ONNX = {"softmax": "Softmax", "softmax_integer": "Softmax", "dequantizelinear": "DequantizeLinear",
              "quantizelinear": "QuantizeLinear", "resize_integer": "Resize", "resize": "Resize",
              "conv_integer": "Conv", "Concat": "Concat", "Split": "Split", "DMA_Transpose": "Transpose",
              "DMA_DepthToSpace": "DepthToSpace", "DMA_Outputs_Slice_SplitLike": "Split"}
REGISTERS_PER_STRENG = 14  # CTRL, ADDR, FSIZE, DEPTH, STRD, offsets, repeat, limits, cache, event, position
REGISTERS_PER_LINK = 1


def timing_profile(out, profile):
    """`profile` with ST's pools (addresses and sizes from the compile)."""
    by_name = {p.name: p for p in profile.pools}
    pools = []
    for p in out.pools:
        like = by_name.get(p.name)
        if like is not None:
            pools.append(replace(like, base=p.address, size=p.size, perms="r" if p.read_only else "rw"))
        else:
            pools.append(HwPool(name=p.name, base=p.address, size=p.size, width=p.byte_width,
                                clock_ratio=p.freq_ratio, perms="r" if p.read_only else "rw",
                                cacheable=p.cacheable, banks=1, interleave=p.byte_width,
                                external=p.address >= 0x60000000))
    return replace(profile, pool=tuple(pools))


def _conv_cycles(u, frames: int, profile) -> float:
    g = u.get
    sh, sv = max(int(g("hstride", 1) or 1), 1), max(int(g("vstride", 1) or 1), 1)
    out_px = math.ceil(int(g("fWidth", 0) or 0) / sh) * math.ceil(int(g("fHeight", 0) or 0) / sv)
    macs = out_px * int(g("kernelWidth", 1) or 1) * int(g("kernelHeight", 1) or 1) * \
        max(int(g("nKernels", 1) or 1), 1) * max(int(g("batchDepth", 1) or 1), 1) * max(frames, 1)
    rate = profile.compute.macs("int8")
    if int(g("inbytes_f", 1) or 1) > 1:
        rate /= 2
    return macs / rate


def _elementwise_cycles(u, profile) -> float:
    g = u.get
    n = int(g("fWidth", 0) or 0) * int(g("fHeight", 0) or 0) * max(int(g("fChannels", g("batchDepth", 1)) or 1), 1)
    kind = {"ARITH": "arith", "POOL": "pool", "ACTIV": "activation"}[u.kind]
    return n / float(profile.compute.elems_per_cycle[kind])


def epoch_cycles(ep, symbols: dict, prof, ec_instructions: int | None = None) -> float:
    """Cycles of one hardware epoch (module doc)."""
    registers = ec_instructions if ec_instructions is not None else (
        REGISTERS_PER_STRENG * len(ep.strengs) + sum(len(u.fields) for u in ep.units) +
        REGISTERS_PER_LINK * len(ep.links))
    setup = prof.epoch.setup(registers)
    stages = [0.0]
    by_pool: dict = {}
    by_port: dict = {}
    frames_of = {}
    for s in ep.enabled_strengs():
        s = resolve_symbols(s, symbols)
        frames_of[s.engine] = s.frame_tot_cnt
        pool = prof.pool_at(s.addr)
        if pool is None:
            continue
        costs = [pattern_cost(pool, p, prof, access=s.direction) for p in se.walk(s)]
        cyc = sum(c.cycles for c in costs)
        stages.append(cyc)
        by_pool.setdefault(pool.name, []).extend(costs)
        port = prof.bus.stream_engine_port[s.engine] if s.engine < len(prof.bus.stream_engine_port) else 0
        by_port[port] = by_port.get(port, 0.0) + sum(c.beats for c in costs)
    for name, costs in by_pool.items():
        if len(costs) > 1:
            total = max(c.cycles for c in costs) + conflict_cycles(costs, name, prof).cycles
            stages.append(total)
    stages.extend(by_port.values())
    feeds = {(lk.dst_kind, lk.dst_index, lk.dst_port): (lk.src_kind, lk.src_index) for lk in ep.links}
    on = {k for k in ep.enabled}
    for u in ep.units:
        if on and (u.kind, u.index) not in on:
            continue
        if u.kind == "CONVACC":
            src = feeds.get(("CONVACC", u.index, 0))
            frames = frames_of.get(src[1], 1) if src and src[0] == "STRENG" else 1
            stages.append(_conv_cycles(u, frames, prof))
        elif u.kind in ("ARITH", "POOL", "ACTIV"):
            stages.append(_elementwise_cycles(u, prof))
    return setup + max(stages)


def sw_cycles(blk, buffers_by_name: dict, prof) -> float:
    total = 0.0
    for op in blk.sw_ops:
        onnx = SW_AS_ONNX.get(op.kind, "Identity")
        shapes = []
        for ref in op.inputs + op.operands + op.outputs:
            b = buffers_by_name.get(ref)
            if b is not None and b.shape:
                shapes.append(tuple(b.shape))
        if not shapes:
            shapes = [(1,)]
        total += host_cycles(onnx, shapes[:-1] or shapes, shapes[-1:], prof)
    return total


def program_cycles(out, rep, profile) -> dict:
    """{(block index, epoch, software part?): cycles} of every epoch and software block."""
    prof = timing_profile(out, profile)
    symbols = {k: v[0] for k, v in rep.placements.items()}
    by_name = {b.name: b for b in out.buffers}
    cycles = {}
    for blk in out.blocks:
        for ep in blk.epochs:
            cycles[(blk.index, ep.number, False)] = epoch_cycles(ep, symbols, prof,
                                                                 ep.ec_instructions)
        if blk.sw_ops:
            num = blk.epoch_num if blk.epoch_num is not None else blk.index
            cycles[(blk.index, num, True)] = sw_cycles(blk, by_name, prof)
    return cycles
