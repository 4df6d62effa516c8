"""The trace viewer in a real browser: `traceatlas view STORE --no-browser --port 0` serves
h100-planted/imbalance (4 ranks, H100 Kineto traces from ../shared/traces), headless
chromium opens it and the tests drive it with the mouse like a person would.

References are independent of the viewer: kernel names and times come from `traceatlas sql`
on the window the page shows, the selection's breakdown from `traceatlas analyze breakdown
--window @A:@B --format json`. Every test also checks that the page logged no console
error, raised nothing, and requested nothing outside the server's origin.

Set TRACEATLAS_VIEW_SHOTS=<dir> to keep the screenshots (docs/img/view-*.png come from it).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces"
IMBALANCE = TRACES / "h100-planted" / "imbalance"
CLI = str(Path(sys.executable).parent / "traceatlas")
VIEWPORT = {"width": 1400, "height": 860}


def _cli(*args: str, env: dict[str, str]) -> str:
    res = subprocess.run([CLI, *args], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    return res.stdout


@contextlib.contextmanager
def _viewer(store: Path, env: dict[str, str], *extra: str) -> Iterator[dict[str, Any]]:
    """`traceatlas view STORE --no-browser --port 0 [extra]` running; its URL and origin."""
    proc = subprocess.Popen([CLI, "view", str(store), "--no-browser", "--port", "0", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in proc.stdout or []:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    url = None
    deadline = time.monotonic() + 240
    while url is None and time.monotonic() < deadline and proc.poll() is None:
        try:
            line = lines.get(timeout=0.5).strip()
        except queue.Empty:
            continue
        if line.startswith("http://"):
            url = line
    try:
        if url is None:
            err = proc.stderr.read() if proc.poll() is not None and proc.stderr else ""
            pytest.fail(f"traceatlas view did not print its URL: {err[-2000:]}")
        yield {"url": url, "origin": "/".join(url.split("/", 3)[:3]), "store": store,
               "env": env}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def server(imbalance_store: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """h100-planted/imbalance (conftest ``imbalance_store``) served by `traceatlas view`."""
    with _viewer(imbalance_store["store"], imbalance_store["env"]) as srv:
        yield srv


@pytest.fixture(scope="module")
def server_1024(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A synthetic 1,024-rank MPI run (testing.mpi, Paraver text) served by `view`."""
    from traceatlas.testing.mpi import write_mpi_trace

    root = tmp_path_factory.mktemp("view1024")
    env = dict(os.environ, TRACEATLAS_CACHE_DIR=str(root / "cache"), NO_COLOR="1")
    trace = write_mpi_trace(root / "mpi.prv", ranks=1024, iterations=8, imbalance=0.5,
                            heavy_ranks=range(0, 1024, 2))
    store = root / "mpi.store"
    _cli("ingest", str(trace.path), "-o", str(store), env=env)
    with _viewer(store, env) as srv:
        yield srv


class Page:
    """A page on the viewer plus what it logged and requested."""

    def __init__(self, browser: Any, srv: dict[str, Any], fragment: str = "") -> None:
        self.page = browser.new_page(viewport=VIEWPORT)
        self.srv = srv
        self.console: list[tuple[str, str]] = []
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.console.append((m.type, m.text)))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.goto(srv["url"] + fragment, wait_until="load")
        self.settle()
        box = self.page.locator("#timeline").bounding_box()
        assert box is not None
        self.box = box

    def state(self) -> dict[str, Any]:
        st: dict[str, Any] = self.page.evaluate("() => window.__traceatlas")
        return st

    def settle(self, timeout: float = 30.0) -> dict[str, Any]:
        """Wait until the page has drawn and has no request in flight (polled from Python:
        the page's CSP forbids the eval behind Playwright's wait_for_function)."""
        deadline = time.monotonic() + timeout
        calm = 0
        while time.monotonic() < deadline:
            st = self.state()
            calm = calm + 1 if st and st.get("ready") and st.get("pending") == 0 else 0
            if calm >= 3:
                return st
            time.sleep(0.1)
        raise AssertionError(f"the page did not settle: {self.state()}")

    def x_of(self, t_ns: int, st: dict[str, Any]) -> float:
        """Page x of absolute time ``t_ns`` in the window ``st`` shows."""
        start, end = int(st["start_ns"]), int(st["end_ns"])
        label_w = 190  # render.js LABEL_W
        plot_w = self.box["width"] - label_w
        return float(self.box["x"] + label_w + (t_ns - start) / (end - start) * plot_w)

    def check_clean(self) -> None:
        assert self.errors == []
        assert [m for m in self.console if m[0] == "error"] == []
        assert self.requests, "no request seen"
        outside = [u for u in self.requests if not u.startswith(self.srv["origin"] + "/")]
        assert outside == []
        assert self.state()["lastError"] is None

    def close(self) -> None:
        self.page.close()


@pytest.fixture()
def view(browser: Any, server: dict[str, Any]) -> Iterator[Page]:
    p = Page(browser, server)
    yield p
    p.close()


def _api(view: Page, path: str) -> Any:
    return json.loads(view.page.evaluate("async (p) => (await fetch(p)).text()", path))


def _tracks(view: Page) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = _api(view, "/api/tracks")
    return out


def _canvas_ink(view: Page) -> int:
    """Pixels of the timeline canvas that differ from its background colour."""
    n: int = view.page.evaluate("""() => {
        const c = document.getElementById('timeline');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        const bg = [d[0], d[1], d[2]];
        let n = 0;
        for (let i = 0; i < d.length; i += 4) {
            const diff = Math.abs(d[i] - bg[0]) + Math.abs(d[i + 1] - bg[1])
                + Math.abs(d[i + 2] - bg[2]);
            if (diff > 30) n++;
        }
        return n;
    }""")
    return n


def _canvas_hash(view: Page) -> int:
    """A cheap hash of the timeline canvas pixels."""
    h: int = view.page.evaluate("""() => {
        const c = document.getElementById('timeline');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let h = 0;
        for (let i = 0; i < d.length; i += 7) h = (Math.imul(h, 31) + d[i]) | 0;
        return h;
    }""")
    return h


def _shot(view: Page, name: str, tmp: Path) -> Path:
    out = tmp / name
    view.page.screenshot(path=str(out))
    keep = os.environ.get("TRACEATLAS_VIEW_SHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(out, Path(keep) / name)
    return out


def _zoom_onto(view: Page, t_ns: int, y: float, until: Any, max_steps: int = 40) -> dict[str, Any]:
    """Wheel-zoom at the page x of ``t_ns`` (re-aimed after each step) until ``until(state)``."""
    st = view.settle()
    for _ in range(max_steps):
        if until(st):
            return st
        view.page.mouse.move(view.x_of(t_ns, st), y)
        view.page.mouse.wheel(0, -300)
        st = view.settle()
    raise AssertionError(f"zoom did not reach the condition: level {st['level']}")


@pytest.mark.realtrace
def test_overview_draws_every_rank(view: Page, tmp_path: Path) -> None:
    st = view.state()
    ranks = sorted({t["rank"] for t in _tracks(view)})
    assert ranks == [0, 1, 2, 3]
    assert [f"rank {r}" for r in ranks] == [x for x in st["rows"] if x.startswith("rank ")]
    # every rank's summary rows are visible and were fetched as pyramid bins, not events
    assert st["mode"] == "lanes" and st["drawn"] == []
    assert _canvas_ink(view) > 20_000  # a blank canvas has 0
    shot = _shot(view, "view-overview.png", tmp_path)
    assert shot.stat().st_size > 10_000
    assert view.page.locator("#minimap").is_visible()
    view.check_clean()


@pytest.mark.realtrace
def test_wheel_zoom_and_drag_pan(view: Page) -> None:
    st0 = view.state()
    s0, e0 = int(st0["start_ns"]), int(st0["end_ns"])
    cx = view.box["x"] + 190 + (view.box["width"] - 190) / 2
    cy = view.box["y"] + 100
    view.page.mouse.move(cx, cy)
    view.page.mouse.wheel(0, -400)
    st1 = view.settle()
    s1, e1 = int(st1["start_ns"]), int(st1["end_ns"])
    assert e1 - s1 < (e0 - s0) * 0.7 and s1 > s0 and e1 < e0  # zoomed in, around the cursor
    # drag to the left by 200 px: the window moves later by 200 px worth of time
    view.page.mouse.move(cx, cy)
    view.page.mouse.down()
    view.page.mouse.move(cx - 200, cy, steps=8)
    view.page.mouse.up()
    st2 = view.settle()
    s2, e2 = int(st2["start_ns"]), int(st2["end_ns"])
    shift = 200 / (view.box["width"] - 190) * (e1 - s1)
    assert e2 - s2 == e1 - s1
    assert abs((s2 - s1) - shift) < 0.02 * (e1 - s1)
    # keys: W zooms in at the centre, A pans left
    view.page.keyboard.press("w")
    st3 = view.settle()
    assert int(st3["end_ns"]) - int(st3["start_ns"]) < e2 - s2
    view.page.keyboard.press("a")
    st4 = view.settle()
    assert int(st4["start_ns"]) < int(st3["start_ns"])
    assert "#start=" in view.page.url and st4["start_ns"] in view.page.url
    view.check_clean()


def _sql(srv: dict[str, Any], query: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = json.loads(_cli("sql", str(srv["store"]), query, "--format", "json",
                                                env=srv["env"]))
    return out


@pytest.mark.realtrace
def test_deep_zoom_shows_the_kernels_sql_finds(view: Page, server: dict[str, Any],
                                               tmp_path: Path) -> None:
    tracks = {t["id"]: t for t in _tracks(view)}
    streams = {i for i, t in tracks.items() if t["rank"] == 0 and t["kind"] == "gpu_stream"}
    # a kernel in the middle of the run on rank 0 (chosen by SQL, not by the page)
    target = _sql(server, "SELECT start_ns, end_ns FROM intervals WHERE rank = 0 AND "
                          "category = 'kernel' ORDER BY start_ns")
    mid = target[len(target) // 2]
    t_mid = (int(mid["start_ns"]) + int(mid["end_ns"])) // 2
    # expand rank 0 from its label, then zoom on the kernel until its lanes show raw events
    st = view.state()
    view.page.mouse.click(view.box["x"] + 40, view.box["y"] + 22 + 8)
    st = view.settle()
    assert "stream 7" in st["rows"]
    y = view.box["y"] + 22 + 30  # the first stream lane
    # every visible stream lane finer than its pyramid: raw events (contract: raw = level
    # below the track's finest stored level)
    st = _zoom_onto(view, t_mid, y, lambda s: s["level"] < min(
        tracks[i]["finest_level"] for i in s["visible_tracks"] if i in streams))
    start, end = int(st["start_ns"]), int(st["end_ns"])
    shown = {tracks[d["track"]]["track_id"] for d in st["drawn"]} & {
        tracks[i]["track_id"] for i in streams}
    visible = sorted(tracks[i]["track_id"] for i in st["visible_tracks"] if i in streams)
    assert visible, st["rows"]
    drawn = {(tracks[d["track"]]["track_id"], d["name"], int(d["start_ns"]), int(d["end_ns"]))
             for d in st["drawn"] if d["track"] in streams}
    ids = ",".join(str(v) for v in visible)
    ref = _sql(server, "SELECT track_id, name, start_ns, end_ns, category, depth FROM intervals "
                       f"WHERE rank = 0 AND track_id IN ({ids}) AND start_ns <= {end} "
                       f"AND end_ns >= {start}")
    expected = {(r["track_id"], r["name"], int(r["start_ns"]), int(r["end_ns"])) for r in ref}
    assert any(r["category"] == "kernel" for r in ref)
    assert shown and drawn == expected
    _shot(view, "view-zoomed.png", tmp_path)

    # hover the widest kernel drawn that runs inside a GPU annotation (depth > 0): the
    # tooltip names it and what encloses it
    kernels = {(r["name"], int(r["start_ns"])) for r in ref
               if r["category"] == "kernel" and r["depth"] > 0}
    boxes = [d for d in st["drawn"] if d["track"] in streams
             and (d["name"], int(d["start_ns"])) in kernels]
    assert boxes, "no nested kernel drawn in the window"
    best = max(boxes, key=lambda d: d["w"])
    view.page.mouse.move(view.box["x"] + best["x"] + best["w"] / 2,
                         view.box["y"] + best["y"] + best["h"] / 2)
    tip = view.page.locator("#tooltip")
    tip.wait_for(state="visible", timeout=5000)
    lines = tip.inner_text().splitlines()
    assert lines[0] == best["name"]
    # the tooltip's "in:" line names the events enclosing it on its lane (SQL: shallower
    # intervals of the same track covering it), outermost first
    tid = tracks[best["track"]]["track_id"]
    b0, b1 = int(best["start_ns"]), int(best["end_ns"])
    depth = _sql(server, f"SELECT depth FROM intervals WHERE rank = 0 AND track_id = {tid} "
                         f"AND start_ns = {b0} AND end_ns = {b1}")[0]["depth"]
    outer = _sql(server, f"SELECT name FROM intervals WHERE rank = 0 AND track_id = {tid} AND "
                         f"depth < {depth} AND start_ns <= {b0} AND end_ns >= {b1} "
                         "ORDER BY depth")
    inside = [x[4:] for x in lines if x.startswith("in: ")]
    assert outer and inside == [" \u203a ".join(r["name"] for r in outer)]

    # colour modes redraw the same events differently, without errors
    hashes = {"start": _canvas_hash(view)}
    for mode in ("name", "busy", "category"):
        view.page.select_option("#color-mode", mode)
        view.settle()
        hashes[mode] = _canvas_hash(view)
    assert hashes["name"] != hashes["start"] and hashes["busy"] != hashes["start"]
    assert hashes["category"] == hashes["start"]  # back to the same picture

    # click it: the details panel shows the same event and its launch chain
    view.page.mouse.click(view.box["x"] + best["x"] + best["w"] / 2,
                          view.box["y"] + best["y"] + best["h"] / 2)
    name = view.page.locator("#details-name")
    name.wait_for(state="visible", timeout=10000)
    assert name.inner_text() == best["name"]
    chain = view.page.locator("[data-testid=details-chain] li")
    chain.first.wait_for(timeout=10000)
    assert any("launch" in chain.nth(i).inner_text() for i in range(chain.count()))
    view.check_clean()


@pytest.mark.realtrace
def test_selection_breakdown_equals_the_cli(view: Page, server: dict[str, Any]) -> None:
    y = view.box["y"] + 60
    x0 = view.box["x"] + 190 + 0.30 * (view.box["width"] - 190)
    x1 = view.box["x"] + 190 + 0.45 * (view.box["width"] - 190)
    view.page.keyboard.down("Shift")
    view.page.mouse.move(x0, y)
    view.page.mouse.down()
    view.page.mouse.move(x1, y, steps=10)
    view.page.mouse.up()
    view.page.keyboard.up("Shift")
    panel = view.page.locator("#selection-panel")
    panel.wait_for(state="visible")
    view.page.locator("#selection-panel[data-ready='1']").wait_for(timeout=60000)
    a, b = (int(x) for x in view.state()["sel"])
    assert b - a > 0
    ref = json.loads(_cli("analyze", "breakdown", str(server["store"]), "--window",
                          f"@{a}:@{b}", "--format", "json", env=server["env"]))
    assert ref, "the reference breakdown is empty"
    cells = view.page.locator("[data-testid=breakdown-cell]")
    got: dict[int, dict[str, str]] = {}
    for i in range(cells.count()):
        c = cells.nth(i)
        got.setdefault(int(c.get_attribute("data-row") or -1), {})[
            c.get_attribute("data-col") or ""] = c.get_attribute("data-value") or ""
    assert len(got) == len(ref)
    for i, row in enumerate(ref):
        assert set(got[i]) == set(row)
        for col, value in row.items():
            shown = got[i][col]
            if value is None:
                assert shown == ""
            elif isinstance(value, (int, float)):
                assert float(shown) == float(value), (col, shown, value)
            else:
                assert shown == str(value)
    assert "sel=" in view.page.url
    view.check_clean()


@pytest.mark.realtrace
def test_search_steps_through_occurrences(view: Page, server: dict[str, Any]) -> None:
    ref = _sql(server, "SELECT count(*) AS n FROM intervals WHERE name ILIKE '%gelubackward%'")
    n = int(ref[0]["n"])
    assert n > 1
    view.page.fill("#search-input", "GeluBackward")
    view.page.press("#search-input", "Enter")
    status = view.page.locator("#search-status")
    view.page.wait_for_timeout(200)
    st1 = view.settle()
    assert status.inner_text().startswith("1 / ")
    assert status.inner_text().split(" / ")[1].split("+")[0] == str(n)
    view.page.click("#search-next")
    st2 = view.settle()
    assert status.inner_text().startswith("2 / ")
    assert st2["start_ns"] != st1["start_ns"]
    assert any("GeluBackward" in d["name"] for d in st2["drawn"])
    view.page.click("#search-prev")
    view.settle()
    assert status.inner_text().startswith("1 / ")
    view.check_clean()


@pytest.mark.realtrace
def test_dark_theme_and_shared_url(browser: Any, server: dict[str, Any], tmp_path: Path) -> None:
    p = Page(browser, server)
    try:
        p.page.click("#theme-toggle")
        p.settle()
        assert p.page.evaluate("() => document.documentElement.dataset.theme") == "dark"
        p.page.mouse.move(p.box["x"] + 700, p.box["y"] + 100)
        p.page.mouse.wheel(0, -600)
        st = p.settle()
        _shot(p, "view-dark.png", tmp_path)
        url = p.page.url
        assert "theme=dark" in url
        p.check_clean()
    finally:
        p.close()
    # the link opens the same window in the same theme
    q = Page(browser, server, "#" + url.split("#", 1)[1])
    try:
        st2 = q.settle()
        assert (st2["start_ns"], st2["end_ns"]) == (st["start_ns"], st["end_ns"])
        assert q.page.evaluate("() => document.documentElement.dataset.theme") == "dark"
        q.check_clean()
    finally:
        q.close()


def test_1024_ranks_group_then_split_to_single_ranks(browser: Any,
                                                    server_1024: dict[str, Any]) -> None:
    """More ranks than rows: rank groups covering every rank once, drawn; ctrl+wheel on the
    rank axis splits them down to single ranks (then lanes)."""
    p = Page(browser, server_1024)
    try:
        st = p.state()
        assert st["mode"] == "groups"
        spans = [tuple(int(x) for x in r.split(" ")[1].split("-")) for r in st["rows"]]
        assert len(spans) >= 30
        assert spans[0][0] == 0 and spans[-1][-1] == 1023
        covered = [r for span in spans for r in range(span[0], span[-1] + 1)]
        assert covered == list(range(1024))  # every rank once, in order
        assert _canvas_ink(p) > 20_000
        y = p.box["y"] + 22 + 0.5 * (p.box["height"] - 22)
        p.page.mouse.move(p.box["x"] + 600, y)
        p.page.keyboard.down("Control")
        for _ in range(40):
            p.page.mouse.wheel(0, -200)
            st = p.settle()
            if st["mode"] == "lanes":
                break
        p.page.keyboard.up("Control")
        assert st["mode"] == "lanes"
        ranks = [int(r.split(" ")[1]) for r in st["rows"] if r.startswith("rank ")]
        assert 1 <= len(ranks) <= 40 and ranks == list(range(ranks[0], ranks[0] + len(ranks)))
        assert 300 < ranks[0] < 700  # zoomed where the cursor was (the middle of the axis)
        assert "ranks=" in p.page.url
        assert _canvas_ink(p) > 5_000
        p.check_clean()
    finally:
        p.close()


@pytest.mark.realtrace
def test_js_level_choice_and_exact_times_agree_with_python(view: Page) -> None:
    """The page's level_for (tiles.js) equals view/levels.py's on edge and random cases;
    its JSON parser keeps epoch ns beyond 2**53 exact (a plain JSON.parse would not)."""
    import random

    from traceatlas.view import levels

    rng = random.Random(10)
    cases = [(levels.bin_ns(lv) * px + d, px) for lv in range(0, 12) for px in (1, 835, 1920)
             for d in (-1, 0, 1)]
    cases += [(rng.randrange(1, 10**13), rng.randrange(1, 4000)) for _ in range(2000)]
    got = view.page.evaluate(
        """async (cases) => {
            const m = await import('/static/tiles.js');
            return cases.map(([w, px]) => m.levelFor(w, px));
        }""", cases)
    assert got == [levels.level_for(w, px) for w, px in cases]
    big = [1795540774877517813, 1795540774877517814, 2**63 - 1, -(2**62) - 3, 2**53 + 1]
    text = json.dumps({"start_ns": big, "small": [1, 2.5]})
    parsed = view.page.evaluate(
        """async (text) => {
            const m = await import('/static/api.js');
            const r = m.parseJSON(text);
            return {big: r.start_ns.map((x) => typeof x === 'bigint' ? x.toString() : 'lost'),
                    small: r.small};
        }""", text)
    assert parsed == {"big": [str(b) for b in big], "small": [1, 2.5]}
    assert str(big[0]) != view.page.evaluate("(t) => String(JSON.parse(t)[0])", json.dumps(big))


@pytest.mark.realtrace
def test_token_page_sends_it_on_every_request(browser: Any, server: dict[str, Any]) -> None:
    """With --token the printed URL carries ?token=; the page loads (its static files via
    the cookie the server sets) and sends `Authorization: Bearer` on every API call; the
    same page without the token gets 401 and no data."""
    token = "t0k-" + "x" * 20
    with _viewer(server["store"], server["env"], "--token", token) as srv:
        assert srv["url"].endswith(f"/?token={token}")
        p = Page(browser, srv)
        try:
            auth: dict[str, str | None] = {}
            p.page.on("request", lambda r: auth.__setitem__(r.url, r.headers.get("authorization")))
            p.page.mouse.move(p.box["x"] + 600, p.box["y"] + 100)
            p.page.mouse.wheel(0, -300)
            p.settle()
            api = {u: a for u, a in auth.items() if "/api/" in u}
            assert api and set(api.values()) == {f"Bearer {token}"}
            assert _canvas_ink(p) > 20_000
            p.check_clean()
        finally:
            p.close()
        bare = browser.new_page()
        try:
            resp = bare.goto(srv["origin"] + "/")
            assert resp is not None and resp.status == 401
            assert "missing or wrong token" in bare.content()
        finally:
            bare.close()


@pytest.mark.realtrace
def test_json_fallback_without_source_text_keeps_int64_exact(view: Page) -> None:
    """parseJSON's path for browsers without JSON.parse source text (forced here): integer
    literals of 16+ digits come back as exact BigInts, digits inside strings (values and
    keys, with escaped quotes) are left alone, a string that starts with NUL stays itself."""
    extremes = [2**63 - 1, -(2**63), 1795540774877517813, -(10**15) * 9 - 7, 2**53 + 1]
    doc = {"start_ns": extremes, "safe": [9007199254740991, 10**15, -12, 0, 2.5, 1e300],
           "name": 'kernel<1234567890123456789>("x", 9223372036854775807)',
           'k"9223372036854775807': "q\\\"1234567890123456789\"",
           "nul": "\u00001234567890123456789", "nul2": "\u0000\u0000x", "1234567890123456789": 7}
    text = json.dumps(doc, separators=(", ", " : "))  # spaces around ':' and ','
    got = view.page.evaluate(
        """async (text) => {
            const m = await import('/static/api.js');
            const out = {};
            for (const force of [true, false]) {
                const r = m.parseJSON(text, force);
                out[force ? 'fallback' : 'native'] = JSON.stringify(r,
                    (k, x) => (typeof x === 'bigint' ? 'big:' + x.toString() : x));
            }
            return out;
        }""", text)

    def tag(x: Any) -> Any:  # the expected value with each unsafe integer marked as BigInt
        if isinstance(x, bool) or not isinstance(x, int):
            return {k: tag(v) for k, v in x.items()} if isinstance(x, dict) else (
                [tag(v) for v in x] if isinstance(x, list) else x)
        return f"big:{x}" if abs(x) > 2**53 - 1 else x

    expected = tag(doc)
    assert expected["start_ns"][0] == "big:9223372036854775807"
    assert expected["safe"][0] == 9007199254740991  # a 16-digit safe integer stays a Number
    assert json.loads(got["fallback"]) == expected
    assert json.loads(got["native"]) == expected


@pytest.mark.realtrace
def test_short_display_names(view: Page) -> None:
    """Lane boxes and labels show C++ signatures without return type, template arguments
    and parameters (last 2 namespaces + name); other names are unchanged."""
    cases = {
        "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float, "
        "at::native::(anonymous namespace)::SoftMaxBackwardEpilogue>(float*, float const*, "
        "float const*, long)": "at::native::cunn_SoftMaxBackward",
        "void at::native::vectorized_elementwise_kernel<4, at::native::GeluBackwardCUDAKernelImpl"
        "(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::"
        "{lambda(float, float)#1}, std::array<char*, 3ul> >(int, std::array<char*, 3ul>)":
            "at::native::vectorized_elementwise_kernel",
        "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align1>"
        "(cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align1::Params)": "cutlass::Kernel2",
        "a::b::c::d::e(int)": "c::d::e",
        "aten::copy_": "aten::copy_",
        "Memcpy DtoH (Device -> Pinned)": "Memcpy DtoH (Device -> Pinned)",
        "ProfilerStep#4": "ProfilerStep#4",
        "stream 7": "stream 7",
    }
    got = view.page.evaluate(
        """async (names) => {
            const m = await import('/static/render.js');
            return names.map((n) => m.shortName(n));
        }""", list(cases))
    assert got == list(cases.values())


@pytest.mark.realtrace
def test_bins_wider_than_a_chunk_are_kept_in_every_chunk(view: Page) -> None:
    """A raw track asked at level 0 is answered at its coarser finest level, bins wider than
    a 512-bin chunk of level 0: the page's tile cache holds each bin in every chunk it
    overlaps (expected from /api/tiles, split by hand)."""
    tracks = _tracks(view)
    track = max((t for t in tracks if t["kind"] == "gpu_stream"), key=lambda t: t["finest_level"])
    assert track["finest_level"] >= 6  # bins of >= 4**6 level-0 bins: several chunks
    meta = _api(view, "/api/meta")
    origin = int(meta["origin_ns"])
    chunk = 512 * 1024  # tiles.js CHUNK bins of level 0
    wide = 1024 * 4 ** track["finest_level"]
    # a window of chunks around the middle of one of its bins that holds events
    first = _api(view, f"/api/tiles?level={track['finest_level']}&start_ns={origin}&end_ns="
                       f"{int(meta['end_ns'])}&tracks={track['id']}")["tracks"][0]
    mid = int(first["bin"][0]) * wide + wide // 2
    c0, c1 = mid // chunk - 3, mid // chunk + 3
    got = view.page.evaluate(
        """async ([id, c0, c1]) => {
            const t = await import('/static/tiles.js');
            const api = await import('/static/api.js');
            const meta = api.parseJSON(await (await fetch('api/meta')).text());
            const tracks = api.parseJSON(await (await fetch('api/tracks')).text());
            const byId = new Map(tracks.map((x) => [Number(x.id), x]));
            let done, fail;
            const p = new Promise((res, rej) => { done = res; fail = rej; });
            const ds = new t.DataStore(meta, byId, () => done(), (e) => fail(e));
            ds.fetchTiles('tiles', 0, [id], c0, c1);
            await p;
            const out = {};
            for (let c = c0; c <= c1; c++) {
                const got = ds.tiles.get(ds.key('tiles', 0, id, c));
                out[c] = [...got.start].map((s, i) => [s, got.binNs, got.cat[i]]);
            }
            return out;
        }""", [track["id"], c0, c1])
    ref = _api(view, f"/api/tiles?level=0&start_ns={origin + c0 * chunk}&end_ns="
                     f"{origin + (c1 + 1) * chunk}&tracks={track['id']}")["tracks"][0]
    bn = int(ref["bin_ns"])
    assert bn == wide and bn > chunk
    rows = [(int(b) * bn, int(c)) for b, c in zip(ref["bin"], ref["cat"], strict=True)]
    assert rows
    for c in range(c0, c1 + 1):
        expected = sorted((s, bn, cat) for s, cat in rows
                          if s < (c + 1) * chunk and s + bn > c * chunk)
        assert sorted((int(s), int(b), int(k)) for s, b, k in got[str(c)]) == expected, c
    assert all(got[str(c)] for c in range(c0, c1 + 1))  # the wide bin is in all of them
    view.check_clean()


@pytest.mark.realtrace
def test_quiet_streams_fold_into_one_line_busiest_first(view: Page, server: dict[str, Any]) -> None:
    """Rank 0 expanded: its GPU streams come busiest first (events, from SQL), the streams
    of at most 16 events fold into one "N quiet streams" line that a click opens."""
    tracks = {t["id"]: t for t in _tracks(view)}
    counts = _sql(server, "SELECT t.track_id, t.name, count(i.start_ns) AS n FROM tracks t "
                          "LEFT JOIN intervals i ON i.rank = t.rank AND i.track_id = t.track_id "
                          "WHERE t.rank = 0 AND t.kind = 'gpu_stream' GROUP BY ALL")
    stream = {t["track_id"]: t["stream"] for t in tracks.values() if t["rank"] == 0}
    counts.sort(key=lambda r: (-r["n"], stream[r["track_id"]]))  # busiest first, then stream
    busy = [r for r in counts if r["n"] > 16]
    quiet = [r for r in counts if r["n"] <= 16]
    assert len(quiet) >= 2 and busy
    view.page.mouse.click(view.box["x"] + 40, view.box["y"] + 22 + 8)
    st = view.settle()
    streams = [r for r in st["rows"] if r.startswith("stream ")]
    assert streams == [r["name"] for r in busy]
    line = [r for r in st["rows"] if "quiet streams" in r]
    most = max(r["n"] for r in quiet)
    assert line == [f"▸ {len(quiet)} quiet streams (≤{most} events)"]
    # click the line: the quiet streams show, most events first
    idx = st["rows"].index(line[0])
    y0 = 22 + sum(_row_heights(view)[:idx]) + 4
    view.page.mouse.click(view.box["x"] + 40, view.box["y"] + y0)
    st = view.settle()
    shown = [r for r in st["rows"] if r.startswith("stream ")]
    assert len(shown) > len(streams)
    assert st["rows"][idx].startswith("▾ ")
    opened = [tracks[i]["name"] for i in st["visible_tracks"]
              if tracks[i]["kind"] == "gpu_stream" and tracks[i]["events"] <= 16]
    assert opened and opened == [r["name"] for r in quiet][:len(opened)]
    view.check_clean()


def _row_heights(view: Page) -> list[float]:
    """Heights (CSS px) of the rows the page lays out, from its hit rows."""
    out: list[float] = view.page.evaluate("() => window.__traceatlas.row_h")
    return out


@pytest.mark.realtrace
def test_short_selection_breakdown_stays_inside_it(browser: Any, server: dict[str, Any],
                                                   tmp_path: Path) -> None:
    """A link to rank 0, 800 us of the run with a ~400 us selection: the page opens there
    with the selection's breakdown, whose times (intervals cut to the window) all fit in
    the window and equal `analyze breakdown --window`'s (screenshot view-selection.png)."""
    probe = Page(browser, server)
    try:
        origin = int(_api(probe, "/api/meta")["start_ns"])
    finally:
        probe.close()
    start, end = origin + 221_300_000, origin + 222_100_000
    a, b = origin + 221_400_000, origin + 221_802_000
    p = Page(browser, server, f"#start={start}&end={end}&ranks=0-0&sel={a}:{b}")
    try:
        p.page.locator("#selection-panel[data-ready='1']").wait_for(timeout=60000)
        st = p.settle()
        assert (int(st["start_ns"]), int(st["end_ns"])) == (start, end)
        assert st["sel"] == [str(a), str(b)]
        assert st["drawn"]  # rank 0 expanded, raw events at this zoom
        ref = json.loads(_cli("analyze", "breakdown", str(server["store"]), "--window",
                              f"@{a}:@{b}", "--ranks", "0", "--format", "json",
                              env=server["env"]))
        assert ref
        cells = p.page.locator("[data-testid=breakdown-cell]")
        got = {cells.nth(i).get_attribute("data-col"): cells.nth(i).get_attribute("data-value")
               for i in range(cells.count())}
        ns_cols = [c for c in ref[0] if c.endswith("_ns")]
        assert "span_ns" in ns_cols and "busy_ns" in ns_cols
        for col in ns_cols:
            assert float(got[col] or "nan") == float(ref[0][col]), col
            assert 0 <= ref[0][col] <= b - a, col
        _shot(p, "view-selection.png", tmp_path)
        p.check_clean()
    finally:
        p.close()
