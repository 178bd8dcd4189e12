"""HTML building blocks of the report pages: the page shell (inline style and script, a
content-security policy that forbids every network fetch), sections, sortable tables, numbers.

A sortable table is a `<table class="sortable">`; a click on a header sorts its rows by that
column, numerically by each cell's `data-v` when every cell has one, else by text.
"""

from __future__ import annotations

import html
import re

# No network: every fetch (script, style, image, font, frame, connection) outside the page is refused.
CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; "
       "font-src data:; base-uri 'none'; form-action 'none'")

_CSS = """
:root { --fg:#1d2330; --muted:#5c6473; --line:#d7dbe2; --bg:#ffffff; --alt:#f5f7fa; --bad:#c62828; --ok:#2e7d32; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: var(--fg);
       background: var(--bg); margin: 0; }
header { padding: 14px 24px; border-bottom: 1px solid var(--line); background: var(--alt); }
header h1 { margin: 0 0 4px; font-size: 20px; }
nav a { margin-right: 14px; color: #1a5fb4; text-decoration: none; font-size: 13px; }
main { padding: 4px 24px 40px; max-width: 1500px; }
section { margin-top: 22px; }
h2 { font-size: 17px; border-bottom: 1px solid var(--line); padding-bottom: 3px; margin: 0 0 10px; }
h3 { font-size: 14px; margin: 14px 0 6px; }
.badge { display: inline-block; padding: 1px 9px; border-radius: 10px; color: #fff; font-weight: 600; font-size: 13px; }
.badge.ok { background: var(--ok); } .badge.fault { background: var(--bad); }
.kv { display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: 2px 14px; margin: 0; }
.kv dt { color: var(--muted); } .kv dd { margin: 0; font-variant-numeric: tabular-nums; overflow-wrap: anywhere; }
h3 { overflow-wrap: anywhere; }
.cols { display: flex; flex-wrap: wrap; gap: 10px 48px; }
pre.sanitizer { background: #1e1e24; color: #f3f3f3; padding: 12px 14px; border-radius: 4px; overflow-x: auto;
                font: 12.5px/1.4 ui-monospace, "DejaVu Sans Mono", monospace; white-space: pre-wrap;
                overflow-wrap: anywhere; }
pre.sanitizer .err { color: #ff8a80; font-weight: 600; }
table { border-collapse: collapse; font-size: 12.5px; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 7px; text-align: left; white-space: nowrap; }
th { white-space: normal; vertical-align: bottom; }
td.n, th.n { text-align: right; }
td.wrap { white-space: normal; overflow-wrap: anywhere; min-width: 14em; max-width: 36em; }
td.soft { white-space: normal; }
thead th { background: var(--alt); position: sticky; top: 0; }
table.sortable thead th { cursor: pointer; user-select: none; }
table.sortable thead th[aria-sort="ascending"]::after { content: " \\25B2"; font-size: 9px; }
table.sortable thead th[aria-sort="descending"]::after { content: " \\25BC"; font-size: 9px; }
tr.fault td { color: var(--bad); font-weight: 600; }
.scroll { overflow-x: auto; max-width: 100%; }
.note { color: var(--muted); font-size: 12.5px; }
.chart svg { max-width: 100%; height: auto; }
.memmap svg text { font-family: system-ui, "DejaVu Sans", sans-serif; }
.zoombar { margin: 4px 0 6px; font-size: 12.5px; color: var(--muted); }
ul.tight { margin: 4px 0; padding-left: 20px; }
a { color: #1a5fb4; }
"""

_JS = """
(function () {
  function key(td) { var v = td.getAttribute('data-v'); return v === null ? null : parseFloat(v); }
  document.querySelectorAll('table.sortable').forEach(function (table) {
    var heads = table.tHead ? table.tHead.rows[0].cells : [];
    Array.prototype.forEach.call(heads, function (th, col) {
      th.addEventListener('click', function () {
        var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
        var asc = th.getAttribute('aria-sort') !== 'ascending';
        var numeric = rows.every(function (r) { return r.cells[col] && key(r.cells[col]) !== null; });
        rows.sort(function (a, b) {
          var x = a.cells[col], y = b.cells[col], d;
          d = numeric ? key(x) - key(y) : x.textContent.localeCompare(y.textContent);
          return asc ? d : -d;
        });
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute('aria-sort'); });
        th.setAttribute('aria-sort', asc ? 'ascending' : 'descending');
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
  document.querySelectorAll('input.zoom').forEach(function (input) {
    var target = document.getElementById(input.getAttribute('data-target'));
    var label = input.parentNode.querySelector('output');
    function apply() {
      target.querySelectorAll('svg').forEach(function (svg) { svg.style.width = (100 * input.value) + '%'; });
      if (label) { label.textContent = input.value + 'x'; }
    }
    input.addEventListener('input', apply);
    apply();
  });
})();
"""


def esc(value) -> str:
    return html.escape(str(value), quote=True)


def slug(text: str) -> str:
    """An id-safe form of `text` (letters, digits, '-' and '_')."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", str(text)).strip("-") or "x"


def hexaddr(v) -> str:
    return "?" if v is None else f"0x{int(v):08x}"


def num(v, digits: int = 0) -> str:
    if v is None:
        return ""
    if digits:
        return f"{float(v):,.{digits}f}"
    return f"{int(round(float(v))):,}"


def size_text(n: int) -> str:
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:.4g} {unit}"
    return f"{n} B"


def page(title: str, body: str, subtitle: str = "", nav: list[tuple[str, str]] = ()) -> str:
    """A whole self-contained HTML document."""
    links = "".join(f'<a href="#{esc(i)}">{esc(t)}</a>' for i, t in nav)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f'<title>{esc(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n'
            f'<header><h1>{esc(title)}</h1>'
            + (f'<div class="note">{subtitle}</div>' if subtitle else "")
            + (f"<nav>{links}</nav>" if links else "")
            + f"</header>\n<main>\n{body}\n</main>\n<script>{_JS}</script>\n</body>\n</html>\n")


def section(sid: str, title: str, content: str) -> str:
    return f'<section id="{esc(sid)}">\n<h2>{esc(title)}</h2>\n{content}\n</section>'


def kv(pairs) -> str:
    """A definition list of (label, html value) pairs."""
    return '<dl class="kv">' + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in pairs) + "</dl>"


class Cell:
    """A table cell: its html, an optional numeric sort key and extra attributes."""

    __slots__ = ("html", "key", "cls", "title")

    def __init__(self, html_text: str, key: float | None = None, cls: str = "", title: str = ""):
        self.html, self.key, self.cls, self.title = html_text, key, cls, title


def ncell(v, digits: int = 0) -> Cell:
    """A right-aligned number cell sorted by its value."""
    return Cell(num(v, digits), None if v is None else float(v), "n")


def tcell(text, title: str = "") -> Cell:
    return Cell(esc(text), None, "", title)


def scell(text, title: str = "") -> Cell:
    """A text cell that wraps between its words (a list of units)."""
    return Cell(esc(text), None, "soft", title)


def wcell(text, title: str = "") -> Cell:
    """A text cell that wraps (a layer or node name: TFLite's run past a hundred characters), preferably
    after a `;` or `/` of the name."""
    return Cell(re.sub(r"([;/])", r"\1<wbr>", esc(text)), None, "wrap", title)


def table(heads, rows, sortable: bool = True, tid: str = "", row_classes=None) -> str:
    """`heads`: [(label, numeric?)]; `rows`: [[Cell]]; `row_classes`: optional class per row."""
    th = "".join(("<th class=\"n\">" if numeric else "<th>") + esc(label).replace("_", "_<wbr>") + "</th>"
                 for label, numeric in heads)
    body = []
    for i, row in enumerate(rows):
        cls = row_classes[i] if row_classes else ""
        tds = []
        for c in row:
            attrs = (f' class="{c.cls}"' if c.cls else "") + (f' data-v="{c.key:.10g}"' if c.key is not None else "") \
                + (f' title="{esc(c.title)}"' if c.title else "")
            tds.append(f"<td{attrs}>{c.html}</td>")
        body.append((f'<tr class="{cls}">' if cls else "<tr>") + "".join(tds) + "</tr>")
    attrs = (f' id="{esc(tid)}"' if tid else "") + (' class="sortable"' if sortable else "")
    return (f'<div class="scroll"><table{attrs}><thead><tr>{th}</tr></thead>\n<tbody>\n'
            + "\n".join(body) + "\n</tbody></table></div>")
