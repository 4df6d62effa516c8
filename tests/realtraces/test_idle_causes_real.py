"""``idle --table causes`` and the host-wait findings on the real H100 runs
(``h100-planted``), checked against a plain JSON parse of the same files."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np
import pytest

import traceatlas
from traceatlas.advisor import Context
from traceatlas.advisor.host_wait import check
from traceatlas.analysis import registry
from traceatlas.testing.compare import plain_union_length

PLANTED = "h100-planted"
COLLECTIVE = re.compile(r"^(gloo:|c10d::)")


def _events(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as fh:
        events: list[dict[str, Any]] = json.load(fh)["traceEvents"]
    return [e for e in events if e.get("ph") == "X" and "dur" in e]


def _union_ns(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end) intervals: us in (the file's text), ns out."""
    return plain_union_length(intervals) * 1000


@pytest.fixture(scope="module")
def stores(traces_dir: Path, tmp_path_factory: pytest.TempPathFactory
           ) -> dict[str, traceatlas.Trace]:
    root = tmp_path_factory.mktemp("causes")
    return {name: traceatlas.open(traceatlas.ingest([traces_dir / PLANTED / name],
                                                    root / name))
            for name in ("healthy", "dataload", "imbalance")}


def _causes(trace: traceatlas.Trace) -> tuple[Any, Any]:
    result = registry.run("idle", trace, {})
    return result.table, result.extra["causes"]


@pytest.mark.parametrize("name", ["healthy", "dataload", "imbalance"])
def test_causes_add_up_to_host_wait(stores: dict[str, traceatlas.Trace], name: str) -> None:
    import polars as pl

    table, causes = _causes(stores[name])
    sums = {(r, s): v for r, s, v in causes.group_by("rank", "stream")
            .agg(pl.col("idle_ns").sum()).iter_rows()}
    for rank, stream, wait in table.select("rank", "stream", "host_wait_ns").iter_rows():
        assert sums.get((rank, stream), 0) == (wait or 0)


def test_healthy_host_collective_bounded_by_gloo(stores: dict[str, traceatlas.Trace],
                                                 traces_dir: Path) -> None:
    """Per rank, the main stream's host_collective time is at most the union of the
    gloo/c10d intervals of the file (any thread), and most of its host wait."""
    import polars as pl

    table, causes = _causes(stores["healthy"])
    for rank in (0, 1):
        events = _events(traces_dir / PLANTED / "healthy" / f"rank-{rank}.json.gz")
        gloo = _union_ns([(e["ts"], e["ts"] + e["dur"]) for e in events
                          if COLLECTIVE.match(e["name"]) and e.get("cat") != "gpu_user_annotation"])
        main = causes.filter((pl.col("rank") == rank) & (pl.col("stream") == 7))
        coll = int(main.filter(pl.col("cause") == "host_collective")["idle_ns"].sum())
        assert 0 < coll <= gloo + 1_000  # 1 us: the files' us rounding
        wait = table.filter((pl.col("rank") == rank) & (pl.col("stream") == 7))["host_wait_ns"]
        assert coll >= 0.5 * int(wait[0])


def test_dataload_per_step_is_the_planted_25ms(stores: dict[str, traceatlas.Trace],
                                               traces_dir: Path) -> None:
    """On the main stream (7), data_loading is at most the DataLoader __next__ time of the
    file (each stream's gaps are bounded separately) and the
    advisor's data_loading finding says about 25 ms per step (planted: 25 ms sleeps)."""
    import polars as pl

    _, causes = _causes(stores["dataload"])
    for rank in (0, 1):
        events = _events(traces_dir / PLANTED / "dataload" / f"rank-{rank}.json.gz")
        loads = [e["dur"] * 1000 for e in events if "DataLoader" in e["name"]]
        mine = causes.filter((pl.col("rank") == rank) & (pl.col("stream") == 7)
                             & (pl.col("cause") == "data_loading"))
        assert int(mine["idle_ns"].sum()) <= sum(loads) + 1_000
        assert 20e6 <= median(loads) <= 30e6
    found = {f.cause: f for f in check(Context(stores["dataload"]))}
    assert found["data_loading"].per_step is not None
    assert abs(found["data_loading"].per_step["ms"] - 25) <= 0.2 * 25
    assert "DataLoader" in found["data_loading"].where["op"]


def test_healthy_and_imbalance_findings(stores: dict[str, traceatlas.Trace]) -> None:
    healthy = check(Context(stores["healthy"]))
    assert max(healthy, key=lambda f: f.cost_ns).cause == "host_collective"
    assert "for rank" not in healthy[0].statement  # no slow rank planted there
    found = {f.cause: f for f in check(Context(stores["imbalance"]))}
    coll = found["host_collective"]
    assert {0, 1, 3} <= set(coll.ranks)
    assert "wait there for rank 2" in coll.statement and "rank(s) 0, 1, 3" in coll.statement
    assert coll.where.get("op", "").startswith("gloo:")


def test_breakdown_host_comm_is_the_gloo_union(stores: dict[str, traceatlas.Trace],
                                               traces_dir: Path) -> None:
    """breakdown's host_comm_ns = the union of the file's host-side collective ranges
    (gloo/c10d ops and PyTorch's comms records; not the device copies of annotations)."""
    host_comm = re.compile(r"^(gloo:|c10d:|nccl:|record_param_comms)")
    table = registry.run("breakdown", stores["healthy"], {}).table
    for rank in (0, 1):
        events = _events(traces_dir / PLANTED / "healthy" / f"rank-{rank}.json.gz")
        expected = _union_ns([(e["ts"], e["ts"] + e["dur"]) for e in events
                              if host_comm.match(e["name"])
                              and e.get("cat") != "gpu_user_annotation"])
        got = table.filter(table["rank"] == rank)["host_comm_ns"][0]
        assert expected > 0 and abs(got - expected) <= 1_000  # us text -> ns rounding


@pytest.mark.parametrize("name", ["healthy", "dataload", "imbalance"])
def test_classify_table_equals_sorted_path(stores: dict[str, traceatlas.Trace], name: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``idle_causes.classify`` (one hashed path) against the frozen ``classify_sorted``
    (the former np.unique path) and a per-row ``name_class``, and the whole causes table
    with either."""
    import polars as pl

    from traceatlas.analysis import idle_causes
    from traceatlas.ops.host_activity import name_class

    trace = stores[name]
    rows = trace.intervals.select("name", "category").collect()
    fast = idle_causes.classify(rows)
    from traceatlas.testing.frozen_idle_causes import classify_sorted

    assert np.array_equal(fast, classify_sorted(rows))
    pairs = rows.select(pl.col("name").cast(pl.String), pl.col("category").cast(pl.String))
    memo: dict[tuple[str, str], int] = {}
    plain = [memo.setdefault((n, c), name_class(str(n), str(c))) for n, c in pairs.iter_rows()]
    assert fast.tolist() == plain
    new = _causes(trace)[1]
    monkeypatch.setattr(idle_causes, "classify", classify_sorted)
    assert new.equals(_causes(trace)[1])


def _host_old(trace: traceatlas.Trace, ranks: list[int], device: Any) -> tuple[Any, Any]:
    """The former ``idle_causes._host`` (pageable launches found by a left join of every
    host row), the oracle of the new one."""
    import polars as pl

    from traceatlas.analysis.idle_causes import LAUNCH_CATEGORIES, classify
    from traceatlas.analysis.requirements import DEVICE_WORK
    from traceatlas.ops.host_activity import PAGEABLE_RE

    rows = (trace.intervals
            .select("rank", "track_id", "start_ns", "end_ns", "name", "category", "depth",
                    "correlation")
            .filter(~pl.col("category").is_in((*DEVICE_WORK, "gpu_annotation"))
                    & pl.col("rank").is_in(ranks))
            .collect())
    k = classify(rows)
    # correlation ids are per rank: a launch is pageable when its own rank's copy is
    pageable = (device.filter(pl.col("name").str.contains(PAGEABLE_RE.pattern)
                              & pl.col("correlation").is_not_null())
                .select(pl.col("rank").cast(rows["rank"].dtype),
                        pl.col("correlation").cast(rows["correlation"].dtype))
                .unique().with_columns(_pageable=pl.lit(True)))
    launch = pl.col("category").is_in(LAUNCH_CATEGORIES) & pl.col("correlation").is_not_null()
    host = (rows.with_columns(k=pl.Series(k, dtype=pl.Int8))
            .join(pageable, on=["rank", "correlation"], how="left", maintain_order="left")
            .with_columns(k=pl.when(launch & pl.col("_pageable").fill_null(False))
                          .then(pl.lit(2, pl.Int8)).otherwise(pl.col("k")))
            .drop("_pageable")
            .filter(pl.col("k") >= 0))
    calls = (host.filter(launch)
             .select("rank", "track_id", "correlation", pl.col("start_ns").alias("next_ns"))
             .sort("next_ns"))
    host = host.with_row_index("_row")
    syncs = (host.filter(pl.col("k") == 2).select("_row", "rank", "track_id", "end_ns")
             .sort("end_ns")
             .join_asof(calls.select("rank", "track_id", "next_ns"), left_on="end_ns",
                        right_on="next_ns", by=["rank", "track_id"], strategy="forward",
                        check_sortedness=False))
    paint_end = host["end_ns"].to_numpy().copy()
    rows_i = syncs["_row"].to_numpy()
    paint_end[rows_i] = np.maximum(paint_end[rows_i],
                                   syncs["next_ns"].fill_null(0).to_numpy())
    host = host.drop("_row", "correlation", "category").with_columns(
        paint_end=pl.Series(paint_end))
    return host, calls


@pytest.mark.parametrize("name", ["healthy", "dataload", "imbalance", "sync"])
def test_host_equals_former_join(stores: dict[str, traceatlas.Trace], name: str,
                                 traces_dir: Path, tmp_path: Path) -> None:
    """``_host`` (pageable launches marked through the launch rows only) equals the former
    left join of every host row, on traces without pageable copies and with (``sync``:
    20 pageable copies per rank in the files)."""
    import polars as pl

    from traceatlas.analysis import idle, idle_causes

    trace = (stores[name] if name in stores else
             traceatlas.open(traceatlas.ingest([traces_dir / PLANTED / name], tmp_path / name)))
    device = idle._device_work(trace).collect()
    ranks = trace.ranks
    host, calls = idle_causes._host(trace, ranks, device)
    old_host, old_calls = _host_old(trace, ranks, device)
    assert host.equals(old_host) and calls.equals(old_calls)
    pageable = device.filter(pl.col("name").str.contains("Pageable")).height
    if name == "sync":  # 20 pageable copies per rank in the files (2 ranks): their 40
        # cudaMemcpyAsync calls become syncs on top of the calls classified by name
        from traceatlas.analysis.requirements import DEVICE_WORK

        rows = (trace.intervals.select("name", "category")
                .filter(~pl.col("category").is_in((*DEVICE_WORK, "gpu_annotation")))
                .collect())
        by_name = int((idle_causes.classify(rows) == 2).sum())
        assert pageable == 40 and int((host["k"] == 2).sum()) - by_name == 40
