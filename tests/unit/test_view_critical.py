"""``/api/critical_path`` (``traceatlas.view.api_critical``) on a store built here whose
paths are known by construction (times in ns after the trace start):

- step 0, a CPU-bound launch loop: launch calls of 5 us at 1k, 11k, 21k launching 1 us
  kernels at 7k, 17k, 27k; the step marker spans [1k, 26k]. Region [1k, 28k] = 27 us:
  call 1 and the gap after it, call 2 and the gap (cpu 20k), the launch of k2 from call
  3's start (launch 6k), k2 (gpu_compute 1k): the convention of ``test_critical_path``.
- step 1, GPU bound: one call [101k, 102k] launching a 47 us kernel at 103k; the marker
  spans [101k, 126k]. Region [101k, 150k]: launch 2k (call start to kernel start), the
  kernel 47k.

The endpoint's segments are compared with ``analysis.run("critical_path")`` on the same
selection (what ``traceatlas analyze critical_path --step N`` prints), their viewer track
ids with ``/api/tracks``, the breakdowns with the hand figures above."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
from starlette.testclient import TestClient

import traceatlas
from traceatlas import analysis
from traceatlas.testing.builder import TraceBuilder
from traceatlas.view import api_critical, security
from traceatlas.view.app import create_app
from traceatlas.view.pyramid import ensure_pyramid

BASE = 1_700_000_000_000_000_000
STEP0 = {"cpu": 20_000, "launch": 6_000, "gpu_compute": 1_000}
STEP1 = {"launch": 2_000, "gpu_compute": 47_000}


def build_store(tmp: Path) -> Path:
    b = TraceBuilder(rank=0, base_time_ns=BASE, profiler_markers=False)
    b.step(0, 1_000, 26_000)
    for i in range(3):
        b.launch(f"k{i}", 1_000 + 10_000 * i, 5_000, 7_000 + 10_000 * i, 1_000)
    b.step(1, 101_000, 126_000)
    b.launch("long_kernel", 101_000, 1_000, 103_000, 47_000)
    return traceatlas.ingest([str(b.write(tmp / "rank0.json"))], tmp / "store")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[traceatlas.Trace, Any,
                                                               TestClient]:
    tmp = tmp_path_factory.mktemp("vcp")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRACEATLAS_CACHE_DIR", str(tmp / "cache"))
        trace = traceatlas.open(build_store(tmp))
        pyramid = ensure_pyramid(trace)
    web = create_app(trace, pyramid, token=None,
                     allowed_hosts=security.allowed_hosts("127.0.0.1"))
    return trace, web, TestClient(web, base_url="http://127.0.0.1:8765")


def _frame(body: dict[str, Any]) -> pl.DataFrame:
    cols = [c for c in api_critical.SEGMENT_COLUMNS if c != "track"]
    return pl.DataFrame({c: body[c] for c in cols}, schema_overrides={
        "rank": pl.Int32, "track_id": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64,
        "on_path_ns": pl.Int64, "event_start_ns": pl.Int64, "event_end_ns": pl.Int64,
        "name": pl.String, "category": pl.String, "bound": pl.String})


def _bounds(body: dict[str, Any]) -> dict[str, int]:
    b = body["by_bound"]
    return {k: v for k, v in zip(b["bound"], b["ns"], strict=True) if v > 0}


def test_step_segments_equal_the_analysis(served: tuple[traceatlas.Trace, Any,
                                                        TestClient]) -> None:
    trace, _, client = served
    r = client.get("/api/critical_path", params={"step": 0})
    assert r.status_code == 200, r.text
    body = r.json()
    assert _bounds(body) == STEP0  # by construction
    assert body["length_ns"] == 27_000
    assert (body["path_start_ns"], body["path_end_ns"]) == (BASE + 1_000, BASE + 28_000)
    n = len(body["bound"])
    assert (body["count"], body["total"], body["truncated"]) == (n, n, False)
    want = analysis.run("critical_path", trace.select(step=0, clip=True)).table
    assert _frame(body).to_dicts() == want.to_dicts()
    # the segments tile the region, the last is k2 on its GPU stream
    assert body["start_ns"][1:] == body["end_ns"][:-1]
    assert (body["name"][-1], body["bound"][-1]) == ("k2", "gpu_compute")
    tracks = client.get("/api/tracks").json()
    for track, rank, tid in zip(body["track"], body["rank"], body["track_id"], strict=True):
        assert track is not None
        assert (tracks[track]["rank"], tracks[track]["track_id"]) == (rank, tid)
    assert tracks[body["track"][-1]]["kind"] == "gpu_stream"
    assert body["region"] == {"kind": "step", "ranks": None, "step": 0}


def test_step_in_view_and_window(served: tuple[traceatlas.Trace, Any, TestClient]) -> None:
    trace, _, client = served
    body = client.get("/api/critical_path", params={"at_ns": BASE + 110_000}).json()
    assert body["region"]["step"] == 1 and _bounds(body) == STEP1
    assert body["name"] == ["long_kernel", "long_kernel"]
    r = client.get("/api/critical_path", params={"at_ns": BASE + 130_000})
    assert r.status_code == 404 and "no step at" in r.json()["error"]
    win = {"start_ns": BASE + 1_000, "end_ns": BASE + 28_000}
    body = client.get("/api/critical_path", params=win).json()
    assert _bounds(body) == STEP0 and body["region"]["window"] == [win["start_ns"],
                                                                   win["end_ns"]]
    want = analysis.run("critical_path", trace.select(
        window=(win["start_ns"], win["end_ns"]), clip=True)).table
    assert _frame(body)["start_ns"].to_list() == want["start_ns"].to_list()
    assert _frame(body)["bound"].to_list() == want["bound"].to_list()


@pytest.mark.parametrize(("params", "name"), [
    ({"step": "x"}, "step"), ({"step": "-1"}, "step"), ({"step": "9"}, "--step"),
    ({"step": "0", "start_ns": str(BASE)}, "start_ns"),
    ({"at_ns": "1", "step": "0"}, "at_ns"),
    ({"start_ns": str(BASE + 5), "end_ns": str(BASE)}, "end_ns"),
    ({"limit": "0"}, "limit"), ({"limit": "20001"}, "limit"), ({"ranks": "7"}, "ranks"),
    ({"at_ns": "1.5"}, "at_ns"),
])
def test_bad_parameters_are_400(served: tuple[traceatlas.Trace, Any, TestClient],
                                params: dict[str, str], name: str) -> None:
    _, _, client = served
    r = client.get("/api/critical_path", params=params)
    assert r.status_code == 400, r.text
    assert r.json()["error"].startswith(name)


def test_repeated_parameter_is_400(served: tuple[traceatlas.Trace, Any, TestClient]) -> None:
    _, _, client = served
    r = client.get("/api/critical_path?step=0&step=1")
    assert r.status_code == 400 and "more than once" in r.json()["error"]


def test_cap_keeps_the_longest_in_path_order(served: tuple[traceatlas.Trace, Any,
                                                           TestClient]) -> None:
    _, _, client = served
    full = client.get("/api/critical_path", params={"step": 0}).json()
    n = len(full["bound"])
    assert n >= 4
    body = client.get("/api/critical_path", params={"step": 0, "limit": 2}).json()
    assert (body["count"], body["total"], body["truncated"], body["limit"]) == (2, n, True, 2)
    # the two longest of the full answer (ties: the earlier), in path order
    order = sorted(range(n), key=lambda i: (-full["on_path_ns"][i], i))[:2]
    assert body["start_ns"] == [full["start_ns"][i] for i in sorted(order)]
    assert _bounds(body) == STEP0 and body["length_ns"] == 27_000  # the whole path
    assert any("of" in note and "segments sent" in note for note in body["notes"])


def test_default_cap(served: tuple[traceatlas.Trace, Any, TestClient],
                     monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, client = served
    monkeypatch.setattr(api_critical, "MAX_SEGMENTS", 3)
    body = client.get("/api/critical_path", params={"step": 0}).json()
    assert body["count"] == 3 and body["truncated"] and body["limit"] == 3
    assert client.get("/api/critical_path", params={"step": 0, "limit": 4}).status_code == 400


def test_cached_once_per_region(served: tuple[traceatlas.Trace, Any, TestClient],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    _, web, client = served
    cache = api_critical._cache(web.state.context)
    client.get("/api/critical_path", params={"step": 1})
    before = cache.computed
    for params in ({"step": 1}, {"at_ns": BASE + 120_000}, {"step": 1, "limit": 1}):
        assert client.get("/api/critical_path", params=params).status_code == 200
    assert cache.computed == before  # step 1 in three spellings: computed once
    monkeypatch.setattr(api_critical, "CACHE_SIZE", 1)
    client.get("/api/critical_path", params={"start_ns": BASE, "end_ns": BASE + 9_000})
    assert len(cache.results) == 1  # a new region pushed the others out
    client.get("/api/critical_path", params={"step": 1})
    assert cache.computed == before + 2 and len(cache.results) == 1  # step 1 again


def test_same_guard_as_every_endpoint(served: tuple[traceatlas.Trace, Any,
                                                    TestClient]) -> None:
    trace, web, _ = served
    ctx = web.state.context
    locked = create_app(trace, ctx.pyramid, token="s3cret",
                        allowed_hosts=security.allowed_hosts("127.0.0.1"))
    client = TestClient(locked, base_url="http://127.0.0.1:8765")
    assert client.get("/api/critical_path", params={"step": 0}).status_code == 401
    ok = client.get("/api/critical_path", params={"step": 0},
                    headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 200 and ok.headers["content-security-policy"]
    evil = TestClient(locked, base_url="http://evil.example:8765")
    r = evil.get("/api/critical_path", params={"step": 0},
                 headers={"Authorization": "Bearer s3cret"})
    assert r.status_code == 400
