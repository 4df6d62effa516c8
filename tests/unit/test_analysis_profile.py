"""profile golden tests: an OTF2 archive written here (otf2.writer, 1 tick = 1 ns) with
nested calls; every expected value is computed by hand in the comments. Also the
exclusive-time primitive (traceatlas.ops.exclusive) on plain arrays.
"""

from __future__ import annotations

import types
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import otf2  # type: ignore[import-untyped]
import polars as pl
import pytest

import traceatlas
from traceatlas.analysis import registry
from traceatlas.errors import InputError
from traceatlas.model.trace import Trace
from traceatlas.ops.exclusive import child_overlap, parents
from traceatlas.testing import otf2 as otf2_calls


def write_otf2(root: Path, monkeypatch: pytest.MonkeyPatch,
               calls: dict[int, list[tuple[str, int, int]]],
               gpu: tuple[tuple[str, int, int], ...] = ()) -> Path:
    """``traceatlas.testing.otf2.write_otf2`` with the realtime timestamp pinned."""
    monkeypatch.setattr(otf2.writer, "time", types.SimpleNamespace(time=lambda: 1.7e9))
    return otf2_calls.write_otf2(root, calls, gpu)


# Rank 0: main [0,100) > compute [10,40) > MPI_Allreduce [20,30); compute [50,60);
#         MPI_Send [70,75).  Rank 1: main [0,100) > compute [10,30); MPI_Allreduce [45,55).
# GPU stream of rank 0: two overlapping kernels (not nested on a stream).
CALLS = {
    0: [("main", 0, 100), ("compute", 10, 40), ("MPI_Allreduce", 20, 30),
        ("compute", 50, 60), ("MPI_Send", 70, 75)],
    1: [("main", 0, 100), ("compute", 10, 30), ("MPI_Allreduce", 45, 55)],
}
GPU = (("sgemm", 10, 30), ("sgemm", 20, 40))


@pytest.fixture
def trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Trace:
    anchor = write_otf2(tmp_path / "a", monkeypatch, CALLS, GPU)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return traceatlas.open(traceatlas.ingest(str(anchor), tmp_path / "s"))


def _rows(table: pl.DataFrame, *cols: str) -> dict[Any, tuple[Any, ...]]:
    key = [c for c in ("rank", "name") if c in table.columns]
    return {tuple(r[k] for k in key) if len(key) > 1 else r[key[0]]:
            tuple(r[c] for c in cols) for r in table.iter_rows(named=True)}


def test_per_rank_exclusive_by_hand(trace: Trace) -> None:
    table = registry.run("profile", trace, {"by": "rank"}).table
    assert _rows(table, "calls", "inclusive_ns", "exclusive_ns") == {
        # rank 0: main 100 - compute 30 - compute 10 - send 5 = 55 (the allreduce is a
        # grandchild: it comes off compute, not main); compute (30 - 10) + 10 = 30
        (0, "main"): (1, 100, 55), (0, "compute"): (2, 40, 30),
        (0, "MPI_Allreduce"): (1, 10, 10), (0, "MPI_Send"): (1, 5, 5),
        # rank 1: main 100 - 20 - 10 = 70
        (1, "main"): (1, 100, 70), (1, "compute"): (1, 20, 20),
        (1, "MPI_Allreduce"): (1, 10, 10),
    }
    # sorted by rank, then exclusive time descending
    assert table["name"].to_list()[:4] == ["main", "compute", "MPI_Allreduce", "MPI_Send"]
    assert set(table["category"].to_list()) == {"region", "mpi"}


def test_over_ranks_statistics(trace: Trace) -> None:
    table = registry.run("profile", trace).table  # by=name is the default
    assert table["name"].to_list() == ["main", "compute", "MPI_Allreduce", "MPI_Send"]
    got = _rows(table, "ranks", "calls", "inclusive_ns", "exclusive_ns", "inclusive_mean_ns",
                "exclusive_mean_ns", "exclusive_min_ns", "exclusive_max_ns")
    assert got == {
        "main": (2, 2, 200, 125, 100, 62, 55, 70),    # mean 62.5 rounds half to even: 62
        "compute": (2, 3, 60, 50, 30, 25, 20, 30),
        "MPI_Allreduce": (2, 2, 20, 20, 10, 10, 10, 10),
        "MPI_Send": (1, 1, 5, 5, 5, 5, 5, 5),          # only rank 0: mean over 1 rank
    }
    imb = dict(zip(table["name"], table["imbalance"], strict=True))
    assert imb["main"] == pytest.approx(70 / 62.5)
    assert imb["compute"] == pytest.approx(30 / 25)
    assert imb["MPI_Send"] == pytest.approx(1.0)
    # all_ranks: MPI_Send averaged over both ranks (rank 1 = 0): mean 2.5, min 0, max/mean 2
    every = registry.run("profile", trace, {"all_ranks": "true"}).table
    send = every.filter(pl.col("name") == "MPI_Send").row(0, named=True)
    assert (send["exclusive_min_ns"], send["imbalance"]) == (0, pytest.approx(2.0))


def test_categories_top_and_device_rows(trace: Trace) -> None:
    mpi = registry.run("profile", trace, {"categories": "mpi"}).table
    # the selection does not change exclusive times: MPI_Allreduce still 20 in total
    assert _rows(mpi, "calls", "exclusive_ns") == {"MPI_Allreduce": (2, 20), "MPI_Send": (1, 5)}
    top = registry.run("profile", trace, {"by": "rank", "top": "1"}).table
    assert top.select("rank", "name").rows() == [(0, "main"), (1, "main")]
    # kernels: not in the default (host) selection. The stream holds enter 10, enter 20,
    # leave 30, leave 40: however the reader pairs them, the two durations add to 40, and
    # on a stream nothing nests, so exclusive = inclusive = 40 (not 40 - child)
    assert "sgemm" not in registry.run("profile", trace).table["name"].to_list()
    result = registry.run("profile", trace, {"categories": "all"})
    assert _rows(result.table, "calls", "inclusive_ns", "exclusive_ns")["sgemm"] == (2, 40, 40)
    assert any("do not nest" in n for n in result.notes)
    with pytest.raises(InputError):
        registry.run("profile", trace, {"categories": "bogus"})


def test_parents_primitive() -> None:
    # one track (key 0): A [0,10) > B [2,5) > C [3,4); zero-length Z at 5; D [6,12)
    # crosses the end of A. Key 1: E [0,10) > F [0,10) (same span: the first listed is
    # not necessarily the parent, but one is the other's). G does not nest (device).
    key = np.array([0, 0, 0, 0, 0, 1, 1, 2], dtype=np.int64)
    start = np.array([0, 2, 3, 5, 6, 0, 0, 1], dtype=np.int64)
    end = np.array([10, 5, 4, 5, 12, 10, 10, 3], dtype=np.int64)
    nests = np.array([True] * 7 + [False])
    parent = parents(key, start, end, nests)
    assert parent[:5].tolist() == [-1, 0, 1, 0, 0]
    assert sorted(parent[5:7].tolist()) == [-1, 5] or sorted(parent[5:7].tolist()) == [-1, 6]
    assert parent[7] == -1
    # D [6,12) under A [0,10): only its overlap, 4 ns, comes off A
    assert child_overlap(parent, start, end).tolist() == [0, 3, 1, 0, 4, 0, 10, 0] or \
        child_overlap(parent, start, end).tolist() == [0, 3, 1, 0, 4, 10, 0, 0]
