"""The memory map as SVG diagrams (drawn here: it is a diagram, not a chart).

`overview`: each pool a horizontal band at scale (the whole pool, or its used start when that is
under a quarter of it), its regions as blocks coloured by kind, stacked in lanes where the plan
reuses memory, prefetch guards hatched; the first bad byte of the first fault marked.
`zoom`: a band around the fault: the regions there, the faulting access's runs as the hardware
walked them (bytes outside the access's own region in red), the same runs where the compiler's
buffer table put them when its strides differ, and the first bad byte.
`overrun_targets`: the regions that the runs of the faulting access shown touch outside its own
region, with their bytes and whether they held live data at the faulting command.
Every block has a tooltip (`<title>`) with its name, kind, range, alignment and lifetime.
"""

from __future__ import annotations

import hashlib

from .page import esc, hexaddr, size_text

W = 1100  # drawing width in SVG units (the browser scales it)
LEFT = 8
LANE_H = 17
MAX_LANES = 24  # lanes per band; regions beyond share the last one
MAX_ITEMS = 5000  # regions drawn per band at most
KIND_FILL = {"input": "#5b8ff9", "output": "#3aa876", "activation": "#b39ddb", "weight": "#f2b134",
             "scratch": "#9aa3b1", "guard": "url(#hatch)"}
RUN_IN, RUN_OUT, PLANNED = "#2f6fb3", "#d62728", "#8c96a5"

_DEFS = ('<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
         'patternTransform="rotate(45)"><rect width="6" height="6" fill="#eceef2"/>'
         '<line x1="0" y1="0" x2="0" y2="6" stroke="#7a8291" stroke-width="2.2"/></pattern></defs>')


def _svg(width: int, height: int, body: list[str], label: str) -> str:
    """The diagram; its hatch pattern's id is its own (a page holds the zoom and the overview, and a page of
    several contexts one pair per context)."""
    inner = "".join(body)
    tag = "hatch-" + hashlib.sha1(f"{label}{inner}".encode()).hexdigest()[:8]
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" '
            f'role="img" aria-label="{esc(label)}" style="min-width:{width // 2}px">'
            + (_DEFS + inner).replace('id="hatch"', f'id="{tag}"').replace("url(#hatch)", f"url(#{tag})") + "</svg>")


def _lanes(items: list[dict]) -> list[int]:
    """First-fit lane per item (items sorted by start): overlapping regions never share a lane."""
    ends: list[int] = []
    out = []
    for it in items:
        for i, end in enumerate(ends):
            if end <= it["start"]:
                ends[i] = it["end"]
                out.append(i)
                break
        else:
            if len(ends) < MAX_LANES:
                ends.append(it["end"])
                out.append(len(ends) - 1)
            else:
                out.append(MAX_LANES - 1)
    return out


def live_state(item: dict, command) -> str:
    """'live' | 'dead' | '' (unknown) for a region at command index `command`."""
    live = item.get("live")
    if not live or command is None:
        return ""
    return "live" if live[0] <= command <= live[1] else "dead"


def _tooltip(item: dict, command=None) -> str:
    lines = [f"{item['name']} ({item['kind']}) [{hexaddr(item['start'])}, {hexaddr(item['end'])}) "
             f"{item['size']:,} B, aligned to {item.get('align', '?')} B"
             + (f" (asked {item['align_asked']})" if item.get("align_asked") else "")]
    if item.get("layout"):
        lines.append(f"{item['layout']} {item.get('dtype', '')} {item.get('shape', '')}, line stride "
                     f"{item.get('line_stride', 0)} B, plane stride {item.get('plane_stride', 0)} B")
    if item.get("producer"):
        lines.append(f"written by layer {item['producer']}")
    if item.get("consumers"):
        lines.append("read by " + ", ".join(item["consumers"][:8]) + (" ..." if len(item["consumers"]) > 8 else ""))
    if item.get("live"):
        state = live_state(item, command)
        lines.append(f"holds data from command {item['live'][0]} to {item['live'][1]}"
                     + (f": {'live' if state == 'live' else 'not live'} at the faulting command {command}"
                        if state else ""))
    if item.get("owner"):
        lines.append(f"context {item['owner']}")
    if item.get("origin"):
        lines.append(item["origin"])
    return "\n".join(lines)


def _ticks(lo: int, hi: int, x_of, y: float, n: int = 6) -> list[str]:
    """Address ticks at multiples of a power of two, about `n` of them, plus both ends."""
    step = 1 << max((max(hi - lo, 1) // n).bit_length() - 1, 0)
    marks = list(range(-(-lo // step) * step, hi + 1, step))
    out = []
    last_x = -1e9
    for a in marks:
        x = x_of(a)
        if x - last_x < 95 or x_of(hi) - x < 100:
            continue
        last_x = x
        anchor = "start" if x < LEFT + 40 else "middle"
        out.append(f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 4}" stroke="#7a8291"/>'
                   f'<text x="{x:.1f}" y="{y + 15}" font-size="10" fill="#5c6473" text-anchor="{anchor}">'
                   f"{hexaddr(a)}</text>")
    x = x_of(hi)
    out.append(f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 4}" stroke="#7a8291"/>'
               f'<text x="{x:.1f}" y="{y + 15}" font-size="10" fill="#5c6473" text-anchor="end">{hexaddr(hi)}</text>')
    return out


def _label(name: str, width: float, font: float = 10) -> str:
    fits = int(width / (font * 0.6))
    if fits < 3:
        return ""
    return name if len(name) <= fits else name[: max(fits - 1, 1)] + "\u2026"


def _block(item: dict, x0: float, x1: float, y: float, h: float, cls: str, sid: str = "", command=None,
           font: float = 10) -> str:
    state = live_state(item, command)
    fill = KIND_FILL.get(item["kind"], "#9aa3b1")
    opacity = "0.35" if state == "dead" else "0.92"
    stroke = {"faulting": ' stroke="#c62828" stroke-width="2.5"',
              "hit": ' stroke="#e8590c" stroke-width="2" stroke-dasharray="5 3"'}.get(cls, ' stroke="#ffffff" stroke-width="0.6"')
    w = max(x1 - x0, 1.0)
    ident = f' id="{esc(sid)}"' if sid else ""
    text = _label(item["name"], w - 4, font)
    label = (f'<text x="{x0 + 3:.1f}" y="{y + h / 2 + font * 0.35:.1f}" font-size="{font}" fill="#1d2330" '
             f'pointer-events="none">{esc(text)}</text>') if text else ""
    return (f'<g class="region {cls} kind-{esc(item["kind"])}" data-name="{esc(item["name"])}"{ident}>'
            f'<title>{esc(_tooltip(item, command))}</title>'
            f'<rect x="{x0:.2f}" y="{y:.1f}" width="{w:.2f}" height="{h}" fill="{fill}" fill-opacity="{opacity}"{stroke}/>'
            f"{label}</g>")


def _roles(fault: dict | None) -> tuple[str, str]:
    """(name of the faulting access's region, name of the region holding the first bad byte)."""
    if not fault:
        return "", ""
    region = (fault.get("region") or {}).get("name", "")
    hit = (fault.get("details") or {}).get("hit_region", "")
    return region, hit


def _shown_span(pool: dict, items: list[dict]) -> int:
    used = min(max((it["end"] for it in items), default=pool["base"] + 1), pool["end"]) - pool["base"]
    if used >= pool["size"] // 4:
        return pool["size"]
    step = 1 << max(used.bit_length() - 3, 10)  # round up to 1/8 of its power of two, at least 1 KiB
    return min(pool["size"], -(-int(used * 1.04) // step) * step)


def overview(memory_map: list[dict], fault: dict | None = None, prefix: str = "", zoom_window=None) -> str:
    """All pools, one band each (module docstring)."""
    region_name, hit_name = _roles(fault)
    addr = fault.get("address") if fault else None
    command = fault.get("command") if fault else None
    body, y = [], 6
    marked = found = False
    every = _all_items(memory_map)
    for pool in memory_map:
        base = pool["base"]
        # a region of merged pools (npuRAM3..6) runs on into the bands after its own: drawn in each
        reach = [it for it in every if it["start"] < pool["end"] and it["end"] > base]
        span = _shown_span(pool, reach)
        end = base + span
        items = sorted((it for it in reach if it["start"] < end), key=lambda it: (it["start"], it["end"]))[:MAX_ITEMS]
        lanes = _lanes(items)
        n_lanes = max(lanes, default=0) + 1

        def x_of(a, base=base, span=span):
            return LEFT + (min(max(a, base), base + span) - base) * (W - 2 * LEFT) / span

        shown = "" if span == pool["size"] else f" \u00b7 showing the first {size_text(span)} (the used part)"
        cont = sum(it["start"] < base for it in reach)
        on = f" (+{cont} running on from the pool before)" if cont else ""
        body.append(f'<text x="{LEFT}" y="{y + 12}" font-size="12" font-weight="600" fill="#1d2330">'
                    f'{esc(pool["pool"])}<tspan font-weight="400" fill="#5c6473"> [{hexaddr(base)}, '
                    f'{hexaddr(pool["end"])}) {size_text(pool["size"])} {esc(pool["perms"])}, '
                    f'{len(pool["items"])} regions{esc(on)}{esc(shown)}</tspan></text>')
        has_marker = addr is not None and not marked and base <= addr < end
        top = y + (40 if has_marker else 22)
        band_h = n_lanes * LANE_H
        body.append(f'<rect x="{LEFT}" y="{top}" width="{W - 2 * LEFT}" height="{band_h}" fill="#f5f7fa" '
                    f'stroke="#b8bec9"/>')
        for it, lane in zip(items, lanes):
            cls = "faulting" if it["name"] == region_name and it["kind"] != "guard" else \
                "hit" if it["name"] == hit_name else ""
            sid = ""
            if cls == "faulting" and not found:
                sid, found = f"{prefix}faulting-block", True
            body.append(_block(it, x_of(it["start"]), x_of(it["end"]), top + lane * LANE_H + 1, LANE_H - 2, cls,
                               sid, command, font=9))
        if zoom_window and base <= zoom_window[0] < end:
            zx0, zx1 = x_of(zoom_window[0]), x_of(zoom_window[1])
            body.append(f'<rect x="{zx0 - 2:.1f}" y="{top - 3}" width="{zx1 - zx0 + 4:.1f}" height="{band_h + 6}" '
                        f'fill="none" stroke="#1d2330" stroke-dasharray="2 2"><title>zoomed below</title></rect>')
        if has_marker:
            mx = x_of(addr)
            body.append(f'<g id="{prefix}fault-marker" class="fault-marker"><title>first bad byte {hexaddr(addr)}'
                        f'</title><line x1="{mx:.1f}" y1="{top - 6}" x2="{mx:.1f}" y2="{top + band_h + 2}" '
                        f'stroke="#c62828" stroke-width="2"/><path d="M{mx - 6:.1f},{top - 12} L{mx + 6:.1f},'
                        f'{top - 12} L{mx:.1f},{top - 3} Z" fill="#c62828"/>'
                        f'<text x="{min(mx + 9, W - 190):.1f}" y="{top - 8}" font-size="11" font-weight="600" '
                        f'fill="#c62828">first bad byte {hexaddr(addr)}</text></g>')
            marked = True
        body += _ticks(base, end, x_of, top + band_h + 2)
        y = top + band_h + 26
    return _svg(W, y + 2, body, "memory map: every pool at scale")


def _planned(fault: dict, region_item: dict | None):
    """Start of each shown run where the buffer table puts it (its line/plane strides in place of
    the hardware's s1/s2, from the same base), when they differ and the base lies in the buffer; else None."""
    p = fault.get("pattern")
    if not p or not region_item or not region_item.get("line_stride") or \
            not region_item["start"] <= p["base"] < region_item["end"]:
        return None
    line, plane = region_item["line_stride"], region_item.get("plane_stride") or p["s2"]
    if line == p["s1"] and (p["n2"] == 1 or plane == p["s2"]):
        return None
    runs = fault["runs"]
    out = []
    for i in range(len(runs["starts"])):
        k = runs["first"] + i
        i1, i2, i3 = k % p["n1"], (k // p["n1"]) % p["n2"], k // (p["n1"] * p["n2"])
        out.append(p["base"] + i1 * line + i2 * plane + i3 * p["s3"])
    return out, line, plane


def zoom_window(fault: dict | None, memory_map: list[dict] = ()) -> tuple[int, int] | None:
    """[lo, hi) around the fault: a few runs before the faulting run to several after it, with the
    region boundary it crossed and the first bad byte, inside the pool of the first bad byte when
    the map has it; None without an address."""
    if not fault or fault.get("address") is None:
        return None
    addr = int(fault["address"])
    pts = [addr, addr + 1]
    runs, p = fault.get("runs"), fault.get("pattern")
    if runs and p and runs["starts"]:
        j = int((fault.get("details") or {}).get("run", runs["first"])) - runs["first"]
        j = min(max(j, 0), len(runs["starts"]) - 1)
        for s in runs["starts"][max(0, j - 3): j + 7]:
            pts += [s, s + p["run"]]
    region = fault.get("region")
    if region:
        edge = region["start"] + region["size"] if addr >= region["start"] else region["start"]
        if abs(edge - addr) <= 4 * (max(pts) - min(pts)) + 256:
            pts.append(edge)
    lo, hi = min(pts), max(pts)
    pad = max((hi - lo) // 25, 16)
    lo, hi = lo - pad, hi + pad
    pool = next((p for p in memory_map if p["base"] <= addr < p["end"]), None)
    if pool is not None:
        lo, hi = max(lo, pool["base"]), min(hi, pool["end"])
    return lo, hi


def _all_items(memory_map):
    return [it for pool in memory_map for it in pool["items"]]


def overrun_targets(memory_map: list[dict], fault: dict | None) -> list[dict]:
    """[{item, bytes, state}] of the regions the shown runs of the faulting access touch outside
    its own region, largest first (module docstring)."""
    if not fault or not fault.get("runs") or not fault.get("pattern") or not fault.get("region"):
        return []
    reg = fault["region"]
    lo_r, hi_r = reg["start"], reg["start"] + reg["size"]
    run = fault["pattern"]["run"]
    outside = []
    for s in fault["runs"]["starts"]:
        e = s + run
        for a, b in ((s, min(e, lo_r)), (max(s, hi_r), e)):
            if a < b:
                outside.append((a, b))
    if not outside:
        return []
    got: dict[int, int] = {}
    items = _all_items(memory_map)
    for idx, it in enumerate(items):
        if it["name"] == reg["name"] and it["start"] == lo_r:
            continue
        n = sum(max(0, min(b, it["end"]) - max(a, it["start"])) for a, b in outside)
        if n:
            got[idx] = n
    out = [{"item": items[i], "bytes": n, "state": live_state(items[i], fault.get("command"))} for i, n in got.items()]
    return sorted(out, key=lambda t: (-t["bytes"], t["item"]["start"]))


def zoom(memory_map: list[dict], fault: dict, prefix: str = "") -> str:
    """The band around the fault (module docstring); "" when the fault has no address."""
    win = zoom_window(fault, memory_map)
    if win is None:
        return ""
    lo, hi = win
    span = hi - lo

    def x_of(a):
        return LEFT + (min(max(a, lo), hi) - lo) * (W - 2 * LEFT) / span

    region_name, hit_name = _roles(fault)
    command = fault.get("command")
    items = sorted((it for it in _all_items(memory_map) if it["start"] < hi and it["end"] > lo),
                   key=lambda it: (it["start"], it["end"]))[:MAX_ITEMS]
    lanes = _lanes(items)
    n_lanes = max(lanes, default=0) + 1
    body = [f'<text x="{LEFT}" y="14" font-size="12" font-weight="600" fill="#1d2330">zoom on the fault'
            f'<tspan font-weight="400" fill="#5c6473"> [{hexaddr(lo)}, {hexaddr(hi)}) {span:,} B</tspan></text>']
    top, h = 24, 22
    region_item = None
    for it, lane in zip(items, lanes):
        cls = "faulting" if it["name"] == region_name and it["kind"] != "guard" else \
            "hit" if it["name"] == hit_name else ""
        if cls == "faulting" and region_item is None:
            region_item = it
        body.append(_block(it, x_of(it["start"]), x_of(it["end"]), top + lane * h + 1, h - 3, cls,
                           f"{prefix}faulting-block-zoom" if cls == "faulting" and it is region_item else "",
                           command, font=10))
    y = top + n_lanes * h + 8
    p, runs = fault.get("pattern"), fault.get("runs")
    rows_top = y
    if p and runs and runs["starts"]:
        k_fault = int((fault.get("details") or {}).get("run", -1))
        reg = fault.get("region") or {}
        r_lo, r_hi = reg.get("start", lo), reg.get("start", lo) + reg.get("size", 0)
        who = f"{fault.get('unit') or '?'} {fault.get('access') or ''}".strip()
        body.append(f'<text x="{LEFT}" y="{y + 10}" font-size="11" fill="#1d2330">runs of the {esc(who)} as the '
                    f'hardware walked them (run {p["run"]} B, line stride {p["s1"]} B'
                    + (f', plane stride {p["s2"]} B' if p["n2"] > 1 else "") + "); red: outside "
                    + (f"'{esc(reg.get('name'))}'" if reg else "its region") + "</text>")
        y += 16
        body += _runs_row(runs, p["run"], x_of, lo, hi, y, r_lo, r_hi, k_fault, prefix)
        y += 26
        planned = _planned(fault, region_item)
        if planned is not None:
            starts, line, plane = planned
            body.append(f'<text x="{LEFT}" y="{y + 10}" font-size="11" fill="#1d2330">the same runs where the '
                        f"compiler laid them out (line stride {line} B"
                        + (f", plane stride {plane} B" if p["n2"] > 1 else "") + ")</text>")
            y += 16
            body += _runs_row({"first": runs["first"], "starts": starts}, p["run"], x_of, lo, hi, y, None, None,
                              k_fault, prefix, planned=True)
            y += 26
    addr = int(fault["address"])
    mx = x_of(addr)
    body.append(f'<g id="{prefix}fault-marker-zoom" class="fault-marker"><title>first bad byte {hexaddr(addr)}</title>'
                f'<line x1="{mx:.1f}" y1="{top - 4}" x2="{mx:.1f}" y2="{max(y, rows_top)}" stroke="#c62828" '
                f'stroke-width="2" stroke-dasharray="4 2"/><text x="{min(mx + 5, W - 190):.1f}" y="{top - 6}" '
                f'font-size="11" font-weight="600" fill="#c62828">first bad byte {hexaddr(addr)}</text></g>')
    body += _ticks(lo, hi, x_of, y + 2)
    return _svg(W, y + 24, body, "memory map zoomed on the fault")


def _runs_row(runs, run_bytes, x_of, lo, hi, y, r_lo, r_hi, k_fault, prefix, planned: bool = False) -> list[str]:
    out = []
    for i, s in enumerate(runs["starts"]):
        e = s + run_bytes
        if e <= lo or s >= hi:
            continue
        k = runs["first"] + i
        tip = f"run {k}: [{hexaddr(s)}, {hexaddr(e)}) {run_bytes} B" + (" (as planned)" if planned else "")
        parts = [(s, e, PLANNED)] if planned else \
            [(a, b, RUN_IN if r_lo <= a and b <= r_hi else RUN_OUT)
             for a, b in _split(s, e, r_lo, r_hi)]
        rects = "".join(f'<rect x="{x_of(a):.2f}" y="{y}" width="{max(x_of(b) - x_of(a), 0.8):.2f}" height="16" '
                        f'fill="{c}"/>' for a, b, c in parts)
        edge = ""
        if k == k_fault:
            edge = (f'<rect x="{x_of(s):.2f}" y="{y - 1}" width="{max(x_of(e) - x_of(s), 1):.2f}" height="18" '
                    f'fill="none" stroke="#1d2330" stroke-width="1.6"/>')
            tip += " (the faulting run)" if not planned else ""
        text = f"run {k}" if x_of(e) - x_of(s) > 40 else (str(k) if x_of(e) - x_of(s) > 14 else "")
        label = (f'<text x="{x_of(s) + 3:.1f}" y="{y + 12}" font-size="9.5" fill="#ffffff" pointer-events="none">'
                 f"{text}</text>") if text else ""
        ident = f' id="{prefix}faulting-run"' if k == k_fault and not planned else ""
        out.append(f'<g class="run{" planned" if planned else ""}"{ident}><title>{esc(tip)}</title>{rects}{edge}{label}</g>')
    return out


def _split(s: int, e: int, r_lo: int, r_hi: int):
    """[s, e) cut at the region's bounds into pieces each wholly inside or outside it."""
    cuts = sorted({s, e, *(c for c in (r_lo, r_hi) if s < c < e)})
    return list(zip(cuts, cuts[1:]))
