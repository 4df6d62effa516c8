"""Memory counter tracks in the viewer, in headless chromium: h100-planted/leak rank 0
(a real H100 Kineto trace with ``[memory]`` events) ingested and served by
``traceatlas view``. The GPU's memory curves are drawn under the GPU, after its streams
and before the host rows; the CPU's memory curve sits with the host rows.

The expected track names and devices come from ``traceatlas sql`` on the store.
TRACEATLAS_VIEW_SHOTS=<dir> keeps the screenshot.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces"
LEAK = TRACES / "h100-planted" / "leak" / "rank-0.json.gz"
CLI = str(Path(sys.executable).parent / "traceatlas")


def _cli(*args: str, env: dict[str, str]) -> str:
    res = subprocess.run([CLI, *args], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    return res.stdout


def _url(proc: subprocess.Popen[str]) -> str:
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in proc.stdout or []:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            line = lines.get(timeout=0.5).strip()
        except queue.Empty:
            continue
        if line.startswith("http://"):
            return line
    pytest.fail("traceatlas view did not print its URL")


def _settle(page: Any) -> dict[str, Any]:
    deadline, calm = time.monotonic() + 30, 0
    while time.monotonic() < deadline:
        st: dict[str, Any] = page.evaluate("() => window.__traceatlas")
        calm = calm + 1 if st and st.get("ready") and st.get("pending") == 0 else 0
        if calm >= 3:
            return st
        time.sleep(0.1)
    raise AssertionError("the page did not settle")


@pytest.mark.realtrace
def test_memory_tracks_sit_under_their_device(browser: Any, tmp_path: Path) -> None:
    if not LEAK.is_file():
        pytest.skip(f"{LEAK} missing")
    env = dict(os.environ, TRACEATLAS_CACHE_DIR=str(tmp_path / "cache"), NO_COLOR="1")
    store = tmp_path / "leak.store"
    _cli("ingest", str(LEAK), "-o", str(store), env=env)
    tracks = json.loads(_cli("sql", str(store), "SELECT name, device FROM tracks WHERE "
                             "kind = 'counter' ORDER BY name", "--format", "json", env=env))
    assert tracks == [
        {"name": "CPU memory allocated", "device": -1},
        {"name": "CPU memory reserved", "device": -1},
        {"name": "GPU 0 memory allocated", "device": 0},
        {"name": "GPU 0 memory reserved", "device": 0},
    ]
    proc = subprocess.Popen([CLI, "view", str(store), "--no-browser", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 860})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(_url(proc), wait_until="load")
        st = _settle(page)
        rows = [r.strip() for r in st["rows"]]
        if not any(r.startswith("GPU 0 memory") for r in rows):  # collapsed: open rank 0
            box = page.locator("#timeline").bounding_box()
            page.mouse.click(box["x"] + 40, box["y"] + 22 + 8)
            st = _settle(page)
            rows = [r.strip() for r in st["rows"]]
        streams = [i for i, r in enumerate(rows) if r.startswith("stream ")]
        gpu = [rows.index("GPU 0 memory allocated"), rows.index("GPU 0 memory reserved")]
        cpu = rows.index("CPU memory allocated")
        host = [i for i, r in enumerate(rows) if r.split("/")[0].isdigit() or "thread" in r]
        assert streams and max(streams) < min(gpu), rows
        assert max(gpu) < cpu, rows
        assert not host or cpu < min(host), rows
        shot = tmp_path / "view-memory.png"
        page.screenshot(path=str(shot))
        keep = os.environ.get("TRACEATLAS_VIEW_SHOTS")
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            shutil.copy(shot, Path(keep) / shot.name)
        assert errors == []
        page.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
