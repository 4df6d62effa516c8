"""The engines give byte-for-byte the same tables: inline (LocalEngine(1)), a process
pool (LocalEngine(2)) and a Dask LocalCluster (DaskEngine(n_workers=2))."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceatlas
from traceatlas.engine import LocalEngine
from traceatlas.model.schema import TABLES

N_RANKS = 3
BASE_NS = 1_700_000_000_000_000_000


def _rank_trace(rank: int) -> dict[str, Any]:
    """A tiny Kineto trace: step marker, cpu_op, launch, kernel (+ NCCL kernel), flow."""
    t0 = 100 + 10 * rank  # us, relative to baseTimeNanoseconds
    pid = 1000 + rank
    corr = 50 + rank
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": N_RANKS},
        "baseTimeNanoseconds": BASE_NS,
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
             "args": {"name": "python"}},
            {"ph": "M", "name": "process_name", "pid": 0, "tid": 0,
             "args": {"name": "python"}},
            {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0,
             "args": {"labels": "GPU 0"}},
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": pid,
             "args": {"name": "thread main"}},
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": pid,
             "tid": pid, "ts": t0, "dur": 200, "args": {"External id": 1}},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": pid,
             "ts": t0 + 5, "dur": 40.5, "args": {"External id": 2}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid,
             "tid": pid, "ts": t0 + 10, "dur": 4.25,
             "args": {"correlation": corr, "External id": 2}},
            {"ph": "X", "cat": "kernel", "name": "sgemm_128x64", "pid": 0, "tid": 7,
             "ts": t0 + 20, "dur": 30.125,
             "args": {"correlation": corr, "External id": 2, "device": 0, "stream": 7,
                      "grid": [4, 1, 1], "block": [128, 1, 1]}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid,
             "tid": pid, "ts": t0 + 60, "dur": 3,
             "args": {"correlation": corr + 100, "External id": 3}},
            {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float",
             "pid": 0, "tid": 20, "ts": t0 + 70, "dur": 25,
             "args": {"correlation": corr + 100, "External id": 3, "device": 0,
                      "stream": 20}},
            {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": pid, "tid": pid,
             "ts": t0 + 10},
            {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": 0, "tid": 7,
             "ts": t0 + 20, "bp": "e"},
            {"ph": "i", "cat": "cpu_instant_event", "name": "mark", "pid": pid, "tid": pid,
             "ts": t0 + 1, "s": "t"},
        ],
    }


@pytest.fixture
def three_ranks(tmp_path: Path) -> Path:
    src = tmp_path / "traces"
    src.mkdir()
    # Written in an order other than the rank order: ranks come from distributedInfo.
    for rank in (2, 0, 1):
        (src / f"host-{(rank * 7) % 3}-trace-{rank}.json").write_text(
            json.dumps(_rank_trace(rank))
        )
    return src


def _canonical(frame: pl.DataFrame) -> pl.DataFrame:
    """Categoricals as strings, rows sorted by every sortable column."""
    frame = frame.with_columns(
        pl.col(name).cast(pl.String)
        for name, dtype in frame.schema.items()
        if isinstance(dtype, pl.Categorical | pl.Enum)
    )
    keys = [n for n, d in frame.schema.items() if not isinstance(d, pl.List | pl.Struct)]
    return frame.sort(keys, nulls_last=True)


def _tables(store: Path) -> dict[str, pl.DataFrame]:
    trace = traceatlas.Trace(store)
    return {name: _canonical(trace.scan(name).collect()) for name in sorted(TABLES)}


def _assert_same(a: Path, b: Path) -> None:
    ta, tb = _tables(a), _tables(b)
    for name in ta:
        assert ta[name].schema == tb[name].schema, name
        assert ta[name].equals(tb[name]), f"table {name} differs:\n{ta[name]}\n{tb[name]}"
    ma, mb = traceatlas.Trace(a).manifest, traceatlas.Trace(b).manifest
    assert ma["ranks"] == mb["ranks"]
    assert [(s["rank"], s["path"]) for s in ma["sources"]] == [
        (s["rank"], s["path"]) for s in mb["sources"]
    ]


def _check_content(store: Path) -> None:
    trace = traceatlas.Trace(store)
    assert trace.ranks == [0, 1, 2]
    summary = traceatlas.summarize(trace)
    assert summary["intervals"] == 6 * N_RANKS
    assert summary["by_category"]["kernel"] == N_RANKS
    assert summary["by_category"]["comm_kernel"] == N_RANKS
    assert summary["by_category"]["step"] == N_RANKS
    flows = trace.flows.collect()
    assert flows.height == N_RANKS
    assert flows["src_track_id"].null_count() == 0
    assert flows["dst_track_id"].null_count() == 0


@pytest.fixture
def inline_store(three_ranks: Path, tmp_path: Path) -> Path:
    store = traceatlas.ingest(three_ranks, tmp_path / "inline", engine=LocalEngine(max_workers=1))
    _check_content(store)
    return store


def test_local_pool_matches_inline(three_ranks: Path, inline_store: Path, tmp_path: Path) -> None:
    pooled = traceatlas.ingest(three_ranks, tmp_path / "pool", engine=LocalEngine(max_workers=2))
    _check_content(pooled)
    _assert_same(inline_store, pooled)


@pytest.mark.dask
def test_dask_matches_inline(three_ranks: Path, inline_store: Path, tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    from traceatlas.engine.dask import DaskEngine

    engine = DaskEngine(n_workers=2)
    try:
        assert engine.workers(N_RANKS) == 2
        store = traceatlas.ingest(three_ranks, tmp_path / "dask", engine=engine)
    finally:
        engine.close()
    _check_content(store)
    _assert_same(inline_store, store)
    assert traceatlas.Trace(store).manifest["producer"]["engine"] == "dask"


def _pool_size(_: int) -> tuple[str | None, int]:
    import os

    import polars

    return os.environ.get("POLARS_MAX_THREADS"), polars.thread_pool_size()


@pytest.mark.dask
@pytest.mark.parametrize("preset", [None, "2"])
def test_dask_local_workers_size_polars_to_their_threads(
    monkeypatch: pytest.MonkeyPatch, preset: str | None
) -> None:
    """A LocalCluster's worker runs one task at a time, so its Polars pool has one thread
    (Polars would size it to every core: N workers, N x N threads); a value the user set
    in the environment is inherited instead."""
    pytest.importorskip("distributed")
    from traceatlas.engine.dask import DaskEngine

    if preset is None:
        monkeypatch.delenv("POLARS_MAX_THREADS", raising=False)
    else:
        monkeypatch.setenv("POLARS_MAX_THREADS", preset)
    engine = DaskEngine(n_workers=1)
    try:
        got = engine.map(_pool_size, [0, 1])
    finally:
        engine.close()
    want = preset or "1"
    assert got == [(want, int(want))] * 2
