"""The report's Memory card and flame graph in headless chromium: ``traceatlas report -o``
on a built trace with ``[memory]`` events; the page loads offline without errors, the
memory curve (with its peak mark) and the holders table are visible, the flame graph's
root box spans its SVG, and screenshots of both cards are not blank."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_report_browser import _pixel_stats
from typer.testing import CliRunner

from traceatlas.cli.main import app
from traceatlas.testing.builder import TraceBuilder


def _trace(directory: Path) -> Path:
    """Two steps, an annotation holding two nested ops, a kernel, five GPU allocations
    (peak 150 B at 200 ns, inside ``inner``)."""
    b = TraceBuilder(rank=0)
    b.step(1, 0, 1000)
    b.step(2, 1000, 2000)
    b.annotation("fwd", 50, 900)
    b.cpu_op("outer", 100, 400)
    b.cpu_op("inner", 150, 300)
    b.launch("gemm", 160, 20, 400, 300)
    for ts, nbytes, addr, total in ((120, 100, 1, 100), (200, 50, 2, 150), (250, -100, 1, 50),
                                    (350, 30, 3, 80), (1200, -50, 2, 30)):
        b.memory(ts, nbytes, addr=addr, total_allocated=total, total_reserved=1024,
                 device_id=0)
    directory.mkdir(parents=True, exist_ok=True)
    return b.write(directory / "mem.json")


@pytest.fixture(scope="module")
def report_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("memreport")
    path = _trace(base / "run")
    out = base / "report.html"
    res = CliRunner().invoke(app, ["report", str(path), "-o", str(out)])
    assert res.exit_code == 0, res.output
    return out


def test_memory_and_flame_cards_render(browser: Any, report_html: Path,
                                       tmp_path: Path) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    requests: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(report_html.as_uri(), wait_until="load")
    assert errors == [] and requests == [report_html.as_uri()]

    curve = page.locator(".card.memory svg.plot").first
    box = curve.bounding_box()
    assert curve.is_visible() and box is not None and box["width"] > 300
    peak = page.locator(".card.memory circle.peak").first
    assert peak.is_visible()
    assert "Who holds the memory at the peak" in page.locator(".card.memory").inner_text()
    assert page.locator(".card.memory table.holders tr").count() >= 2

    icicle = page.locator(".card.flame-card svg.flame").first
    svg_box = icicle.bounding_box()
    root = page.locator(".card.flame-card svg.flame rect[data-depth='0']").first
    root_box = root.bounding_box()
    assert svg_box is not None and root_box is not None
    assert abs(root_box["width"] - svg_box["width"]) < 2  # the root spans the graph

    for card in (".card.memory", ".card.flame-card"):
        png = page.locator(card).screenshot(path=str(tmp_path / f"{card[6:]}.png"))
        stats = _pixel_stats(browser, png)
        assert stats["variance"] > 100, (card, stats)  # blank ~0
    page.close()
