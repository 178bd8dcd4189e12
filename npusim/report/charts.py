"""Charts of a run as inline SVG, drawn with matplotlib (headless, text kept as text).

`layer_chart` (cycles per layer, split by stall cause), `bank_heatmap` (bytes per bank and
layer, one panel per pool) and `timeline` (a Gantt chart of the epoch controller, the host and
every unit and stream engine over the run) take the plain data of a run's JSON report.
Stall causes and units are drawn from whatever the data holds, in the order it gives them.
"""

from __future__ import annotations

import hashlib
import io
import re

import numpy as np

from ..names import fit

MAX_LAYERS = 120  # rows a per-layer chart draws (the rest are named in a note)
MAX_BARS = 20000  # timeline bars drawn at most
_TRACK_ORDER = ("EC", "HOST", "SE", "CA", "POOL", "ARITH", "ACT")
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.S)
OVERLAP = "overlapped"  # a layer's cycles that no stall cause claims: compute and transfers both busy


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _svg(fig) -> str:
    """The figure as an <svg> element (no XML prolog), then closed."""
    import matplotlib

    plt = _pyplot()
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "npusim"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    return page_svg(buf.getvalue())


def page_svg(text: str) -> str:
    """matplotlib's SVG file as an element of a page: stable ids of its own, no prolog or metadata."""
    return own_ids(inline_svg(stable_ids(text)))


_HASHED_ID = re.compile(r"\b([a-z])([0-9a-f]{10})\b")


def stable_ids(svg: str) -> str:
    """matplotlib's SVG ids renumbered in order of first appearance: its clip-path ids hash the
    id() of a Python object, so the same figure would give other bytes in another process."""
    names: dict[str, str] = {}

    def rename(m):
        key = m.group(0)
        if key not in names:
            names[key] = f"{m.group(1)}{len(names):x}"
        return names[key]

    return _HASHED_ID.sub(rename, svg)


_ID = re.compile(r'\bid="([^"]+)"')
_REF = re.compile(r'(url\(#|href="#)([^)"]+)')


def own_ids(svg: str) -> str:
    """Every id of an SVG and every reference to one (`url(#..)`, `href="#.."`) prefixed by a digest of the
    SVG: charts inlined in one page keep their own clip paths (matplotlib names the first `p0` in every
    chart, and a page resolves `url(#p0)` to the first, so each chart was clipped to the first one's axes).
    The same chart gets the same ids in any process."""
    ids = set(_ID.findall(svg))
    if not ids:
        return svg
    tag = "c" + hashlib.sha1(svg.encode()).hexdigest()[:8] + "-"
    svg = _ID.sub(lambda m: f'id="{tag}{m.group(1)}"', svg)
    return _REF.sub(lambda m: m.group(1) + (tag + m.group(2) if m.group(2) in ids else m.group(2)), svg)


def inline_svg(text: str) -> str:
    """An SVG file's text as an element to put in a page: no XML prolog or doctype, no metadata."""
    start = text.find("<svg")
    return _METADATA.sub("", text[start:] if start >= 0 else text)


def _margins(fig, labels, fontsize: float, right_in: float = 0.3, top_in: float = 0.35, bottom_in: float = 0.55):
    """Fixed margins in inches, the left one wide enough for the longest y label: one layout
    pass instead of tight_layout's extra draw (which doubles the time of charts with many labels)."""
    w, h = fig.get_size_inches()
    left_in = 0.25 + 0.6 * fontsize / 72 * max((len(str(t)) for t in labels), default=4)
    fig.subplots_adjust(left=min(left_in / w, 0.45), right=1 - right_in / w, top=1 - top_in / h,
                        bottom=min(bottom_in / h, 0.45))


LABEL_CHARS = 40  # a layer's label at most (`names.fit`: a longer name keeps its distinguishing end)


def _labels(rows) -> list[str]:
    """The rows' layer names as axis labels: TFLite's long tensor names cut to their distinguishing end."""
    names = [str(r.get("name") or "?") for r in rows]
    _, shown = fit(names, limit=LABEL_CHARS)
    return [shown[n] for n in names]


def stall_causes(rows) -> list[str]:
    """The stall causes the rows (layers or epochs) name, in first-seen order."""
    seen: list[str] = []
    for r in rows:
        for k in (r.get("stall_cycles") or {}):
            if k not in seen:
                seen.append(k)
    return seen


def layer_chart(layers: list[dict]) -> str:
    """Horizontal stacked bars: each layer's cycles split by stall cause, the rest `overlapped`."""
    plt = _pyplot()
    rows = layers[:MAX_LAYERS]
    causes = stall_causes(rows)
    names = _labels(rows)
    fig, ax = plt.subplots(figsize=(10, 0.8 + 0.24 * max(len(rows), 3)))
    y = np.arange(len(rows))
    left = np.zeros(len(rows))
    cmap = plt.get_cmap("tab10")
    for i, c in enumerate(causes):
        vals = np.array([float((r.get("stall_cycles") or {}).get(c, 0)) for r in rows])
        if vals.any():
            ax.barh(y, vals, left=left, color=cmap(i % 10), label=c, height=0.7)
            left += vals
    rest = np.maximum(np.array([float(r.get("cycles") or 0) for r in rows]) - left, 0)
    if rest.any():
        ax.barh(y, rest, left=left, color="#c9ced6", label=f"{OVERLAP} (compute and transfers both busy)", height=0.7)
    ax.set_yticks(y, names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("cycles")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.set_title("cycles per layer by stall cause", fontsize=10)
    _margins(fig, names, 8, right_in=3.3)
    return _svg(fig)


def bank_heatmap(layers: list[dict], pools: dict[str, list[int]]) -> str:
    """One panel per pool with more than one bank: payload bytes per bank (columns) and layer (rows)."""
    plt = _pyplot()
    rows = layers[:MAX_LAYERS]
    shown = [p for p, v in pools.items() if len(v) > 1 and any(v)]
    if not shown:
        return ""
    names = _labels(rows)
    height = 1.4 + 0.22 * max(len(rows), 3)
    fig, axes = plt.subplots(1, len(shown), figsize=(max(4.2 * len(shown), 6), height), squeeze=False,
                             sharey=True)
    for ax, pool in zip(axes[0], shown):
        banks = len(pools[pool])
        grid = np.zeros((len(rows), banks))
        for i, r in enumerate(rows):
            per_bank = ((r.get("bank_bytes") or {}).get(pool) or [])[:banks]
            grid[i, :len(per_bank)] = per_bank
        im = ax.imshow(grid / 1024.0, aspect="auto", cmap="viridis", interpolation="nearest")
        ax.set_xticks(np.arange(banks), [str(b) for b in range(banks)], fontsize=8)
        if ax is axes[0][0]:
            ax.set_yticks(np.arange(len(rows)), names, fontsize=7)
        ax.set_xlabel("bank")
        total = np.asarray(pools[pool], dtype=float)
        spread = (total.max() / total.mean()) if total.mean() else 0.0
        ax.set_title(f"{pool}: KiB per bank (busiest bank {spread:.2f}x the mean)", fontsize=9)
        fig.colorbar(im, ax=ax, fraction=0.05, pad=0.02)
    _margins(fig, names, 7, top_in=0.4)
    fig.subplots_adjust(wspace=0.3)
    return _svg(fig)


def _track_key(name: str):
    m = re.match(r"([A-Za-z]+)(\d*)$", name)
    kind, idx = (m.group(1), int(m.group(2) or 0)) if m else (name, 0)
    order = _TRACK_ORDER.index(kind) if kind in _TRACK_ORDER else len(_TRACK_ORDER)
    return order, kind, idx


def timeline_bars(epochs: list[dict]) -> dict[str, list[tuple[float, float, int]]]:
    """{track: [(start cycle, cycles, epoch position)]}: the setup of each NPU epoch on `EC`, each
    stage's busy time from the end of setup, host epochs on `HOST`."""
    bars: dict[str, list] = {}
    for i, e in enumerate(epochs):
        start, setup = float(e.get("start") or 0), float(e.get("setup_cycles") or 0)
        if e.get("kind") == "host":
            bars.setdefault("HOST", []).append((start, float(e.get("cycles") or 0), i))
            continue
        bars.setdefault("EC", []).append((start, setup, i))
        for name, busy in (e.get("stages") or {}).items():
            bars.setdefault(name, []).append((start + setup, float(busy), i))
    return bars


def faulting_epochs(epochs: list[dict], faults: list[dict]) -> set[int]:
    """Positions in `epochs` of those that faulted or hung: by status, by a fault's epoch id, or
    (host epochs) by a fault's command."""
    ids = {f.get("epoch") for f in faults if f.get("epoch") is not None}
    cmds = {f.get("command") for f in faults if f.get("epoch") is None and f.get("command") is not None}
    return {i for i, e in enumerate(epochs)
            if e.get("status") in ("fault", "hang") or (e.get("kind") != "host" and e.get("id") in ids)
            or (e.get("kind") == "host" and e.get("command") in cmds)}


def timeline(epochs: list[dict], clock_hz: float | None = None, faulting=frozenset()) -> str:
    """Gantt chart: one row per track, one bar per epoch stage, coloured by layer; the epochs at
    positions `faulting` outlined in red."""
    plt = _pyplot()
    bars = timeline_bars(epochs)
    if not bars:
        return ""
    tracks = sorted(bars, key=_track_key)
    layers = list(dict.fromkeys(str(e.get("layer") or "?") for e in epochs))
    cmap = plt.get_cmap("tab20")
    colour = {name: cmap(i % 20) for i, name in enumerate(layers)}
    chars, shown = fit(layers, limit=LABEL_CHARS)
    ncol = max(1, min(6, int(11.5 / (0.3 + 0.065 * chars))))  # as many columns as labels of that length fit in 12 in
    legend_rows = -(-len(layers) // ncol) if len(layers) <= 24 else 0
    fig, ax = plt.subplots(figsize=(12, 1.0 + 0.3 * len(tracks) + 0.2 * legend_rows))
    drawn = 0
    for row, track in enumerate(tracks):
        items = bars[track][: max(0, MAX_BARS - drawn)]
        drawn += len(items)
        if not items:
            continue
        spans = [(s, max(d, 1e-9)) for s, d, _ in items]
        cols = [colour[str(epochs[i].get("layer") or "?")] for _, _, i in items]
        edges = ["#c62828" if i in faulting else "none" for _, _, i in items]
        ax.broken_barh(spans, (row - 0.38, 0.76), facecolors=cols, edgecolors=edges,
                       linewidth=1.2).set_gid(f"track-{track}")  # one path per bar, in `bars[track]` order
    ax.set_yticks(np.arange(len(tracks)), tracks, fontsize=8)
    ax.set_ylim(len(tracks) - 0.5, -0.5)
    end = max(s + d for items in bars.values() for s, d, _ in items)
    ax.set_xlim(0, end * 1.01 or 1)
    ax.set_xlabel("cycles" + (f" (1 cycle = {1e9 / clock_hz:.3g} ns)" if clock_hz else ""))
    ax.grid(axis="x", alpha=0.3)
    if legend_rows:
        handles = [plt.Rectangle((0, 0), 1, 1, color=colour[n]) for n in layers]
        fig.legend(handles, [shown[n] for n in layers], fontsize=7, ncol=min(ncol, len(layers)), loc="lower center",
                   frameon=False)
    ax.set_title("epoch timeline: epoch controller (setup), host and units (busy cycles per epoch)", fontsize=10)
    _margins(fig, tracks, 8, bottom_in=0.55 + 0.2 * legend_rows + (0.1 if legend_rows else 0))
    return _svg(fig)
