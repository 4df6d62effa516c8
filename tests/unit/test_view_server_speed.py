"""The viewer server's fast paths: Arrow columns as numpy views for orjson, the msgspec
fall back, ``/api/events`` in one pass (and its streaming fall back for huge windows),
and the ``start_ns`` lower bound from the ranks' longest interval. Expected values come
from plain Python over the store's rows (pyarrow) or from the slow path they replace."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from starlette.testclient import TestClient

import traceatlas
from traceatlas.store.layout import table_parts
from traceatlas.testing import TraceBuilder
from traceatlas.testing.builder import write_multi_rank
from traceatlas.view import api_events, api_search, security
from traceatlas.view.api_common import Context, column_values, json_bytes
from traceatlas.view.app import create_app
from traceatlas.view.pyramid import ensure_pyramid

BASE = 1_700_000_000_000_000_000


def test_column_values_give_the_same_json_as_to_pylist() -> None:
    cases = [
        pa.chunked_array([pa.array([BASE, -1, 2**63 - 1], pa.int64())]),
        pa.chunked_array([pa.array([1, 2], pa.int8()), pa.array([3], pa.int8())]),
        pa.chunked_array([], pa.int32()),
        pa.chunked_array([pa.array([1, None, 3], pa.int64())]),
        pa.chunked_array([pa.array([0.1, 1.5, math.nan, 1e300], pa.float64())]),
        pa.chunked_array([pa.array(["a", None], pa.string())]),
        pa.array([7, 8], pa.int32()).slice(1),
    ]
    for col in cases:
        got = json.loads(json_bytes({"c": column_values(col)}))["c"]
        expected = json.loads(msgspec.json.encode(col.to_pylist()))
        assert repr(got) == repr(expected), col  # repr: 1 vs 1.0 and nan vs None differ
    assert isinstance(column_values(cases[0]), np.ndarray)  # no Python list built
    assert isinstance(column_values(cases[3]), list)  # nulls: written as null


def test_json_bytes_falls_back_to_msgspec() -> None:
    """Integer dict keys are written as strings (as msgspec did); what orjson refuses
    goes through msgspec, numpy values included."""
    data = {1: "a", "b": np.int64(BASE), "c": np.array([1, 2]), "d": 2**70}  # orjson: no 2**70
    assert json.loads(json_bytes(data)) == {"1": "a", "b": BASE, "c": [1, 2], "d": 2**70}
    assert json.loads(json_bytes({1: "a"})) == {"1": "a"}


def build(tmp: Path) -> Path:
    """Two ranks; rank 0 has a 10 ms step enclosing everything else (the longest
    interval), so a late window overlaps it though it starts long before."""
    builders = []
    for rank in (0, 1):
        b = TraceBuilder(rank, 2, base_time_ns=BASE, profiler_markers=False)
        b.step(0, 0, 10_000_000 if rank == 0 else 900_000)
        for i in range(40):
            t = 10_000 + i * 20_000
            b.cpu_op(f"op{i % 5}", t, t + 5_000 + i * 100)
            b.launch(f"k{i % 3}", t + 1_000, 1_000, t + 30_000, 2_000 + 50 * i)
        builders.append(b)
    paths = write_multi_rank(tmp / "raw", builders, gz=False)
    return traceatlas.ingest([str(p) for p in paths], tmp / "store")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Context, TestClient]:
    tmp = tmp_path_factory.mktemp("speed")
    mp = pytest.MonkeyPatch()
    mp.setenv("TRACEATLAS_CACHE_DIR", str(tmp / "cache"))
    store = build(tmp)
    trace = traceatlas.open(store)
    pyramid = ensure_pyramid(trace)
    mp.undo()
    web = create_app(trace, pyramid, token=None,
                     allowed_hosts=security.allowed_hosts("127.0.0.1"))
    return store, Context(trace, pyramid), TestClient(web, base_url="http://127.0.0.1:8765")


def rows_of(store: Path) -> list[dict[str, Any]]:
    table = pa.concat_tables(pq.read_table(p) for p in table_parts(store, "intervals"))
    return table.to_pylist()


def test_longest_is_the_longest_interval_per_rank(served: tuple[Path, Context, TestClient]
                                                  ) -> None:
    store, ctx, _ = served
    rows = rows_of(store)
    for ranks in ([0], [1], [0, 1]):
        expected = max(r["end_ns"] - r["start_ns"] for r in rows if r["rank"] in ranks)
        assert ctx.longest(ranks) == expected
    assert ctx.longest([0]) == 10_000_000


def _expected(store: Path, ctx: Context, ids: list[int], a: int, b: int
              ) -> list[tuple[int, int, int, str]]:
    return sorted((ctx.by_key[(r["rank"], r["track_id"])], r["start_ns"], r["end_ns"],
                   r["name"]) for r in rows_of(store)
                  if ctx.by_key.get((r["rank"], r["track_id"])) in ids
                  and r["start_ns"] <= b and r["end_ns"] >= a)


def _get(client: TestClient, **params: Any) -> dict[str, Any]:
    r = client.get("/api/events", params=params)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def _tuples(body: dict[str, Any]) -> list[tuple[int, int, int, str]]:
    return sorted(zip(body["track"], body["start_ns"], body["end_ns"], body["name"],
                      strict=True))


def test_window_inside_a_long_interval(served: tuple[Path, Context, TestClient]) -> None:
    store, ctx, client = served
    ids = sorted(ctx.by_key.values())
    for a, b in ((BASE + 9_000_000, BASE + 9_000_000), (BASE + 5_000, BASE + 40_000),
                 (BASE + 899_999, BASE + 2_000_000), (BASE - 5, BASE)):
        body = _get(client, start_ns=a, end_ns=b, tracks=",".join(map(str, ids)))
        expected = _expected(store, ctx, ids, a, b)
        assert _tuples(body) == expected and body["total"] == len(expected) >= 1
        assert body["start_ns"] == sorted(body["start_ns"]) and not body["truncated"]


@pytest.mark.parametrize("factor,cap", [(10, 1_000_000), (1, 3)])
def test_truncation_in_memory_and_streaming(served: tuple[Path, Context, TestClient],
                                            monkeypatch: pytest.MonkeyPatch,
                                            factor: int, cap: int) -> None:
    """Both paths (rows counted in memory; a huge window counted in a second pass) keep
    the ``limit`` longest, ordered by start, and count every overlapping interval."""
    store, ctx, client = served
    monkeypatch.setattr(api_events, "COLLECT_FACTOR", factor)
    monkeypatch.setattr(api_events, "MAX_COLLECT", cap)
    ids = sorted(ctx.by_key.values())
    a, b = BASE, BASE + 500_000
    every = _expected(store, ctx, ids, a, b)
    for limit in (1, 5, len(every) - 1, len(every)):
        body = _get(client, start_ns=a, end_ns=b, tracks=",".join(map(str, ids)), limit=limit)
        durations = sorted((e[2] - e[1] for e in every), reverse=True)
        assert body["total"] == len(every) and body["count"] == limit
        assert body["truncated"] is (limit < len(every))
        got = sorted((e - s for s, e in zip(body["start_ns"], body["end_ns"], strict=True)),
                     reverse=True)
        assert got == durations[:limit]  # the longest kept (ties: any of equal length)
        assert set(_tuples(body)) <= set(every)
        assert body["start_ns"] == sorted(body["start_ns"])


@pytest.fixture(scope="module")
def small_groups(tmp_path_factory: pytest.TempPathFactory
                 ) -> tuple[Path, Context, TestClient]:
    """Two ranks of 40 x (op, launch, kernel) written in 7-row groups, so a search has
    many row groups to choose from and to stop early in; rank 1's are 10 x sparser, so
    its groups span many of rank 0's (an early group also holds late rows)."""
    tmp = tmp_path_factory.mktemp("groups")
    mp = pytest.MonkeyPatch()
    mp.setenv("TRACEATLAS_CACHE_DIR", str(tmp / "cache"))
    builders = []
    for rank in (0, 1):
        b = TraceBuilder(rank, 2, base_time_ns=BASE, profiler_markers=False)
        for i in range(40):
            t = i * 50_000 * (1 + 9 * rank) + rank * 3
            b.cpu_op(f"aten::op{i % 4}", t, t + 10_000)
            b.launch(f"kernel_{'ab'[i % 2]}{i % 5}", t + 1_000, 1_000, t + 20_000, 5_000)
        builders.append(b)
    paths = write_multi_rank(tmp / "raw", builders, gz=False)
    store = traceatlas.ingest([str(p) for p in paths], tmp / "store")
    trace = traceatlas.open(store)
    pyramid = ensure_pyramid(trace)
    mp.undo()
    for part in table_parts(store, "intervals"):  # the same rows, in 7-row groups (after
        pq.write_table(pq.read_table(part), part, row_group_size=7)  # the open's checks)
    web = create_app(trace, pyramid, token=None,
                     allowed_hosts=security.allowed_hosts("127.0.0.1"))
    return store, Context(trace, pyramid), TestClient(web, base_url="http://127.0.0.1:8765")


def test_search_over_many_row_groups(small_groups: tuple[Path, Context, TestClient]) -> None:
    store, ctx, client = small_groups
    groups = sum(pq.read_metadata(p).num_row_groups for p in table_parts(store, "intervals"))
    assert groups > 20
    rows = rows_of(store)
    index = api_search.name_index(ctx)
    assert sorted(index.names) == sorted({r["name"] for r in rows})
    assert int(index.entry_count.sum()) == len(rows)
    last = max(r["start_ns"] for r in rows)
    for text, limit in (("KERNEL_A", 1000), ("kernel_b3", 1000), ("aten::op1", 3),
                        ("kernel", 5), ("kernel", 1), ("op", 2000), ("nothing", 10)):
        body = client.get("/api/search", params={"name": text, "limit": limit}).json()
        every = sorted((r["start_ns"], ctx.by_key[(r["rank"], r["track_id"])], r["end_ns"],
                        r["name"]) for r in rows if text.casefold() in r["name"].casefold())
        got = list(zip(body["start_ns"], body["track"], body["end_ns"], body["name"],
                       strict=True))
        assert got == every[:limit], text  # the earliest, by (start, track)
        assert body["total"] == len(every) and body["truncated"] is (len(every) > limit)
        names, parts, bound, total = api_search.plan(index, text.casefold(), limit)
        assert total == len(every) and sorted(names) == sorted({e[3] for e in every})
        if every:  # the bound keeps the answer and, for a few, prunes the later groups
            assert every[min(limit, len(every)) - 1][0] <= bound
            assert len(parts) == len({(r["rank"]) for r in rows
                                      if text.casefold() in r["name"].casefold()})
        if limit <= 5:
            assert bound < last


def test_track_columns_equal_each_tables_to_pylist() -> None:
    """Stacked (one schema) and per-table (mixed schemas) paths give each table's own
    values, empty tables and nulls included."""
    from traceatlas.view.api import _track_columns

    def t(bins: list[int], names: list[int | None], kind: pa.DataType | None = None
          ) -> pa.Table:
        return pa.table({"bin": pa.array(bins, pa.int64()),
                         "name": pa.array(names, kind or pa.int32())})

    same_schema = [t([1, 2], [5, 6]), t([], []), t([BASE], [7]), t([3], [None])]
    mixed = [t([1], [2]), t([4, 5], [6, 7], pa.int8())]
    for tables in (same_schema, mixed, same_schema[:1], []):
        got = [{k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in d.items()}
               for d in _track_columns(tables)]
        assert got == [tb.to_pydict() for tb in tables]
        assert all(type(x) is int or x is None for d in got for v in d.values() for x in v)
