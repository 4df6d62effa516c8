"""``collectives``, ``annotations``, ``patterns`` and ``counters`` on real traces, checked
against plain computations: JSON read with ``json`` / ``tarfile``, and plain Python loops
(with ``bisect``) over the store's rows, independent of the analyses' as-of joins."""

from __future__ import annotations

import bisect
import gzip
import json
import re
import tarfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceatlas
from traceatlas import analysis

pytestmark = pytest.mark.realtrace

DLRM = "param-et_replay/dlrm_kineto.tar.gz"
NSYS = "nsys-ai/h100_2gpu_1s.sqlite"
CUPTI = "hta/cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz"
DEVICE = ("kernel", "comm_kernel", "memcpy", "memset")


@pytest.fixture(scope="module")
def dlrm(traces_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> traceatlas.Trace:
    out = tmp_path_factory.mktemp("dlrm") / "store"
    return traceatlas.open(traceatlas.ingest(traces_dir / DLRM, out))


def test_dlrm_collectives_skew_from_the_json(dlrm: traceatlas.Trace, traces_dir: Path) -> None:
    # Plain parse: per rank, NCCL kernels by start; key (op word in the name, occurrence).
    starts: dict[tuple[str, int], dict[int, int]] = defaultdict(dict)
    with tarfile.open(traces_dir / DLRM) as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            doc = json.load(tar.extractfile(member))  # type: ignore[arg-type]
            rank = doc["distributedInfo"]["rank"]
            nccl = sorted((e["ts"], e["name"]) for e in doc["traceEvents"]
                          if e.get("cat") == "kernel" and "nccl" in e["name"].lower())
            seen: dict[str, int] = defaultdict(int)
            for ts, name in nccl:
                op = re.search(r"Kernel_([A-Za-z0-9]+)", name).group(1).lower()  # type: ignore[union-attr]
                starts[(op, seen[op])][rank] = round(ts * 1000)
                seen[op] += 1
    assert len(starts) == 8 and all(len(v) == 8 for v in starts.values())

    result = analysis.run("collectives", dlrm)
    table = result.table
    assert table.height == 8 and set(table["ranks"]) == {8}
    assert result.extra["per_rank"].height == 64
    for row in table.to_dicts():
        by_rank = starts[(row["op"], row["occurrence"])]
        assert row["skew_ns"] == max(by_rank.values()) - min(by_rank.values())
        latest = max(by_rank.values())
        assert row["straggler"] == min(r for r, s in by_rank.items() if s == latest)
    stragglers = result.extra["stragglers"]
    assert stragglers["last"].sum() == 8 and set(stragglers["instances"]) == {8}


def _rows(trace: traceatlas.Trace, cats: tuple[str, ...]) -> list[dict[str, Any]]:
    return (trace.intervals.filter(pl.col("category").cast(pl.String).is_in(cats))
            .with_columns(pl.col("name", "category").cast(pl.String))
            .select("rank", "track_id", "start_ns", "end_ns", "name", "category",
                    "correlation")
            .collect().to_dicts())


def _enclosed(trace: traceatlas.Trace, spans: list[dict[str, Any]]
              ) -> dict[int, list[tuple[int, int, int, int]]]:
    """Span index -> device rows (rank, start, end, correlation) launched inside it."""
    launches: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for r in _rows(trace, ("runtime", "driver")):
        if r["correlation"] is not None:
            launches[(r["rank"], r["track_id"])].append((r["start_ns"], r["correlation"]))
    for v in launches.values():
        v.sort()
    device: dict[tuple[int, int], list[tuple[int, int, int, int]]] = defaultdict(list)
    for r in _rows(trace, DEVICE):
        device[(r["rank"], r["correlation"])].append(
            (r["rank"], r["start_ns"], r["end_ns"], r["correlation"]))
    out: dict[int, list[tuple[int, int, int, int]]] = {}
    for i, s in enumerate(spans):
        lst = launches.get((s["rank"], s["track_id"]), [])
        lo = bisect.bisect_left(lst, (s["start_ns"], -1))
        hi = bisect.bisect_left(lst, (s["end_ns"], -1))
        out[i] = [d for _, corr in lst[lo:hi] for d in device.get((s["rank"], corr), [])]
    return out


@pytest.mark.filterwarnings("ignore::traceatlas.errors.RankInferredWarning")
@pytest.mark.parametrize("which", ["dlrm", "nsys"])
def test_annotations_kernel_counts_and_innermost(which: str, dlrm: traceatlas.Trace,
                                                 traces_dir: Path, tmp_path: Path) -> None:
    trace = dlrm.select(ranks=[0, 3]) if which == "dlrm" else traceatlas.open(
        traceatlas.ingest(traces_dir / NSYS, tmp_path / "store"))
    spans = [s for s in _rows(trace, ("annotation", "nvtx")) if s["end_ns"] > s["start_ns"]]
    inside = _enclosed(trace, spans)
    per_name: dict[tuple[int, str], set[Any]] = defaultdict(set)
    innermost: dict[tuple[int, int], tuple[int, int, str]] = {}
    for i, s in enumerate(spans):
        per_name[(s["rank"], s["name"])].update(inside[i])
        for d in inside[i]:
            key, rank_start = (d[0], d[3]), (s["start_ns"], -s["end_ns"], s["name"])
            if key not in innermost or rank_start > innermost[key]:
                innermost[key] = rank_start
    result = analysis.run("annotations", trace, {"categories": "annotation,nvtx"})
    got = {(r["rank"], r["name"]): r["kernels"] for r in result.table.to_dicts()}
    assert got == {k: len(v) for k, v in per_name.items()} | {
        k: 0 for k in got if k not in per_name}
    assert sum(got.values()) > 100
    kernels = result.extra["kernels"].filter(pl.col("innermost").is_not_null())
    assert kernels.height == len(innermost)
    for r in kernels.select("rank", "correlation", "innermost").to_dicts():
        assert innermost[(r["rank"], r["correlation"])][2] == r["innermost"]


def test_patterns_cover_every_launch_under_outermost_ops(dlrm: traceatlas.Trace) -> None:
    trace = dlrm.select(ranks=[0])
    ops = sorted((s for s in _rows(trace, ("cpu_op", "annotation"))
                  if s["name"].startswith("aten::")),
                 key=lambda s: (s["track_id"], s["start_ns"], -s["end_ns"]))
    roots: list[dict[str, Any]] = []
    for s in ops:  # outermost: not inside the previous root of the same track
        prev = roots[-1] if roots else None
        if prev and prev["track_id"] == s["track_id"] and s["start_ns"] < prev["end_ns"]:
            continue
        roots.append(s)
    launched = sum(len(v) for v in _enclosed(trace, roots).values())
    table = analysis.run("patterns", trace, {"op": "^aten::", "length": 1, "top": 0}).table
    assert table["count"].sum() == launched > 100
    whole = analysis.run("patterns", trace, {"op": "^aten::", "top": 0}).table
    assert (whole["count"] * whole["length"]).sum() == launched


def test_cupti_range_counters_match_the_json(traces_dir: Path, tmp_path: Path) -> None:
    with gzip.open(traces_dir / CUPTI, "rt") as fh:
        events = [e for e in json.load(fh)["traceEvents"]
                  if e.get("cat") == "cuda_profiler_range"]
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    for e in events:
        for key, value in e["args"].items():
            values[(e["name"], key)].append(float(value))
    trace = traceatlas.open(traceatlas.ingest(traces_dir / CUPTI, tmp_path / "store"))
    table = analysis.run("counters", trace).table
    assert set(table["source"]) == {"cupti_range"}
    got = {(r["kernel"], r["counter"]): (r["kernels"], r["mean"]) for r in table.to_dicts()}
    assert got.keys() == values.keys()
    for key, vals in values.items():
        assert got[key][0] == len(vals)
        assert got[key][1] == pytest.approx(sum(vals) / len(vals))
