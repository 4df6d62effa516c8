"""``critical_path`` on the real traces of HTA's critical-path tests, ns-resolution and AMD
traces, and the 8-rank DLRM set: the path tiles its region (the breakdown adds up to the
region's length), the forward pass reproduces it, and sync dependencies are found where
the trace records them (counts of ``cuda_sync`` records read from the JSON here)."""

from __future__ import annotations

import gzip
import json
import tarfile
from pathlib import Path

import polars as pl
import pytest

import traceatlas
from traceatlas import analysis

CASES = ("hta/critical_path/simple_add", "hta/critical_path/alexnet",
         "hta/critical_path/cuda_event_sync", "hta/critical_path/cuda_event_sync_multi_stream",
         "hta/critical_path/end_to_end/simple_add/input", "hta/ns_resolution_trace",
         "hta/amd_trace")


def _sync_kinds(directory: Path) -> dict[str, int]:
    """cuda_sync records per kind, counted from the raw JSON (independent of the reader)."""
    out: dict[str, int] = {}
    for f in directory.rglob("*.json*"):
        opener = gzip.open if f.suffix == ".gz" else open
        with opener(f, "rt") as fh:  # type: ignore[operator]
            events = json.load(fh).get("traceEvents", [])
        for e in events:
            if e.get("cat") == "cuda_sync":
                kind = e.get("args", {}).get("cuda_sync_kind", "")
                out[kind] = out.get(kind, 0) + 1
    return out


@pytest.mark.parametrize("case", CASES)
def test_path_tiles_region_and_finds_syncs(traces_dir: Path, case: str) -> None:
    trace = traceatlas.open(traces_dir / case)
    res = analysis.run("critical_path", trace, {"speedup": "category:kernel:1"})
    t = res.table
    assert t.height > 0
    assert (t["start_ns"][1:] == t["end_ns"][:-1]).all()          # contiguous, in order
    length = int(t["end_ns"][-1] - t["start_ns"][0])
    assert int(t["on_path_ns"].sum()) == length
    assert int(res.extra["by_bound"]["ns"].sum()) == length
    w = res.extra["whatif"].row(0, named=True)
    assert w["length_before_ns"] == length and w["gain_ns"] == 0   # factor 1: no change
    deps = dict(res.extra["dependencies"].iter_rows())
    kinds = _sync_kinds(traces_dir / case)
    if kinds.get("Stream Wait Event"):
        assert deps["stream_wait_event"] >= 1
    if kinds.get("Context Sync"):
        assert deps["sync_context"] >= 1
    if kinds.get("Stream Sync"):
        assert deps["sync_stream"] >= 1
    assert deps["launch"] > 0


def test_dlrm_eight_ranks_cross_rank(traces_dir: Path, tmp_path: Path) -> None:
    """All 8 NCCL collectives matched across the 8 ranks; the rank most often last is the
    one whose NCCL kernels start last, counted here from the kernel starts directly."""
    with tarfile.open(traces_dir / "param-et_replay/dlrm_kineto.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    trace = traceatlas.open(tmp_path / "dlrm_kineto")
    res = analysis.run("critical_path", trace)
    assert dict(res.extra["dependencies"].iter_rows())["nccl_collectives"] == 8
    by_rank = res.extra["by_rank"]
    assert by_rank.height == 8 and by_rank["arrivals_last_all"].sum() == 8
    assert abs(by_rank["share"].sum() - 1.0) < 1e-9
    # independent count: per collective occurrence, the rank with the latest start
    k = (trace.intervals.filter(pl.col("category").cast(pl.String) == "comm_kernel")
         .select("rank", "start_ns", pl.col("name").cast(pl.String)).collect()
         .sort("rank", "start_ns")
         .with_columns(occ=pl.int_range(pl.len()).over("rank", "name")))
    last = (k.sort("start_ns").group_by("name", "occ").agg(pl.col("rank").last())
            ["rank"].value_counts().sort("count", descending=True))
    top = by_rank.sort("arrivals_last_all", descending=True)["rank"][0]
    assert top == last["rank"][0]


def test_lulesh_paraver_eight_ranks(traces_dir: Path) -> None:
    """Extrae's LULESH run (8 MPI ranks, 5 iterations): the path crosses ranks through the
    MPI collectives and messages; per rank, the number of collective instances where it
    arrived last equals a plain count from the call starts (per (call name, occurrence
    on the rank) across all 8 ranks, the rank with the latest start); the per-rank and
    per-bound sums add up to the region."""
    trace = traceatlas.open(
        traces_dir / "profet-paraver/lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv")
    res = analysis.run("critical_path", trace)
    t = res.table
    length = int(t["end_ns"][-1] - t["start_ns"][0])
    assert int(t["on_path_ns"].sum()) == length
    assert int(res.extra["by_bound"]["ns"].sum()) == length
    by_rank = res.extra["by_rank"]
    assert by_rank.height == 8 and int(by_rank["ns"].sum()) == length
    assert t["rank"].n_unique() >= 2                                 # crosses ranks
    deps = dict(res.extra["dependencies"].iter_rows())
    assert deps["mpi_collectives"] >= 1 and deps["messages"] >= 1
    calls = (trace.intervals.filter(
        (pl.col("category").cast(pl.String) == "mpi")
        & pl.col("name").cast(pl.String).str.contains(
            r"^MPI_(Allreduce|Barrier|Bcast|Reduce|Allgather\w*|Alltoall\w*)$"))
        .select("rank", "start_ns", pl.col("name").cast(pl.String)).collect()
        .sort("rank", "start_ns")
        .with_columns(occ=pl.int_range(pl.len()).over("rank", "name")))
    full = calls.filter(pl.col("rank").n_unique().over("name", "occ") == 8)
    last = (full.sort("start_ns", "rank").group_by("name", "occ").agg(pl.col("rank").last())
            ["rank"].value_counts())
    expected = dict(zip(last["rank"].to_list(), last["count"].to_list(), strict=True))
    got = {r: n for r, n in by_rank.select("rank", "arrivals_last_all").iter_rows() if n}
    assert got == expected and sum(expected.values()) == deps["mpi_collectives"]
    # waits beside the path: one collective row per rank, the last arrivals' waits small
    waits = res.extra["waits"].filter(pl.col("kind") == "collective")
    assert waits.height == 8
