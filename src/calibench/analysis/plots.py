"""Drawing helpers the analysis parts share: saving a figure, tau heatmaps, stage colours."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from calibench.vocabulary import STAGES

DPI = 110  # every figure's PNG resolution
# The width the report shows a figure at, at most (report/page.py: body max-width 1200 px
# less 2 x 12 px padding; img max-width 100 %): a wider PNG is scaled down to it.
REPORT_CONTENT_PX = 1176
ANNOTATION_MIN_PX = 9.0  # cell values smaller than this on screen are left out (issue 25, item 7)
MAX_ANNOTATED_CELLS = 144  # larger matrices: no values (the colour bar gives the scale)


def rendered_px(fontsize_pt: float, png_width_px: float, dpi: float = DPI,
                shown_px: float = REPORT_CONTENT_PX) -> float:
    """On-screen height (px) of a ``fontsize_pt`` font in a PNG of ``png_width_px`` at
    ``dpi``, shown at most ``shown_px`` wide (scaled down, never up)."""
    return fontsize_pt * dpi / 72.0 * min(1.0, shown_px / png_width_px)


def annotation_fontsize(cells: int, png_width_in: float, cell_width_in: float, chars: int = 5,
                        dpi: float = DPI, shown_px: float = REPORT_CONTENT_PX,
                        min_pt: float = 6.0) -> float | None:
    """Font size (pt) for the values written in heatmap cells: the smallest (at least
    ``min_pt``) that is ``ANNOTATION_MIN_PX`` high at the width the report shows a PNG
    ``png_width_in`` wide at, or None (values left out) where it would not fit a cell
    ``cell_width_in`` wide (``chars`` characters of about 0.6 em) or the matrix has more
    than ``MAX_ANNOTATED_CELLS`` cells."""
    if cells > MAX_ANNOTATED_CELLS:
        return None
    pt = max(min_pt, ANNOTATION_MIN_PX / rendered_px(1.0, png_width_in * dpi, dpi, shown_px))
    return pt if chars * 0.6 * pt <= 0.95 * cell_width_in * 72.0 else None


def fit_annotations(fig, images, fmt: str = "{:.2f}", dark: float = 0.6, scale: float = 1.0, chars: int = 5,
                    min_pt: float = 6.0) -> float | None:
    """Write the values of the heatmaps ``images`` (AxesImage) of a finished ``fig`` (last,
    before saving it with ``bbox_inches="tight"``) at :func:`annotation_fontsize` for the
    PNG's real width (the tight box plus its padding) and the smallest cell; returns the
    size (None: left out). The values, inside their axes, leave the tight box as it is."""
    import matplotlib

    values = [np.ma.filled(np.ma.asarray(im.get_array(), dtype=float), np.nan) for im in images]
    if not values or max(v.size for v in values) > MAX_ANNOTATED_CELLS:
        return None  # no values: no layout drawn for them either
    engine = fig.get_layout_engine()
    if engine is not None:  # lay it out once and freeze it: saving draws it without laying it out again
        engine.execute(fig)
        fig.set_layout_engine("none")
    renderer = fig.canvas.get_renderer()  # text extents without drawing the figure
    width_in = (fig.get_tightbbox(renderer).width + 2 * matplotlib.rcParams["savefig.pad_inches"]
                + 2.0 / DPI)  # px rounding
    cell_in = min(im.get_window_extent().width / v.shape[1] / fig.dpi for im, v in zip(images, values))
    fontsize = annotation_fontsize(max(v.size for v in values), width_in, cell_in, chars, min_pt=min_pt)
    for im, v in zip(images, values):
        annotate(im.axes, scale * v, fontsize, fmt, dark)
    return fontsize


def annotate(ax, values: np.ndarray, fontsize: float | None, fmt: str = "{:.2f}", dark: float = 0.6) -> None:
    """Write each finite value of ``values`` in its cell at ``fontsize`` (None: nothing),
    white where ``|v| > dark`` (legible on the dark ends of the colour map)."""
    if fontsize is None:
        return
    for (i, j), v in np.ndenumerate(values):
        if np.isfinite(v):
            ax.text(j, i, fmt.format(v), ha="center", va="center", fontsize=fontsize, in_layout=False,
                    color="white" if abs(v) > dark else "black")


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
    fig.savefig(path, dpi=DPI, bbox_inches="tight")  # nothing clipped: long titles, legends below
    plt.close(fig)
    return path


def stage_color(stage: str) -> str:
    """A stage's colour: its place in :data:`STAGES` in the tab10 palette."""
    import matplotlib

    palette = matplotlib.colormaps["tab10"].colors
    return matplotlib.colors.to_hex(palette[STAGES.index(stage) % 10] if stage in STAGES else palette[-1])


def draw_heatmap(ax, m: pd.DataFrame, fontsize: float | None = 6.0):
    """One tau matrix on ``ax`` (rows and columns in their order of appearance), its values
    at ``fontsize`` (None: left out); the image."""
    grid = m.pivot(index="row", columns="col", values="tau")
    rows = list(dict.fromkeys(m["row"]))
    cols = list(dict.fromkeys(m["col"]))
    grid = grid.loc[rows, cols]
    im = ax.imshow(grid.values, vmin=-1, vmax=1, cmap="RdBu_r")
    ax.set_xticks(range(len(cols)), [c.removeprefix("pre_") for c in cols], rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(len(rows)), [r.removeprefix("pre_") for r in rows], fontsize=7)
    annotate(ax, grid.to_numpy(dtype=float), fontsize)
    return im


def heatmap(m: pd.DataFrame, title: str, path: Path) -> float | None:
    """One tau matrix; returns the font size of its cell values (None: left out, see
    :func:`annotation_fontsize`)."""
    plt = pyplot()
    rows, cols = m["row"].nunique(), m["col"].nunique()
    fig, ax = plt.subplots(figsize=(max(4.2, 1.6 + 0.55 * cols), max(3.2, 1.0 + 0.5 * rows)))
    im = draw_heatmap(ax, m, None)
    fig.colorbar(im, ax=ax, fraction=0.04, pad=0.03, label="Kendall tau-b")
    ax.set_title(title, fontsize=9)
    fontsize = fit_annotations(fig, [im])
    save(fig, path, layout=False)  # one axes: the tight bounding box alone fits it, one drawing fewer
    return fontsize


def heatmap_panels(blocks: Sequence[tuple[str, pd.DataFrame]], title: str, path: Path) -> float | None:
    """Several small tau matrices side by side (Fig. 2: one per metric), one colour bar;
    returns the font size of the cell values (None: left out)."""
    plt = pyplot()
    size = max(max(m["col"].nunique(), m["row"].nunique()) for _, m in blocks)
    side = max(2.6, 1.2 + 0.55 * size)
    fig, axes = plt.subplots(1, len(blocks), figsize=(side * len(blocks) + 1.0, side + 0.6), squeeze=False)
    images = []
    for ax, (name, m) in zip(axes[0], blocks):
        images.append(draw_heatmap(ax, m, None))
        ax.set_title(name, fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.colorbar(images[-1], ax=axes, fraction=0.02, pad=0.02, label="Kendall tau-b")
    fontsize = fit_annotations(fig, images)
    save(fig, path, layout=False)
    return fontsize
