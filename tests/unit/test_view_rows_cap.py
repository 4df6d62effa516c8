"""``/api/rows`` refuses (400) a request whose answer would hold more than
``MAX_ROW_CELLS`` cells (rank groups x bins of the window): three float arrays of that
size and their JSON, from one request, could exhaust the server's memory. ``/api/tiles``
and ``/api/counters`` cap tracks x bins alike."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient
from test_view_server import BASE, build_store

import traceatlas
from traceatlas.view import params, security
from traceatlas.view.app import create_app
from traceatlas.view.pyramid import ensure_pyramid


def test_rows_answer_size_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = traceatlas.open(str(build_store(tmp_path)))
    web = create_app(trace, ensure_pyramid(trace), token=None,
                     allowed_hosts=security.allowed_hosts("127.0.0.1"))
    client = TestClient(web, base_url="http://127.0.0.1")
    monkeypatch.setattr(params, "MAX_ROW_CELLS", 1000)
    query = {"level": 0, "start_ns": BASE, "kind": "rank_device", "groups": 2}
    # 400 bins of 1024 ns x 2 groups = 800 cells: answered, for both ranks.
    ok = client.get("/api/rows", params={**query, "end_ns": BASE + 400 * 1024})
    assert ok.status_code == 200
    body = ok.json()
    assert [g["ranks"] for g in body["groups"]] == [[0, 0], [1, 1]]
    # 600 bins x 2 groups = 1,200 cells: refused; 600 bins x 1 group: answered.
    big = client.get("/api/rows", params={**query, "end_ns": BASE + 600 * 1024})
    assert big.status_code == 400 and "groups" in big.json()["error"]
    one = client.get("/api/rows", params={**query, "groups": 1, "end_ns": BASE + 600 * 1024})
    assert one.status_code == 200


@pytest.mark.parametrize("path", ["/api/tiles", "/api/counters"])
def test_tiles_answer_size_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     path: str) -> None:
    """Tracks x bins of the window are capped like ``/api/rows`` (400 naming ``tracks``)."""
    trace = traceatlas.open(str(build_store(tmp_path)))
    pyramid = ensure_pyramid(trace)
    web = create_app(trace, pyramid, token=None,
                     allowed_hosts=security.allowed_hosts("127.0.0.1"))
    client = TestClient(web, base_url="http://127.0.0.1")
    assert len(pyramid.tracks) >= 3
    monkeypatch.setattr(params, "MAX_ROW_CELLS", 1000)
    query = {"level": 0, "start_ns": BASE, "end_ns": BASE + 400 * 1024}
    # 400 bins of 1024 ns (+1: the window is inclusive) x 2 tracks = 802 cells: answered
    ok = client.get(path, params={**query, "tracks": "0,1"})
    assert ok.status_code == 200 and [t["id"] for t in ok.json()["tracks"]] == [0, 1]
    # x 3 tracks = 1,203 cells: refused; a duplicate id does not count twice
    big = client.get(path, params={**query, "tracks": "0,1,2"})
    assert big.status_code == 400 and "tracks" in big.json()["error"]
    assert "1,203" in big.json()["error"]
    assert client.get(path, params={**query, "tracks": "0,1,1,0"}).status_code == 200
    # Arrow answers are capped alike
    assert client.get(path, params={**query, "tracks": "0,1,2", "format": "arrow"}
                      ).status_code == 400
