"""Golden snapshots of a compiled model's run: build, save, load, diff.

A snapshot is a plain, JSON-ready dict (stably sorted when written):

    {"format": 1,
     "meta":    {model, model_sha256, options, profile, ...}   # identity, not compared
     "status":  "ok" | "fault",  "end_reason": "done" | ...,
     "cycles":  total cycles (int),
     "layers":  {layer name: cycles},                          # summed over a layer's epochs
     "faults":  [{class, layer, region, count}],               # sorted
     "memory_map": {buffer name: {pool, offset, size}},
     "outputs": {name: {shape, dtype, sha256, mean, std, absmax}}}

`sha256` hashes the native-dtype output bytes (bit-exact); mean/std/absmax of the float
outputs give a tolerance check when `outputs="tolerance"`. Nothing volatile (paths, times)
is stored, so a re-run with the same compiler gives byte-identical files.

`diff(old, new, ...)` returns a `GoldenDiff`: `ok`, `problems` (what fails), `notes`
(changes within tolerance), a one-line `headline` (fault class and layer first, for CI)
and `text()`, a readable report: which layer got slower and by how much, which buffer moved.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import InvalidInputError

GOLDEN_FORMAT = 1
CHECKS = ("status", "cycles", "faults", "memory_map", "outputs")
OUTPUT_MODES = ("hash", "tolerance", "ignore")
UPDATE_HINT = "update the golden file with: pytest --npusim-update-golden"


class GoldenError(InvalidInputError):
    """A golden file is missing, unreadable or not a golden snapshot."""


# ---------------------------------------------------------------- build

def _sig(x: float) -> float:
    """A float rounded to 7 significant digits (readable, stable across platforms)."""
    return float(f"{float(x):.7g}")


def _fault_row(f) -> dict:
    """(class, layer, region) of a Fault or of its JSON dict."""
    d = f if isinstance(f, dict) else {
        "class": f.cls, "layer": f.layer, "count": getattr(f, "count", 1),
        "region": None if f.region is None else {"name": getattr(f.region, "name", f.region)}}
    region = d.get("region")
    if isinstance(region, dict):
        region = region.get("name")
    return {"class": str(d["class"]), "layer": str(d.get("layer") or ""),
            "region": None if region is None else str(region), "count": int(d.get("count") or 1)}


def _fault_key(row: dict) -> tuple:
    return (row["class"], row["layer"], row["region"] or "")


def output_fingerprint(value, raw=None) -> dict:
    """Shape, dtype, sha256 of the native bytes (`raw`, else `value`) and float stats."""
    arr = np.asarray(value)
    native = np.ascontiguousarray(np.asarray(raw) if raw is not None else arr)
    f = arr.astype(np.float64)
    return {"shape": list(arr.shape), "dtype": str(native.dtype),
            "sha256": hashlib.sha256(native.tobytes()).hexdigest(),
            "mean": _sig(f.mean()) if f.size else 0.0,
            "std": _sig(f.std()) if f.size else 0.0,
            "absmax": _sig(np.abs(f).max()) if f.size else 0.0}


def build_from_parts(report: dict, buffers=(), outputs=None, raw_outputs=None, meta=None) -> dict:
    """Snapshot from a run's JSON report (`RunResult.report_json()`), a buffer table and outputs."""
    layers: dict[str, int] = {}
    for row in (report.get("stats") or {}).get("layers") or []:
        name = str(row.get("name") or "")
        layers[name] = layers.get(name, 0) + int(round(float(row.get("cycles") or 0)))
    faults: dict[tuple, dict] = {}
    for f in report.get("faults") or []:
        row = _fault_row(f)
        k = _fault_key(row)
        if k in faults:
            faults[k]["count"] += row["count"]
        else:
            faults[k] = row
    mm = {}
    for b in buffers:
        mm[b.name] = {"pool": b.pool, "offset": int(b.offset), "size": int(b.size)}
    outs = {}
    raw_outputs = raw_outputs or {}
    for name, val in sorted((outputs or {}).items()):
        outs[name] = output_fingerprint(val, raw_outputs.get(name))
    return {"format": GOLDEN_FORMAT, "meta": dict(meta or {}),
            "status": str(report.get("status", "ok")),
            "end_reason": str(report.get("end_reason", "")),
            "cycles": int(round(float(report.get("cycles") or 0))),
            "layers": layers,
            "faults": [faults[k] for k in sorted(faults)],
            "memory_map": mm, "outputs": outs}


def build(result, program=None, meta=None) -> dict:
    """Snapshot of a `RunResult` (and the `Program` it ran, for the memory map)."""
    report = result.report_json()
    report.setdefault("end_reason", getattr(result, "end_reason", ""))
    return build_from_parts(report, buffers=program.buffers if program is not None else (),
                            outputs=getattr(result, "outputs", None),
                            raw_outputs=getattr(result, "raw_outputs", None), meta=meta)


# ---------------------------------------------------------------- files

def to_json(snap: dict) -> str:
    """Readable, stably sorted JSON text (ends with a newline)."""
    return json.dumps(snap, indent=2, sort_keys=True) + "\n"


def save(path: str | Path, snap: dict) -> Path:
    """Write `snap` to `path` (parents created) by atomic rename; unchanged files are not rewritten."""
    path = Path(path)
    text = to_json(snap)
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)  # atomic: a concurrent reader (pytest-xdist) sees the old file or the new one
    return path


def load(path: str | Path) -> dict:
    """Read a golden file; GoldenError names the file and the problem."""
    path = Path(path)
    try:
        snap = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise GoldenError(f"golden file {path} does not exist ({UPDATE_HINT})") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise GoldenError(f"golden file {path} is not readable JSON: {e}") from None
    if not isinstance(snap, dict) or snap.get("format") != GOLDEN_FORMAT:
        raise GoldenError(f"golden file {path} is not a format-{GOLDEN_FORMAT} npusim snapshot")
    for key in ("cycles", "layers", "faults", "memory_map", "outputs"):
        if key not in snap:
            raise GoldenError(f"golden file {path} lacks the key {key!r}")
    return snap


# ---------------------------------------------------------------- diff

@dataclass
class GoldenDiff:
    """Result of comparing a new snapshot to a golden one."""

    problems: list[str] = field(default_factory=list)  # lines that make the check fail
    notes: list[str] = field(default_factory=list)  # changes within tolerance (shown, not failing)
    sections: dict[str, list[str]] = field(default_factory=dict)  # section -> detail lines
    source: str = ""  # golden file name, for messages

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def headline(self) -> str:
        where = f" ({self.source})" if self.source else ""
        if self.ok:
            return f"npusim golden matches{where}"
        return f"npusim golden mismatch{where}: " + "; ".join(self.problems[:3]) + (
            f"; +{len(self.problems) - 3} more" if len(self.problems) > 3 else "")

    def text(self) -> str:
        lines = [self.headline]
        for name, rows in self.sections.items():
            if rows:
                lines.append(f"  {name}:")
                lines.extend(f"    {r}" for r in rows)
        if not self.ok:
            lines.append(UPDATE_HINT)
        return "\n".join(lines)

    __str__ = text


def _pct(old: float, new: float) -> float:
    if old == 0:
        return 0.0 if new == 0 else float("inf")
    return (new - old) / old * 100.0


def _fmt_pct(p: float) -> str:
    if p == float("inf"):
        return "new"
    return f"{p:+.2f}%" if abs(p) < 1.0 else f"{p:+.1f}%"


def _where(m: dict) -> str:
    return f"{m['pool']}+0x{m['offset']:x} ({m['size']} B)"


def _diff_cycles(old, new, tolerance, layer_tolerance, d: GoldenDiff):
    rows = d.sections.setdefault("cycles", [])
    oc, nc = old["cycles"], new["cycles"]
    p = _pct(oc, nc)
    past = abs(p) > tolerance * 100.0
    worst = None
    lo, ln = old["layers"], new["layers"]
    changed = []
    for name in sorted(set(lo) | set(ln)):
        a, b = lo.get(name), ln.get(name)
        if a == b:
            continue
        if a is None:
            changed.append((b, f"+ {name}: new layer, {b} cycles", name, None))
        elif b is None:
            changed.append((a, f"- {name}: vanished layer ({a} cycles)", name, None))
        else:
            lp = _pct(a, b)
            lim = layer_tolerance if layer_tolerance is not None else tolerance
            mark = "!" if abs(lp) > lim * 100.0 else " "
            verb = "slower" if b > a else "faster"
            changed.append((abs(b - a), f"{mark} {name}: {a} -> {b} cycles ({_fmt_pct(lp)}, {verb})", name, lp))
    changed.sort(key=lambda t: (-t[0], t[2]))
    slower = [c for c in changed if c[3] is not None and c[3] > 0]
    if slower:
        worst = max(slower, key=lambda c: (c[0], c[2]))
    if oc != nc or changed:
        rows.append(f"total: {oc} -> {nc} cycles ({_fmt_pct(p)}, tolerance ±{tolerance * 100:.1f}%)")
        rows.extend(c[1] for c in changed[:25])
        if len(changed) > 25:
            rows.append(f"... {len(changed) - 25} more layers changed")
    if past:
        msg = f"cycles {_fmt_pct(p)} ({oc} -> {nc}, tolerance ±{tolerance * 100:.1f}%)"
        if worst is not None and p > 0:
            msg += f", slowest layer {worst[2]} {_fmt_pct(worst[3])}"
        d.problems.append(msg)
    elif oc != nc:
        d.notes.append(f"cycles {_fmt_pct(p)} within tolerance")
    if layer_tolerance is not None:
        for _, _, name, lp in changed:
            if lp is not None and abs(lp) > layer_tolerance * 100.0:
                d.problems.append(f"layer {name} {_fmt_pct(lp)} (layer tolerance ±{layer_tolerance * 100:.1f}%)")


def _diff_faults(old, new, d: GoldenDiff):
    rows = d.sections.setdefault("faults", [])
    fo = {_fault_key(r): r for r in old["faults"]}
    fn = {_fault_key(r): r for r in new["faults"]}
    for k in sorted(set(fn) - set(fo)):
        r = fn[k]
        region = f" (region {r['region']})" if r["region"] else ""
        rows.append(f"+ new fault: {r['class']} in layer {r['layer']}{region} x{r['count']}")
        d.problems.append(f"new fault {r['class']} in layer {r['layer']}{region}")
    for k in sorted(set(fo) - set(fn)):
        r = fo[k]
        region = f" (region {r['region']})" if r["region"] else ""
        rows.append(f"- vanished fault: {r['class']} in layer {r['layer']}{region}")
        d.problems.append(f"vanished fault {r['class']} in layer {r['layer']}")
    for k in sorted(set(fo) & set(fn)):
        if fo[k]["count"] != fn[k]["count"]:
            rows.append(f"~ {k[0]} in layer {k[1]}: x{fo[k]['count']} -> x{fn[k]['count']}")
            d.notes.append(f"fault {k[0]} in layer {k[1]} repeats {fo[k]['count']} -> {fn[k]['count']} times")


def _diff_memory_map(old, new, d: GoldenDiff):
    rows = d.sections.setdefault("memory map", [])
    mo, mn = old["memory_map"], new["memory_map"]
    moved = []
    for name in sorted(set(mo) | set(mn)):
        a, b = mo.get(name), mn.get(name)
        if a == b:
            continue
        if a is None:
            rows.append(f"+ new buffer {name}: {_where(b)}")
            moved.append(name)
        elif b is None:
            rows.append(f"- vanished buffer {name}: was {_where(a)}")
            moved.append(name)
        else:
            verb = "moved" if (a["pool"], a["offset"]) != (b["pool"], b["offset"]) else "resized"
            rows.append(f"~ {verb} {name}: {_where(a)} -> {_where(b)}")
            moved.append(name)
    if len(rows) > 40:
        rows[40:] = [f"... {len(rows) - 40} more buffer changes"]
    if moved:
        shown = ", ".join(moved[:3]) + (f" +{len(moved) - 3} more" if len(moved) > 3 else "")
        d.problems.append(f"memory map changed ({shown})")


def _close(a: float, b: float, rtol: float, atol: float, spread: float) -> bool:
    """|a - b| within rtol of |a| plus rtol of the output's spread (its golden std), plus atol.

    The spread term is the floor that makes a near-zero mean comparable: float outputs that differ
    in summation order or SIMD variant move every statistic by a small fraction of the std, not of
    the mean."""
    return abs(a - b) <= atol + rtol * (abs(a) + abs(spread))


def _diff_outputs(old, new, mode, rtol, atol, d: GoldenDiff):
    if mode == "ignore":
        return
    rows = d.sections.setdefault("outputs", [])
    oo, on = old["outputs"], new["outputs"]
    for name in sorted(set(oo) | set(on)):
        a, b = oo.get(name), on.get(name)
        if a is None or b is None:
            rows.append(f"{'+ new' if a is None else '- vanished'} output {name}")
            d.problems.append(f"output {name} {'new' if a is None else 'vanished'}")
            continue
        if a["shape"] != b["shape"] or a["dtype"] != b["dtype"]:
            rows.append(f"~ {name}: {a['dtype']}{a['shape']} -> {b['dtype']}{b['shape']}")
            d.problems.append(f"output {name} shape/dtype changed")
            continue
        if a["sha256"] == b["sha256"]:
            continue
        stats = ", ".join(f"{k} {a[k]:.6g} -> {b[k]:.6g}" for k in ("mean", "std", "absmax"))
        if mode == "hash":
            rows.append(f"~ {name}: values changed (sha256 {a['sha256'][:12]} -> {b['sha256'][:12]}; {stats})")
            d.problems.append(f"output {name} values changed")
        else:
            bad = [k for k in ("mean", "std", "absmax") if not _close(a[k], b[k], rtol, atol, a["std"])]
            rows.append(f"{'!' if bad else ' '} {name}: values changed ({stats})")
            if bad:
                d.problems.append(f"output {name} {'/'.join(bad)} past tolerance")
            else:
                d.notes.append(f"output {name} changed within tolerance")


def diff(old: dict, new: dict, tolerance: float = 0.02, layer_tolerance: float | None = None,
         outputs: str = "hash", rtol: float = 1e-3, atol: float = 1e-6,
         checks=CHECKS, source: str = "") -> GoldenDiff:
    """Compare snapshot `new` against golden `old`.

    tolerance: relative drift of total cycles allowed (both ways; faster also fails, so the
    golden gets refreshed). layer_tolerance: if set, any layer past it fails too (else
    layers are listed, `!` marking those past `tolerance`). outputs: "hash" (bit-exact),
    "tolerance" (mean/std/absmax each within atol + rtol * (|golden value| + golden std)) or
    "ignore". checks: subset of CHECKS.
    """
    if outputs not in OUTPUT_MODES:
        raise GoldenError(f"outputs must be one of {', '.join(OUTPUT_MODES)}, not {outputs!r}")
    unknown = set(checks) - set(CHECKS)
    if unknown:
        raise GoldenError(f"unknown golden check(s) {sorted(unknown)}; known: {', '.join(CHECKS)}")
    d = GoldenDiff(source=source)
    if "faults" in checks:
        _diff_faults(old, new, d)
    if "status" in checks and (old.get("status"), old.get("end_reason")) != (new.get("status"), new.get("end_reason")):
        d.problems.append(f"status {old.get('status')}/{old.get('end_reason')} -> "
                          f"{new.get('status')}/{new.get('end_reason')}")
    if "cycles" in checks:
        _diff_cycles(old, new, tolerance, layer_tolerance, d)
    if "memory_map" in checks:
        _diff_memory_map(old, new, d)
    if "outputs" in checks:
        _diff_outputs(old, new, outputs, rtol, atol, d)
    return d
