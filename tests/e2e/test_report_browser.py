"""The HTML report in a real browser: ``traceatlas demo`` writes the report of the shipped
sample, headless chromium opens it offline, and the test checks the page itself: no
console errors or page errors, no network request, the efficiency tree and the plots are
rendered and visible with a real size, and a screenshot is not blank."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from traceatlas.cli.main import app

MIN_PLOTS = 4
"""Rank bars, timeline heatmap, at least one kernel histogram, step durations."""


@pytest.fixture(scope="module")
def report_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "demo-report.html"
    res = CliRunner().invoke(app, ["demo", "-o", str(out)])
    assert res.exit_code == 0, res.output
    return out


def _pixel_stats(browser: Any, png: bytes) -> dict[str, float]:
    """Mean and variance of the screenshot's grey levels, decoded by the browser (a
    canvas) so the test needs no image library."""
    page = browser.new_page()
    try:
        data = "data:image/png;base64," + base64.b64encode(png).decode()
        stats: dict[str, float] = page.evaluate(
            """async (src) => {
                const img = new Image(); img.src = src; await img.decode();
                const c = document.createElement('canvas');
                c.width = img.width; c.height = img.height;
                const ctx = c.getContext('2d'); ctx.drawImage(img, 0, 0);
                const d = ctx.getImageData(0, 0, c.width, c.height).data;
                let n = 0, s = 0, s2 = 0;
                for (let i = 0; i < d.length; i += 4) {
                    const g = (d[i] + d[i + 1] + d[i + 2]) / 3; n++; s += g; s2 += g * g;
                }
                const mean = s / n;
                return {width: c.width, height: c.height, mean: mean,
                        variance: s2 / n - mean * mean};
            }""", data)
    finally:
        page.close()
    return stats


def test_report_renders_in_chromium(browser: Any, report_html: Path, tmp_path: Path) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    console: list[tuple[str, str]] = []
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: console.append((m.type, m.text)))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(report_html.as_uri(), wait_until="load")

    assert errors == []
    assert [m for m in console if m[0] == "error"] == []
    assert requests == [report_html.as_uri()]  # nothing fetched besides the file itself

    tree = page.locator(".efftree")
    assert tree.count() == 1 and tree.is_visible()
    nodes = page.locator(".efftree .node")
    assert nodes.count() >= 4  # parallel efficiency and its factors
    assert all(nodes.nth(i).is_visible() for i in range(nodes.count()))
    assert "load balance" in tree.inner_text()
    assert page.locator(".findings li").count() >= 1

    plots = page.locator("svg.plot")
    assert plots.count() >= MIN_PLOTS
    for i in range(plots.count()):
        box = plots.nth(i).bounding_box()
        assert box is not None and box["width"] > 100 and box["height"] > 50, box
    for section in (".rank-bars", ".timeline", ".kernels", ".steps"):
        assert page.locator(f"{section} svg.plot").first.is_visible(), section
    heat_cells = page.locator(".timeline svg.plot rect").count()
    assert heat_cells > 100  # ranks x time bins

    shot = tmp_path / "report.png"
    png = page.screenshot(path=str(shot), full_page=True)
    page.close()
    stats = _pixel_stats(browser, png)
    assert stats["width"] == 1280 and stats["height"] > 900
    assert stats["variance"] > 100, stats  # a blank page has variance ~0
