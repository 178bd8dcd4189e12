"""Plots of sweep results (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_sweep(result, path: str | Path, heatmap: bool = True, title: str | None = None) -> Path:
    """Cycles and conflicts vs the swept value, footprint on a second axis, faults marked.

    With `heatmap`, a second panel shows per-layer cycles (layer x value), normalised per layer.
    """
    plt = _pyplot()
    pts = result.points
    labels = [str(p.value) for p in pts]
    x = np.arange(len(pts))
    layers = result.layer_names() if heatmap else []
    nrows = 2 if layers else 1
    fig, axes = plt.subplots(nrows, 1, figsize=(9, 4.2 * nrows + (0.12 * len(layers) if layers else 0)),
                             squeeze=False, gridspec_kw={"height_ratios": [1, max(1.0, len(layers) / 12)]} if layers else None)
    ax = axes[0][0]
    cycles = np.array([p.cycles for p in pts], dtype=float)
    ax.plot(x, cycles / 1e3, "o-", color="tab:blue", label="cycles (k)")
    ax.bar(x - 0.18, [p.bank_conflicts / 1e3 for p in pts], width=0.36, color="tab:orange", alpha=0.6,
           label="bank conflicts (k)")
    ax.bar(x + 0.18, [p.cross_bank_splits / 1e3 for p in pts], width=0.36, color="tab:green", alpha=0.6,
           label="cross-bank splits (k)")
    bad = [i for i, p in enumerate(pts) if p.status != "ok"]
    if bad:
        ax.scatter(x[bad], cycles[bad] / 1e3, marker="X", s=140, color="tab:red", zorder=5,
                   label="faulted (cycles up to the fault)")
        for i in bad:
            ax.annotate(pts[i].first_fault, (x[i], cycles[i] / 1e3), textcoords="offset points", xytext=(0, 10),
                        ha="center", fontsize=8, color="tab:red")
    ax.set_xticks(x, labels)
    ax.set_xlabel(result.param)
    ax.set_ylabel("thousands")
    ax2 = ax.twinx()
    ax2.plot(x, [p.footprint_bytes / 1024 for p in pts], "s--", color="tab:purple", label="footprint (KiB)")
    ax2.set_ylabel("RAM footprint (KiB)")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper right")
    ax.set_title(title or f"Cost vs {result.param}")
    ax.grid(alpha=0.3)
    if layers:
        hm = axes[1][0]
        grid = np.array([[p.layers.get(n, np.nan) for p in pts] for n in layers], dtype=float)
        norm = grid / np.nanmin(np.where(grid > 0, grid, np.nan), axis=1, keepdims=True)
        im = hm.imshow(norm, aspect="auto", cmap="viridis", interpolation="nearest")
        hm.set_xticks(x, labels)
        hm.set_yticks(np.arange(len(layers)), layers, fontsize=7)
        hm.set_xlabel(result.param)
        hm.set_title("per-layer cycles, relative to each layer's best")
        fig.colorbar(im, ax=hm, fraction=0.03)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
