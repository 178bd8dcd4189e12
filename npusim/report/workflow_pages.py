"""The report pages of `npusim sweep --html` and `npusim bisect --html`, from plain data.

Sweep: per sweep its plot (an SVG the caller drew, `tools.plots.plot_sweep`), a sortable table
of the points and a per-layer table (cycles per point, shaded by how far each is above that
layer's best). Bisect: the verdict, the whole-model retries, a sortable table of every
operator run alone, and per faulting operator its minimal configuration, clean neighbours and
alignments, with links to its reproducer files and to the report page (memory map) of its blob.
"""

from __future__ import annotations

from .page import Cell, esc, kv, ncell, page, section, slug, table, tcell, wcell


def _point_rows(points: list[dict], with_align: bool):
    ok = [p["cycles"] for p in points if p.get("status") == "ok"]
    best = min(ok) if ok else None
    rows, classes = [], []
    for p in points:
        delta = 100 * (p["cycles"] / best - 1) if best and p.get("status") == "ok" else None
        value = p.get("value")
        row = [Cell(esc(value), float(value) if isinstance(value, (int, float)) else None)]
        row += [ncell(p.get("mem_align"))] if with_align else []
        row += [tcell(p.get("status")), ncell(p.get("cycles")),
                ncell(delta, 2) if delta is not None else Cell("", None), ncell(p.get("ms"), 4),
                ncell(p.get("bank_conflicts")), ncell(p.get("cross_bank_splits")), ncell(p.get("stall_cycles")),
                ncell(p.get("footprint_bytes")), ncell(p.get("faults")), tcell(p.get("first_fault") or "")]
        rows.append(row)
        classes.append("fault" if p.get("status") != "ok" else "")
    return rows, classes


def _layer_table(points: list[dict], tid: str) -> str:
    names: list[str] = []
    for p in points:
        for n in p.get("layers") or {}:
            if n not in names:
                names.append(n)
    if not names:
        return ""
    heads = [("layer", False)] + [(f"{p.get('value')}", True) for p in points]
    rows = []
    for n in names:
        vals = [(p.get("layers") or {}).get(n) for p in points]
        clean = [v for v, p in zip(vals, points) if v and p.get("status") == "ok"]
        best = min(clean) if clean else None
        row = [tcell(n)]
        for v, p in zip(vals, points):
            if v is None:
                row.append(Cell("", None))
                continue
            c = ncell(v)
            if p.get("status") != "ok":
                c.title = "a faulting point: cycles up to the fault"
                c.html = f'<span class="note">{c.html}</span>'
            elif best:
                above = v / best - 1
                shade = min(above / 0.10, 1.0)  # 10 % above the layer's best is the darkest shade
                c.title = f"{100 * above:+.2f}% vs this layer's fastest clean point"
                c.html = f'<span style="background:rgba(198,40,40,{0.04 + 0.5 * shade:.2f});padding:0 3px">{c.html}</span>'
            row.append(c)
        rows.append(row)
    return ('<h3>cycles per layer and point</h3><p class="note">shaded by how far a point is above the '
            'layer\'s fastest clean point (darkest: 10 % or more); a faulting point (grey) has the layers up '
            'to the fault</p>' + table(heads, rows, tid=tid))


def sweep_section(s: dict, index: int) -> str:
    """One sweep: {title, param, points: [SweepPoint as a dict], plot_svg}."""
    points = s.get("points") or []
    with_align = s.get("param") != "mem_align"
    rows, classes = _point_rows(points, with_align)
    heads = [(s.get("param", "value"), True)] + ([("mem_align", True)] if with_align else []) + [
             ("status", False), ("cycles", True),
             ("% vs fastest clean", True), ("ms", True), ("bank conflicts", True), ("cross-bank splits", True),
             ("stall cycles", True), ("RAM footprint", True), ("faults", True), ("first fault", False)]
    ok = [p for p in points if p.get("status") == "ok"]
    best = min(ok, key=lambda p: p["cycles"]) if ok else None
    verdict = (f"fastest clean point: {esc(s.get('param'))}={esc(best['value'])} ({best['cycles']:,} cycles)"
               if best else "no point ran clean")
    plot = f'<div class="chart">{s["plot_svg"]}</div>' if s.get("plot_svg") else ""
    return section(f"sweep-{index}", s.get("title") or f"sweep of {s.get('param')}",
                   f"<p><b>{verdict}</b></p>{plot}" + table(heads, rows, tid=f"sweep-{index}-points", row_classes=classes)
                   + _layer_table(points, f"sweep-{index}-layers"))


def render_sweep(sweeps: list[dict], title: str = "npusim sweep report") -> str:
    """A page of one or more sweeps (see `sweep_section`)."""
    body = "\n".join(sweep_section(s, i) for i, s in enumerate(sweeps))
    nav = [(f"sweep-{i}", s.get("title") or s.get("param", "")) for i, s in enumerate(sweeps)]
    return page(title, body, nav=nav)


def _outcome(o: dict | None) -> str:
    if not o:
        return "-"
    return esc(f"{o.get('status')} {o.get('fault') or ''}".strip())


def _links(f: dict, pages: dict) -> str:
    bits = [f'<a href="{esc(href)}">{esc(kind)}</a>' for kind, href in (f.get("reproducer_links") or {}).items()]
    page_href = pages.get(f.get("node"))
    if page_href:
        bits.append(f'<a href="{esc(page_href)}#memory">memory map and report</a>')
    return " \u00b7 ".join(bits)


def render_bisect(report: dict, pages: dict | None = None, title: str = "npusim bisect report") -> str:
    """`report`: a BisectReport as a dict (findings with `reproducer_links`: {kind: href relative to
    the page}); `pages`: {node: href of its reproducer's report page}."""
    pages = pages or {}
    findings = report.get("findings") or []
    faulting = [f for f in findings if (f.get("outcome") or {}).get("status") == "fault"]
    summary = kv([("verdict", f"<b>{esc(report.get('verdict', ''))}</b>"),
                  ("whole model", _outcome(report.get("model_outcome"))),
                  ("with --fuse none", _outcome(report.get("fuse_none"))),
                  ("with padded I/O buffers", _outcome(report.get("io_padded"))),
                  ("operators run alone", f"{len(findings)} ({len(faulting)} fault)")])
    heads = [("#", True), ("node", False), ("op", False), ("shape", False), ("result", False), ("detail", False),
             ("smallest faulting", False), ("clean with --mem-align", False), ("files", False)]
    rows, classes = [], []
    for i, f in enumerate(findings):
        o = f.get("outcome") or {}
        node = wcell(f["node"])
        rows.append([ncell(i), Cell(f'<a href="#op-{esc(slug(f["node"]))}">{node.html}</a>'
                                    if o.get("status") == "fault" else node.html, cls="wrap"),
                     tcell(f.get("op_type")), tcell(f.get("shape")), tcell(o.get("status")),
                     wcell(o.get("fault") or ""), tcell(f.get("minimal") or ""),
                     tcell("/".join(str(a) for a in f.get("clean_alignments") or [])), Cell(_links(f, pages))])
        classes.append("fault" if o.get("status") == "fault" else "")
    details = []
    for f in faulting:
        o = f["outcome"]
        pairs = [("fault", esc(o.get("fault", "")))]
        if o.get("why"):
            pairs.append(("why", esc(o["why"])))
        if f.get("minimal"):
            pairs.append(("smallest faulting", esc(f"{f['minimal']} ({f.get('minimal_fault', '')})")))
        if f.get("clean_neighbours"):
            pairs.append(("runs clean with one change", esc(", ".join(f["clean_neighbours"]))))
        if f.get("clean_alignments"):
            pairs.append(("clean with --mem-align", esc("/".join(map(str, f["clean_alignments"])))))
        links = _links(f, pages)
        if links:
            pairs.append(("reproducer", links))
        details.append(f'<div id="op-{esc(slug(f["node"]))}"><h3>{esc(f.get("op_type"))} {esc(f["node"])} '
                       f'({esc(f.get("shape"))})</h3>{kv(pairs)}</div>')
    body = (section("verdict", "Verdict", summary)
            + section("operators", "Every operator alone", table(heads, rows, tid="bisect-table", row_classes=classes))
            + (section("faulting", "Faulting operators", "\n".join(details)) if details else ""))
    nav = [("verdict", "Verdict"), ("operators", "Operators")] + ([("faulting", "Faulting operators")] if details else [])
    return page(title, body, nav=nav)
