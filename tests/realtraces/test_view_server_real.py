"""The viewer's fast JSON encoding (orjson on numpy views of the Arrow columns, static
answers encoded once) on a real store (h100-planted/healthy, real pyramid): every answer
parses to the same values, with the same JSON types, as the plain encoding it replaced
(``to_pylist`` + msgspec), built here from the pyramid's own tables."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import Any

import msgspec
import pytest
from starlette.testclient import TestClient

import traceatlas
from traceatlas.view import levels, security
from traceatlas.view.app import create_app
from traceatlas.view.pyramid import ensure_pyramid

pytestmark = pytest.mark.realtrace


def same(a: Any, b: Any, where: str = "$") -> None:
    """``a == b`` with the same JSON types everywhere (1 and 1.0 differ, True and 1 too)."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        assert list(a) == list(b), f"{where}: keys {list(a)} vs {list(b)}"
        for k in a:
            same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), f"{where}: {len(a)} vs {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"


def plain(data: Any) -> Any:
    """What the old encoder wrote, parsed back."""
    return json.loads(msgspec.json.encode(data))


@pytest.fixture(scope="module")
def served(traces_dir: Path, tmp_path_factory: pytest.TempPathFactory
           ) -> tuple[Any, Any, TestClient]:
    store = tmp_path_factory.mktemp("viewenc") / "healthy.tastore"
    trace = traceatlas.open(traceatlas.ingest(
        [str(traces_dir / "h100-planted" / "healthy")], store))
    pyramid = ensure_pyramid(trace)
    web = create_app(trace, pyramid, token=None,
                     allowed_hosts=security.allowed_hosts("127.0.0.1"))
    return trace, pyramid, TestClient(web, base_url="http://127.0.0.1:8765")


def test_meta_and_tracks_parse_as_before(served: tuple[Any, Any, TestClient]) -> None:
    trace, pyramid, client = served
    expected_meta = dict(pyramid.meta())
    expected_meta.update(source_format=trace.source_format, store=str(trace.path),
                         title="healthy.tastore (2 ranks)")
    same(json.loads(client.get("/api/meta").content), plain(expected_meta))
    tracks = json.loads(client.get("/api/tracks").content)
    same(tracks, plain([dataclasses.asdict(t) for t in pyramid.tracks]))
    assert len(tracks) == len(pyramid.tracks) > 4


def test_tiles_parse_as_before(served: tuple[Any, Any, TestClient]) -> None:
    _, pyramid, client = served
    meta = pyramid.meta()
    start, end = int(meta["start_ns"]), int(meta["end_ns"])
    ids = [t.id for t in pyramid.tracks if t.kind != "counter"]
    rng = random.Random(7)
    checked = 0
    for level in [lv["level"] for lv in meta["levels"]]:
        width = levels.bin_ns(level)
        a = rng.randrange(start, end)
        b = min(end, a + 3000 * width)
        params = {"level": level, "start_ns": a, "end_ns": b, "tracks": ",".join(map(str, ids))}
        got = json.loads(client.get("/api/tiles", params=params).content)
        found = pyramid.tiles(level, a, b, ids)
        rows, used = [], set()
        for t in found:
            row = {"id": t.id, "level": t.level, "bin_ns": t.bin_ns, "raw": t.raw}
            row.update({c: t.table.column(c).to_pylist() for c in t.table.column_names})
            used.update(row["name"])
            rows.append(row)
        expected = {"level": level, "origin_ns": int(meta["origin_ns"]),
                    "categories": list(pyramid.categories), "tracks": rows,
                    "names": {str(i): pyramid.names[i] for i in sorted(used)}}
        same(got, plain(expected))
        checked += sum(len(r["bin"]) for r in rows)
    assert checked > 1000  # the comparison saw real bins


def test_events_parse_as_before(served: tuple[Any, Any, TestClient]) -> None:
    trace, pyramid, client = served
    import polars as pl

    meta = pyramid.meta()
    start = int(meta["start_ns"])
    ids = [t.id for t in pyramid.tracks if t.track_id is not None and t.kind != "counter"]
    vid = {(t.rank, t.track_id): t.id for t in pyramid.tracks if t.track_id is not None}
    a, b = start + 200_000_000, start + 260_000_000
    got = json.loads(client.get("/api/events", params={
        "start_ns": a, "end_ns": b, "tracks": ",".join(map(str, ids))}).content)
    rows = (trace.intervals.filter((pl.col("start_ns") <= b) & (pl.col("end_ns") >= a))
            .collect().to_dicts())
    cols = ("track", "start_ns", "end_ns", "name", "category", "depth", "correlation",
            "external_id", "step")
    table = sorted(({**r, "track": vid[(r["rank"], r["track_id"])]} for r in rows),
                   key=lambda r: (r["start_ns"], r["track"], r["depth"]))
    expected: dict[str, Any] = {c: [r[c] for r in table] for c in cols}
    expected.update(count=len(table), total=len(table), truncated=False, limit=20000)
    assert 100 < len(table) < 20000
    # rows tied on (start, track, depth) may come in either order: compare them as sets
    key = list(zip(*(got[c] for c in cols), strict=True))
    assert sorted(key, key=repr) == sorted(zip(*(expected[c] for c in cols), strict=True),
                                           key=repr)
    same({c: got[c] for c in ("start_ns", "track", "count", "total", "truncated", "limit")},
         plain({c: expected[c] for c in ("start_ns", "track", "count", "total", "truncated",
                                         "limit")}))
    for c in cols:  # the JSON types of every column (ints stay ints, null stays null)
        assert sorted(type(v).__name__ for v in got[c]) == sorted(
            type(v).__name__ for v in plain(expected[c])), c
