"""Faults in the engines: a worker killed mid-analysis gives the full result (Dask runs
the dead worker's task again) or one clear error, never a partial answer. The killed
task is chosen by its rank batch; a marker file says whether it already died once.
Expected values: the same analysis run whole in this process."""

from __future__ import annotations

import functools
import json
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
from polars.testing import assert_frame_equal

import traceatlas
from traceatlas.analysis import registry
from traceatlas.analysis.partitioned import RankTask, run_partitioned
from traceatlas.engine import Engine, LocalEngine
from traceatlas.errors import EngineError
from traceatlas.ingest import ingest
from traceatlas.testing.mpi import write_mpi_trace

T = TypeVar("T")
R = TypeVar("R")
VICTIM = (4, 5, 6, 7)
"""The rank batch whose task kills its worker (ranks_per_task=4 on 16 ranks)."""


def _die(fn: Callable[[RankTask], R], marker: str, always: bool, how: str,
         task: RankTask) -> R:
    """``fn(task)``; the victim batch's task first ends its worker (os._exit, as a kill
    or the out-of-memory killer would) or raises, once (marker file) or every time."""
    if task.ranks == VICTIM and (always or not os.path.exists(marker)):
        Path(marker).touch()
        if how == "exit":
            os._exit(1)
        raise OSError("transient read error")
    return fn(task)


class Faulty(Engine):
    """``inner`` with the victim's task failing (see ``_die``)."""

    def __init__(self, inner: Engine, marker: Path, always: bool = False,
                 how: str = "exit") -> None:
        self.inner, self.marker, self.always, self.how = inner, str(marker), always, how

    def workers(self, n_items: int) -> int:
        return self.inner.workers(n_items)

    def map(self, fn: Callable[[T], R], items: Sequence[T],
            on_done: Callable[[int], None] | None = None) -> list[R]:
        wrapped: Any = functools.partial(_die, fn, self.marker, self.always, self.how)
        return self.inner.map(wrapped, items, on_done)


@pytest.fixture(scope="module")
def mpi16(tmp_path_factory: pytest.TempPathFactory) -> traceatlas.Trace:
    root = tmp_path_factory.mktemp("mpi16")
    made = write_mpi_trace(root / "mpi.prv", ranks=16, iterations=2, imbalance=0.3,
                           heavy_ranks=(5,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store = ingest(made.path, root / "store", engine=LocalEngine(1))
    return traceatlas.Trace(store)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """One LocalCluster of 2 worker processes for the module; a task may kill its worker
    once before it counts as the culprit (allowed-failures 1: a fast error)."""
    distributed = pytest.importorskip("distributed")
    import cloudpickle
    import dask

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers lack tests/
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                     dashboard_address=":0") as made:
        yield made


def _profile(trace: traceatlas.Trace, engine: Engine) -> Any:
    analysis = registry.get_analysis("profile")
    typed = registry.parse_params(analysis, {"by": "name"})
    return run_partitioned(analysis, trace, typed, engine, ranks_per_task=4)


def _whole(trace: traceatlas.Trace) -> Any:
    return registry.run("profile", trace, {"by": "name"})


@pytest.mark.dask
def test_dask_worker_killed_once_gives_full_result(
        cluster: Any, mpi16: traceatlas.Trace, tmp_path: Path) -> None:
    from traceatlas.engine.dask import DaskEngine

    marker = tmp_path / "died"
    engine = DaskEngine(cluster.scheduler_address)
    try:
        got = _profile(mpi16, Faulty(engine, marker))
    finally:
        engine.close()
    assert marker.exists()  # the victim's worker did die
    assert_frame_equal(got.table, _whole(mpi16).table)
    assert got.table["ranks"].max() == 16  # every rank's partial is in the result


@pytest.mark.dask
def test_dask_worker_killed_every_time_is_a_clear_error(
        cluster: Any, mpi16: traceatlas.Trace, tmp_path: Path) -> None:
    from traceatlas.engine.dask import DaskEngine

    engine = DaskEngine(cluster.scheduler_address)
    try:
        with pytest.raises(EngineError, match="workers died running task"):
            _profile(mpi16, Faulty(engine, tmp_path / "died", always=True))
        # the cluster lives on: the next analysis is whole again
        assert_frame_equal(_profile(mpi16, engine).table, _whole(mpi16).table)
    finally:
        engine.close()


@pytest.mark.dask
def test_dask_retries_a_task_that_raised(cluster: Any, mpi16: traceatlas.Trace,
                                         tmp_path: Path) -> None:
    from traceatlas.engine.dask import DaskEngine

    once = DaskEngine(cluster.scheduler_address, retries=1)
    never = DaskEngine(cluster.scheduler_address)
    try:
        got = _profile(mpi16, Faulty(once, tmp_path / "a", how="raise"))
        assert_frame_equal(got.table, _whole(mpi16).table)
        with pytest.raises(OSError, match="transient read error"):
            _profile(mpi16, Faulty(never, tmp_path / "b", how="raise"))
    finally:
        once.close()
        never.close()


@pytest.mark.dask
def test_scheduler_file_engine(cluster: Any, mpi16: traceatlas.Trace,
                               tmp_path: Path) -> None:
    """``scheduler-file:PATH`` connects to the scheduler the file names (the JSON
    ``dask scheduler --scheduler-file`` writes: its ``address``); a missing file is an
    input error naming it."""
    from traceatlas.engine import get_engine
    from traceatlas.errors import InputError

    path = tmp_path / "sched.json"
    path.write_text(json.dumps({"address": cluster.scheduler_address}))
    engine = get_engine(f"scheduler-file:{path}")
    try:
        assert engine.workers(8) == 2
        assert_frame_equal(_profile(mpi16, engine).table, _whole(mpi16).table)
    finally:
        engine.close()
    with pytest.raises(InputError, match="no such scheduler file"):
        get_engine(f"scheduler-file:{tmp_path / 'absent.json'}")


def test_local_worker_dies_is_a_clear_error(mpi16: traceatlas.Trace,
                                            tmp_path: Path) -> None:
    """A process-pool worker dying: EngineError, nothing returned."""
    with pytest.raises(EngineError, match="a worker process died"):
        _profile(mpi16, Faulty(LocalEngine(2), tmp_path / "died"))


def test_cli_worker_dies_one_line_exit_1(mpi16: traceatlas.Trace, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """``analyze`` whose pool worker dies: exit 1, one line naming the failure, no
    traceback, no table."""
    from typer.testing import CliRunner

    from traceatlas.cli import analyze
    from traceatlas.cli.main import app

    monkeypatch.setattr(analyze, "analysis_engine",
                        lambda spec: Faulty(LocalEngine(2), tmp_path / "died"))
    out = CliRunner().invoke(app, ["analyze", "profile", str(mpi16.path), "-f", "csv"])
    assert out.exit_code == 1, out.output
    lines = [line for line in out.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "worker process died" in lines[0], out.output
    assert "Traceback" not in out.output
