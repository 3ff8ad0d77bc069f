"""calibench.report.screenshot on a tiny hand-written page with one matplotlib PNG (no workflow run).

The browser tests skip, saying why, where no headless Chromium is installed
(apt-get install chromium-headless-shell, or set CALIBENCH_BROWSER).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from calibench.report import screenshot as render  # noqa: E402


def _page(tmp_path, body: str):
    html = tmp_path / "report.html"
    html.write_text("<!doctype html><html><head><meta charset='utf-8'><title>t</title>"
                    "<style>body{font-family:sans-serif;max-width:1200px;margin:auto}img{max-width:100%}</style>"
                    f"</head><body><h1>tiny report</h1>{body}</body></html>", encoding="utf-8")
    return html


@pytest.fixture
def report(tmp_path):
    """report.html with a paragraph, a 1,500 px spacer and plots/fig.png (a small matplotlib line plot)."""
    (tmp_path / "plots").mkdir()
    fig, ax = plt.subplots(figsize=(3, 2), dpi=80)
    ax.plot([0, 1, 2], [0, 1, 0], color="tab:red")
    ax.set_title("a figure")
    fig.savefig(tmp_path / "plots" / "fig.png")
    plt.close(fig)
    return _page(tmp_path, "<p>Some text.</p><div style='height:1500px'></div>"
                           "<h4>the figure</h4><img src='plots/fig.png' alt='fig'><p>the end</p>")


@pytest.fixture
def browser():
    try:
        return render.find_browser()
    except render.BrowserNotFound as exc:
        pytest.skip(str(exc))


def test_missing_image_named(report):
    """A broken <img src> fails before any browser starts, naming the src and the file looked for."""
    (report.parent / "plots" / "fig.png").rename(report.parent / "plots" / "other.png")
    assert render.missing_images(report) == [("plots/fig.png", report.parent.resolve() / "plots" / "fig.png")]
    with pytest.raises(render.RenderError, match=r"plots/fig\.png"):
        render.check_rendered(report, browser="/nonexistent/browser")


def test_image_sources_skip_data_and_remote(tmp_path):
    html = _page(tmp_path, "<img src='data:image/png;base64,AAAA'><img src='https://example.org/a.png'>"
                           "<img src='a%20b.png'><img>")
    (tmp_path / "a b.png").write_bytes(b"")
    assert render.missing_images(html) == [("", None)]


def test_no_browser_names_what_it_looked_for(monkeypatch, tmp_path):
    monkeypatch.delenv(render.BROWSER_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(render.BrowserNotFound) as info:
        render.find_browser()
    message = str(info.value)
    assert "chromium-headless-shell" in message and "chromium" in message and render.BROWSER_ENV in message
    monkeypatch.setenv(render.BROWSER_ENV, str(tmp_path / "nope"))
    with pytest.raises(render.BrowserNotFound, match="nope"):
        render.find_browser()


def test_screenshot_full_page_not_blank(report, browser, tmp_path):
    from PIL import Image

    result = render.check_rendered(report, tmp_path / "shot.png", width=800, browser=browser)
    assert result.png.is_file() and result.images == 1 and result.warnings == []
    with Image.open(result.png) as image:
        width, height = image.size
        pixels = image.convert("RGB").load()
        # The whole page, not only the first screen: the figure sits below a 1,500 px spacer.
        assert width == 800 and height >= result.page_height > 1500
        # Some of the figure's red line made it into the screenshot, below the spacer.
        reds = sum(1 for y in range(1500, height, 2) for x in range(0, width, 2)
                   if (lambda r, g, b: r > 150 and g < 100 and b < 100)(*pixels[x, y]))
        assert reds > 5
    assert result.colours >= 8
    assert render.screenshot(report, tmp_path / "plain.png", 640, 480, full_page=False, browser=browser).is_file()
    with Image.open(tmp_path / "plain.png") as image:
        assert image.size == (640, 480)


def test_undecodable_image_and_blank_page(report, browser, tmp_path):
    """An existing but broken PNG is caught by the browser; an empty page by the colour count."""
    (report.parent / "plots" / "fig.png").write_bytes(b"not a png")
    with pytest.raises(render.RenderError, match=r"could not load or decode 1 image\(s\): plots/fig\.png"):
        render.check_rendered(report, tmp_path / "broken.png", width=600, browser=browser)
    blank = tmp_path / "blank"
    blank.mkdir()
    (blank / "empty.html").write_text("<!doctype html><html><body></body></html>")
    with pytest.raises(render.RenderError, match="looks blank"):
        render.check_rendered(blank / "empty.html", width=600, browser=browser)


def test_overflow_is_a_warning(tmp_path, browser):
    html = _page(tmp_path, "<h2>wide</h2><table><tr><td>" + "x" * 400 + "</td></tr></table>")
    result = render.check_rendered(html, tmp_path / "wide.png", width=600, browser=browser)
    assert len(result.warnings) == 1 and "<table> under 'wide'" in result.warnings[0]


def test_table_cells_never_break_words_in_the_reports_style(tmp_path, browser):
    """Issue 25 item 7: a table much wider than the window. Under the old style (cells
    wrapping anywhere, the table squeezed to the page) the browser breaks headers and numbers
    inside words, and the probe says which; under the report's style (page.STYLE, tables in
    page.scrollable_tables' box) no cell is cut or wrapped and nothing sticks out."""
    from calibench.report import page

    header = "".join(f"<th>accuracy_{i} algorithm space</th>" for i in range(14))
    row = "".join(f"<td>0.16{i:02d}44 supercalifragilistic</td>" for i in range(14))
    table = f"<h2>wide table</h2><table><tr>{header}</tr><tr>{row}</tr></table>"
    old_style = ("body{max-width:1200px;margin:auto}table{border-collapse:collapse;max-width:100%}"
                 "td,th{padding:2px 6px;overflow-wrap:anywhere}")
    for name, style, body in (("old", old_style, table), ("new", page.STYLE, page.scrollable_tables(table))):
        html = tmp_path / f"{name}.html"
        html.write_text(f"<!doctype html><html><head><meta charset='utf-8'><style>{style}</style></head>"
                        f"<body>{body}</body></html>", encoding="utf-8")
        shot = render.render(html, tmp_path / f"{name}.png", 800, 600, browser=browser)
        if name == "old":
            assert shot.n_broken_cells >= 14 and {c["why"] for c in shot.broken_cells} == {"word"}
            assert all(c["heading"] == "wide table" for c in shot.broken_cells)
        else:
            assert shot.n_broken_cells == 0 and shot.broken_cells == [] and shot.overflow == []
    result = render.check_rendered(tmp_path / "old.html", tmp_path / "old2.png", width=800, min_colours=2,
                                   browser=browser)
    assert any("wrapped inside a word" in w for w in result.warnings), result.warnings
