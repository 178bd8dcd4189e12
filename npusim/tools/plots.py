"""Plots of sweep results (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..names import fit


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def check_plot_path(path: str | Path) -> None:
    """UsageError (before any work) unless matplotlib can write `path`'s format."""
    from ..errors import UsageError

    suffix = Path(path).suffix.lower().lstrip(".")
    plt = _pyplot()
    formats = plt.figure().canvas.get_supported_filetypes()
    plt.close("all")
    if suffix not in formats:
        raise UsageError(f"--plot {path}: unsupported image format {('.' + suffix) if suffix else '(no suffix)'} "
                         f"(use one of {', '.join('.' + f for f in sorted(formats))})")


MEASURED, FAULTED, NOT_REACHED = 0, 1, 2  # states of a heat-map cell
LABEL_CHARS = 36  # a layer's label on the heat map at most (`names.fit`: a longer name keeps its distinguishing end)


def heatmap_cells(result):
    """(layers, percent[layer][point], state[layer][point]) of the per-layer heat map.

    A layer's cycles at a point are `MEASURED` when the layer ran to its end; the first fault's
    layer is `FAULTED` (its cycles stop at the fault) and the layers after it, or of a point that
    did not run, are `NOT_REACHED`. Percent is above the layer's best measured clean point (its best
    measured point if no clean point measured it); only measured cells have a value."""
    pts = result.points
    layers = result.layer_names()
    state = np.full((len(layers), len(pts)), NOT_REACHED, dtype=int)
    cycles = np.full((len(layers), len(pts)), np.nan)
    for j, p in enumerate(pts):
        for i, name in enumerate(layers):
            if name not in p.layers or p.status == "error":
                continue
            if p.status == "fault" and name == p.fault_layer:
                state[i, j] = FAULTED
                continue
            state[i, j] = MEASURED
            cycles[i, j] = p.layers[name]
    clean = np.array([p.status == "ok" for p in pts], dtype=bool)
    percent = np.full_like(cycles, np.nan)
    for i in range(len(layers)):
        ref = cycles[i, clean & (state[i] == MEASURED)]
        ref = ref[ref > 0] if ref.size else ref
        if not ref.size:
            ref = cycles[i, state[i] == MEASURED]
            ref = ref[ref > 0]
        if ref.size:
            percent[i] = 100 * (cycles[i] / ref.min() - 1)
    return layers, percent, state


def sweep_figure(result, heatmap: bool = True, title: str | None = None):
    """The matplotlib figure `plot_sweep` saves (see there)."""
    from matplotlib.patches import Patch

    plt = _pyplot()
    pts = result.points
    labels = [str(p.value) for p in pts]
    x = np.arange(len(pts))
    layers = result.layer_names() if heatmap else []
    label_chars, short = fit(layers, limit=LABEL_CHARS) if layers else (0, {})
    ratios = [1.3, 1.0] + ([max(1.0, len(layers) / 10)] if layers else [])
    width = 10 + 0.06 * max(0, label_chars - 12)  # the heat map's labels widen the figure, not squeeze the panels
    fig, axes = plt.subplots(len(ratios), 1, figsize=(width, 3.0 * sum(ratios) + 0.8), squeeze=False,
                             gridspec_kw={"height_ratios": ratios}, layout="constrained")
    ax = axes[0][0]
    cycles = np.array([p.cycles for p in pts], dtype=float)
    ok = np.array([p.status == "ok" for p in pts])
    best = cycles[ok].min() if ok.any() else (cycles.min() if cycles.size else 0)
    # the line joins neighbouring clean points only: a faulted point's cycles stop at its fault
    ax.plot(x, np.where(ok, cycles, np.nan) / 1e3, "o-", color="tab:blue", label="cycles (k), clean points")
    for i, p in enumerate(pts):
        if p.status == "ok" and best > 0:
            ax.annotate(f"{100 * (p.cycles / best - 1):+.2f}%", (x[i], cycles[i] / 1e3), textcoords="offset points",
                        xytext=(0, 8), ha="center", va="bottom", fontsize=8, color="tab:blue")
    bad = np.flatnonzero(~ok)
    if bad.size:
        ax.scatter(x[bad], cycles[bad] / 1e3, marker="X", s=140, color="tab:red", zorder=5,
                   label="faulted (cycles up to the fault)")
        for i in bad:
            ax.annotate(pts[i].first_fault or "error", (x[i], cycles[i] / 1e3), textcoords="offset points",
                        xytext=(0, 10), ha="center", va="bottom", fontsize=8, color="tab:red")
    ax.margins(y=0.25)  # room for the labels above the points, inside the frame
    ax.set_xlim(-0.5, len(pts) - 0.5)  # a column per point, as in the panels below (whichever points the line has)
    ax.set_ylabel("cycles (thousands)")
    ax.set_xticks(x, labels)
    ax.grid(alpha=0.3)
    ax2 = ax.twinx()
    made = np.array([p.status != "error" for p in pts])  # a point that did not compile has no footprint
    foot = np.array([p.footprint_bytes / 1024 for p in pts], dtype=float)
    ax2.plot(x, np.where(made, foot, np.nan), "s--", color="tab:purple", label="RAM footprint (KiB)")
    ax2.margins(y=0.25)
    ax2.set_ylabel("RAM footprint (KiB)")
    ax.set_zorder(ax2.get_zorder() + 1)  # the cycles and the faulted points' marks over the footprint line
    ax.patch.set_visible(False)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    fig.legend(h1 + h2, l1 + l2, fontsize=8, loc="outside upper right", ncol=3)
    ax.set_title(title or f"Cost vs {result.param} (percent: cycles vs the fastest clean point)", loc="left",
                 fontsize=10)

    bx = axes[1][0]
    hatch = ["xx" if not good else "" for good in ok]  # a faulted point counts up to its fault
    edge = ["tab:red" if not good else "none" for good in ok]
    bx.bar(x - 0.2, [p.bank_conflicts for p in pts], width=0.4, color="tab:orange", hatch=hatch, edgecolor=edge)
    bx.bar(x + 0.2, [p.cross_bank_splits for p in pts], width=0.4, color="tab:green", hatch=hatch, edgecolor=edge)
    keys = [Patch(facecolor="tab:orange", label="bank conflicts"), Patch(facecolor="tab:green", label="cross-bank splits")]
    if bad.size:
        keys.append(Patch(facecolor="white", hatch="xx", edgecolor="tab:red", label="faulted point (up to the fault)"))
    bx.set_xticks(x, labels)
    bx.set_ylabel("count")
    bx.legend(handles=keys, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)  # beside, never on a bar
    bx.grid(alpha=0.3, axis="y")
    bx.set_xlabel(result.param)
    if layers:
        hm = axes[2][0]
        _, percent, state = heatmap_cells(result)
        cmap = plt.get_cmap("magma_r").with_extremes(bad="white")
        im = hm.imshow(np.ma.masked_invalid(percent), aspect="auto", cmap=cmap, interpolation="nearest")
        for (i, j), st in np.ndenumerate(state):
            if st == FAULTED:
                hm.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="mistyrose", edgecolor="tab:red",
                                           hatch="xx", linewidth=0.5))
            elif st == NOT_REACHED:
                hm.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="0.85", edgecolor="none"))
        hm.set_xticks(x, labels)
        hm.set_yticks(np.arange(len(layers)), [short[n] for n in layers], fontsize=7)
        hm.set_xlabel(result.param)
        hm.set_title("per-layer cycles, % above the layer's best clean point", fontsize=9, loc="left")
        cb = fig.colorbar(im, ax=hm, fraction=0.03)
        cb.set_label("% above the layer's best clean point", fontsize=8)
        kinds = [(FAULTED, Patch(facecolor="mistyrose", edgecolor="tab:red", hatch="xx",
                                 label="faulted here (cycles up to the fault)")),
                 (NOT_REACHED, Patch(facecolor="0.85", label="not reached (after the fault)"))]
        shown = [patch for st, patch in kinds if (state == st).any()]
        if shown:
            fig.legend(handles=shown, fontsize=8, loc="outside lower center", ncol=2, frameon=False)  # under the map
    return fig


def plot_sweep(result, path: str | Path, heatmap: bool = True, title: str | None = None) -> Path:
    """Three panels against the swept value:
    cycles (and their change vs the fastest clean point) with faulting points marked and the RAM
    footprint on a second axis; bank conflicts and cross-bank splits; per-layer cycles relative to
    each layer's best clean point (with `heatmap`; a faulting point's faulting layer is hatched and
    the layers after it grey, both named in a legend)."""
    plt = _pyplot()
    fig = sweep_figure(result, heatmap, title)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _save(fig, path)
    plt.close(fig)
    return path


def _save(fig, path: Path) -> None:
    """Save with no date and fixed ids, so the same result gives the same file."""
    import matplotlib

    meta = {"png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None},
            "ps": {"CreationDate": None}, "eps": {"CreationDate": None}}.get(path.suffix.lower().lstrip("."))
    with matplotlib.rc_context({"svg.hashsalt": "npusim"}):
        if path.suffix.lower() == ".svg":
            import io

            from ..report.charts import stable_ids

            buf = io.StringIO()
            fig.savefig(buf, format="svg", dpi=110, metadata=meta)
            path.write_text(stable_ids(buf.getvalue()), encoding="utf-8")
        else:
            fig.savefig(path, dpi=110, **({"metadata": meta} if meta else {}))


def plot_stress(pool, high, cycles, rss, path: str | Path, title: str = "npusim stress") -> Path:
    """Three panels over the inferences of a stress / soak: bytes in use in the runtime pools after
    each inference (and the high-water mark), each inference's cycles, and the host's resident
    memory. Each argument is an (x, y) pair of arrays (the samples a bounded series kept)."""
    plt = _pyplot()
    fig, (a, b, c) = plt.subplots(3, 1, figsize=(9, 7), sharex=True)
    a.plot(pool[0], np.asarray(pool[1], dtype=float) / 1024, color="tab:blue", lw=1, label="in use after the inference")
    a.plot(high[0], np.asarray(high[1], dtype=float) / 1024, color="tab:gray", lw=1, ls="--", label="high-water")
    a.set_ylabel("runtime pool (KiB)")
    a.set_ylim(bottom=0)
    a.legend(fontsize=8, loc="upper left")
    a.set_title(title)
    b.plot(cycles[0], np.asarray(cycles[1], dtype=float) / 1e3, ".", color="tab:orange", ms=2)
    b.set_ylabel("cycles per inference (k)")
    mib = np.asarray(rss[1], dtype=float) / 2**20
    c.plot(rss[0], mib, color="tab:green", lw=1.5)
    c.set_ylabel("host RSS (MiB)")
    c.set_ylim(0, 1.15 * float(mib.max()) if mib.size else 1.0)
    c.set_xlabel("inference")
    for ax in (a, b, c):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    _save(fig, path)
    plt.close(fig)
    return path
