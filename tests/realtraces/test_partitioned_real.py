"""Every analysis declared per rank (``partition = "rank"``), run whole in one process and
partitioned over the engine (LocalEngine with 2 processes; a Dask LocalCluster of 2
workers), gives the same tables on real multi-rank traces: the 8-rank NCCL DLRM archive,
h100-planted/healthy (2 ranks) and Extrae LULESH (Paraver, 20 tasks). The expected value
is the whole-trace run of the same analysis (the code path every other test checks)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import traceatlas
from traceatlas.analysis import registry
from traceatlas.analysis.base import Result
from traceatlas.analysis.partitioned import (
    MESSAGE,
    RankTask,
    is_partitioned,
    merge,
    partition_of,
    prepare_passes,
    rank_batches,
    run_partitioned,
    run_task,
)
from traceatlas.engine import Engine, LocalEngine

pytestmark = pytest.mark.realtrace

TRACES = {
    "dlrm": "param-et_replay/dlrm_kineto.tar.gz",
    "healthy": "h100-planted/healthy",
    "lulesh": "profet-paraver/lulesh_7+1_with_uncores_sockets1+2.chop8.prv",
}
PARAMS: dict[str, list[dict[str, Any]]] = {
    "profile": [{"by": "rank"}, {"by": "name"}, {"by": "name", "all_ranks": True, "top": 5}],
    "kernels": [{"by": "rank"}, {"by": "name"}, {"by": "name", "top": 5, "memory": True}],
    "breakdown": [{}, {"by": "stream"}],
    "load_imbalance": [{}, {"metric": "inclusive", "num_ranks": 3, "all_ranks": True}],
    "message_histogram": [{}, {"scale": "log", "bins": 5}],
    "comm_over_time": [{}, {"bins": 7, "by": "recv"}],
    "roofline": [{}, {"by": "rank", "top": 4}],
    "time_profile": [{}, {"bins": 9, "normalize": True}],
}


@pytest.fixture(scope="module")
def traces(traces_dir: Path) -> dict[str, traceatlas.Trace]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {k: traceatlas.open(traces_dir / v) for k, v in TRACES.items()}


def _cases(trace: traceatlas.Trace) -> list[tuple[str, dict[str, Any]]]:
    """(analysis, typed params) declared per rank whose whole run has the data."""
    out = []
    for name in registry.ANALYSES:
        analysis = registry.get_analysis(name)
        for given in PARAMS.get(name, [{}]):
            typed = registry.parse_params(analysis, given)
            if is_partitioned(analysis, typed):
                try:
                    registry.check_requirements(analysis, trace)
                except registry.MissingDataError:
                    continue
                out.append((name, typed))
    return out


def _same(got: Result, want: Result, what: str) -> None:
    def srt(f: pl.DataFrame) -> pl.DataFrame:
        return f.sort(f.columns, nulls_last=True)

    # floats may differ in the last bit (summation order): 1e-12 relative
    assert got.table.height == want.table.height, what
    assert_frame_equal(srt(got.table), srt(want.table), rel_tol=1e-12)
    assert sorted(got.extra) == sorted(want.extra), what
    for key, frame in want.extra.items():
        assert got.extra[key].height == frame.height, f"{what} extra {key}"
        assert_frame_equal(srt(got.extra[key]), srt(frame), rel_tol=1e-12)
    assert got.notes == want.notes, what


def _check_all(trace: traceatlas.Trace, engine: Engine, ranks_per_task: int) -> list[str]:
    """All cases of ``trace`` in one engine map (one pool for all), merged per analysis;
    analyses with first passes (``prepare``, ``passes``) through ``run_partitioned`` each."""
    cases = _cases(trace)
    tasks, owner = [], []
    checked = []

    def passes(case: tuple[str, dict[str, Any]]) -> bool:
        return bool(prepare_passes(registry.get_analysis(case[0]), case[1]))

    for name, typed in [c for c in cases if passes(c)]:
        analysis = registry.get_analysis(name)
        got = run_partitioned(analysis, trace, typed, engine, ranks_per_task=ranks_per_task)
        _same(got, analysis.run(trace, typed), f"{name} {typed}")
        checked.append(name)
    cases = [c for c in cases if not passes(c)]
    for i, (name, typed) in enumerate(cases):
        by = partition_of(registry.get_analysis(name), typed)
        ranks = sorted(map(int, trace.manifest["ranks"])) if by == MESSAGE else trace.ranks
        for batch in rank_batches(ranks, ranks_per_task):
            tasks.append(RankTask(str(trace.path), trace.selections, batch, name,
                                  tuple(sorted(typed.items())), by))
            owner.append(i)
    partials = engine.map(run_task, tasks)
    for i, (name, typed) in enumerate(cases):
        analysis = registry.get_analysis(name)
        try:
            want = analysis.run(trace, typed)
        except registry.MissingDataError:
            # every batch lacks the data (no partial), or the merge says so (roofline,
            # phases: batches send what they found, the merge raises when nothing was)
            mine = [p for p, o in zip(partials, owner, strict=True) if o == i and p is not None]
            if mine:
                with pytest.raises(registry.MissingDataError):
                    merge(analysis, mine, typed)
            continue
        mine = [p for p, o in zip(partials, owner, strict=True) if o == i and p is not None]
        _same(merge(analysis, mine, typed), want, f"{name} {typed}")
        checked.append(name)
    return checked


@pytest.mark.parametrize("key", list(TRACES))
def test_partitioned_equals_whole_local_2_processes(
        traces: dict[str, traceatlas.Trace], key: str) -> None:
    trace = traces[key]
    assert len(trace.ranks) >= 2
    checked = _check_all(trace, LocalEngine(2), ranks_per_task=3)
    expected = {"dlrm": {"breakdown", "kernels", "idle", "launch", "queue", "syncs",
                         "overlap", "annotations", "patterns", "steps", "profile",
                         "load_imbalance", "collectives", "time_profile", "phases"},
                "healthy": {"breakdown", "kernels", "idle", "profile", "load_imbalance",
                            "time_profile", "phases", "roofline"},
                "lulesh": {"profile", "counters", "load_imbalance", "comm_matrix",
                           "comm_by_rank", "message_histogram", "comm_over_time",
                           "mpi_wait"}}[key]
    assert expected <= set(checked), checked


@pytest.mark.dask
def test_partitioned_equals_whole_dask_local_cluster(
        traces: dict[str, traceatlas.Trace]) -> None:
    """One LocalCluster of 2 worker processes: registry.run(engine=...) on DLRM."""
    pytest.importorskip("distributed")
    from traceatlas.engine.dask import DaskEngine

    trace = traces["dlrm"]
    engine = DaskEngine(n_workers=2)
    try:
        assert engine.workers(8) == 2
        checked = []
        for name, typed in _cases(trace):
            try:
                want = registry.get_analysis(name).run(trace, typed)
            except registry.MissingDataError:  # memory, roofline: not in this trace
                with pytest.raises(registry.MissingDataError):
                    registry.run(name, trace, typed, engine=engine)
                continue
            _same(registry.run(name, trace, typed, engine=engine), want, name)
            checked.append(name)
        assert {"breakdown", "kernels", "idle", "profile", "collectives", "time_profile",
                "phases"} <= set(checked)
        # a selection (ranks 1-6, cut to a window) travels to the workers
        view = trace.select(ranks="1-6")
        got = run_partitioned(registry.get_analysis("breakdown"), view,
                              {"by": "device"}, engine, ranks_per_task=2)
        assert got.table["rank"].to_list() == [1, 2, 3, 4, 5, 6]
    finally:
        engine.close()
