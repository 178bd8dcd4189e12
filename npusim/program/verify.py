"""ISA-level verifier of a decoded command list against the spec and a profile.

Checks what is legal to *encode* but that the epoch controller would still refuse:
field minimums, unit indices beyond the profile's unit counts, a stream engine
programmed with a bus port it is not wired to, links between endpoints that do not
exist or are not configured in the epoch, and the program structure

    program := (epoch | HOST)* END
    epoch   := EPOCH (SE | CONV | POOL | RESIZE | ARITH | ACT | LINK)* RUN WAIT

Returns problems as strings ("command 7 (SE): ..."); an empty list means verified.
Value semantics (layouts, strides, addresses) are the engine's job: it faults at run time.
"""

from __future__ import annotations

from typing import Iterable

from .codec import Command
from .spec import IsaSpec, load_isa

UNIT_COMMANDS = {"CONV": "CA", "POOL": "POOL", "RESIZE": "POOL", "ARITH": "ARITH", "ACT": "ACT"}
ENDPOINT_COUNT = {"SE": "stream_engines", "CA": "conv_accelerators", "POOL": "pool_units",
                  "ARITH": "arith_units", "ACT": "activation_units"}
# Input ports per sink kind (DESIGN.md: CA 0 = feature map, 1 = weights; ARITH 0 = a, 1 = b).
SINK_PORTS = {"SE": 1, "CA": 2, "POOL": 1, "ARITH": 2, "ACT": 1}


def _profile_value(profile, path: str) -> int:
    node = profile
    for part in path.split("."):
        node = getattr(node, part)
    return int(node)


def _field_problems(cmd: Command, isa: IsaSpec, profile) -> list[str]:
    spec = isa.command(cmd.op)
    out = []
    for f in spec.fields:
        if f.enum is not None:
            continue
        v = cmd.args.get(f.name, 0)
        if isinstance(v, bool) or not isinstance(v, int):
            out.append(f"{f.name}={v!r} is not an integer")
            continue
        if f.min and v < f.min:
            out.append(f"{f.name}={v} is below its minimum {f.min}")
        if f.max_profile is not None:
            n = _profile_value(profile, f.max_profile)
            if not 0 <= v < n:
                out.append(f"{f.name}={v}: the profile has only {n} ({f.max_profile})")
    if cmd.op == "SE":
        eng, ports = cmd.args.get("engine", 0), profile.bus.stream_engine_port
        if isinstance(eng, int) and 0 <= eng < len(ports) and cmd.args.get("port") != ports[eng]:
            out.append(f"port={cmd.args.get('port')}: stream engine {eng} is wired to bus port {ports[eng]}")
    return out


def _link_problems(cmd: Command, profile, configured: dict[tuple[str, int], Command]) -> list[str]:
    out = []
    for role, kind_key, idx_key in (("source", "src_kind", "src"), ("sink", "dst_kind", "dst")):
        kind, idx = cmd.args.get(kind_key), cmd.args.get(idx_key)
        n = getattr(profile.units, ENDPOINT_COUNT[kind]) if kind in ENDPOINT_COUNT else 0
        if kind not in ENDPOINT_COUNT:
            out.append(f"{role} kind {kind!r} is not a stream-switch endpoint")
            continue
        if not isinstance(idx, int) or not 0 <= idx < n:
            out.append(f"{role} {kind}{idx} does not exist (the profile has {n})")
            continue
        unit = configured.get((kind, idx))
        if unit is None:
            out.append(f"{role} {kind}{idx} is not configured in this epoch")
        elif kind == "SE":
            want = "read" if role == "source" else "write"
            if unit.args.get("dir") != want:
                out.append(f"{role} SE{idx} is a {unit.args.get('dir')} engine, a {role} must be a {want} engine")
    kind, port = cmd.args.get("dst_kind"), cmd.args.get("dst_port", 0)
    if kind in SINK_PORTS and not 0 <= port < SINK_PORTS[kind]:
        out.append(f"dst_port={port}: {kind} has {SINK_PORTS[kind]} input port(s)")
    return out


def verify(commands: Iterable[Command], profile, isa: IsaSpec | None = None) -> list[str]:
    """Problems of a decoded command list (empty if it verifies)."""
    isa = isa or load_isa()
    cmds = list(commands)
    problems: list[str] = []
    state = "idle"  # idle -> config (after EPOCH) -> running (after RUN) -> idle (after WAIT)
    configured: dict[tuple[str, int], Command] = {}
    ended = False

    def bad(i: int, c: Command, msg: str) -> None:
        problems.append(f"command {i} ({c.op}): {msg}")

    for i, c in enumerate(cmds):
        if c.op not in isa.by_name:
            bad(i, c, "unknown command")
            continue
        if ended:
            bad(i, c, "comes after END")
            continue
        for msg in _field_problems(c, isa, profile):
            bad(i, c, msg)
        if c.op == "EPOCH":
            if state != "idle":
                bad(i, c, f"starts an epoch while the previous one is {state} (missing RUN/WAIT)")
            state, configured = "config", {}
        elif c.op == "SE" or c.op in UNIT_COMMANDS:
            if state != "config":
                bad(i, c, "configures a unit outside an epoch (before EPOCH or after RUN)")
            key = ("SE", c.args.get("engine")) if c.op == "SE" else (UNIT_COMMANDS[c.op], c.args.get("unit"))
            if key in configured and state == "config":
                bad(i, c, f"{key[0]}{key[1]} is configured twice in one epoch")
            configured[key] = c
        elif c.op == "LINK":
            if state != "config":
                bad(i, c, "link outside an epoch (before EPOCH or after RUN)")
            for msg in _link_problems(c, profile, configured):
                bad(i, c, msg)
        elif c.op == "RUN":
            if state != "config":
                bad(i, c, "RUN without an epoch being configured")
            elif not configured:
                bad(i, c, "RUN of an epoch that configures nothing")
            state = "running"
        elif c.op == "WAIT":
            if state != "running":
                bad(i, c, "WAIT without a running epoch")
            state = "idle"
        elif c.op == "HOST":
            if state != "idle":
                bad(i, c, "HOST inside an epoch (the host runs between epochs)")
        elif c.op == "END":
            if state != "idle":
                bad(i, c, f"END while an epoch is {state} (missing RUN/WAIT)")
            ended = True
    if not ended:
        problems.append("program does not end with END" if cmds else "program is empty (no END)")
    return problems
