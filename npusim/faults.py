"""Fault taxonomy, fault records, and their text (AddressSanitizer-style) and JSON forms.

A `Fault` is data about the *simulated* program, never an exception. The memory
checker (`npusim.memory.checker`) builds them; the engine collects them.

JSON schema (one entry of `faults`; also `FAULT_JSON_SCHEMA`, a JSON-Schema dict):
    class     str   one of FAULT_CLASSES
    level     str   "hardware" | "sanitizer"
    access    str|null  "read" | "write" (null for faults that are not an access)
    address   int|null  first bad byte (absolute NPU address)
    size      int   bytes of the access (the run holding the bad byte; 0 if not an access)
    unit      str   e.g. "SE0", "CA1", "EC", "HOST", "RUNTIME"
    epoch     int|null, command int|null (command index in the program)
    layer     str   ONNX node name ("" if unknown)
    context   str|null  context (process) that made the access
    region    {name, kind, start, size, state, end, perms, owner, producer, origin} | null
    relation  {where: after|before|inside|unmapped, offset: int}
    rule      str   the rule that was broken (e.g. "required alignment 128, actual residue 16")
    why       str   the likely cause, when a descriptor disagrees with the buffer table ("" if unknown)
    message   str   one-line description
    count     int   how many identical faults this entry stands for
    details   dict  extra per-class data (e.g. other_unit of a write-write-race)
    pattern   {base, run, n1, s1, n2, s2, n3, s3} | null  the access as the hardware walked it
              (addresses the unit really used; null for faults that are not an access pattern)
    runs      {first, total, starts} | null  a window of at most RUNS_WINDOW runs of `pattern`
              around the faulting run (`details.run`): `starts[i]` is the start address of run
              `first + i` in stream order, `total` the pattern's run count
    static    bool  a static prediction (`npusim check`), not a fault a simulation met; the text
              form marks it on the first line and the SUMMARY line ("[static prediction]")
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

__all__ = ["FAULT_CLASSES", "FAULT_JSON_SCHEMA", "HARDWARE_CLASSES", "PATTERN_FIELDS", "RELATIONS", "RUNS_WINDOW",
           "SANITIZER_CLASSES", "STATIC_MARK", "Fault", "RegionRef", "Relation", "fault_to_json", "faults_to_json", "merge_repeats", "render_text",
           "validate_fault_json"]

HARDWARE_CLASSES = ("out-of-pool", "write-to-readonly", "misaligned-access", "bad-descriptor",
                    "unknown-opcode", "hang")
SANITIZER_CLASSES = ("buffer-overflow", "buffer-underflow", "use-after-free", "uninitialized-read",
                     "cross-context-access", "pool-overlap", "write-write-race")
FAULT_CLASSES = HARDWARE_CLASSES + SANITIZER_CLASSES
RELATIONS = ("after", "before", "inside", "unmapped")
PATTERN_FIELDS = ("base", "run", "n1", "s1", "n2", "s2", "n3", "s3")
RUNS_WINDOW = 64  # runs of the faulting pattern kept in the JSON: 16 before the faulting run, the rest after
_RUNS_BEFORE = 16

STATIC_MARK = " [static prediction]"
_HW_NOTE = {"out-of-pool": "bus error", "write-to-readonly": "bus error",
            "misaligned-access": "descriptor refused", "bad-descriptor": "descriptor refused",
            "unknown-opcode": "epoch controller error", "hang": "epoch timeout"}


@dataclass(frozen=True)
class RegionRef:
    """Snapshot of a region as it was when the fault happened."""

    name: str
    kind: str
    start: int
    size: int
    state: str
    perms: str = "rw"
    owner: str | None = None
    producer: str = ""
    origin: str = ""
    pool: str = ""

    @property
    def end(self) -> int:
        return self.start + self.size


@dataclass(frozen=True)
class Relation:
    where: str  # after | before | inside | unmapped
    offset: int  # bytes after the end / before the start / from the start

    def text(self, region: RegionRef | None) -> str:
        if region is None or self.where == "unmapped":
            return "outside every known region"
        what = f"the {region.size}-byte region '{region.name}'"
        if self.where == "after":
            return f"{self.offset} bytes after {what}"
        if self.where == "before":
            return f"{self.offset} bytes before {what}"
        return f"{self.offset} bytes inside {what}"


@dataclass(frozen=True)
class Fault:
    cls: str
    access: str | None = None
    address: int | None = None
    size: int = 0
    unit: str = ""
    epoch: int | None = None
    command: int | None = None
    layer: str = ""
    region: RegionRef | None = None
    relation: Relation = Relation("unmapped", 0)
    rule: str = ""
    message: str = ""
    count: int = 1
    context: str | None = None
    details: dict = field(default_factory=dict, compare=False, hash=False)
    why: str = ""
    pattern: tuple | None = field(default=None, compare=False)  # PATTERN_FIELDS of the faulting access
    static: bool = field(default=False, compare=False)  # predicted by `npusim check`, not simulated

    @property
    def level(self) -> str:
        return "hardware" if self.cls in HARDWARE_CLASSES else "sanitizer"

    def key(self) -> tuple:
        """Identity used to suppress repeats: class, unit, layer, region name."""
        return (self.cls, self.unit, self.layer, self.region.name if self.region else None)


def merge_repeats(faults) -> list[Fault]:
    """Collapse faults with the same key() into the first one, summing counts (order kept)."""
    out: dict[tuple, Fault] = {}
    for f in faults:
        k = f.key()
        out[k] = replace(out[k], count=out[k].count + f.count) if k in out else f
    return list(out.values())


# ---------------------------------------------------------------- text

def _hex(v) -> str:
    return "?" if v is None else f"0x{v:08x}"


def _detail(v) -> str:
    if isinstance(v, int) and not isinstance(v, bool) and v > 0xFFFF:
        return f"0x{v:08x}"
    return str(v)


NODE_KIND = "node_kind"  # details key: what the layer names ("ONNX node" when absent; "ST node" in ST programs)
NODE_KINDS = {"tflite": "TFLite operator"}  # by `Header.source` (a program compiled from ONNX has "")
RUNTIME_NODE = "runtime library"  # the node kind of the runtime library's own host copies
COMMAND_KIND = "command_kind"  # details key: what `command` counts ("command"; "epoch block" in ST programs)
_PRESENTATION = (NODE_KIND, COMMAND_KIND)


def _where(f: Fault) -> str:
    bits = [f.unit or "?"]
    if f.epoch is not None:
        bits.append(f"epoch {f.epoch}")
    if f.command is not None:
        bits.append(f"{f.details.get(COMMAND_KIND, 'command')} {f.command}")
    return ", ".join(bits)


def _render_one(f: Fault, index: int) -> list[str]:
    kind = f"{f.cls} ({_HW_NOTE[f.cls]})" if f.cls in _HW_NOTE else f.cls
    head = f"==npusim== ERROR: NPUSanitizer: {kind}"
    if f.address is not None:
        head += f" on address {_hex(f.address)}"
    head += f" at {_where(f)}"
    if f.layer:
        head += f" in layer '{f.layer}'"
    if f.static:
        head += STATIC_MARK
    lines = [head]
    if f.access:
        lines.append(f"{f.access.upper()} of size {f.size} at {_hex(f.address)} by {_where(f)}"
                     + (f", context '{f.context}'" if f.context else ""))
    if f.message:
        lines.append(f"    {f.message}")
    if f.layer or f.epoch is not None:
        node = f.details.get(NODE_KIND, "ONNX node")
        lines.append(f"    #0 layer '{f.layer or '?'}' ({node}), epoch {f.epoch if f.epoch is not None else '?'},"
                     f" {f.details.get(COMMAND_KIND, 'command')} {f.command if f.command is not None else '?'}")
    r = f.region
    if r is not None:
        addr = _hex(f.address) if f.address is not None else "the access"
        lines.append(f"{addr} is located {f.relation.text(r)}")
        lines.append(f"    region '{r.name}' kind={r.kind} [{_hex(r.start)}, {_hex(r.end)}) size={r.size}"
                     f" perms={r.perms} state={r.state}" + (f" owner={r.owner}" if r.owner else ""))
        origin = r.origin or "runtime allocation"
        prod = (f", produced by layer '{r.producer}'" if r.producer else
                "" if "produced by" in origin else ", not produced by any layer")
        lines.append(f"    origin: {origin}" + (f" in pool {r.pool}" if r.pool else "") + prod)
    elif f.address is not None:
        lines.append(f"{_hex(f.address)} is located outside every known region")
    if f.rule:
        lines.append(f"    rule: {f.rule}")
    if f.why:
        lines.append(f"    why: {f.why}")
    shown = sorted(k for k in f.details if k not in _PRESENTATION)
    if shown:
        lines.append("    details: " + ", ".join(f"{k}={_detail(f.details[k])}" for k in shown))
    if f.count > 1:
        lines.append(f"    ... {f.count - 1} more identical fault(s) suppressed"
                     f" ({f.cls}, unit {f.unit}, layer '{f.layer}')")
    return lines


def render_text(faults, program_name: str = "") -> str:
    """ASan-style report: one block per distinct fault, repeats suppressed, SUMMARY line last."""
    faults = list(faults)
    prog = f" in program '{program_name}'" if program_name else ""
    if not faults:
        return f"==npusim== no faults{prog}\n"
    merged = merge_repeats(faults)
    lines: list[str] = []
    for i, f in enumerate(merged):
        if i:
            lines.append("")
        lines.extend(_render_one(f, i))
    total = sum(f.count for f in merged)
    lines.append("")
    if total > 1:
        by: dict[str, int] = {}
        for f in merged:
            by[f.cls] = by.get(f.cls, 0) + f.count
        lines.append(f"==npusim== {total} faults{prog} ("
                     + ", ".join(f"{n} {c}" for c, n in by.items()) + f"); {len(merged)} shown")
    f = merged[0]
    acc = f" {f.access}" if f.access else ""
    addr = f" at {_hex(f.address)}" if f.address is not None else ""
    lines.append(f"SUMMARY: NPUSanitizer: {f.cls}{acc}{addr} by {f.unit or '?'} in {f.layer or '?'}{prog}"
                 + (STATIC_MARK if f.static else ""))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- JSON

def _runs_window(pattern: tuple | None, run: int | None) -> dict | None:
    """Start addresses of at most RUNS_WINDOW runs of `pattern` around run `run` (stream order)."""
    if pattern is None:
        return None
    base, size, n1, s1, n2, s2, n3, s3 = pattern
    total = n1 * n2 * n3
    if total == 0 or size == 0:
        return {"first": 0, "total": total, "starts": []}
    k = min(max(int(run or 0), 0), total - 1)
    first = max(0, min(k - _RUNS_BEFORE, total - RUNS_WINDOW))
    starts = []
    for i in range(first, min(total, first + RUNS_WINDOW)):
        i1, i2, i3 = i % n1, (i // n1) % n2, i // (n1 * n2)
        starts.append(base + i1 * s1 + i2 * s2 + i3 * s3)
    return {"first": first, "total": total, "starts": starts}


def fault_to_json(f: Fault) -> dict:
    r = f.region
    region = None if r is None else {
        "name": r.name, "kind": r.kind, "start": r.start, "size": r.size, "state": r.state,
        "end": r.end, "perms": r.perms, "owner": r.owner, "producer": r.producer,
        "origin": r.origin, "pool": r.pool}
    return {"class": f.cls, "level": f.level, "access": f.access, "address": f.address,
            "size": f.size, "unit": f.unit, "epoch": f.epoch, "command": f.command,
            "layer": f.layer, "context": f.context, "region": region,
            "relation": {"where": f.relation.where, "offset": f.relation.offset},
            "rule": f.rule, "why": f.why, "message": f.message, "count": f.count,
            "details": {k: f.details[k] for k in sorted(f.details)},
            "pattern": None if f.pattern is None else dict(zip(PATTERN_FIELDS, (int(v) for v in f.pattern))),
            "runs": _runs_window(f.pattern, f.details.get("run")), "static": bool(f.static)}


def faults_to_json(faults, merge: bool = False) -> list[dict]:
    """JSON-ready dicts (see module docstring); `merge=True` collapses repeats first."""
    faults = merge_repeats(faults) if merge else list(faults)
    return [fault_to_json(f) for f in faults]


_INT_OR_NULL = {"type": ["integer", "null"]}
_STR_OR_NULL = {"type": ["string", "null"]}
FAULT_JSON_SCHEMA = {
    "type": "object",
    "required": ["class", "access", "address", "size", "unit", "epoch", "command", "layer",
                 "region", "relation", "rule", "message", "count"],
    "properties": {
        "class": {"type": "string", "enum": list(FAULT_CLASSES)},
        "level": {"type": "string", "enum": ["hardware", "sanitizer"]},
        "access": {"type": ["string", "null"], "enum": ["read", "write", None]},
        "address": _INT_OR_NULL, "size": {"type": "integer"}, "unit": {"type": "string"},
        "epoch": _INT_OR_NULL, "command": _INT_OR_NULL, "layer": {"type": "string"},
        "context": _STR_OR_NULL,
        "region": {"type": ["object", "null"],
                   "required": ["name", "kind", "start", "size", "state"],
                   "properties": {"name": {"type": "string"}, "kind": {"type": "string"},
                                  "start": {"type": "integer"}, "size": {"type": "integer"},
                                  "state": {"type": "string", "enum": ["live", "freed", "unwritten"]}}},
        "relation": {"type": "object", "required": ["where", "offset"],
                     "properties": {"where": {"type": "string", "enum": list(RELATIONS)},
                                    "offset": {"type": "integer"}}},
        "rule": {"type": "string"}, "why": {"type": "string"}, "message": {"type": "string"},
        "count": {"type": "integer"}, "details": {"type": "object"},
        "pattern": {"type": ["object", "null"], "required": list(PATTERN_FIELDS),
                    "properties": {k: {"type": "integer"} for k in PATTERN_FIELDS}},
        "runs": {"type": ["object", "null"], "required": ["first", "total", "starts"],
                 "properties": {"first": {"type": "integer"}, "total": {"type": "integer"}}},
        "static": {"type": "boolean"},
    },
}

_PY = {"string": str, "integer": int, "object": dict, "null": type(None), "boolean": bool}


def validate_fault_json(entry: dict, schema: dict = FAULT_JSON_SCHEMA, where: str = "fault") -> list[str]:
    """Problems of one JSON entry against the (small JSON-Schema subset) schema; [] if valid."""
    probs: list[str] = []
    types = schema.get("type")
    if types:
        types = [types] if isinstance(types, str) else types
        ok = any(isinstance(entry, _PY[t]) and not (t == "integer" and isinstance(entry, bool))
                 for t in types)
        if not ok:
            return [f"{where}: expected {'/'.join(types)}, got {type(entry).__name__}"]
    if "enum" in schema and entry not in schema["enum"]:
        probs.append(f"{where}: {entry!r} not one of {schema['enum']}")
    if isinstance(entry, dict):
        for k in schema.get("required", ()):
            if k not in entry:
                probs.append(f"{where}.{k}: missing")
        for k, sub in schema.get("properties", {}).items():
            if k in entry:
                probs.extend(validate_fault_json(entry[k], sub, f"{where}.{k}"))
    return probs
