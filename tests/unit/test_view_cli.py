"""``traceatlas view`` as a user runs it: a real server process on a free port, the URL
it prints, the token off loopback, a clean Ctrl-C, and bad input as one line, exit 2."""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from test_view_server import BASE, build_store, intervals

from traceatlas.testing.compare import plain_union_length

EXE = Path(sys.executable).parent / "traceatlas"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("cli"))


def _start(*args: str) -> tuple[subprocess.Popen[str], str]:
    """Start ``traceatlas view ARGS`` and return it with the URL it prints (stdout)."""
    proc = subprocess.Popen([str(EXE), "view", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if sel.select(timeout=0.5):
            line = proc.stdout.readline()
            if line.startswith("http://"):
                return proc, line.strip()
            if not line:
                break
    proc.kill()
    _, err = proc.communicate()
    raise AssertionError(f"no URL printed; stderr: {err}")


def _stop(proc: subprocess.Popen[str]) -> str:
    """Ctrl-C: the process ends with 0 or 130 and no traceback; its stderr."""
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode in (0, 130), err
    assert "Traceback" not in err
    return err


def _base(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def test_serves_meta_on_a_free_port(store: Path) -> None:
    proc, url = _start(str(store), "--no-browser", "--port", "0", "--window",
                       "10us:20us", "--ranks", "1")
    try:
        parts = urlsplit(url)
        assert parts.hostname == "127.0.0.1" and parts.port not in (None, 0, 8765)
        assert parts.query == ""  # no token on loopback
        state = parse_qs(parts.fragment)
        # The window is relative to the trace start (BASE: rank 0's step starts there).
        assert state == {"start": [str(BASE + 10_000)], "end": [str(BASE + 20_000)],
                         "ranks": ["1-1"]}
        meta = httpx.get(_base(url) + "/api/meta", timeout=30).json()
        assert meta["ranks"] == [0, 1] and meta["source_format"] == "kineto"
        tracks = httpx.get(_base(url) + "/api/tracks", timeout=30).json()
        assert {t["rank"] for t in tracks} == {0, 1}
        _check_tiles_cover_the_union(store, _base(url), meta, tracks)
    finally:
        err = _stop(proc)
    assert "serving" in err


def _check_tiles_cover_the_union(store: Path, base: str, meta: dict[str, Any],
                                 tracks: list[dict[str, Any]]) -> None:
    """Through the real pyramid: at the top level, each store track's busy_ns summed over
    bins and categories is the union of its intervals (plain loop over pyarrow rows)."""
    top = meta["levels"][-1]["level"]
    ids = [t["id"] for t in tracks if t["track_id"] is not None and t["kind"] != "counter"]
    body = httpx.get(base + "/api/tiles", timeout=30, params={
        "level": top, "start_ns": meta["start_ns"], "end_ns": meta["end_ns"],
        "tracks": ",".join(map(str, ids))}).json()
    rows = intervals(store)
    for got in body["tracks"]:
        info = tracks[got["id"]]
        spans = [(r["start_ns"], r["end_ns"]) for r in rows
                 if (r["rank"], r["track_id"]) == (info["rank"], info["track_id"])]
        assert got["raw"] is False and sum(got["busy_ns"]) == plain_union_length(spans), info
        assert sum(got["count"]) == len(spans)
        assert all(0 <= i < len(meta["categories"]) for i in got["cat"])
        assert {str(i) for i in got["name"]} <= set(body["names"])


def test_off_loopback_needs_the_printed_token(store: Path) -> None:
    proc, url = _start(str(store), "--no-browser", "--port", "0", "--host", "0.0.0.0")
    try:
        token = parse_qs(urlsplit(url).query)["token"][0]
        assert len(token) >= 32
        base = _base(url)
        assert httpx.get(base + "/api/meta", timeout=30).status_code == 401
        assert httpx.get(base + "/api/meta", params={"token": "nope"}, timeout=30
                         ).status_code == 401
        ok = httpx.get(base + "/api/meta", headers={"Authorization": f"Bearer {token}"},
                       timeout=30)
        assert ok.status_code == 200 and ok.json()["ranks"] == [0, 1]
    finally:
        err = _stop(proc)
    assert token in err  # the generated token is printed


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(EXE), "view", *args], capture_output=True, text=True,
                          timeout=120, env=os.environ.copy())


def test_bad_input_is_one_line_exit_2(store: Path, tmp_path: Path) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        port = str(busy.getsockname()[1])
        cases = [
            ([str(tmp_path / "missing.json"), "--no-browser", "--port", "0"], "missing.json"),
            ([str(store), "--no-browser", "--port", "0", "--window", "2s:1s"], "--window"),
            ([str(store), "--no-browser", "--port", "0", "--ranks", "x"], "--ranks"),
            ([str(store), "--no-browser", "--port", "70000"], "--port"),
            ([str(store), "--no-browser", "--port", port], "in use"),
        ]
        for args, needle in cases:
            done = _run(*args)
            assert done.returncode == 2, (args, done.stderr)
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1 and needle in lines[0], (args, done.stderr)
            assert done.stdout == ""
    finally:
        busy.close()
