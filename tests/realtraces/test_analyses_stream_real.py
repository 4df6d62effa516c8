"""``overlap``, ``idle`` and ``queue`` on real HTA traces, checked against plain-Python
computations over the same rows (independent of the Polars code), and the missing-data
error on CPU-only traces."""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas.analysis import registry
from traceatlas.cli.main import app
from traceatlas.testing.compare import plain_union_length

pytestmark = pytest.mark.realtrace

GPU_TRACES = [
    "hta/nccl_parser_config/nccl_data.json.gz",                   # NCCL, 1 stream
    "hta/negative_queue_length_values_check/rank0.json.gz",       # NCCL on 3 streams
]
DEVICE = ("kernel", "comm_kernel", "memcpy", "memset")


@pytest.fixture(scope="module", params=GPU_TRACES)
def gpu_trace(request: pytest.FixtureRequest, traces_dir: Path,
              tmp_path_factory: pytest.TempPathFactory) -> traceatlas.Trace:
    out = tmp_path_factory.mktemp("store")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return traceatlas.open(traceatlas.ingest(traces_dir / request.param, out / "s"))


def _rows(trace: traceatlas.Trace, categories: Iterable[str]) -> list[dict[str, Any]]:
    cat = pl.col("category").cast(pl.String)
    return (trace.intervals.filter(cat.is_in(list(categories)))
            .select("rank", "device", "stream", cat.alias("category"), "start_ns", "end_ns",
                    "correlation")
            .collect().to_dicts())


def test_overlap_comm_matches_breakdown_and_plain_union(gpu_trace: traceatlas.Trace) -> None:
    result = registry.run("overlap", gpu_trace)
    breakdown = registry.run("breakdown", gpu_trace).table
    comm_by_rank = breakdown.group_by("rank").agg(pl.col("comm_ns").sum())
    merged = result.table.join(comm_by_rank, on="rank", suffix="_breakdown")
    assert merged.height == result.table.height > 0
    assert (merged["comm_ns"] == merged["comm_ns_breakdown"]).all()

    comm: dict[int, list[tuple[int, int]]] = defaultdict(list)
    comp: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for r in _rows(gpu_trace, ("kernel", "comm_kernel")):
        iv = (int(r["start_ns"]), int(r["end_ns"]))
        (comm if r["category"] == "comm_kernel" else comp)[r["rank"]].append(iv)
    for row in result.table.to_dicts():
        c, k = comm[row["rank"]], comp[row["rank"]]
        overlapped = plain_union_length(c) + plain_union_length(k) - plain_union_length(c + k)
        assert row["overlapped_ns"] == overlapped
        assert row["overlap_pct"] == pytest.approx(overlapped * 100 / plain_union_length(c))

    # In-flight series: the integral of in_flight is the summed kernel time.
    series = result.extra["series"]
    integral = ((series["end_ns"] - series["start_ns"]) * series["in_flight"]).sum()
    assert integral == sum(e - s for ivs in (comm, comp) for v in ivs.values() for s, e in v)
    assert (series["in_flight"] >= 0).all()


def test_idle_categories_add_up_to_span_minus_busy(gpu_trace: traceatlas.Trace) -> None:
    table = registry.run("idle", gpu_trace).table
    per_stream: dict[tuple[int, int, int], list[tuple[int, int]]] = defaultdict(list)
    for r in _rows(gpu_trace, DEVICE):
        key = (r["rank"], -1 if r["device"] is None else r["device"],
               -1 if r["stream"] is None else r["stream"])
        per_stream[key].append((int(r["start_ns"]), int(r["end_ns"])))
    assert table.height == len(per_stream)
    for row in table.to_dicts():
        ivs = per_stream[(row["rank"], row["device"], row["stream"])]
        span = max(e for _, e in ivs) - min(s for s, _ in ivs)
        idle = span - plain_union_length(ivs)
        assert row["idle_ns"] == idle
        assert row["host_wait_ns"] + row["kernel_wait_ns"] + row["other_ns"] == idle


def test_queue_series_never_negative_and_integral(gpu_trace: traceatlas.Trace) -> None:
    result = registry.run("queue", gpu_trace)
    series = result.extra["series"]
    assert series.height > 0
    assert (series["queue_length"] >= 0).all()
    last = series.group_by("rank", "device", "stream").agg(pl.col("queue_length").last())
    assert (last["queue_length"] == 0).all()

    # Independent: the area under each stream's queue length = sum over launch calls of
    # (last end - min(launch start, first start)) per stream the call's activities run on
    # (a launch call with several activities, e.g. a CUDA graph, is one queue entry).
    cat = pl.col("category").cast(pl.String)
    launch_rows = (gpu_trace.intervals.filter(cat.is_in(["runtime", "driver"]))
                   .select("rank", "correlation", "start_ns").collect().rows())
    launch: dict[tuple[int, int], int] = {}
    for rank, corr, start in launch_rows:
        if corr is not None:
            launch[(rank, corr)] = min(start, launch.get((rank, corr), start))
    entries: dict[tuple[int, int, int, int], tuple[int, int]] = {}
    for r in _rows(gpu_trace, DEVICE):
        got = launch.get((r["rank"], r["correlation"]))
        if got is not None:
            key = (r["rank"], r["device"], r["stream"], r["correlation"])
            first, last = entries.get(key, (got, int(r["end_ns"])))
            entries[key] = (min(first, int(r["start_ns"])), max(last, int(r["end_ns"])))
    area: dict[tuple[int, int, int], int] = defaultdict(int)
    for (rank, device, stream, _), (first, last) in entries.items():
        area[(rank, device, stream)] += last - first
    timed = series.with_columns(
        dur=pl.col("ts_ns").shift(-1).over("rank", "device", "stream") - pl.col("ts_ns"))
    measured = timed.group_by("rank", "device", "stream").agg(
        (pl.col("dur") * pl.col("queue_length")).sum())
    assert {tuple(k): v for *k, v in measured.rows()} == dict(area)

    bandwidth = result.extra["bandwidth"]
    assert bandwidth.height > 0
    assert (bandwidth["gbps"].drop_nulls() > 0).all()


@pytest.mark.parametrize("name", ["idle", "overlap", "queue"])
@pytest.mark.parametrize("trace", ["hta/cpu_only", "torch-cpu-gloo"])
def test_cpu_only_trace_is_missing_data(traces_dir: Path, name: str, trace: str) -> None:
    done = CliRunner().invoke(app, ["analyze", name, str(traces_dir / trace)])
    assert done.exit_code == 2, done.output
    assert "device activity" in done.output
