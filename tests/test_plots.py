"""Heatmap cell values (issue 25, item 7): written at least ANNOTATION_MIN_PX high at the
width the report shows the figure at (analysis/plots.py), or left out."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from calibench.analysis import plots
from calibench.analysis.kendall import _methods_figure


def _matrix(n_rows, n_cols, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame([{"row": f"pre_r{i}", "col": f"pre_c{j}", "tau": rng.uniform(-1, 1)}
                         for i in range(n_rows) for j in range(n_cols)])


def _png_width(path):
    with Image.open(path) as image:
        return image.width


def test_rendered_px_and_annotation_fontsize_exact_values():
    assert plots.REPORT_CONTENT_PX == 1176 and plots.DPI == 110
    assert plots.rendered_px(6, 462) == pytest.approx(6 * 110 / 72)  # narrower than the page: full size
    assert plots.rendered_px(6, 2352) == pytest.approx(6 * 110 / 72 * 0.5)  # shown at half its width
    assert plots.annotation_fontsize(9, 4.2, 0.55) == 6.0  # 9.17 px at 6 pt already
    # 20 in = 2,200 px shown at 1,176 px: 9 px needs 9 * 72 * 2200 / (110 * 1176) pt, which fits 0.55 in
    assert plots.annotation_fontsize(9, 20.0, 0.55) == pytest.approx(9 * 72 * 2200 / (110 * 1176), rel=1e-12)
    assert plots.annotation_fontsize(9, 30.0, 0.55) is None  # 16.5 pt: "-0.12" wider than its cell
    assert plots.annotation_fontsize(9, 30.0, 0.55, chars=2) == pytest.approx(9 * 72 * 3300 / (110 * 1176))
    assert plots.annotation_fontsize(145, 4.2, 0.55) is None  # more cells than MAX_ANNOTATED_CELLS
    assert plots.annotation_fontsize(144, 4.2, 0.55) == 6.0


def test_draw_heatmap_writes_each_finite_value_or_none():
    plt = plots.pyplot()
    m = _matrix(3, 4)
    m.loc[5, "tau"] = np.nan
    fig, (a, b) = plt.subplots(1, 2)
    plots.draw_heatmap(a, m, 7.5)
    plots.draw_heatmap(b, m, None)
    assert len(a.texts) == 11 and {t.get_fontsize() for t in a.texts} == {7.5} and len(b.texts) == 0
    assert sorted(t.get_text() for t in a.texts) == sorted(f"{v:.2f}" for v in m["tau"].dropna())
    plt.close(fig)


@pytest.mark.parametrize("n", [4, 12, 13])
def test_heatmap_values_are_legible_on_the_saved_png_or_left_out(tmp_path, n):
    size = plots.heatmap(_matrix(n, n), "t", tmp_path / "h.png")
    panels = plots.heatmap_panels([(f"m{i}", _matrix(n, n, i)) for i in range(4)], "t", tmp_path / "p.png")
    if n == 13:  # 169 cells
        assert size is None and panels is None
        return
    assert size is not None and plots.rendered_px(size, _png_width(tmp_path / "h.png")) >= plots.ANNOTATION_MIN_PX
    if n == 4:
        assert plots.rendered_px(panels, _png_width(tmp_path / "p.png")) >= plots.ANNOTATION_MIN_PX
    else:  # four 12 x 12 panels side by side: 9 px would not fit a cell
        assert panels is None


def _methods_block(stages, bins):
    rng = np.random.default_rng(1)
    return pd.DataFrame([{"stage": s, "row": f"pre_ece_{a}", "col": f"{s}_ece_{b}", "tau": rng.uniform(-1, 1)}
                         for s in stages for a in bins for b in bins])


def test_per_method_heatmap_values_legible_or_left_out(tmp_path):
    """The per-method figure of question 4: seven stages of 3 bin counts get values of at
    least 9 px on the PNG as the report shows it; with 10 bin counts (values about 5 px
    before) they are left out."""
    stages = ["post", "vs", "ms", "dir", "iso", "hist", "spline"]
    size = _methods_figure(_methods_block(stages, [5, 15, 50]), stages, "t", tmp_path / "a.png")
    assert size is not None and plots.rendered_px(size, _png_width(tmp_path / "a.png")) >= plots.ANNOTATION_MIN_PX
    many = [5, 10, 15, 20, 25, 30, 50, 75, 100, 150]
    assert _methods_figure(_methods_block(stages, many), stages, "t", tmp_path / "b.png") is None
    assert plots.rendered_px(6, _png_width(tmp_path / "b.png")) < plots.ANNOTATION_MIN_PX  # what 6 pt gave


def test_each_kendall_heatmap_names_its_networks_in_its_title(tmp_path, monkeypatch):
    """A heatmap of taus says on how many networks they stand (a range where cells differ)."""
    from calibench.analysis import kendall as ak

    titles = []
    monkeypatch.setattr(ak, "heatmap", lambda m, title, path: titles.append(title))
    monkeypatch.setattr(ak, "heatmap_panels", lambda blocks, title, path: titles.append(title))
    monkeypatch.setattr(ak, "_methods_figure", lambda block, stages, title, path: titles.append(title))
    cells = [{"figure": "metrics", "population": "all", "stage": None, "metric": "*", "space": "tss", "hp": "200",
              "dataset": "cifar10", "row": "pre_ece_15", "col": c, "tau": 0.5, "n": n}
             for c, n in (("pre_nll", 6466), ("pre_brier", 6466))]
    cells += [{"figure": "pre_post", "population": "all", "stage": s, "metric": "*", "space": "tss", "hp": "200",
               "dataset": "cifar10", "row": "pre_ece_15", "col": f"{s}_ece_15", "tau": 0.5, "n": n}
              for s, n in (("post", 40), ("vs", 42))]
    cells += [{"figure": "datasets", "population": "all", "stage": None, "metric": "pre_ece_15", "space": "tss",
               "hp": "200", "dataset": "*", "row": "cifar10", "col": "cifar100", "tau": 0.5, "n": 5}]
    kendall = pd.DataFrame(cells)
    ak.make_plots(kendall, "", tmp_path)
    ak.method_plots(kendall, ["post", "vs"], "", tmp_path)
    assert any(t.startswith("metrics, cifar10") and t.endswith(", n = 6,466 networks") for t in titles), titles
    assert any(t.startswith("ECE pre vs post") and t.endswith(", n = 40 networks") for t in titles), titles
    assert any(t.startswith("Kendall tau across datasets") and t.endswith(", n = 5 networks") for t in titles), titles
    assert any(t.startswith("Question 4") and t.endswith(", n = 40–42 networks") for t in titles), titles
