"""Plots of sweep results (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


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


def plot_sweep(result, path: str | Path, heatmap: bool = True, title: str | None = None) -> Path:
    """Three panels against the swept value:
    cycles (and their change vs the fastest clean point) with faulting points marked and the RAM
    footprint on a second axis; bank conflicts and cross-bank splits; per-layer cycles relative to
    each layer's best (with `heatmap`)."""
    plt = _pyplot()
    pts = result.points
    labels = [str(p.value) for p in pts]
    x = np.arange(len(pts))
    layers = result.layer_names() if heatmap else []
    ratios = [1.3, 1.0] + ([max(1.0, len(layers) / 10)] if layers else [])
    fig, axes = plt.subplots(len(ratios), 1, figsize=(9, 3.0 * sum(ratios) + 0.6), squeeze=False,
                             gridspec_kw={"height_ratios": ratios})
    ax = axes[0][0]
    cycles = np.array([p.cycles for p in pts], dtype=float)
    ok = np.array([p.status == "ok" for p in pts])
    best = cycles[ok].min() if ok.any() else cycles.min()
    ax.plot(x, cycles / 1e3, "o-", color="tab:blue", label="cycles (k)")
    for i, p in enumerate(pts):
        if p.status == "ok":
            ax.annotate(f"{100 * (p.cycles / best - 1):+.2f}%", (x[i], cycles[i] / 1e3), textcoords="offset points",
                        xytext=(0, 8), ha="center", fontsize=8, color="tab:blue")
    bad = np.flatnonzero(~ok)
    if bad.size:
        ax.scatter(x[bad], cycles[bad] / 1e3, marker="X", s=140, color="tab:red", zorder=5,
                   label="faulted (cycles up to the fault)")
        for i in bad:
            ax.annotate(pts[i].first_fault, (x[i], cycles[i] / 1e3), textcoords="offset points", xytext=(0, -16),
                        ha="center", fontsize=8, color="tab:red")
    ax.set_ylabel("cycles (thousands)")
    ax.set_xticks(x, labels)
    ax.grid(alpha=0.3)
    ax2 = ax.twinx()
    ax2.plot(x, [p.footprint_bytes / 1024 for p in pts], "s--", color="tab:purple", label="RAM footprint (KiB)")
    ax2.set_ylabel("RAM footprint (KiB)")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="best")
    ax.set_title(title or f"Cost vs {result.param} (percent: cycles vs the fastest clean point)")

    bx = axes[1][0]
    bx.bar(x - 0.2, [p.bank_conflicts for p in pts], width=0.4, color="tab:orange", label="bank conflicts")
    bx.bar(x + 0.2, [p.cross_bank_splits for p in pts], width=0.4, color="tab:green", label="cross-bank splits")
    bx.set_xticks(x, labels)
    bx.set_ylabel("count")
    bx.legend(fontsize=8, loc="best")
    bx.grid(alpha=0.3, axis="y")
    bx.set_xlabel(result.param)
    if layers:
        hm = axes[2][0]
        grid = np.array([[p.layers.get(n, np.nan) for p in pts] for n in layers], dtype=float)
        lowest = np.nanmin(np.where(grid > 0, grid, np.nan), axis=1, keepdims=True)
        im = hm.imshow(100 * (grid / lowest - 1), aspect="auto", cmap="magma_r", interpolation="nearest")
        hm.set_xticks(x, labels)
        hm.set_yticks(np.arange(len(layers)), layers, fontsize=7)
        hm.set_xlabel(result.param)
        hm.set_title("per-layer cycles, % above each layer's best", fontsize=9)
        fig.colorbar(im, ax=hm, fraction=0.03)
    fig.tight_layout()
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
        fig.savefig(path, dpi=110, **({"metadata": meta} if meta else {}))
