"""time_profile golden tests: an OTF2 archive written here (1 tick = 1 ns); expected bin
values computed by hand in the comments."""

from __future__ import annotations

import types
import warnings
from pathlib import Path
from typing import Any

import otf2  # type: ignore[import-untyped]
import polars as pl
import pytest

import traceatlas
from traceatlas.analysis import registry
from traceatlas.model.trace import Trace
from traceatlas.testing import otf2 as otf2_calls


def write_otf2(root: Path, monkeypatch: pytest.MonkeyPatch,
               calls: dict[int, list[tuple[str, int, int]]],
               gpu: tuple[tuple[str, int, int], ...] = ()) -> Path:
    """``traceatlas.testing.otf2.write_otf2`` with the realtime timestamp pinned."""
    monkeypatch.setattr(otf2.writer, "time", types.SimpleNamespace(time=lambda: 1.7e9))
    return otf2_calls.write_otf2(root, calls, gpu)


# Three ranks, run span [0, 100) (main on every rank), so bins=2 -> [0,50), [50,100).
# Rank 0: main > compute [10,40) > MPI_Allreduce [20,30); compute [50,60); MPI_Send [70,75)
# Rank 1: main > compute [10,30); MPI_Allreduce [45,55)  (split across the two bins)
# Rank 2: main > compute [5,15), compute [20,30)
CALLS = {
    0: [("main", 0, 100), ("compute", 10, 40), ("MPI_Allreduce", 20, 30),
        ("compute", 50, 60), ("MPI_Send", 70, 75)],
    1: [("main", 0, 100), ("compute", 10, 30), ("MPI_Allreduce", 45, 55)],
    2: [("main", 0, 100), ("compute", 5, 15), ("compute", 20, 30)],
}


@pytest.fixture
def trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Trace:
    anchor = write_otf2(tmp_path / "a", monkeypatch, CALLS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return traceatlas.open(traceatlas.ingest(str(anchor), tmp_path / "s"))


def _cells(table: pl.DataFrame, col: str) -> dict[tuple[int, str], Any]:
    return {(r["bin"], r["name"]): r[col] for r in table.iter_rows(named=True)}


def test_two_bins_by_hand(trace: Trace) -> None:
    result = registry.run("time_profile", trace, {"bins": "2", "normalize": "true"})
    table = result.table
    assert table.columns == ["bin", "bin_start_ns", "bin_end_ns", "name", "category",
                             "exclusive_ns", "fraction"]
    start = int(table["bin_start_ns"].min())  # type: ignore[arg-type]
    assert sorted({(s - start, e - start) for s, e in
                   table.select("bin_start_ns", "bin_end_ns").rows()}) == [(0, 50), (50, 100)]
    assert _cells(table, "exclusive_ns") == {
        # compute, bin 0: r0 [10,40) minus its allreduce [20,30) = 20; r1 20; r2 10 + 10
        (0, "compute"): 60, (1, "compute"): 10,            # r0 [50,60)
        # allreduce: r0 10 in bin 0; r1 [45,55) split 5 | 5
        (0, "MPI_Allreduce"): 15, (1, "MPI_Allreduce"): 5,
        (0, "MPI_Send"): 0, (1, "MPI_Send"): 5,
        # main, bin 0: r0 50 - 30 (compute [10,40)) = 20; r1 50 - 20 - 5 = 25; r2 50 - 20
        # = 30 -> 75. bin 1: r0 50 - 10 - 5 = 35; r1 50 - 5 = 45; r2 50 -> 130
        (0, "main"): 75, (1, "main"): 130,
    }
    # each bin holds 3 ranks x 50 ns = 150 ns: 60+15+0+75 and 10+5+5+130
    frac = _cells(table, "fraction")
    assert frac[(0, "compute")] == pytest.approx(60 / 150)
    assert frac[(1, "main")] == pytest.approx(130 / 150)
    assert result.extra["idle"]["idle_ns"].to_list() == [0, 0]
    # bins of the table are in order, most time first within a bin
    assert table["name"].to_list()[:4] == ["main", "compute", "MPI_Allreduce", "MPI_Send"]


def test_uneven_edges_and_idle(trace: Trace) -> None:
    # bins=3 over 100 ns: edges floor(k * 100 / 3) = 0, 33, 66, 100
    table = registry.run("time_profile", trace, {"bins": "3", "categories": "mpi"}).table
    start = int(table["bin_start_ns"].min())  # type: ignore[arg-type]
    assert sorted({(s - start, e - start) for s, e in table.select(
        "bin_start_ns", "bin_end_ns").rows()}) == [(0, 33), (33, 66), (66, 100)]
    # MPI only: allreduce r0 [20,30) -> bin 0; r1 [45,55) -> bin 1; send [70,75) -> bin 2
    assert _cells(table, "exclusive_ns") == {
        (0, "MPI_Allreduce"): 10, (1, "MPI_Allreduce"): 10, (2, "MPI_Allreduce"): 0,
        (0, "MPI_Send"): 0, (1, "MPI_Send"): 0, (2, "MPI_Send"): 5}
    # idle = 3 ranks x width - MPI time: 99 - 10, 99 - 10, 102 - 5
    idle = registry.run("time_profile", trace, {"bins": "3", "categories": "mpi"}).extra["idle"]
    assert idle["idle_ns"].to_list() == [89, 89, 97]


def test_default_bins_is_pipit_default(trace: Trace) -> None:
    table = registry.run("time_profile", trace).table
    assert table["bin"].n_unique() == 50  # Pipit's time_profile(num_bins=50)
    # the sum over bins of each function's exclusive time is its flat-profile exclusive
    # time (Pipit's test_time_profile checks the same): main 55 + 70 + 80 = 205
    totals = dict(table.group_by("name").agg(pl.col("exclusive_ns").sum()).rows())
    profile = registry.run("profile", trace).table
    assert totals == dict(profile.select("name", "exclusive_ns").rows())
    assert totals["main"] == 205
