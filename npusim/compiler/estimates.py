"""Cycle estimates the recipes weigh against the host's cost model (cpu/cost.py): an epoch's setup
(its configuration registers) plus its slowest unit or its bytes through the fastest activation pool,
CA cycles at the engine's lane and tap use (engine/timing.py), and the engines codegen reads and
writes with. A recipe whose estimate is not below the host's keeps its node on the CPU, with the reason.
"""

from __future__ import annotations

from ..cpu.cost import host_cycles
from ..hw import load_profile
from ..program.spec import load_isa
from .ir import Graph, Node
from .storage import activation_pools


def engine_sets(profile) -> tuple[list[int], list[int]]:
    """(read engines, write engines): engines wired to engine 0's bus port read, the others write."""
    ports = profile.bus.stream_engine_port
    reads = [e for e in range(profile.units.stream_engines) if ports[e] == ports[0]]
    return reads, [e for e in range(profile.units.stream_engines) if ports[e] != ports[0]]


def epoch_cycles(profile, units: tuple[str, ...], ses: int, body: float, elems: int = 0, esize: int = 1) -> float:
    """Setup of one epoch (its SE, unit and LINK registers: one LINK per unit and write SE) plus the longer of
    `body` (its slowest unit) and moving `elems` elements through the fastest activation pool."""
    regs = load_isa().registers({"SE": ses, "LINK": len(units) + 1, **{u: 1 for u in units}})
    memory = elems * esize / profile.pool_named(activation_pools(profile)[0]).bytes_per_cycle
    return profile.epoch.setup(regs) + max(body, memory)


def stored(c: int) -> int:
    """Channels a map of c channels stores per pixel (blocked16 planes hold 16)."""
    return c if c <= 4 else -(-c // 16) * 16


def conv_cycles(profile, dtype: str, in_c: int, out_c: int, kw: int, groups: int, pixels: int) -> float:
    """CA cycles of a 1 x kw CONV over `pixels` output pixels (engine/timing.py's utilisation rule); a dense
    CONV of two or more 16-channel output blocks shares them among the CAs (codegen.ca_slices)."""
    comp = profile.compute
    blocks = -(-out_c // 16)
    if groups == 1 and blocks >= 2:  # the slowest CA takes ceil(blocks / CAs) whole blocks
        out_c = min(out_c, -(-blocks // min(profile.units.conv_accelerators, blocks)) * 16)
    icg = max(in_c // groups, 1)
    lane_use = icg / (-(-icg // comp.lanes) * comp.lanes)
    window = comp.kernel_taps
    if kw >= window:
        tap_use = kw / (-(-kw // window) * window)
    else:
        tap_use = min(window, kw * min(comp.tap_fill, -(-icg // comp.lanes))) / window
    eff = comp.depthwise_efficiency if groups > 1 and icg == 1 else 1.0
    return pixels * out_c * icg * kw / (comp.macs(dtype) * lane_use * tap_use * eff)


def arith_cycles(profile, elems: int) -> float:
    return elems / float(profile.compute.elems_per_cycle["arith"])


def host_faster(g: Graph, n: Node, npu: float, what: str) -> str | None:
    """The reason when the host runs node `n` in fewer cycles than the estimated `npu`, else None."""
    if g.profile is None:
        return None

    ins = [tuple(g.shapes[t]) for t in n.inputs if t and t not in g.consts]
    outs = [tuple(g.shapes[t]) for t in n.outputs if t]
    cpu = host_cycles(n.op, ins, outs, g.profile, n.attrs)
    if npu >= cpu:
        return f"faster on the CPU (estimated {npu:,.0f} NPU cycles {what} vs {cpu:,.0f})"
    return None


def parallel_convs(profile) -> int:
    """CONVs one epoch runs side by side on their own CAs, their input read once (Layer.siblings): each
    takes a CA, a weight read SE and a write SE."""
    profile = profile or load_profile()
    reads, writes = engine_sets(profile)
    return max(1, min(profile.units.conv_accelerators, len(reads) - 1, len(writes)))


def conv_epoch(profile, dtype: str, in_c: int, out_c: int, groups: int, pixels: int, elems: int,
               side: int = 1) -> float:
    """Estimated cycles of a 1 x 1 moving CONV's epoch: its registers (a CONV, read and write SE and three
    LINKs per CA, one weight SE; codegen shares a dense CONV's blocks among up to every CA; `side` CONVs
    of this size side by side, one CA each), the CA body, `elems` elements through the fastest activation
    pool."""
    blocks = -(-out_c // 16)
    cas = min(profile.units.conv_accelerators, blocks) if blocks >= 2 and groups == 1 and side == 1 else side
    regs = load_isa().registers({"CONV": cas, "SE": 2 * cas + 1, "LINK": 3 * cas})
    es = load_isa().dtype_bytes(dtype)
    memory = elems * es / profile.pool_named(activation_pools(profile)[0]).bytes_per_cycle
    body = conv_cycles(profile, dtype, in_c, out_c, 1, groups, pixels)
    return profile.epoch.setup(regs) + max(body, memory)
