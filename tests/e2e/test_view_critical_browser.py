"""The critical path in the viewer, in headless chromium: `traceatlas view STORE
--critical-path --step 3` on h100-planted/imbalance (4 ranks, H100 Kineto traces from
../shared/traces; rank 1 is the planted slow rank), and the toolbar toggle on a
shift-drag selection.

References come from the CLI, not the viewer: `traceatlas analyze critical_path --step 3
--format json` (the path's rows, its by_bound table) and the same with `--window @A:@B`
for the selection. The overlay is checked in the canvas's own pixels: where the page says
it drew a path bar, the pixel has that bound's colour with the toggle on and not with it
off. Screenshots go to /tmp/shots_view_cp/ (or $TRACEATLAS_VIEW_SHOTS).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_view_browser import Page, _cli, _viewer

SHOTS = Path(os.environ.get("TRACEATLAS_VIEW_SHOTS") or "/tmp/shots_view_cp")
BOUND_RGB = {"cpu": (0x1f, 0x77, 0xb4), "gpu_compute": (0x2c, 0xa0, 0x2c),
             "gpu_comm": (0xd6, 0x27, 0x28), "launch": (0xff, 0x7f, 0x0e),
             "kernel_gap": (0x8c, 0x8c, 0x8c), "sync": (0xe3, 0x77, 0xc2),
             "data_load": (0x8c, 0x56, 0x4b), "wait": (0x94, 0x67, 0xbd),
             "comm": (0xbc, 0xbd, 0x22)}
"""critical.js BOUND_COLORS."""


@pytest.fixture(scope="module")
def served(imbalance_store: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The same store (conftest ``imbalance_store``) served with the step-3 path."""
    with _viewer(imbalance_store["store"], imbalance_store["env"], "--critical-path",
                 "--step", "3") as srv:
        yield srv


def _critical(view: Page, timeout: float = 60.0, want: tuple[str, ...] = ("ready", "error")
              ) -> dict[str, Any]:
    """The page's overlay state once its status is one of ``want`` (ready: the path has
    arrived) and the next frame is drawn."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = view.settle()
        c: dict[str, Any] | None = st.get("critical")
        if c and c["status"] in want:
            time.sleep(0.3)  # the frame after the answer
            out: dict[str, Any] = view.state()["critical"]
            return out
        time.sleep(0.1)
    raise AssertionError(f"no critical path drawn: {view.state().get('critical')}")


def _pixel(view: Page, x: float, y: float) -> tuple[int, int, int]:
    rgb = view.page.evaluate("""([x, y]) => {
        const c = document.getElementById('timeline');
        const r = window.devicePixelRatio || 1;
        const d = c.getContext('2d').getImageData(Math.floor(x * r), Math.floor(y * r), 1, 1).data;
        return [d[0], d[1], d[2]];
    }""", [x, y])
    return (int(rgb[0]), int(rgb[1]), int(rgb[2]))


def _shot(view: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    view.page.screenshot(path=str(SHOTS / name))


def _panel_bounds(view: Page) -> dict[str, int]:
    rows = view.page.locator("[data-testid=critical-bound-row]")
    return {str(rows.nth(i).get_attribute("data-bound")): int(str(
        rows.nth(i).get_attribute("data-ns"))) for i in range(rows.count())}


def test_step_overlay_from_the_command_line(browser: Any, served: dict[str, Any]) -> None:
    view = Page(browser, served)
    try:
        c = _critical(view)
        assert c["on"] and c["status"] == "ready", c
        assert c["region"]["kind"] == "step" and c["region"]["step"] == 3
        ref = json.loads(_cli("analyze", "critical_path", str(served["store"]), "--step", "3",
                              "--format", "json", env=served["env"]))
        assert c["total"] == len(ref) and not c["truncated"]
        assert c["bars"] >= 1 and c["boxes"]
        assert view.page.locator("#critical-toggle").is_checked()
        # the panel's breakdown is the CLI's by_bound (non-zero rows)
        table = json.loads(_cli("analyze", "critical_path", str(served["store"]), "--step",
                                "3", "--table", "by_bound", "--format", "json",
                                env=served["env"]))
        want = {r["bound"]: r["ns"] for r in table if r["ns"]}
        assert _panel_bounds(view) == want
        # pixels: the middle of each wide bar has its bound's colour
        wide = [b for b in c["boxes"] if b["x1"] - b["x0"] >= 3]
        assert wide
        for b in wide:
            x, y = (b["x0"] + b["x1"]) / 2, b["y"] + b["h"] / 2
            assert _pixel(view, x, y) == BOUND_RGB[b["bound"]], b
        _shot(view, "step3-on.png")
        # toggled off: nothing drawn, the same pixels lose the bar colour
        view.page.locator("#critical-toggle").uncheck()
        off = _critical(view, want=("off",))
        assert (off["on"], off["bars"], off["outlines"], off["links"]) == (False, 0, 0, 0)
        changed = [b for b in wide if _pixel(view, (b["x0"] + b["x1"]) / 2,
                                             b["y"] + b["h"] / 2) != BOUND_RGB[b["bound"]]]
        assert changed, "the bars are still there with the toggle off"
        assert "cp=" not in view.page.url.partition("#")[2] or _hash_settled(view)
        _shot(view, "step3-off.png")
        view.check_clean()
    finally:
        view.close()


def _hash_settled(view: Page) -> bool:
    time.sleep(0.3)  # writeHash is debounced
    return "cp=" not in view.page.url.partition("#")[2]


def test_toggle_on_a_selection(browser: Any, served: dict[str, Any]) -> None:
    """Opened without the URL's state (no cp: the overlay off); a shift-drag selection,
    then the toggle: the path of the selected window, as `analyze --window @A:@B` finds
    it."""
    view = Page(browser, {**served, "url": served["url"].partition("#")[0]})
    try:
        assert view.state()["critical"]["on"] is False
        y = view.box["y"] + 60
        x0 = view.box["x"] + 190 + 0.05 * (view.box["width"] - 190)
        x1 = view.box["x"] + 190 + 0.25 * (view.box["width"] - 190)
        view.page.keyboard.down("Shift")
        view.page.mouse.move(x0, y)
        view.page.mouse.down()
        view.page.mouse.move(x1, y, steps=10)
        view.page.mouse.up()
        view.page.keyboard.up("Shift")
        view.page.locator("#selection-panel[data-ready='1']").wait_for(timeout=60000)
        a, b = (int(x) for x in view.state()["sel"])
        view.page.locator("#critical-toggle").check()
        c = _critical(view)
        assert c["status"] == "ready" and c["region"]["kind"] == "window"
        assert c["region"]["window"] == [a, b]
        ref = json.loads(_cli("analyze", "critical_path", str(served["store"]), "--window",
                              f"@{a}:@{b}", "--format", "json", env=served["env"]))
        assert c["total"] == len(ref) and ref
        assert c["bars"] >= 1
        # the breakdown section sits in the selection panel beside the other analyses
        panel = view.page.locator("#selection-panel")
        assert panel.locator("[data-testid=selection-critical_path]").count() == 1
        assert panel.locator("[data-testid=selection-breakdown]").count() == 1
        sums: dict[str, int] = {}
        for r in ref:
            sums[r["bound"]] = sums.get(r["bound"], 0) + r["on_path_ns"]
        assert _panel_bounds(view) == {k: v for k, v in sums.items() if v}
        _shot(view, "selection-on.png")
        view.check_clean()
    finally:
        view.close()
