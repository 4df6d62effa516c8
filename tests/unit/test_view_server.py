"""The viewer's HTTP API (``traceatlas.view.app``) on a small two-rank store built here.

Raw-event endpoints (events, event, search, analyze) are checked against plain Python
over the store's rows (pyarrow, no polars filters) or the CLI; the pyramid endpoints
(tiles, counters, rows) against a stand-in pyramid whose answers are known, so the
test checks what the server does with them (parameters passed, JSON/Arrow encoding)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

import traceatlas
from traceatlas.cli.main import app as cli_app
from traceatlas.model.schema import CATEGORIES
from traceatlas.store.layout import table_parts
from traceatlas.testing import TraceBuilder
from traceatlas.testing.builder import write_multi_rank
from traceatlas.view import levels, security
from traceatlas.view.app import create_app
from traceatlas.view.pyramid_types import TrackInfo, TrackTiles

BASE = 1_700_000_000_000_000_000
LONG_NAME = "void kLong<" + "float, " * 60 + "int>()"
KIND_ORDER = {"device": 0, "gpu_stream": 0, "host_thread": 1, "counter": 2, "other": 3}


def build_store(tmp: Path) -> Path:
    """Two ranks: ops with launches (kernels, a memcpy) nested in steps."""
    builders = []
    for rank in (0, 1):
        b = TraceBuilder(rank, 2, base_time_ns=BASE, profiler_markers=False)
        shift = rank * 7_000
        b.step(0, shift, 1_000_000 + shift)
        b.cpu_op("aten::mm", 10_000 + shift, 200_000 + shift)
        b.launch("kA", 20_000 + shift, 5_000, 50_000 + shift, 100_000)
        b.launch("sgemm_kB" if rank == 0 else "kC", 40_000 + shift, 5_000, 160_000 + shift,
                 300_000)
        b.cpu_op("aten::add", 300_000 + shift, 350_000 + shift)
        b.launch("Memcpy HtoD", 310_000 + shift, 1_000, 500_000 + shift, 20_000,
                 kind="memcpy", nbytes=64)
        if rank == 0:  # a kernel signature longer than a search text may be
            b.launch(LONG_NAME, 600_000, 2_000, 610_000, 1_000)
        builders.append(b)
    paths = write_multi_rank(tmp / "raw", builders, gz=False)
    return traceatlas.ingest([str(p) for p in paths], tmp / "store")


class FakePyramid:
    """The contract's query API with fixed answers; records the calls it gets."""

    def __init__(self, store: Path) -> None:
        rows = pa.concat_tables(pq.read_table(p) for p in table_parts(store, "tracks"))
        ordered = sorted(rows.to_pylist(), key=lambda t: (t["rank"], KIND_ORDER[t["kind"]],
                                                           t["track_id"]))
        self.tracks: list[TrackInfo] = []
        for rank in sorted({t["rank"] for t in ordered}):
            self.tracks.append(TrackInfo(len(self.tracks), rank, None, f"rank {rank} GPU",
                                         "rank_device", -1, -1, 0, 0, 3, []))
            for t in (t for t in ordered if t["rank"] == rank):
                self.tracks.append(TrackInfo(len(self.tracks), rank, t["track_id"],
                                             t["name"] or "", t["kind"], t["device"],
                                             t["stream"], 1, 0, 0, []))
        self.names = ["kA", "sgemm_kB", "unused"]
        self.categories = list(CATEGORIES)
        self.calls: list[tuple[Any, ...]] = []

    def meta(self) -> dict[str, Any]:
        return {"start_ns": BASE, "end_ns": BASE + 1_007_000, "origin_ns": BASE,
                "levels": [{"level": lv, "bin_ns": levels.bin_ns(lv)}
                           for lv in levels.levels(1_007_000)],
                "ranks": [0, 1], "categories": self.categories, "tracks": len(self.tracks),
                "build_s": 0.0, "bytes": 0}

    def tiles(self, level: int, start: int, end: int, ids: list[int]) -> list[TrackTiles]:
        self.calls.append(("tiles", level, start, end, list(ids)))
        table = pa.table({"bin": pa.array([0, 1], pa.int64()), "cat": pa.array([5, 5], pa.int8()),
                          "busy_ns": pa.array([1000, 24], pa.int64()),
                          "count": pa.array([1, 2], pa.int64()),
                          "name": pa.array([0, 1], pa.int32())})
        return [TrackTiles(i, max(level, 1), levels.bin_ns(max(level, 1)), level < 1, table)
                for i in ids]

    def counter_tiles(self, level: int, start: int, end: int, ids: list[int]
                      ) -> list[TrackTiles]:
        self.calls.append(("counters", level, start, end, list(ids)))
        table = pa.table({"bin": pa.array([3], pa.int64()), "series": pa.array([0], pa.int32()),
                          "min": [1.0], "mean": [1.5], "max": [2.0],
                          "count": pa.array([2], pa.int64())})
        return [TrackTiles(i, level, levels.bin_ns(level), False, table) for i in ids]

    def rows(self, level: int, start: int, end: int, kind: str, ranks: list[int],
             groups: int) -> list[dict[str, Any]]:
        self.calls.append(("rows", level, start, end, kind, list(ranks), groups))
        return [{"ranks": [ranks[0], ranks[-1]], "bin": [0], "mean": [0.5], "min": [0.25],
                 "max": [0.75]}]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, FakePyramid, TestClient]:
    store = build_store(tmp_path_factory.mktemp("view"))
    pyramid = FakePyramid(store)
    web = create_app(traceatlas.open(store), pyramid, token=None,
                     allowed_hosts=security.allowed_hosts("127.0.0.1"))
    return store, pyramid, TestClient(web, base_url="http://127.0.0.1:8765")


def intervals(store: Path) -> list[dict[str, Any]]:
    """Every interval row, read with pyarrow (independent of the server's polars path)."""
    table = pa.concat_tables(pq.read_table(p) for p in table_parts(store, "intervals"))
    return table.to_pylist()


def viewer_id(pyramid: FakePyramid) -> dict[tuple[int, int], int]:
    return {(t.rank, t.track_id): t.id for t in pyramid.tracks if t.track_id is not None}


def test_meta_and_tracks(served: tuple[Path, FakePyramid, TestClient]) -> None:
    store, pyramid, client = served
    meta = client.get("/api/meta").json()
    assert meta["start_ns"] == BASE and meta["ranks"] == [0, 1]
    assert meta["source_format"] == "kineto" and meta["store"] == str(store)
    assert meta["title"] == "store (2 ranks)"
    tracks = client.get("/api/tracks").json()
    assert tracks == [dataclasses.asdict(t) for t in pyramid.tracks]
    assert [t["id"] for t in tracks] == list(range(len(tracks)))


def test_tiles_json(served: tuple[Path, FakePyramid, TestClient]) -> None:
    _, pyramid, client = served
    r = client.get("/api/tiles", params={"level": 0, "start_ns": BASE, "end_ns": BASE + 50_000,
                                         "tracks": "2,1,2"})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    body = r.json()
    assert pyramid.calls[-1] == ("tiles", 0, BASE, BASE + 50_000, [2, 1])
    assert body["level"] == 0 and body["origin_ns"] == BASE
    assert body["categories"] == list(CATEGORIES)
    assert [t["id"] for t in body["tracks"]] == [2, 1]
    first = body["tracks"][0]
    assert (first["level"], first["bin_ns"], first["raw"]) == (1, 4096, True)
    assert (first["bin"], first["cat"], first["busy_ns"], first["count"], first["name"]) == (
        [0, 1], [5, 5], [1000, 24], [1, 2], [0, 1])
    assert body["names"] == {"0": "kA", "1": "sgemm_kB"}  # only the indexes used


def test_tiles_arrow_matches_json(served: tuple[Path, FakePyramid, TestClient]) -> None:
    _, _, client = served
    params = {"level": 2, "start_ns": BASE, "end_ns": BASE + 500_000, "tracks": "1,3"}
    js = client.get("/api/tiles", params=params).json()
    r = client.get("/api/tiles", params={**params, "format": "arrow"})
    assert r.headers["content-type"] == "application/vnd.apache.arrow.stream"
    table = pa.ipc.open_stream(r.content).read_all()
    meta = json.loads(table.schema.metadata[b"traceatlas"])
    assert meta["names"] == js["names"] and meta["origin_ns"] == BASE
    assert meta["tracks"] == [{k: t[k] for k in ("id", "level", "bin_ns", "raw")}
                              for t in js["tracks"]]
    for t in js["tracks"]:
        mine = table.filter(pa.compute.equal(table["id"], t["id"]))
        for col in ("bin", "cat", "busy_ns", "count", "name"):
            assert mine[col].to_pylist() == t[col]


def test_counters_and_rows(served: tuple[Path, FakePyramid, TestClient]) -> None:
    _, pyramid, client = served
    c = client.get("/api/counters", params={"level": 3, "start_ns": BASE, "end_ns": BASE + 9,
                                            "tracks": "0"}).json()
    assert pyramid.calls[-1] == ("counters", 3, BASE, BASE + 9, [0])
    t = c["tracks"][0]
    assert (t["series"], t["min"], t["mean"], t["max"], t["count"], t["series_names"]) == (
        [0], [1.0], [1.5], [2.0], [2], [])
    r = client.get("/api/rows", params={"level": 4, "start_ns": BASE, "end_ns": BASE + 10**6,
                                        "kind": "rank_host", "ranks": "1-5", "groups": 1})
    assert r.status_code == 200
    assert pyramid.calls[-1] == ("rows", 4, BASE, BASE + 10**6, "rank_host", [1], 1)
    assert r.json()["bin_ns"] == levels.bin_ns(4)
    assert r.json()["groups"][0]["ranks"] == [1, 1]


def _window_events(store: Path, pyramid: FakePyramid, ids: list[int], a: int, b: int
                   ) -> list[tuple[int, int, int, str]]:
    vid = viewer_id(pyramid)
    return sorted((vid[(r["rank"], r["track_id"])], r["start_ns"], r["end_ns"], r["name"])
                  for r in intervals(store)
                  if vid[(r["rank"], r["track_id"])] in ids
                  and r["start_ns"] <= b and r["end_ns"] >= a)


def test_events_match_plain_filter(served: tuple[Path, FakePyramid, TestClient]) -> None:
    store, pyramid, client = served
    ids = [t.id for t in pyramid.tracks if t.track_id is not None]
    a, b = BASE + 45_000, BASE + 170_000
    body = client.get("/api/events", params={"start_ns": a, "end_ns": b,
                                             "tracks": ",".join(map(str, ids))}).json()
    got = list(zip(body["track"], body["start_ns"], body["end_ns"], body["name"], strict=True))
    expected = _window_events(store, pyramid, ids, a, b)
    assert sorted(got) == expected and len(expected) >= 6
    assert body["start_ns"] == sorted(body["start_ns"])
    assert body["truncated"] is False and body["count"] == body["total"] == len(expected)
    # kA on rank 0's stream ends at BASE + 150_000: kept when the window starts there
    # (inclusive bounds, as --window), gone one ns later.
    edge = {"start_ns": BASE + 150_000, "end_ns": BASE + 150_000, "tracks": ",".join(
        map(str, ids))}
    assert "kA" in client.get("/api/events", params=edge).json()["name"]
    edge["start_ns"] = edge["end_ns"] = BASE + 150_001 + 7_000
    assert "kA" not in client.get("/api/events", params=edge).json()["name"]


def test_events_truncated_keeps_the_longest(served: tuple[Path, FakePyramid, TestClient]
                                            ) -> None:
    store, pyramid, client = served
    ids = [t.id for t in pyramid.tracks if t.track_id is not None]
    body = client.get("/api/events", params={"start_ns": BASE - 10**6, "end_ns": BASE + 10**7,
                                             "tracks": ",".join(map(str, ids)),
                                             "limit": 3}).json()
    every = _window_events(store, pyramid, ids, BASE - 10**6, BASE + 10**7)
    longest = sorted(every, key=lambda e: e[2] - e[1], reverse=True)[:3]
    assert body["truncated"] is True and body["total"] == len(every) and body["count"] == 3
    assert sorted(zip(body["track"], body["start_ns"], body["end_ns"], body["name"],
                      strict=True)) == sorted(longest)
    assert body["start_ns"] == sorted(body["start_ns"])


def test_events_on_a_synthetic_row(served: tuple[Path, FakePyramid, TestClient]) -> None:
    store, pyramid, client = served
    row = next(t for t in pyramid.tracks if t.kind == "rank_device" and t.rank == 1)
    devices = {t.track_id for t in pyramid.tracks if t.rank == 1
               and t.kind in ("gpu_stream", "device")}
    body = client.get("/api/events", params={"start_ns": BASE, "end_ns": BASE + 10**7,
                                             "tracks": str(row.id)}).json()
    expected = sorted(r["name"] for r in intervals(store)
                      if r["rank"] == 1 and r["track_id"] in devices)
    assert sorted(body["name"]) == expected and set(body["track"]) == {row.id}
    assert "kC" in expected


def test_search_matches_a_substring_loop(served: tuple[Path, FakePyramid, TestClient]) -> None:
    store, pyramid, client = served
    vid = viewer_id(pyramid)
    for text in ("KA", "k", "aten::", "[", ".*", "%"):
        body = client.get("/api/search", params={"name": text, "limit": 100}).json()
        expected = sorted((r["start_ns"], vid[(r["rank"], r["track_id"])], r["name"])
                          for r in intervals(store) if text.casefold() in r["name"].casefold())
        got = list(zip(body["start_ns"], body["track"], body["name"], strict=True))
        assert sorted(got) == expected, text
        assert body["start_ns"] == sorted(body["start_ns"])
        assert body["total"] == len(expected) and body["truncated"] is False
    few = client.get("/api/search", params={"name": "k", "limit": 2}).json()
    assert few["count"] == 2 and few["truncated"] is True and few["total"] > 2


def test_event_details_and_chain(served: tuple[Path, FakePyramid, TestClient]) -> None:
    store, pyramid, client = served
    vid = viewer_id(pyramid)
    kernel = next(r for r in intervals(store) if r["name"] == "kC")
    r = client.get("/api/event", params={"track": vid[(1, kernel["track_id"])],
                                         "start_ns": kernel["start_ns"], "name": "kC"})
    body = r.json()
    assert r.status_code == 200 and body["end_ns"] == kernel["end_ns"]
    assert body["args"]["correlation"] == kernel["correlation"]  # args parsed from JSON text
    chain = [(c["role"], c["name"]) for c in body["chain"]]
    # kC was launched by cudaLaunchKernel inside aten::mm (External id) on rank 1.
    assert chain == [("host_op", "aten::mm"), ("launch", "cudaLaunchKernel"),
                     ("device", "kC")]
    assert all(c["rank"] == 1 for c in body["chain"])
    # From the host op: both of its launches and both kernels.
    op = next(r for r in intervals(store) if r["name"] == "aten::mm" and r["rank"] == 0)
    body = client.get("/api/event", params={"track": vid[(0, op["track_id"])],
                                            "start_ns": op["start_ns"]}).json()
    assert sorted(c["name"] for c in body["chain"] if c["role"] == "device") == [
        "kA", "sgemm_kB"]
    long = next(r for r in intervals(store) if r["name"] == LONG_NAME)
    body = client.get("/api/event", params={"track": vid[(0, long["track_id"])],
                                            "start_ns": long["start_ns"],
                                            "name": LONG_NAME}).json()
    assert body["name"] == LONG_NAME and len(LONG_NAME) > 300
    assert [c["role"] for c in body["chain"]] == ["host_op", "launch", "device"]
    missing = client.get("/api/event", params={"track": vid[(0, op["track_id"])],
                                               "start_ns": op["start_ns"] + 1})
    assert missing.status_code == 404 and "error" in missing.json()


def test_analyze_breakdown_equals_cli(served: tuple[Path, FakePyramid, TestClient]) -> None:
    store, _, client = served
    a, b = BASE + 40_000, BASE + 400_000
    body = client.get("/api/analyze/breakdown", params={"start_ns": a, "end_ns": b,
                                                        "ranks": "1"}).json()
    cli = CliRunner().invoke(cli_app, ["analyze", "breakdown", str(store), "--window",
                                       f"@{a}:@{b}", "--ranks", "1", "--format", "json"])
    assert cli.exit_code == 0, cli.output
    expected = json.loads(cli.stdout)
    assert [dict(zip(body["columns"], row, strict=True)) for row in body["rows"]] == expected
    assert len(expected) == 1 and expected[0]["rank"] == 1
    whole = client.get("/api/analyze/breakdown").json()
    assert [row[whole["columns"].index("rank")] for row in whole["rows"]] == [0, 1]
    assert body["rows"] != [whole["rows"][1]]  # the window changed the figures


def test_analyze_errors(served: tuple[Path, FakePyramid, TestClient]) -> None:
    _, _, client = served
    assert client.get("/api/analyze/nosuch").status_code == 404
    bad = client.get("/api/analyze/breakdown", params={"by": "nothing"})
    assert bad.status_code == 400 and "by" in bad.json()["error"]
    assert client.get("/api/analyze/breakdown", params={"colour": "x"}).status_code == 400
    assert client.get("/api/analyze/advisor", params={"path": "/etc/passwd"}).status_code == 400
    assert client.get("/api/analyze/breakdown", params={"ranks": "7"}).status_code == 400
    assert client.get("/api/analyze/breakdown", params={"table": "x"}).status_code == 400
