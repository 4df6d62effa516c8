"""Memory counters on real traces, against values taken from the files with the
standard library (``json``/``gzip``) and, for HTA's raw memory timeline, against the
numbers HTA's own test publishes (``tests/test_memory_analysis.py``: ``sizes[744]``)."""

from __future__ import annotations

import gzip
import itertools
import json
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceatlas
from traceatlas.engine import LocalEngine
from traceatlas.errors import DataQualityWarning
from traceatlas.io.kineto import KinetoReader
from traceatlas.io.memory_timeline import CATEGORIES, MemoryTimelineReader
from traceatlas.io.sources import Source

pytestmark = pytest.mark.realtrace

WITH_TOTALS = [
    "tracelens/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "tracelens/traces/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "hta/df_index_resolver/df_index_resolver.json.gz",
]
WITHOUT_TOTALS = ("kineto-tb_plugin/samples/resnet50_num_workers_0/"
                  "worker0.1623143089861.pt.trace.json.gz")
LABEL = {0: "CPU", 1: "GPU", 6: "GPU"}


def _memory_events(path: Path) -> dict[str, list[dict[str, Any]]]:
    """Device label -> its [memory] events' args (+ ts), ordered by ts then file order."""
    with gzip.open(path) as fh:
        events = json.load(fh)["traceEvents"]
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e.get("name") == "[memory]":
            a = e["args"]
            dev = "CPU" if a["Device Type"] == 0 else f"{LABEL[a['Device Type']]} {a['Device Id']}"
            by[dev].append({**a, "ts": float(e["ts"])})
    for evs in by.values():
        evs.sort(key=lambda a: a["ts"])  # stable: file order among equal times
    return by


def _read(path: Path) -> tuple[dict[str, Any], list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tables = KinetoReader().read(Source(str(path)), threads=2)[0].tables
    return tables, [str(w.message) for w in caught
                    if issubclass(w.category, DataQualityWarning)]


def _values(tables: dict[str, Any]) -> dict[str, list[float]]:
    names = {r["track_id"]: r["name"] for r in tables["tracks"].to_pylist()}
    out: dict[str, list[float]] = defaultdict(list)
    counters = tables["counters"]
    for tid, value in zip(counters["track_id"].to_pylist(), counters["value"].to_pylist(),
                          strict=True):
        out[names[tid]].append(value)
    return out


@pytest.mark.parametrize("rel", WITH_TOTALS)
def test_curves_equal_total_allocated_and_bytes_deltas(traces_dir: Path, rel: str) -> None:
    path = traces_dir / rel
    expected = _memory_events(path)
    tables, quality = _read(path)
    assert not [m for m in quality if "memory" in m]
    got = _values(tables)
    for dev, evs in expected.items():
        alloc = got[f"{dev} memory allocated"]
        assert alloc == [float(a["Total Allocated"]) for a in evs]
        assert got[f"{dev} memory reserved"] == [float(a["Total Reserved"]) for a in evs]
        # The file is self-consistent in this order: each step is the event's Bytes.
        steps = [b - a for a, b in itertools.pairwise(alloc)]
        assert steps == [float(a["Bytes"]) for a in evs[1:]]
    assert sum(r["name"] == "[memory]" for r in tables["instants"].to_pylist()) == sum(
        map(len, expected.values()))


def test_old_trace_without_totals_is_rebuilt(traces_dir: Path) -> None:
    path = traces_dir / WITHOUT_TOTALS
    expected = _memory_events(path)
    assert all("Total Allocated" not in a for evs in expected.values() for a in evs)
    tables, quality = _read(path)
    rebuilt = [m for m in quality if "rebuilt" in m]
    assert len(rebuilt) == 1
    got = _values(tables)
    for dev, evs in expected.items():
        running, curve = 0, []
        for a in evs:
            running += a["Bytes"]
            curve.append(float(running))
        assert got[f"{dev} memory allocated"] == curve
        assert f"{dev} memory reserved" not in got


def test_store_keeps_the_curve(traces_dir: Path, tmp_path: Path) -> None:
    """Through ingest: the store holds GPU 0's samples (the file's Total Allocated
    values), its latest is the file's last event's, its peak the file's maximum."""
    path = traces_dir / WITH_TOTALS[0]
    evs = _memory_events(path)["GPU 0"]
    traceatlas.ingest(path, tmp_path / "s", engine=LocalEngine(max_workers=1))
    trace = traceatlas.Trace(tmp_path / "s")
    tracks = trace.tracks.filter(pl.col("name") == "GPU 0 memory allocated").collect()
    assert tracks["kind"].cast(pl.String).to_list() == ["counter"]
    assert tracks["device"].to_list() == [0]
    samples = trace.counters.join(tracks.lazy().select("rank", "track_id"),
                                  on=["rank", "track_id"]).collect().sort("ts_ns")
    assert evs[-1]["ts"] > evs[-2]["ts"]  # the last event's time is unique
    assert samples["value"].to_list()[-1] == evs[-1]["Total Allocated"]
    assert sorted(samples["value"].to_list()) == sorted(a["Total Allocated"] for a in evs)
    assert samples["value"].max() == max(a["Total Allocated"] for a in evs)
    assert samples["name"].cast(pl.String).unique().to_list() == [
        "GPU 0 memory allocated (bytes)"]


def _hta_process_raw_events(raw: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """HTA's ``MemoryAnalysis._process_raw_events`` loop, retyped from its source."""
    times: list[int] = []
    sizes: list[list[int]] = []
    t_min = -1
    for t, _, numbytes, category in raw:
        if t_min == -1 or (t < t_min and t > 0):
            t_min = t
        if len(times) == 0:
            times.append(t)
            sizes.append([0] * 8)
        elif t != times[-1]:
            times.append(t)
            sizes.append(sizes[-1].copy())
        sizes[-1][category] += numbytes
    return [t_min if t < 0 else t for t in times], sizes


HTA_SIZES_744 = [102440608.0, 102228128.0, 19395584.0, 0.0, 2618160128.0, 58417152.0,
                 41811968.0, 25494440.0]
"""HTA tests/test_memory_analysis.py: ``sizes[744]`` of this very file."""


def test_hta_raw_memory_timeline(traces_dir: Path) -> None:
    path = traces_dir / "hta" / "memory_analysis" / "memory_timeline.raw.gz"
    with gzip.open(path) as fh:
        raw = json.load(fh)
    times, sizes = _hta_process_raw_events(raw)
    assert sizes[744] == HTA_SIZES_744
    source = Source(str(path))
    assert traceatlas.io.registry.detect(source).name == "memory-timeline"
    tables = MemoryTimelineReader().read(source)[0].tables
    names = {r["track_id"]: r["name"] for r in tables["tracks"].to_pylist()}
    assert sorted(names.values()) == sorted(f"memory timeline: {c}" for c in CATEGORIES)
    counters = pl.from_arrow(tables["counters"])
    assert isinstance(counters, pl.DataFrame)
    for i in (0, 1, 744, 5000, len(times) - 1):
        for cat, name in enumerate(CATEGORIES):
            track = next(t for t, n in names.items() if n == f"memory timeline: {name}")
            rows = counters.filter(pl.col("track_id") == track)
            assert rows.height == len(times)
            assert rows["ts_ns"][i] == times[i]
            assert rows["value"][i] == sizes[i][cat], (i, name)
