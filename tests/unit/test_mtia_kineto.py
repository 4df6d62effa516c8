"""MTIA Kineto events in the canonical categories, on a small hand-written trace.

Device events share one Kineto category (``mtia_ccp_events``): DMA requests (a
``direction`` in args) are memcpy, stream events sync, execution wrappers other, hccl
communication, the rest compute kernels; ``mtia_runtime`` calls are launches linked by
``args.correlation``. Metadata (``M``) events at ts 0 are neither outliers nor dropped.
Every expected number below is worked out by hand from the events (times in us).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import traceatlas
from traceatlas import analysis
from traceatlas.errors import DataQualityWarning
from traceatlas.model.categories import mtia_category
from traceatlas.model.trace import Trace

T = 5_000_000_000
"""Run start (us): far from the clock's zero, as in a real trace."""
US = 1000


def _x(name: str, cat: str, pid: int, tid: int, ts: int, dur: int,
       **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": T + ts,
            "dur": dur, "args": args}


def _meta(kind: str, pid: int, tid: int, **args: Any) -> dict[str, Any]:
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "ts": 0, "args": args}


def _events() -> list[dict[str, Any]]:
    host = [
        _x("runFunction - job_prep_and_submit_for_execution", "mtia_runtime", 100, 100, 0,
           10, correlation=1),
        _x("enqueueCommand memcpyHtoDAsync", "mtia_runtime", 100, 100, 30, 4, correlation=3),
        _x("runFunction - job_prep_and_submit_for_execution", "mtia_runtime", 100, 100, 42,
           3, correlation=2),
    ]
    device = [
        _x("add-dtype_Float", "mtia_ccp_events", 9, 4, 15, 20, correlation=1, stream=1),
        _x("dma_request", "mtia_ccp_events", 9, 4, 30, 10, correlation=3, stream=1,
           direction="HOST_TO_DEVICE", size=64, sqid=1),
        _x("fc-dtype_Float", "mtia_ccp_events", 9, 4, 50, 30, correlation=2, stream=1),
        _x("hccl_allreduce", "mtia_ccp_events", 9, 6, 60, 10, stream=3),
        _x("dma_request", "mtia_ccp_events", 9, 801, 90, 5, direction="DEVICE_TO_HOST",
           size=32, sqid=0),
        _x("event_wait", "mtia_ccp_events", 9, 5, 0, 50, stream=2, wait_on_stream=1),
        _x("pe_exe", "mtia_ccp_events", 9, 5, 100, 10, stream=2),
    ]
    flows = [{"ph": ph, "cat": "ac2g", "name": "ac2g", "id": c, "pid": pid, "tid": tid,
              "ts": T + ts, **({"bp": "e"} if ph == "f" else {})}
             for c, (cpu, gpu) in {1: (0, 15), 3: (30, 30), 2: (42, 50)}.items()
             for ph, pid, tid, ts in (("s", 100, 100, cpu), ("f", 9, 4, gpu))]
    meta = [_meta("process_name", 9, 0, name="MTIA 9"),
            _meta("process_labels", 9, 0, labels="MTIA 9"),
            _meta("thread_name", 9, 4, name="Stream 1 FW"),
            _meta("thread_name", 9, 801, name="DMA_REQUEST"),
            _meta("process_name", 100, 0, name="python"),
            _meta("thread_name", 100, 100, name="main")]
    return meta + host + device + flows


def _ingest(tmp_path: Path, events: list[dict[str, Any]]) -> Trace:
    path = tmp_path / "mtia.json"
    path.write_text(json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": 0},
                                "traceEvents": events}))
    return traceatlas.open(traceatlas.ingest(path, tmp_path / "store"))


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Trace:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataQualityWarning)  # no warning at all
        return _ingest(tmp_path_factory.mktemp("mtia"), _events())


def test_categories_kinds_bytes_device_stream(trace: Trace) -> None:
    rows = trace.intervals.filter(pl.col("source_category") == "mtia_ccp_events").sort(
        "start_ns", "name").select(
        pl.col("name").cast(pl.String), pl.col("category").cast(pl.String),
        pl.col("memcpy_kind").cast(pl.String), "bytes", "device", "stream").collect().rows()
    assert rows == [
        ("event_wait", "sync", None, None, 9, 2),
        ("add-dtype_Float", "kernel", None, None, 9, 1),
        ("dma_request", "memcpy", "HtoD", 64, 9, 1),
        ("fc-dtype_Float", "kernel", None, None, 9, 1),
        ("hccl_allreduce", "comm_kernel", None, None, 9, 3),
        ("dma_request", "memcpy", "DtoH", 32, 9, 801),  # no stream arg: the thread id
        ("pe_exe", "other", None, None, 9, 2),
    ]
    runtime = trace.intervals.filter(pl.col("source_category") == "mtia_runtime").collect()
    assert runtime["category"].cast(pl.String).to_list() == ["runtime"] * 3


def test_metadata_kept_and_names_tracks(trace: Trace) -> None:
    meta = trace.metadata.filter(pl.col("key") == "chrome_metadata_events").collect()
    assert len(json.loads(meta["value"][0])) == 6
    names = dict(trace.tracks.filter(pl.col("kind") == "gpu_stream").select(
        "stream", "name").collect().rows())
    assert names[1] == "Stream 1 FW" and names[801] == "DMA_REQUEST"


def test_breakdown_by_hand(trace: Trace) -> None:
    row = analysis.run("breakdown", trace).table.row(0, named=True)
    # device work: kernels [15,35] [50,80]; memcpy [30,40] [90,95]; comm [60,70]
    assert {k: row[k] for k in ("device", "span_ns", "busy_ns", "compute_ns", "comm_ns",
                                 "exposed_comm_ns", "memory_ns", "exposed_memory_ns",
                                 "idle_ns")} == {
        "device": 9, "span_ns": 80 * US, "busy_ns": 60 * US, "compute_ns": 50 * US,
        "comm_ns": 10 * US, "exposed_comm_ns": 0, "memory_ns": 15 * US,
        "exposed_memory_ns": 10 * US, "idle_ns": 20 * US}


def test_launch_by_hand(trace: Trace) -> None:
    table = analysis.run("launch", trace).table.sort("correlation")
    assert table.select("correlation", "category", "cpu_launch_ns", "gpu_ns",
                        "launch_delay_ns").rows() == [
        (1, "kernel", 10 * US, 20 * US, 5 * US),  # call ends 10, kernel starts 15
        (2, "kernel", 3 * US, 30 * US, 5 * US),   # call ends 45, kernel starts 50
        (3, "memcpy", 4 * US, 10 * US, 0),        # DMA starts before the call ends
    ]


def test_idle_by_hand(trace: Trace) -> None:
    table = analysis.run("idle", trace).table
    got = {r["stream"]: (r["idle_ns"], r["host_wait_ns"], r["kernel_wait_ns"])
           for r in table.iter_rows(named=True)}
    # stream 1: [15,35] [30,40] [50,80]; the gap 40..50 waits for the call at 42
    assert got[1] == (10 * US, 10 * US, 0)
    assert got[801][0] == 0 and got[3][0] == 0
    assert 2 not in got  # stream events and wrappers are not device work


def test_queue_by_hand(trace: Trace) -> None:
    result = analysis.run("queue", trace)
    row = result.table.filter(pl.col("stream") == 1).row(0, named=True)
    # +1 at 0, 30, 42; -1 at 35, 40, 80: lengths 1 [0,30] 2 [30,35] 1 [35,40] 0 [40,42]
    # 1 [42,80] -> (30 + 10 + 5 + 38) / 80
    assert (row["launches"], row["span_ns"], row["max_queue_length"], row["empty_ns"]) == (
        3, 80 * US, 2, 2 * US)
    assert row["mean_queue_length"] == pytest.approx(83 / 80)
    bandwidth = {r["kind"]: (r["count"], r["bytes"], r["time_ns"])
                 for r in result.extra["bandwidth"].iter_rows(named=True)}
    assert bandwidth == {"HtoD": (1, 64, 10 * US), "DtoH": (1, 32, 5 * US)}


def test_kernels_totals_by_hand(trace: Trace) -> None:
    table = analysis.run("kernels", trace, {"memory": True}).table
    assert dict(zip(table["name"], zip(table["count"], table["total_ns"], strict=True),
                    strict=True)) == {
        "add-dtype_Float": (1, 20 * US), "fc-dtype_Float": (1, 30 * US),
        "hccl_allreduce": (1, 10 * US), "dma_request": (2, 15 * US)}


def test_real_events_at_ts_zero_are_still_set_aside(tmp_path: Path) -> None:
    """Only the metadata is exempt: one complete event at ts 0 is counted, not the 6 M."""
    events = _events()
    events.append({"ph": "X", "cat": "cpu_op", "name": "stray", "pid": 100, "tid": 100,
                   "ts": 0, "dur": 1})
    with pytest.warns(DataQualityWarning, match=r"had 1 event\(s\) at ts 0") as caught:
        trace = _ingest(tmp_path, events)
    assert not any("set aside" in str(w.message) and "had 1 " not in str(w.message)
                   for w in caught)
    names = trace.intervals.select(pl.col("name").cast(pl.String)).collect()["name"]
    assert "stray" not in names.to_list()
    meta = trace.metadata.filter(pl.col("key") == "chrome_metadata_events").collect()
    assert len(json.loads(meta["value"][0])) == 6


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=30))
def test_a_direction_always_means_memcpy(name: str) -> None:
    assert mtia_category(name, has_direction=True) == "memcpy"
    assert mtia_category(name) in {"memcpy", "sync", "comm_kernel", "other", "kernel"}
    if not name.lower().startswith(("dma", "event_", "hccl", "job_exe", "packet", "pe_exe",
                                    "cpum_exe", "collective_subgraph")):
        assert mtia_category(name) == "kernel"
