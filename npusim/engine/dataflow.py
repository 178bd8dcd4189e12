"""Stream-switch dataflow of one epoch: who feeds whom, in which order, and who waits forever.

A unit starts when every input port it expects has a source delivering exactly the stream size
it expects; a write SE drains when its source delivers exactly its n3*n2*n1*run bytes. Anything
else (no link, a size mismatch, a cycle, an output nobody drains) leaves units waiting: the
machine turns them into a `hang` fault after epoch.timeout_cycles.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .config import EpochConfig


@dataclass
class Flow:
    order: list = field(default_factory=list)  # node names that run, in dependency order
    inputs: dict = field(default_factory=dict)  # node -> {port: source name}
    waiting: dict = field(default_factory=dict)  # node -> reason it waits forever


def produced_bytes(cfg: EpochConfig, name: str) -> int:
    node = cfg.node(name)
    if name.startswith("SE"):
        return node.stream_bytes
    return node.stream_bytes(node.out_shape())


def expected_inputs(cfg: EpochConfig, name: str) -> dict[int, int]:
    """Input port -> bytes the node expects there."""
    node = cfg.node(name)
    if name.startswith("SE"):
        return {} if node.read else {0: node.stream_bytes}
    return {p: node.stream_bytes(s) for p, s in node.in_shapes().items()}


def resolve(cfg: EpochConfig) -> Flow:
    """Dependency order of the nodes that can run; the rest are waiting (with a reason)."""
    flow = Flow()
    names = sorted(cfg.ses) + sorted(cfg.units)
    need = {n: expected_inputs(cfg, n) for n in names}
    srcs = {n: cfg.sources_of(n) for n in names}
    done: set[str] = set()
    progress = True
    while progress:
        progress = False
        for n in names:
            if n in done or n in flow.waiting:
                continue
            ok, ins = True, {}
            for port, nbytes in need[n].items():
                links = srcs[n].get(port, [])
                if not links:
                    flow.waiting[n] = f"input port {port} has no link ({nbytes} B expected)"
                    ok = False
                    break
                src = links[0].src
                if src in flow.waiting:
                    flow.waiting[n] = f"input port {port}: source {src} never produces"
                    ok = False
                    break
                if src not in done:
                    ok = False
                    break
                got = produced_bytes(cfg, src)
                if got != nbytes:
                    flow.waiting[n] = (f"input port {port} expects {nbytes} B but {src} delivers {got} B")
                    ok = False
                    break
                ins[port] = src
            if ok and n not in flow.waiting:
                flow.inputs[n] = ins
                flow.order.append(n)
                done.add(n)
                progress = True
    for n in names:  # cycles: never ready
        if n not in done and n not in flow.waiting:
            flow.waiting[n] = "its inputs form a cycle"
    sinks = {ln.src for ln in cfg.links if ln.dst in done or ln.dst in flow.waiting}
    for n in list(flow.order):  # a produced stream nobody drains blocks its producer
        is_source = not n.startswith("SE") or cfg.ses[n].read
        if is_source and n not in sinks:
            flow.waiting[n] = "its output stream is never drained (no link from it)"
    return flow
