"""load_imbalance golden tests: an OTF2 archive written here (1 tick = 1 ns) where rank 0
does 1.5x the compute of the others; expected values computed by hand."""

from __future__ import annotations

import types
import warnings
from pathlib import Path

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


# compute per rank: r0 30 ns, r1 20, r2 20 (rank 0 does 1.5x the work of the others).
# main [0,100) on each: exclusive r0 100 - 30 - 10 (allreduce) = 60, r1 100 - 20 - 10 = 70,
# r2 100 - 20 = 80 (r2 has no allreduce).
CALLS = {
    0: [("main", 0, 100), ("compute", 10, 40), ("MPI_Allreduce", 50, 60)],
    1: [("main", 0, 100), ("compute", 10, 30), ("MPI_Allreduce", 50, 60)],
    2: [("main", 0, 100), ("compute", 5, 15), ("compute", 20, 30)],
}


@pytest.fixture
def trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Trace:
    anchor = write_otf2(tmp_path / "a", monkeypatch, CALLS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return traceatlas.open(traceatlas.ingest(str(anchor), tmp_path / "s"))


def test_rank_doing_one_and_a_half_times_the_work(trace: Trace) -> None:
    table = registry.run("load_imbalance", trace).table
    assert table.columns == ["name", "category", "ranks", "mean_ns", "max_ns", "min_ns",
                             "imbalance", "top_ranks"]
    rows = {r["name"]: r for r in table.iter_rows(named=True)}
    compute = rows["compute"]
    # 1.5 / ((1.5 + 1 + 1) / 3) = 30 / (70 / 3) = 9 / 7 = 1.2857...; mean 23.33 -> 23
    assert compute["imbalance"] == pytest.approx(9 / 7)
    assert (compute["ranks"], compute["mean_ns"], compute["max_ns"], compute["min_ns"],
            compute["top_ranks"]) == (3, 23, 30, 20, "0")
    # main: 60, 70, 80 -> mean 70, max 80 on rank 2
    assert (rows["main"]["mean_ns"], rows["main"]["imbalance"], rows["main"]["top_ranks"]) \
        == (70, pytest.approx(80 / 70), "2")
    # sorted by mean descending (Pipit's order)
    assert table["name"].to_list() == ["main", "compute", "MPI_Allreduce"]


def test_params(trace: Trace) -> None:
    # two most loaded ranks; ties (r1 and r2 both 20) go to the lower rank
    top = registry.run("load_imbalance", trace, {"num_ranks": "2"}).table
    assert dict(top.select("name", "top_ranks").rows())["compute"] == "0,1"
    # allreduce on ranks 0 and 1 only: Pipit's mean is over those (imbalance 1); over all
    # three ranks: mean 20/3, max 10 -> 1.5
    rows = dict(registry.run("load_imbalance", trace).table.select("name", "imbalance").rows())
    assert rows["MPI_Allreduce"] == pytest.approx(1.0)
    every = registry.run("load_imbalance", trace, {"all_ranks": "true"}).table
    allreduce = every.filter(pl.col("name") == "MPI_Allreduce").row(0, named=True)
    assert (allreduce["imbalance"], allreduce["min_ns"], allreduce["mean_ns"]) == (
        pytest.approx(1.5), 0, 7)
    # inclusive: main is 100 everywhere -> imbalance 1
    inc = registry.run("load_imbalance", trace, {"metric": "inclusive"}).table
    assert dict(inc.select("name", "imbalance").rows())["main"] == pytest.approx(1.0)
