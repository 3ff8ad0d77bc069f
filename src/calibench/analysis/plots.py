"""Drawing helpers the analysis parts share: saving a figure, tau heatmaps, stage colours."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from calibench.layout import STAGES


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: Path, layout: bool = True) -> Path:
    plt = pyplot()
    if layout:
        fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # nothing clipped: long titles, legends below
    plt.close(fig)
    return path


def stage_color(stage: str) -> str:
    """A stage's colour: its place in :data:`STAGES` in the tab10 palette."""
    import matplotlib

    palette = matplotlib.colormaps["tab10"].colors
    return matplotlib.colors.to_hex(palette[STAGES.index(stage) % 10] if stage in STAGES else palette[-1])


def draw_heatmap(ax, m: pd.DataFrame):
    """One tau matrix on ``ax`` (rows and columns in their order of appearance); the image."""
    grid = m.pivot(index="row", columns="col", values="tau")
    rows = list(dict.fromkeys(m["row"]))
    cols = list(dict.fromkeys(m["col"]))
    grid = grid.loc[rows, cols]
    im = ax.imshow(grid.values, vmin=-1, vmax=1, cmap="RdBu_r")
    ax.set_xticks(range(len(cols)), [c.removeprefix("pre_") for c in cols], rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(len(rows)), [r.removeprefix("pre_") for r in rows], fontsize=7)
    for i in range(len(rows)):
        for j in range(len(cols)):
            v = grid.values[i, j]
            if np.isfinite(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6,
                        color="white" if abs(v) > 0.6 else "black")  # legible on the dark ends of RdBu
    return im


def heatmap(m: pd.DataFrame, title: str, path: Path) -> None:
    plt = pyplot()
    rows, cols = m["row"].nunique(), m["col"].nunique()
    fig, ax = plt.subplots(figsize=(max(4.2, 1.6 + 0.55 * cols), max(3.2, 1.0 + 0.5 * rows)))
    im = draw_heatmap(ax, m)
    fig.colorbar(im, ax=ax, fraction=0.04, pad=0.03, label="Kendall tau-b")
    ax.set_title(title, fontsize=9)
    save(fig, path, layout=False)  # one axes: the tight bounding box alone fits it, one drawing fewer


def heatmap_panels(blocks: Sequence[tuple[str, pd.DataFrame]], title: str, path: Path) -> None:
    """Several small tau matrices side by side (Fig. 2: one per metric), one colour bar."""
    plt = pyplot()
    size = max(max(m["col"].nunique(), m["row"].nunique()) for _, m in blocks)
    side = max(2.6, 1.2 + 0.55 * size)
    fig, axes = plt.subplots(1, len(blocks), figsize=(side * len(blocks) + 1.0, side + 0.6), squeeze=False)
    im = None
    for ax, (name, m) in zip(axes[0], blocks):
        im = draw_heatmap(ax, m)
        ax.set_title(name, fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.colorbar(im, ax=axes, fraction=0.02, pad=0.02, label="Kendall tau-b")
    save(fig, path, layout=False)
