"""Analyses mapped over rank batches (``analysis.partitioned``): batching, the note merge,
the declarations, and whole-trace vs partitioned results on a synthetic 256-rank MPI
trace (expected = the same analysis run whole in one process: a second code path)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import traceatlas
from traceatlas.analysis import registry
from traceatlas.analysis.base import Result
from traceatlas.analysis.partitioned import (
    concat_counts,
    is_partitioned,
    rank_batches,
    run_partitioned,
)
from traceatlas.engine import LocalEngine
from traceatlas.ingest import ingest
from traceatlas.testing.mpi import write_mpi_trace


def test_rank_batches_cover_every_rank_once_in_order() -> None:
    ranks = [0, 2, 3, 5, 8, 9, 11]
    batches = rank_batches(ranks, 3)
    assert batches == [(0, 2, 3), (5, 8, 9), (11,)]
    assert rank_batches(ranks, 0) == [(r,) for r in ranks]  # at least one rank a task


def test_concat_counts_sums_counts_keeps_other_notes() -> None:
    one = Result(pl.DataFrame({"rank": [0], "x": [1]}),
                 notes=["64 device activities without a matched launch",
                        "device -1: no device index", "rank(s) 0: no correlation ids"])
    two = Result(pl.DataFrame({"rank": [1], "x": [2]}),
                 notes=["64 device activities without a matched launch",
                        "3 of 10 rows, 2.5 us"])
    three = Result(pl.DataFrame({"rank": [2], "x": [3]}),
                   notes=["1 of 7 rows, 2.5 us", "device -1: no device index"])
    out = concat_counts([one, two, three], {})
    assert out.table["rank"].to_list() == [0, 1, 2]
    # 64 + 64; 3 + 1 of 10 + 7; the decimal and the negative device index are not counts
    assert out.notes == ["128 device activities without a matched launch",
                         "device -1: no device index", "rank(s) 0: no correlation ids",
                         "4 of 17 rows, 2.5 us"]


def test_declarations_follow_parameters() -> None:
    kernels = registry.get_analysis("kernels")
    assert is_partitioned(kernels, {"by": "rank"})
    assert is_partitioned(kernels, {"by": "name"})  # merged
    assert is_partitioned(registry.get_analysis("comm_matrix"), {})  # by message
    assert is_partitioned(registry.get_analysis("profile"), {"by": "name"})  # merged
    assert is_partitioned(registry.get_analysis("mpi_wait"), {})  # by message, 2 passes
    assert is_partitioned(registry.get_analysis("mpi_collectives"), {})  # merged
    critical = registry.get_analysis("critical_path")
    assert is_partitioned(critical, {"speedup": "", "region": ""})  # 3 passes, merged
    assert not is_partitioned(critical, {"speedup": "gemm:2", "region": ""})  # what-if
    assert is_partitioned(critical, {"speedup": "", "region": "annotation:x"})  # 4 passes


@pytest.fixture(scope="module")
def mpi256(tmp_path_factory: pytest.TempPathFactory) -> traceatlas.Trace:
    root = tmp_path_factory.mktemp("mpi256")
    made = write_mpi_trace(root / "mpi.prv", ranks=256, iterations=2, imbalance=0.3,
                           heavy_ranks=(3, 77, 200))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store = ingest(made.path, root / "store", engine=LocalEngine(1))
    return traceatlas.Trace(store)


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort(frame.columns, nulls_last=True)


def test_every_partitioned_analysis_on_256_ranks(mpi256: traceatlas.Trace) -> None:
    """Each analysis declared per rank that applies gives the whole-trace tables when run
    in batches of 15 ranks (uneven: 256 = 17 x 15 + 1) inline."""
    assert len(mpi256.ranks) == 256
    checked = []
    for name, params, analysis, typed in _partitioned_cases():
        try:
            registry.check_requirements(analysis, mpi256)
        except registry.MissingDataError:
            continue
        try:
            whole = analysis.run(mpi256, typed)
        except registry.MissingDataError:
            with pytest.raises(registry.MissingDataError):
                run_partitioned(analysis, mpi256, typed, LocalEngine(1), ranks_per_task=15)
            continue
        parts = run_partitioned(analysis, mpi256, typed, LocalEngine(1), ranks_per_task=15)
        assert_frame_equal(_sorted(parts.table), _sorted(whole.table), rel_tol=1e-12)
        assert parts.table.height == whole.table.height
        assert sorted(parts.extra) == sorted(whole.extra)
        assert parts.notes == whole.notes
        checked.append((name, params))
    assert ("profile", {"by": "rank"}) in checked
    assert {"profile", "load_imbalance", "comm_matrix", "comm_by_rank",
            "message_histogram", "comm_over_time", "mpi_wait",
            "efficiency"} <= {n for n, _ in checked}


def _partitioned_cases() -> Iterator[tuple[str, dict[str, str], Any, Any]]:
    """(name, params, analysis, typed params) of every registered analysis and parameter
    set of ``_param_sets`` that is declared partitioned."""
    for name in registry.ANALYSES:
        analysis = registry.get_analysis(name)
        for params in _param_sets(name):
            typed = registry.parse_params(analysis, params)
            if is_partitioned(analysis, typed):
                yield name, params, analysis, typed


def _param_sets(name: str) -> list[dict[str, str]]:
    return {"profile": [{"by": "rank"}, {"by": "name"}, {"by": "name", "all_ranks": "true",
                                                          "categories": "mpi", "top": "3"}],
            "kernels": [{"by": "rank"}, {"by": "name"}, {"by": "name", "top": "3"}],
            "load_imbalance": [{}, {"metric": "inclusive", "num_ranks": "3",
                                    "all_ranks": "true"}],
            "message_histogram": [{}, {"scale": "log", "bins": "7"}],
            "comm_over_time": [{}, {"bins": "11", "by": "recv"}],
            "phases": [{}, {"min_repeats": "2"}],  # 2 iterations: no loop by default
            "time_profile": [{}, {"bins": "13", "normalize": "true"}]}.get(name, [{}])


def test_registry_run_with_engine_process_pool(mpi256: traceatlas.Trace) -> None:
    """Through ``registry.run(engine=...)`` on 2 processes: the per-rank profile equals the
    whole one; comm_matrix (not per rank) runs whole and equals the plain run."""
    whole = registry.run("profile", mpi256, {"by": "rank"})
    pooled = registry.run("profile", mpi256, {"by": "rank"}, engine=LocalEngine(2))
    assert_frame_equal(pooled.table, whole.table)
    assert pooled.table["rank"].n_unique() == 256
    plain = registry.run("comm_matrix", mpi256)
    assert_frame_equal(registry.run("comm_matrix", mpi256, engine=LocalEngine(2)).table,
                       plain.table)


def test_selection_travels_to_the_workers(mpi256: traceatlas.Trace) -> None:
    """A view (ranks 10-40, a window) is re-applied by each worker: same as whole."""
    start = int(mpi256.intervals.select("start_ns").min().collect().item())
    view = mpi256.select(ranks="10-40", window=(start, start + 1_500_000), clip=True)
    analysis = registry.get_analysis("profile")
    typed = registry.parse_params(analysis, {"by": "rank"})
    whole = analysis.run(view, typed)
    parts = run_partitioned(analysis, view, typed, LocalEngine(1), ranks_per_task=4)
    assert_frame_equal(parts.table, whole.table)
    assert set(parts.table["rank"].to_list()) == set(range(10, 41))


def test_cli_engine_env_and_bad_engine(mpi256: traceatlas.Trace, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from traceatlas.cli.main import app

    runner = CliRunner()
    args = ["analyze", "profile", str(mpi256.path), "-p", "by=rank", "-f", "csv"]
    local = runner.invoke(app, args)
    assert local.exit_code == 0, local.output
    expected = registry.run("profile", mpi256, {"by": "rank"}).table
    assert local.output.count("\n") == expected.height + 1
    monkeypatch.setenv("TRACEATLAS_ENGINE", "nonsense")
    bad = runner.invoke(app, args)
    assert bad.exit_code == 2
    assert "--engine" in bad.output and "Traceback" not in bad.output


@pytest.mark.dask
def test_every_partitioned_analysis_on_256_ranks_dask_2_workers(
        mpi256: traceatlas.Trace) -> None:
    """A LocalCluster of 2 worker processes gives the local engine's tables (inline rank
    batches, the same batch size) for every analysis declared partitioned that applies."""
    pytest.importorskip("distributed")
    from traceatlas.engine.dask import DaskEngine

    engine = DaskEngine(n_workers=2)
    checked = []
    try:
        assert engine.workers(256) == 2
        for name, _params, analysis, typed in _partitioned_cases():
            try:
                registry.check_requirements(analysis, mpi256)
                local = run_partitioned(analysis, mpi256, typed, LocalEngine(1),
                                        ranks_per_task=32)
            except registry.MissingDataError:
                with pytest.raises(registry.MissingDataError):
                    registry.check_requirements(analysis, mpi256)
                    run_partitioned(analysis, mpi256, typed, engine, ranks_per_task=32)
                continue
            dask = run_partitioned(analysis, mpi256, typed, engine, ranks_per_task=32)
            assert_frame_equal(dask.table, local.table)
            assert sorted(dask.extra) == sorted(local.extra)
            for key, frame in local.extra.items():
                assert_frame_equal(dask.extra[key], frame)
            assert dask.notes == local.notes
            checked.append(name)
    finally:
        engine.close()
    assert {"profile", "load_imbalance", "comm_matrix", "comm_by_rank", "message_histogram",
            "comm_over_time", "mpi_wait", "time_profile", "phases",
            "efficiency"} <= set(checked), checked


def test_sized_batches_close_on_rows_and_on_rank_count() -> None:
    from traceatlas.analysis.partitioned import sized_batches

    rows = {0: 3, 1: 3, 2: 9, 3: 1, 4: 1, 5: 1, 6: 1, 7: 1}
    # budget 6 rows, 3 ranks: [0,1] (3+3), [2] alone (9 > 6), [3,4,5] (count cap), [6,7]
    assert sized_batches(list(range(8)), rows, 3, 6) == [(0, 1), (2,), (3, 4, 5), (6, 7)]
    # without row records the count cap alone decides (rank_batches' cut)
    assert sized_batches(list(range(8)), {}, 3, 6) == rank_batches(list(range(8)), 3)


def test_rank_rows_add_every_table_of_a_rank() -> None:
    from traceatlas.analysis.partitioned import rank_rows

    manifest = {"parts": [
        {"path": "intervals/rank=0/part-0.parquet", "rows": 5},
        {"path": "flows/rank=0/part-0.parquet", "rows": 2},
        {"path": "intervals/rank=12/part-0.parquet", "rows": 7},
        {"path": "metadata/part-0.parquet", "rows": 1},  # no rank: not counted
    ]}
    assert rank_rows(manifest) == {0: 7, 12: 7}
