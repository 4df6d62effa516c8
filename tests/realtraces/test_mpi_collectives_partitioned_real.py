"""mpi_collectives in rank batches equals today's whole-trace code kept frozen
(``testing/frozen_mpi_collectives.py``) on the real MPI traces: OTF2 (Pipit ping-pong,
with and without PAPI; the fastotf2 MI300 run), Paraver (Extrae LULESH, 8 and 20 tasks,
with Extrae's global-op send-size and communicator events; NAMD) and the nsys MPI+CUDA
saxpy run, on 1 and 2 processes and on a Dask LocalCluster of 2 workers. The expected
value is the frozen whole run (a second code path: no partial, no merge)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from polars.testing import assert_frame_equal

import traceatlas
from traceatlas.analysis import registry
from traceatlas.analysis.base import Result
from traceatlas.analysis.partitioned import run_partitioned
from traceatlas.engine import Engine, LocalEngine
from traceatlas.errors import MissingDataError
from traceatlas.testing.frozen_mpi_collectives import FrozenMpiCollectives

pytestmark = pytest.mark.realtrace

TRACES = {
    "ping-pong": "pipit/ping-pong-otf2",
    "ping-pong-papi": "pipit/ping-pong-otf2-papi",
    "mi300": "fastotf2/simple-mi300-example-run/traces.otf2",
    "lulesh8": "profet-paraver/lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv",
    "lulesh20": "profet-paraver/lulesh_7+1_with_uncores_sockets1+2.chop8.prv",
    "namd": "folding-paraver/444.namd.prv",
    "saxpy": "pipit/saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
}


@pytest.fixture(scope="module")
def traces(traces_dir: Path, tmp_path_factory: pytest.TempPathFactory
           ) -> dict[str, traceatlas.Trace]:
    out = {}
    for key, rel in TRACES.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            store = traceatlas.ingest(traces_dir / rel, tmp_path_factory.mktemp(key) / "s",
                                      engine=LocalEngine(1))
        out[key] = traceatlas.open(store)
    return out


def assert_same(got: Result, want: Result) -> None:
    assert_frame_equal(got.table, want.table)
    assert sorted(got.extra) == sorted(want.extra)
    for key, frame in want.extra.items():
        assert_frame_equal(got.extra[key], frame)
    assert got.notes == want.notes


def _check(traces: dict[str, traceatlas.Trace], engine: Engine) -> dict[str, int]:
    """Instances found per trace with MPI calls (batches of 1 and 3 ranks)."""
    analysis = registry.get_analysis("mpi_collectives")
    found = {}
    for key, trace in traces.items():
        try:
            registry.check_requirements(analysis, trace)
        except MissingDataError:
            continue
        want = FrozenMpiCollectives().run(trace, {})
        for size in (1, 3):
            got = run_partitioned(analysis, trace, {}, engine, ranks_per_task=size)
            assert_same(got, want)
        found[key] = want.table.height
    return found


def test_one_process(traces: dict[str, traceatlas.Trace]) -> None:
    found = _check(traces, LocalEngine(1))
    for trace in traces.values():  # run (one batch holding every rank) too
        if found and trace.ranks:
            try:
                want = FrozenMpiCollectives().run(trace, {})
            except MissingDataError:
                continue
            assert_same(registry.get_analysis("mpi_collectives").run(trace, {}), want)
    print(found)
    assert found["lulesh8"] > 0 and found["lulesh20"] > 0, found


def test_two_processes(traces: dict[str, traceatlas.Trace]) -> None:
    found = _check(traces, LocalEngine(2))
    assert found["lulesh20"] > 0, found


@pytest.mark.dask
def test_dask_local_cluster(traces: dict[str, traceatlas.Trace]) -> None:
    pytest.importorskip("distributed")
    from traceatlas.engine.dask import DaskEngine

    engine = DaskEngine(n_workers=2)
    try:
        assert engine.workers(8) == 2
        found = _check(traces, engine)
        assert found["lulesh20"] > 0, found
    finally:
        engine.close()
