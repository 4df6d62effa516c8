"""critical_path in rank batches (``analysis/critical_split.py``) equals the whole run on
real multi-rank traces: the path, every extra table and the notes. The whole run is the
oracle (``CriticalPath.run``, one graph over every rank)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import traceatlas
from traceatlas.analysis import partitioned, registry
from traceatlas.engine import LocalEngine
from traceatlas.errors import InputError
from traceatlas.testing.results import assert_same_result

pytestmark = pytest.mark.realtrace
TRACES = {
    "gloo": "torch-cpu-gloo",  # DDP over gloo: host collectives, wake-ups, hand-offs
    "dlrm": "param-et_replay/dlrm_kineto.tar.gz",  # 8 ranks, NCCL kernels
    "lulesh": "profet-paraver/lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv",  # MPI
    "pingpong": "pipit/ping-pong-otf2",  # MPI messages
}


@pytest.fixture(scope="module", params=sorted(TRACES))
def store(request: pytest.FixtureRequest, traces_dir: Path,
          tmp_path_factory: pytest.TempPathFactory) -> traceatlas.Trace:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = traceatlas.ingest(traces_dir / TRACES[request.param],
                                 tmp_path_factory.mktemp(request.param) / "s")
    return traceatlas.Trace(path)


def _both(view: traceatlas.Trace, ranks_per_task: int) -> None:
    analysis = registry.get_analysis("critical_path")
    typed = registry.parse_params(analysis, {})
    assert partitioned.is_partitioned(analysis, typed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = analysis.run(view, typed)
        split = partitioned.run_partitioned(analysis, view, typed, LocalEngine(1),
                                            ranks_per_task=ranks_per_task)
    assert whole.table.height > 0
    assert_same_result(split, whole)


@pytest.mark.parametrize("ranks_per_task", [1, 3])
def test_whole_trace_in_batches_equals_whole_run(store: traceatlas.Trace,
                                                 ranks_per_task: int) -> None:
    assert len(store.ranks) >= 2
    _both(store, ranks_per_task)


def test_rank_selection_in_batches(store: traceatlas.Trace) -> None:
    ranks = store.ranks
    _both(store.select(ranks=ranks[: max(2, len(ranks) // 2)]), 1)


@pytest.mark.parametrize("name", ["gloo", "dlrm"])
def test_one_step_in_batches(name: str, traces_dir: Path,
                             tmp_path_factory: pytest.TempPathFactory) -> None:
    """The report's and the advisor's region: one step over every rank."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = traceatlas.Trace(traceatlas.ingest(traces_dir / TRACES[name],
                                                   tmp_path_factory.mktemp(name) / "s"))
        steps = sorted(set(registry.run("steps", trace).table["step"].to_list()))
    assert steps
    _both(trace.select(step=steps[len(steps) // 2]), 1)


@pytest.mark.parametrize(("name", "region"), [
    ("gloo", "annotation:Optimizer.step#SGD.step:5"),
    ("dlrm", "annotation:nccl:all_to_all:17"),
])
def test_annotation_region_in_batches(name: str, region: str, traces_dir: Path,
                                      tmp_path_factory: pytest.TempPathFactory) -> None:
    """``region=annotation:NAME:I``: its instance found over every batch first."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = traceatlas.Trace(traceatlas.ingest(traces_dir / TRACES[name],
                                                   tmp_path_factory.mktemp(name) / "s"))
    analysis = registry.get_analysis("critical_path")
    typed = registry.parse_params(analysis, {"region": region})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = analysis.run(trace, typed)
        split = partitioned.run_partitioned(analysis, trace, typed, LocalEngine(1),
                                            ranks_per_task=1)
    assert whole.table.height > 0
    assert_same_result(split, whole)
    missing = registry.parse_params(analysis, {"region": "annotation:no such thing"})
    with pytest.raises(InputError) as here:
        analysis.run(trace, missing)
    with pytest.raises(type(here.value)) as there:
        partitioned.run_partitioned(analysis, trace, missing, LocalEngine(1),
                                    ranks_per_task=1)
    assert str(there.value) == str(here.value)


def test_batches_on_a_dask_cluster(traces_dir: Path,
                                   tmp_path_factory: pytest.TempPathFactory) -> None:
    """The three passes and the merge on a LocalCluster of 2 worker processes (the
    batches' stubs and walks travel as task parameters and results)."""
    pytest.importorskip("distributed")
    from traceatlas.engine.dask import DaskEngine

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = traceatlas.Trace(traceatlas.ingest(traces_dir / TRACES["dlrm"],
                                                   tmp_path_factory.mktemp("dd") / "s"))
    analysis = registry.get_analysis("critical_path")
    typed = registry.parse_params(analysis, {})
    engine = DaskEngine(n_workers=2)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            split = partitioned.run_partitioned(analysis, trace, typed, engine,
                                                ranks_per_task=3)
    finally:
        engine.close()
    assert_same_result(split, analysis.run(trace, typed))
