"""`npusim inspect`: header, memory map and disassembled epochs of a blob, as a dict.

`inspect_program` / `inspect_blob` return plain data (JSON-ready); `render_text` and
`render_json` turn it into output.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..memmap import achieved_alignment
from ..program.asm import format_command
from ..program.blob import read_header
from ..program.spec import load_isa
from ..program.verify import verify


def _memory_map(program, profile) -> list[dict]:
    out = []
    for pool in profile.pools:
        items = []
        for b in program.buffers:
            if b.pool != pool.name:
                continue
            start = pool.base + b.offset
            items.append({"name": b.name, "what": "buffer", "kind": b.kind, "start": start, "end": start + b.size,
                          "size": b.size, "align": achieved_alignment(start), "align_asked": b.align,
                          "dtype": b.dtype, "layout": b.layout, "shape": list(b.shape),
                          "line_stride": b.line_stride, "plane_stride": b.plane_stride,
                          "producer": b.producer, "consumers": list(b.consumers)})
            if b.dtype == "int8" and b.kind != "weight":  # the quantization of the tensor it holds
                items[-1].update(scale=b.scale, zero_point=b.zero_point)
        listed = {(x["name"], x["start"], x["end"]): x for x in items}
        for c in program.constants:
            if c.pool != pool.name:
                continue
            start = pool.base + c.offset
            same = listed.get((c.name, start, start + len(c.data)))
            if same is not None:  # a weight buffer is the constant's own entry in the buffer table
                same["constant"] = True
                continue
            items.append({"name": c.name, "what": "constant", "kind": "constant", "start": start,
                          "end": start + len(c.data), "size": len(c.data), "align": achieved_alignment(start),
                          "align_asked": None, "constant": True})
        if not items:
            continue
        items.sort(key=lambda x: (x["start"], x["end"], x["name"]))
        out.append({"pool": pool.name, "base": pool.base, "end": pool.end, "size": pool.size, "perms": pool.perms,
                    "buffer_bytes": _union_bytes(items), "high_water": max(x["end"] for x in items) - pool.base,
                    "items": items})
    return out


def _union_bytes(items) -> int:
    """Bytes covered by at least one item (buffers that reuse memory over time overlap)."""
    total, reach = 0, None
    for x in sorted(items, key=lambda x: x["start"]):
        lo = x["start"] if reach is None else max(x["start"], reach)
        if x["end"] > lo:
            total += x["end"] - lo
        reach = x["end"] if reach is None else max(reach, x["end"])
    return total


def _epochs(program, isa, profile) -> list[dict]:
    """Command groups: NPU epochs (EPOCH .. WAIT), software epochs (HTENSOR* HOST, with the operator
    the host runs and why it is not on the NPU) and control commands."""
    from ..program.hostop import host_records

    records = dict(host_records(program, profile))
    groups, cur = [], None
    for i, c in enumerate(program.commands):
        if c.op == "EPOCH" or cur is None:
            kind = "npu" if c.op == "EPOCH" else "cpu" if c.op in ("HTENSOR", "HOST") else "control"
            cur = {"epoch": c.args.get("id") if c.op == "EPOCH" else None, "kind": kind, "first_command": i,
                   "layer": "", "commands": []}
            groups.append(cur)
        if c.op == "HOST":
            cur["kind"] = "cpu"
            rec = records.get(i)
            cur["operator"] = rec.op_type if rec else None
            cur["reason"] = rec.reason if rec else "unreadable host operator record"
        cur["commands"].append({"index": i, "text": format_command(c, isa, profile)})
        if not cur["layer"] and i in program.debug:
            cur["layer"] = program.debug[i]
        if c.op in ("WAIT", "HOST", "END") or cur["kind"] == "control":
            cur = None
    return groups


def inspect_program(program, profile, blob_header=None) -> dict:
    """JSON-ready description of a loaded program on `profile`."""
    isa = load_isa()
    h = program.header
    info = {"header": {"format_version": h.format_version, "isa": isa.name, "isa_version": h.isa_version,
                       "profile": h.profile, "compiler": h.compiler, "compiler_version": h.compiler_version,
                       "min_runtime": h.min_runtime},
            "profile": profile.name,
            "counts": {"commands": len(program.commands), "epochs": sum(c.op == "EPOCH" for c in program.commands),
                       "cpu_epochs": sum(c.op == "HOST" for c in program.commands),
                       "buffers": len(program.buffers), "constants": len(program.constants),
                       "constant_bytes": sum(len(c.data) for c in program.constants)},
            "problems": verify(program.commands, profile, isa),
            "memory_map": _memory_map(program, profile),
            "epochs": _epochs(program, isa, profile)}
    if blob_header is not None:
        info["file_size"] = blob_header.file_size
        info["sections"] = [{"name": s.name, "offset": s.offset, "length": s.length} for s in blob_header.sections]
    return info


def inspect_blob(path, profile=None, verify: bool = True) -> dict:
    """Load the blob at `path` (bytes also work) and describe it."""
    from ..hw import load_profile
    from ..program.blob import load_blob

    data = path if isinstance(path, (bytes, bytearray)) else Path(path)
    prog = load_blob(data, profile, verify=verify)
    info = inspect_program(prog, profile or load_profile(prog.header.profile), read_header(data))
    if not isinstance(path, (bytes, bytearray)):
        info["file"] = str(path)
    return info


def render_json(info: dict) -> str:
    return json.dumps(info, indent=2, sort_keys=False) + "\n"


def _size(n: int) -> str:
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % (div // 16) == 0:
            return f"{n / div:g} {unit}"
    return f"{n} B"


def render_text(info: dict) -> str:
    h = info["header"]
    out = [f"blob: {info.get('file', '<bytes>')}" + (f" ({info['file_size']} bytes)" if "file_size" in info else ""),
           f"  format v{h['format_version']}, ISA {h['isa']} v{h['isa_version']}, target profile {h['profile']} "
           f"(loaded with {info['profile']})",
           f"  compiler {h['compiler']} {h['compiler_version'] or '(no version)'}, needs runtime >= {h['min_runtime']}"]
    n = info["counts"]
    out.append(f"  {n['commands']} commands, {n['epochs']} NPU epochs, {n['cpu_epochs']} CPU epochs, {n['buffers']} buffers, "
               f"{n['constants']} constants ({n['constant_bytes']} bytes)")
    if "sections" in info:
        out.append("  sections: " + ", ".join(f"{s['name']}@{s['offset']}+{s['length']}" for s in info["sections"]))
    for p in info["problems"]:
        out.append(f"  verifier: {p}")
    out.append("")
    out.append("memory map:")
    for pool in info["memory_map"]:
        out.append(f"  {pool['pool']} [{pool['base']:#010x}, {pool['end']:#010x}) {_size(pool['size'])} {pool['perms']}"
                   f", {pool['buffer_bytes']} bytes in use (buffers reusing memory counted once), "
                   f"high-water {pool['high_water']} bytes")
        out.append(f"    {'start':>10}  {'end':>10}  {'size':>8}  {'align':>5}  {'asked':>5}  {'kind':<10}  name")
        for x in pool["items"]:
            asked = "-" if x["align_asked"] is None else str(x["align_asked"])
            flag = "  (< asked)" if x["align_asked"] and x["align"] < x["align_asked"] else ""
            q = f" scale={x['scale']:.6g} zp={x['zero_point']}" if "scale" in x else ""
            extra = f"  {x['layout']} {x['dtype']}{q} {x['shape']}" if x["what"] == "buffer" else ""
            out.append(f"    {x['start']:#010x}  {x['end']:#010x}  {x['size']:>8}  {x['align']:>5}  {asked:>5}  "
                       f"{x['kind']:<10}  {x['name']}{extra}{flag}")
    out.append("")
    out.append("epochs:")
    for g in info["epochs"]:
        if g.get("kind") == "cpu":
            title = f"CPU epoch {g.get('operator') or '?'} ({g.get('reason', '')})"
        else:
            title = f"epoch {g['epoch']}" if g["epoch"] is not None else "control"
        out.append(f"  {title}" + (f"  [layer {g['layer']}]" if g["layer"] else "") + f"  (command {g['first_command']})")
        for c in g["commands"]:
            out.append(f"    {c['index']:>5}  {c['text']}")
    return "\n".join(out) + "\n"
