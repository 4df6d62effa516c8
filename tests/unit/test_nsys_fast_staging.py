"""Ingest of ranks whose number is decided after reading (staged, then moved into place):
the parts equal those written directly for the same tables with the rank known.

Staging now goes through Arrow IPC instead of Parquet (issue 14: the staged Parquet
write and read were a quarter of nsys ingest); the expected parts are written by
``write_part`` from the reader's own tables, without staging.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pyarrow.parquet as pq

from traceatlas.ingest import ingest
from traceatlas.io.nsys import read_export
from traceatlas.model.schema import TABLES
from traceatlas.store.layout import part_path
from traceatlas.store.writer import write_part
from traceatlas.testing import nsys as tn


def test_staged_ranks_equal_direct_writes(tmp_path: Path) -> None:
    path = tn.write_export(
        tmp_path / "two.sqlite",
        kernels=[tn.Kernel(5_000_000_100, 5_000_000_900, "gemm", correlation=1, pid=100),
                 tn.Kernel(5_000_000_200, 5_000_000_300, "copy", correlation=2, pid=200)],
        calls=[tn.Call(5_000_000_000, 5_000_000_050, "cudaLaunchKernel_v7000", correlation=1,
                       pid=100),
               tn.Call(5_000_000_010, 5_000_000_060, "cudaLaunchKernel_v7000", correlation=2,
                       pid=200, tid=200)],
        ranges=[tn.Range(4_999_999_000, 5_000_001_000, "ProfilerStep#1", pid=100)],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store = tmp_path / "s.tastore"
        ingest([str(path)], str(store))
        ranks = read_export(str(path), path.name)
    assert [r.rank for r in ranks] == [None, None]  # no MPI rank: staged, then numbered
    direct = tmp_path / "direct"
    for rank, data in enumerate(ranks):  # processes are numbered in the order of their id
        for name in TABLES:
            if name in data.tables and name != "metadata":
                write_part(direct, name, rank, data.tables[name])
                got = pq.read_table(part_path(store, name, rank))
                want = pq.read_table(part_path(direct, name, rank))
                assert got.equals(want), (name, rank)
    got = pq.read_table(part_path(store, "intervals", 0))
    assert got["name"].cast("string").to_pylist() == ["ProfilerStep#1", "cudaLaunchKernel",
                                                      "gemm"]
