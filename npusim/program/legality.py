"""Legality rules of an epoch configuration, written once: the verifier (`verify.py`) reports
them as problems before a run, the epoch controller (`engine/hwfaults.py`) as `bad-descriptor`
faults when an unverified program reaches the hardware.

Each rule returns None (legal) or a `Problem(message, rule)`: `message` names the offending
endpoint/value, `rule` is the short statement of the rule (a Fault's `rule`).
"""

from __future__ import annotations

from typing import NamedTuple

# endpoint kind of each unit configuration command (POOL units also run RESIZE)
UNIT_KIND = {"CONV": "CA", "POOL": "POOL", "RESIZE": "POOL", "ARITH": "ARITH", "ACT": "ACT"}
# profile.units attribute holding the number of endpoints of each kind
ENDPOINT_COUNT = {"SE": "stream_engines", "CA": "conv_accelerators", "POOL": "pool_units",
                  "ARITH": "arith_units", "ACT": "activation_units"}
# input ports per sink kind (DESIGN.md: CA 0 = feature map, 1 = weights; ARITH 0 = a, 1 = b)
SINK_PORTS = {"SE": 1, "CA": 2, "POOL": 1, "ARITH": 2, "ACT": 1}


class Problem(NamedTuple):
    message: str
    rule: str


def endpoint_count(kind: str, profile) -> int:
    return int(getattr(profile.units, ENDPOINT_COUNT[kind]))


def endpoint_exists(kind: str, index: int, profile, role: str = "") -> Problem | None:
    """The endpoint index is below the profile's count of that kind."""
    if kind not in ENDPOINT_COUNT:
        return Problem(f"{role + ' ' if role else ''}kind {kind!r} is not a stream-switch endpoint",
                       "endpoint kinds: " + ", ".join(ENDPOINT_COUNT))
    n = endpoint_count(kind, profile)
    if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < n:
        return None
    return Problem(f"{role + ' ' if role else ''}{kind}{index} does not exist: the profile has {n} {kind} "
                   f"({ENDPOINT_COUNT[kind]})", "endpoint index < unit count")


def se_port_wired(engine: int, port: int, profile) -> Problem | None:
    """A stream engine is programmed with the bus port it is wired to."""
    ports = profile.bus.stream_engine_port
    if not 0 <= engine < len(ports) or port == ports[engine]:
        return None
    return Problem(f"port={port}: stream engine {engine} is wired to bus port {ports[engine]}",
                   f"port == {ports[engine]}")


def configured(role: str, kind: str, index: int, node) -> Problem | None:
    """A linked endpoint is configured in the same epoch (`node` is its configuration or None)."""
    if node is not None:
        return None
    return Problem(f"{role} {kind}{index} is not configured in this epoch", "linked endpoints are configured")


def link_direction(role: str, index: int, se_dir: str) -> Problem | None:
    """A read SE is only a link source, a write SE only a sink."""
    want = "read" if role == "source" else "write"
    if se_dir == want:
        return None
    return Problem(f"{role} SE{index} is a {se_dir} engine, a {role} must be a {want} engine",
                   "read SE = source, write SE = sink")


def sink_port_exists(kind: str, port: int) -> Problem | None:
    """The destination port exists on the sink kind."""
    n = SINK_PORTS.get(kind, 0)
    if isinstance(port, int) and 0 <= port < n:
        return None
    return Problem(f"dst_port={port}: {kind} has no input port {port} ({n} input port(s))", f"port < {n}")


def configured_once(name: str, first: int, again: int) -> Problem:
    """An engine/unit is configured at most once per epoch (a second one would overwrite it)."""
    return Problem(f"{name} is configured twice in one epoch (commands {first} and {again})",
                   "one configuration per engine/unit per epoch")
