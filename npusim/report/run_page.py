"""The report page of one run (or of several runs in memory contexts), from its JSON report alone.

Sections: summary (status, cycles, ms, profile, the blob's versions, totals), the fault (the
sanitizer text and a table of every fault), the memory map (zoom on the fault, every pool at
scale, the regions the overrun reached), per-layer chart and sortable table, bank heat map per
pool, epoch timeline and a sortable table of epochs.
"""

from __future__ import annotations

import re

from . import charts, memmap_svg
from .page import Cell, esc, hexaddr, kv, ncell, num, page, section, size_text, scell, slug, table, tcell, wcell

REQUIRED_KEYS = ("status", "end_reason", "cycles", "ms", "faults", "stats")


def run_docs(doc: dict) -> list[tuple[str, dict]]:
    """[(context name or "", run report)] of a run report or of a `{"contexts": {...}}` report."""
    if isinstance(doc.get("contexts"), dict):
        return [(str(k), v) for k, v in doc["contexts"].items()]
    return [("", doc)]


def _typed(value, types, where: str) -> list[str]:
    types = types if isinstance(types, tuple) else (types,)
    if isinstance(value, types) and not (isinstance(value, bool) and bool not in types):
        return []
    return [f"{where}: expected {'/'.join(t.__name__ for t in types)}, got {type(value).__name__}"]


def _list_of_dicts(value, where: str, keys=()) -> list[str]:
    if not isinstance(value, list):
        return [f"{where}: expected a list, got {type(value).__name__}"]
    for i, row in enumerate(value):
        if not isinstance(row, dict):
            return [f"{where}[{i}]: expected an object, got {type(row).__name__}"]
        for k, t in keys:
            if k not in row:
                return [f"{where}[{i}].{k}: missing"]
            probs = _typed(row[k], t, f"{where}[{i}].{k}")
            if probs:
                return probs
    return []


_NUM = (int, float)


def _problems_one(d, where: str) -> list[str]:
    from ..faults import validate_fault_json

    if not isinstance(d, dict):
        return [f"{where}: not a JSON object"]
    missing = [k for k in REQUIRED_KEYS if k not in d]
    if missing:
        return [f"{where}: missing {', '.join(missing)} (not a report of `npusim run --json`)"]
    out = _typed(d["status"], str, f"{where}.status") + _typed(d["cycles"], _NUM, f"{where}.cycles") \
        + _typed(d["ms"], _NUM, f"{where}.ms") + _list_of_dicts(d["faults"], f"{where}.faults") \
        + _typed(d["stats"], dict, f"{where}.stats")
    if out:
        return out
    for i, f in enumerate(d["faults"]):
        out += validate_fault_json(f, where=f"{where}.faults[{i}]")
    st = d["stats"]
    for key, cols in (("layers", (("name", str), ("cycles", _NUM))),
                      ("epochs", (("start", _NUM), ("cycles", _NUM)))):
        if key in st:
            out += _list_of_dicts(st[key], f"{where}.stats.{key}", cols)
    for key in ("pools", "bank_bytes", "stall_cycles"):
        if key in st:
            out += _typed(st[key], dict, f"{where}.stats.{key}")
    if "memory_map" in d:
        pool_keys = (("pool", str), ("base", int), ("end", int), ("size", int), ("items", list))
        out += _list_of_dicts(d["memory_map"], f"{where}.memory_map", pool_keys)
        if not out:
            item_keys = (("name", str), ("kind", str), ("start", int), ("end", int), ("size", int))
            for j, pool in enumerate(d["memory_map"]):
                out += _list_of_dicts(pool["items"], f"{where}.memory_map[{j}].items", item_keys)
    return out


def problems(doc) -> list[str]:
    """What makes `doc` not a run report (or a contexts report) of `npusim run --json`; [] if fine."""
    if not isinstance(doc, dict):
        return ["not a JSON object"]
    out = []
    for name, d in run_docs(doc):
        out += _problems_one(d, f"contexts.{name}" if name else "report")
    return out


_ERR_LINE = re.compile(r"^(==npusim== ERROR:.*|SUMMARY:.*)$", re.M)


def _sanitizer_html(text: str) -> str:
    escaped = esc(text.rstrip("\n"))
    return '<pre class="sanitizer">' + _ERR_LINE.sub(lambda m: f'<span class="err">{m.group(1)}</span>', escaped) + "</pre>"


def _summary(doc: dict) -> str:
    st = doc.get("stats") or {}
    status = str(doc.get("status", "?"))
    badge = f'<span class="badge {"ok" if status == "ok" else "fault"}">{esc(status.upper())}</span>'
    end = doc.get("end_reason", "")
    left = [("status", badge + (f" ({esc(end)})" if end and end not in ("done", status) else "")),
            ("cycles", num(doc.get("cycles"))), ("time", f"{float(doc.get('ms') or 0):.4f} ms"),
            ("profile", esc(doc.get("profile") or "?")), ("timing model", esc(st.get("mode", "?"))),
            ("faults", num(sum(int(f.get("count") or 1) for f in doc.get("faults") or [])))]
    blob = doc.get("blob") or {}
    mid = [("blob format", f"v{esc(blob['format_version'])}" if "format_version" in blob else "?"),
           ("ISA version", esc(blob.get("isa_version", "?"))),
           ("compiler", esc(f"{blob.get('compiler', '?')} {blob.get('compiler_version', '')}".strip())),
           ("target profile", esc(blob.get("profile", "?"))), ("needs runtime", esc(blob.get("min_runtime", "?")))]
    pools = ", ".join(f"{esc(k)} {size_text(int(v))}" for k, v in (st.get("pools") or {}).items())
    right = [("bytes read", num(st.get("bytes_read"))), ("bytes written", num(st.get("bytes_written"))),
             ("per pool", pools or "-"), ("bank conflicts", num(st.get("bank_conflicts"))),
             ("cross-bank splits", num(st.get("cross_bank_splits"))),
             ("MAC utilisation", f"{100 * float(st.get('mac_utilisation') or 0):.1f} %"
              + ("" if st.get("native", True) else " (fp32 debug precision: not native)"))]
    stalls = ", ".join(f"{esc(k)} {num(v)}" for k, v in (st.get("stall_cycles") or {}).items() if v)
    notes = "".join(f"<li>{esc(n)}</li>" for n in st.get("notes") or [])
    return (f'<div class="cols">{kv(left)}{kv(mid)}{kv(right)}</div>'
            f'<p class="note">stall cycles: {stalls or "none"}</p>' + (f'<ul class="tight note">{notes}</ul>' if notes else ""))


def _faults(doc: dict) -> str:
    faults = doc.get("faults") or []
    text = doc.get("fault_text") or ""
    rows = []
    for f in faults:
        reg = f.get("region") or {}
        rel = f.get("relation") or {}
        rows.append([tcell(f.get("class")), tcell(f.get("access") or "-"), Cell(hexaddr(f.get("address")),
                     None if f.get("address") is None else float(f["address"])), tcell(f.get("unit")),
                     ncell(f.get("epoch")), ncell(f.get("command")), wcell(f.get("layer")),
                     wcell(reg.get("name", "-")), tcell(f"{rel.get('offset', '')} B {rel.get('where', '')}"
                                                        if reg else rel.get("where", "")),
                     ncell(f.get("count") or 1)])
    heads = [("class", False), ("access", False), ("first bad byte", False), ("unit", False), ("epoch", True),
             ("command", True), ("layer", False), ("region", False), ("where", False), ("count", True)]
    return (_sanitizer_html(text) if text else "") + table(heads, rows)


def _memory(doc: dict, prefix: str) -> str:
    mm = doc.get("memory_map") or []
    if not mm:
        return '<p class="note">this report holds no memory map (written by an older npusim?)</p>'
    fault = next((f for f in doc.get("faults") or [] if f.get("address") is not None), None)
    legend = " ".join(f'<span style="display:inline-block;width:11px;height:11px;background:{c};'
                      f'border:1px solid #888;vertical-align:-1px"></span> {k}'
                      for k, c in memmap_svg.KIND_FILL.items() if k != "guard")
    parts = [f'<p class="note">{legend} <span style="display:inline-block;width:11px;height:11px;border:1px solid '
             f'#888;background:repeating-linear-gradient(45deg,#7a8291 0 2px,#eceef2 2px 5px);vertical-align:-1px">'
             f"</span> prefetch guard; red outline: the faulting access's region; dashed orange: the region "
             f"holding the first bad byte; faded: holds no live data at the faulting command (memory reuse). "
             f"Hover a block for its details.</p>"]
    if fault is not None:
        z = memmap_svg.zoom(mm, fault, prefix)
        if z:
            parts.append(f'<div class="memmap" id="{prefix}memmap-zoom">{z}</div>')
        parts.append(_targets(mm, fault))
    parts.append(f'<div class="zoombar">overview zoom <input class="zoom" type="range" min="1" max="32" step="1" '
                 f'value="1" data-target="{prefix}memmap-overview"> <output>1x</output></div>')
    parts.append(f'<div class="memmap scroll" id="{prefix}memmap-overview">'
                 f"{memmap_svg.overview(mm, fault, prefix, memmap_svg.zoom_window(fault, mm))}</div>")
    return "\n".join(parts)


def _targets(mm, fault) -> str:
    hits = memmap_svg.overrun_targets(mm, fault)
    if not hits:
        return ""
    runs = fault["runs"]
    reg = fault["region"]["name"]
    items = []
    for h in hits:
        it, state = h["item"], h["state"]
        when = ""
        if state and it.get("live"):
            when = (f", <b>live</b> at command {fault.get('command')} (holds data from command {it['live'][0]} "
                    f"to {it['live'][1]})" if state == "live" else
                    f", not live at command {fault.get('command')} (holds data from command {it['live'][0]} to "
                    f"{it['live'][1]})")
        items.append(f"<li>{esc(it['name'])} ({esc(it['kind'])}, [{hexaddr(it['start'])}, {hexaddr(it['end'])})): "
                     f"{h['bytes']:,} B{when}</li>")
    return (f"<p>The {len(runs['starts'])} runs shown (of {runs['total']}) of the faulting access reach outside "
            f"'{esc(reg)}' into:</p><ul class=\"tight\">" + "".join(items) + "</ul>")


def _layers(doc: dict, charts_on: bool = True, prefix: str = "") -> str:
    st = doc.get("stats") or {}
    layers = st.get("layers") or []
    if not layers:
        return '<p class="note">no layer ran</p>'
    epochs = st.get("epochs") or []
    kinds: dict[str, set] = {}
    units: dict[str, set] = {}
    for e in epochs:
        kinds.setdefault(str(e.get("layer")), set()).add("CPU" if e.get("kind") == "host" else "NPU")
        units.setdefault(str(e.get("layer")), set()).update(n for n in (e.get("stages") or {}) if not n.startswith("SE"))
    causes = charts.stall_causes(layers)
    pools = sorted({p for ly in layers for p in (ly.get("pools") or {})})
    total = float(st.get("cycles") or 0) or 1.0
    time_heads = [("layer", False), ("runs on", False), ("units", False), ("epochs", True), ("cycles", True),
                  ("% of run", True)] + [(f"stall: {c}", True) for c in causes] + [("MAC util %", True)]
    memory_heads = [("layer", False), ("bytes read", True), ("bytes written", True)] + \
        [(f"{p} bytes", True) for p in pools] + [("bank conflicts", True), ("cross-bank splits", True), ("bursts", True)]
    time_rows, memory_rows = [], []
    for ly in layers:
        name = str(ly.get("name"))
        time_rows.append(
            [wcell(name), tcell("/".join(sorted(kinds.get(name, {"NPU"})))), scell(" ".join(sorted(units.get(name, ())))),
             ncell(ly.get("epochs")), ncell(ly.get("cycles")), ncell(100 * float(ly.get("cycles") or 0) / total, 1)]
            + [ncell((ly.get("stall_cycles") or {}).get(c, 0)) for c in causes]
            + [ncell(100 * float(ly.get("mac_utilisation") or 0), 1)])
        memory_rows.append(
            [wcell(name), ncell(ly.get("bytes_read")), ncell(ly.get("bytes_written"))]
            + [ncell((ly.get("pools") or {}).get(p, 0)) for p in pools]
            + [ncell(ly.get("bank_conflicts")), ncell(ly.get("cross_bank_splits")), ncell(ly.get("bursts"))])
    more = (f'<p class="note">the chart shows the first {charts.MAX_LAYERS} of {len(layers)} layers</p>'
            if len(layers) > charts.MAX_LAYERS else "")
    chart = f'<div class="chart">{charts.layer_chart(layers)}</div>{more}' if charts_on else ""
    return (chart + '<p class="note">Click a column header to sort.</p>' + '<h3>Time per layer</h3>'
            + table(time_heads, time_rows, tid=f"{prefix}layers-table") + '<h3>Memory traffic per layer</h3>'
            + table(memory_heads, memory_rows, tid=f"{prefix}layers-memory-table"))


def _banks(doc: dict, charts_on: bool = True, prefix: str = "") -> str:
    st = doc.get("stats") or {}
    pools = {k: v for k, v in (st.get("bank_bytes") or {}).items() if v and any(v)}
    if not pools:
        return '<p class="note">no per-bank traffic in this report</p>'
    svg = charts.bank_heatmap(st.get("layers") or [], pools) if charts_on else ""
    banks = max(len(v) for v in pools.values())
    heads = [("pool", False)] + [(f"bank {b}", True) for b in range(banks)]
    rows = [[tcell(k)] + [ncell(v[b]) if b < len(v) else Cell("", None) for b in range(banks)]
            for k, v in pools.items()]
    return (f'<div class="chart">{svg}</div>' if svg else "") + \
        '<p class="note">payload bytes per bank over the run</p>' + table(heads, rows, tid=f"{prefix}banks-table")


def _timeline(doc: dict, charts_on: bool = True) -> str:
    st = doc.get("stats") or {}
    epochs = st.get("epochs") or []
    ms, cycles = float(doc.get("ms") or 0), float(doc.get("cycles") or 0)
    clock = cycles / (ms * 1e-3) if ms > 0 and cycles > 0 else None
    if not epochs:
        return '<p class="note">no epoch ran</p>'
    bad = charts.faulting_epochs(epochs, doc.get("faults") or [])
    svg = charts.timeline(epochs, clock, bad) if charts_on else ""
    heads = [("#", True), ("epoch", True), ("command", True), ("layer", False), ("kind", False), ("status", False),
             ("start", True), ("cycles", True), ("setup", True), ("critical stage", False), ("bytes read", True),
             ("bytes written", True), ("bank conflicts", True), ("cross-bank splits", True)]
    rows, classes = [], []
    for i, e in enumerate(epochs):
        rows.append([ncell(i), ncell(e.get("id")), ncell(e.get("command")), wcell(e.get("layer")), tcell(e.get("kind")),
                     tcell("fault" if i in bad and e.get("status") == "ok" else e.get("status")), ncell(e.get("start")), ncell(e.get("cycles")), ncell(e.get("setup_cycles")),
                     tcell(e.get("critical")), ncell(e.get("bytes_read")), ncell(e.get("bytes_written")),
                     ncell(e.get("bank_conflicts")), ncell(e.get("cross_bank_splits"))])
        classes.append("fault" if i in bad else "")
    chart = f'<div class="chart">{svg}</div>' if svg else ""
    return (chart + f'<details{"" if svg else " open"}><summary>every epoch ({len(epochs)})</summary>'
            + table(heads, rows, row_classes=classes) + "</details>")


def run_sections(doc: dict, prefix: str = "", heading: str = "", charts_on: bool = True):
    """The sections of one run's report and their (id, title) for the navigation; without
    `charts_on` the matplotlib charts are left out (the tables stay)."""
    parts, nav = [], []

    def add(sid, title, content):
        full = f"{heading}: {title}" if heading else title
        parts.append(section(prefix + sid, full, content))
        nav.append((prefix + sid, full))

    add("summary", "Summary", _summary(doc))
    if doc.get("faults"):
        add("fault", "The fault", _faults(doc))
    add("memory", "Memory map", _memory(doc, prefix))
    add("layers", "Layers", _layers(doc, charts_on, prefix))
    add("banks", "Bank use", _banks(doc, charts_on, prefix))
    add("timeline", "Epoch timeline", _timeline(doc, charts_on))
    return "\n".join(parts), nav


def render_run(doc: dict, title: str = "npusim run report", charts: bool = True) -> str:
    """A self-contained HTML page of a run report (or of a contexts report: one part per context);
    `charts=False` leaves out the matplotlib charts (fast, for many small pages)."""
    bodies, nav = [], []
    docs = run_docs(doc)
    for name, d in docs:
        body, n = run_sections(d, prefix=f"ctx-{slug(name)}-" if name else "",
                               heading=f"context {name}" if name else "", charts_on=charts)
        bodies.append(body)
        nav += n if len(docs) == 1 else n[:1]
    status = ", ".join(f"{name + ': ' if name else ''}{d.get('status', '?')}" for name, d in docs)
    return page(title, "\n".join(bodies), subtitle=esc(status), nav=nav)
