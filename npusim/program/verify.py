"""ISA-level verifier of a decoded command list against the spec and a profile.

Checks what is legal to *encode* but that the epoch controller would still refuse:
field minimums, unit indices beyond the profile's unit counts, a stream engine
programmed with a bus port it is not wired to, links between endpoints that do not
exist or are not configured in the epoch, and the program structure

    program := (epoch | host)* END
    epoch   := EPOCH (SE | CONV | POOL | RESIZE | ARITH | ACT | LINK)* RUN WAIT
    host    := HTENSOR* HOST        (one HTENSOR per input slot 0..n_in-1 and output slot 0..n_out-1)

Returns problems as strings ("command 7 (SE): ..."); an empty list means verified.
Value semantics (layouts, strides, addresses) are the engine's job: it faults at run time.
The endpoint/link rules are `legality.py`'s, shared with the epoch controller.
"""

from __future__ import annotations

from typing import Iterable

from . import legality as L
from .codec import Command
from .spec import IsaSpec, load_isa

UNIT_COMMANDS = L.UNIT_KIND


def _profile_value(profile, path: str) -> int:
    node = profile
    for part in path.split("."):
        node = getattr(node, part)
    return int(node)


def _field_rules(spec, profile) -> list[tuple[str, int, int | None, str | None]]:
    """(name, minimum, profile bound or None, its profile key) of each integer field of a command."""
    return [(f.name, f.min, None if f.max_profile is None else _profile_value(profile, f.max_profile), f.max_profile)
            for f in spec.fields if f.enum is None]


def _field_problems(cmd: Command, isa: IsaSpec, profile, rules: dict) -> list[str]:
    """Problems of a command's fields; `rules`: {command name: `_field_rules`}, filled as commands come."""
    checks = rules.get(cmd.op)
    if checks is None:
        checks = rules[cmd.op] = _field_rules(isa.command(cmd.op), profile)
    out = []
    for name, least, n, path in checks:
        v = cmd.args.get(name, 0)
        if type(v) is not int and (isinstance(v, bool) or not isinstance(v, int)):
            out.append(f"{name}={v!r} is not an integer")
            continue
        if least and v < least:
            out.append(f"{name}={v} is below its minimum {least}")
        if n is not None and not 0 <= v < n:
            out.append(f"{name}={v}: the profile has only {n} ({path})")
    if cmd.op == "SE":
        eng = cmd.args.get("engine", 0)
        pr = L.se_port_wired(eng, cmd.args.get("port"), profile) if isinstance(eng, int) else None
        if pr:
            out.append(pr.message)
    return out


def _link_problems(cmd: Command, profile, configured: dict[tuple[str, int], Command]) -> list[str]:
    out = []
    for role, kind_key, idx_key in (("source", "src_kind", "src"), ("sink", "dst_kind", "dst")):
        kind, idx = cmd.args.get(kind_key), cmd.args.get(idx_key)
        pr = (L.endpoint_exists(kind, idx, profile, role)
              or L.configured(role, kind, idx, configured.get((kind, idx))))
        if pr is None and kind == "SE":
            pr = L.link_direction(role, idx, configured[(kind, idx)].args.get("dir"))
        if pr is not None:
            out.append(pr.message)
    kind = cmd.args.get("dst_kind")
    pr = L.sink_port_exists(kind, cmd.args.get("dst_port", 0)) if kind in L.SINK_PORTS else None
    if pr is not None:
        out.append(pr.message)
    return out


def verify(commands: Iterable[Command], profile, isa: IsaSpec | None = None) -> list[str]:
    """Problems of a decoded command list (empty if it verifies)."""
    isa = isa or load_isa()
    cmds = list(commands)
    problems: list[str] = []
    state = "idle"  # idle -> config (after EPOCH) -> running (after RUN) -> idle (after WAIT)
    configured: dict[tuple[str, int], Command] = {}
    first: dict[tuple[str, int], int] = {}
    operands: set = set()  # (dir, slot) of the HTENSORs since the last HOST
    ended = False
    rules: dict = {}

    def bad(i: int, c: Command, msg: str) -> None:
        problems.append(f"command {i} ({c.op}): {msg}")

    for i, c in enumerate(cmds):
        if c.op not in isa.by_name:
            bad(i, c, "unknown command")
            continue
        if ended:
            bad(i, c, "comes after END")
            continue
        for msg in _field_problems(c, isa, profile, rules):
            bad(i, c, msg)
        if c.op == "EPOCH":
            if operands:
                bad(i, c, "starts an epoch between HTENSOR operands and their HOST")
            if state != "idle":
                bad(i, c, f"starts an epoch while the previous one is {state} (missing RUN/WAIT)")
            state, configured, first = "config", {}, {}
        elif c.op == "SE" or c.op in UNIT_COMMANDS:
            if state != "config":
                bad(i, c, "configures a unit outside an epoch (before EPOCH or after RUN)")
            key = ("SE", c.args.get("engine")) if c.op == "SE" else (UNIT_COMMANDS[c.op], c.args.get("unit"))
            if key in configured and state == "config":
                bad(i, c, L.configured_once(f"{key[0]}{key[1]}", first[key], i).message)
            configured[key] = c
            first.setdefault(key, i)
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
        elif c.op == "HTENSOR":
            if state != "idle":
                bad(i, c, "HTENSOR inside an epoch (host operands are given between epochs)")
            key = (c.args.get("dir"), c.args.get("slot"))
            if key in operands:
                bad(i, c, f"second HTENSOR for {'input' if key[0] == 'read' else 'output'} slot {key[1]} "
                          f"of the next HOST")
            operands.add(key)
        elif c.op == "HOST":
            if state != "idle":
                bad(i, c, "HOST inside an epoch (the host runs between epochs)")
            want = {("read", k) for k in range(c.args.get("n_in", 0))} | \
                {("write", k) for k in range(c.args.get("n_out", 0))}
            if operands != want:
                bad(i, c, f"n_in={c.args.get('n_in')}, n_out={c.args.get('n_out')} but the HTENSORs before it give "
                          f"inputs {sorted(k for d, k in operands if d == 'read')} and outputs "
                          f"{sorted(k for d, k in operands if d == 'write')}")
            operands = set()
        elif c.op == "END":
            if state != "idle":
                bad(i, c, f"END while an epoch is {state} (missing RUN/WAIT)")
            if operands:
                bad(i, c, "HTENSOR operands without a HOST after them")
            ended = True
    if not ended:
        problems.append("program does not end with END" if cmds else "program is empty (no END)")
    return problems
