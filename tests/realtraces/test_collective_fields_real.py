"""Collective analyses show what the source has (issue 20): ``mpi_collectives`` fills bytes
and communicator from Extrae's global-op events (checked against the ``.prv`` records
read by hand), and ``collectives`` gives times since the run start, not epoch ns."""

from __future__ import annotations

import warnings
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest

import traceatlas
from traceatlas import analysis

pytestmark = pytest.mark.realtrace

LULESH = "profet-paraver/lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv"
RANK_OFFSETS = {1: 0, 2: 8}
"""Application -> first rank (the reader numbers ranks across the trace's applications)."""


def _open(path: Path, tmp: Path) -> traceatlas.Trace:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return traceatlas.open(traceatlas.ingest(path, tmp / "store"))


def _allreduce_records(prv: Path) -> dict[int, list[tuple[int, int, int]]]:
    """Per rank, in time order: (time, send size, communicator) of each MPI_Allreduce
    entry record (``2:cpu:appl:task:thread:time:type:value...`` with 50000002:10)."""
    out: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    with prv.open() as fh:
        for line in fh:
            if not line.startswith("2:"):
                continue
            f = line.rstrip("\n").split(":")
            pairs = dict(zip(map(int, f[6::2]), map(int, f[7::2]), strict=True))
            if pairs.get(50000002) == 10:
                rank = RANK_OFFSETS[int(f[2])] + int(f[3]) - 1
                out[rank].append((int(f[5]), pairs[50100001], pairs[50100004]))
    return {r: sorted(v) for r, v in out.items()}


def test_mpi_collectives_bytes_and_communicator_from_extrae(traces_dir: Path,
                                                            tmp_path: Path) -> None:
    records = _allreduce_records(traces_dir / LULESH)
    assert len(records) == 8 and {len(v) for v in records.values()} == {5}
    result = analysis.run("mpi_collectives", _open(traces_dir / LULESH, tmp_path))
    table = result.table
    assert table.height == 5 and set(table["ranks"]) == {8}
    comm_ids = {c for v in records.values() for _, _, c in v}
    assert table["communicator"].to_list() == [f"comm {c}" for c in sorted(comm_ids)] * 5
    per = result.extra["per_rank"].join(table.select("instance", "occurrence"), on="instance")
    got = {(int(r["rank"]), int(r["occurrence"])): (int(r["enter_ns"]), int(r["bytes"]))
           for r in per.iter_rows(named=True)}
    expected = {(rank, k): (t, size) for rank, calls in records.items()
                for k, (t, size, _) in enumerate(calls)}
    assert got == expected
    assert table["bytes"].to_list() == [
        max(calls[k][1] for calls in records.values()) for k in range(5)]


def test_collectives_times_are_since_the_run_start(traces_dir: Path, tmp_path: Path) -> None:
    trace = _open(traces_dir / "param-et_replay/dlrm_kineto.tar.gz", tmp_path)
    result = analysis.run("collectives", trace)
    t0 = trace.intervals.select(pl.col("start_ns").min()).collect().item()
    assert t0 > 10**18  # epoch ns in the store
    first_comm = (trace.intervals.filter(pl.col("category").cast(pl.String) == "comm_kernel")
                  .select(pl.col("start_ns").min()).collect().item())
    assert result.table["start_ns"].min() == first_comm - t0
    assert 0 <= result.table["start_ns"].min() < result.table["end_ns"].max() < 10**10
    assert result.extra["per_rank"]["start_ns"].max() < 10**10
    assert f"{t0} ns since the epoch" in result.notes[0]
