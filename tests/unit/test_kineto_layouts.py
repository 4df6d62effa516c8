"""Kineto / Chrome JSON layouts beyond the usual one: empty traces, JSON Array Format."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

import traceatlas


def test_empty_trace_events_ingests_with_zero_intervals(tmp_path: Path) -> None:
    src = tmp_path / "empty.json"
    src.write_text(json.dumps({"traceEvents": [], "distributedInfo": {"rank": 3}}))
    trace = traceatlas.Trace(traceatlas.ingest(src, tmp_path / "s"))
    summary = traceatlas.summarize(trace)
    assert summary["ranks"] == [3]
    assert summary["intervals"] == 0
    assert summary["span_ns"] == 0


def test_json_array_format_is_read(tmp_path: Path) -> None:
    # Chrome's "JSON Array Format": a bare list of events, no metadata, so no rank.
    src = tmp_path / "trace.json"
    src.write_text(json.dumps([
        {"ph": "X", "name": "outer", "pid": 1, "tid": 1, "ts": 1.5, "dur": 2},
        {"ph": "X", "name": "inner", "pid": 1, "tid": 1, "ts": 2, "dur": 0.5},
        {"ph": "i", "name": "mark", "pid": 1, "tid": 1, "ts": 3, "s": "t"},
    ]))
    with pytest.warns(traceatlas.RankInferredWarning):
        trace = traceatlas.Trace(traceatlas.ingest(src, tmp_path / "s"))
    iv = trace.intervals.sort("start_ns").collect()
    # 1.5 us -> 1500 ns, +2 us -> 3500 ns; 2 us -> 2000 ns, +0.5 us -> 2500 ns
    assert iv["start_ns"].to_list() == [1500, 2000]
    assert iv["end_ns"].to_list() == [3500, 2500]
    assert iv["depth"].to_list() == [0, 1]
    assert iv["category"].cast(pl.String).to_list() == ["other", "other"]
    inst = trace.instants.collect()
    assert inst["ts_ns"].to_list() == [3000]
    assert inst["phase"].cast(pl.String).to_list() == ["i"]


def test_array_of_non_objects_is_not_a_trace(tmp_path: Path) -> None:
    src = tmp_path / "timeline.json"
    src.write_text("[[1, 2], [3, 4]]")
    with pytest.raises(traceatlas.UnsupportedFormatError, match="not a Chrome trace"):
        traceatlas.ingest(src, tmp_path / "s")
    assert not (tmp_path / "s").exists()


def test_absolute_microsecond_timestamps_keep_their_nanoseconds(tmp_path: Path) -> None:
    # 1712195495519689.047 us is beyond a double's ns resolution; it must stay exact.
    src = tmp_path / "trace.json"
    src.write_text(
        '{"distributedInfo": {"rank": 0}, "traceEvents": ['
        '{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1712195495519689.047, '
        '"dur": 1.001},'
        '{"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 1712195495519695.812, '
        '"dur": 0.5},'
        '{"ph": "i", "name": "m", "pid": 1, "tid": 1, "ts": 1712195495519700, "s": "t"}]}'
    )
    trace = traceatlas.Trace(traceatlas.ingest(src, tmp_path / "s"))
    iv = trace.intervals.sort("start_ns").collect()
    assert iv["start_ns"].to_list() == [1712195495519689047, 1712195495519695812]
    assert iv["end_ns"].to_list() == [1712195495519690048, 1712195495519696312]
    assert trace.instants.collect()["ts_ns"].to_list() == [1712195495519700000]
