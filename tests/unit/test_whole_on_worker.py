"""Analyses that need every rank at once run as one task on a Dask worker (the client
holds their result, not their input): same result as in this process, their errors
raised as they are, and the advisor's critical path of one step goes there too.

That the work ran on a worker and not here is shown by breaking the analysis in this
process only (monkeypatch): the spawned workers import the real code."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest

import traceatlas
from traceatlas.analysis import registry
from traceatlas.analysis.critical_path import CriticalPath
from traceatlas.engine import LocalEngine
from traceatlas.errors import InputError
from traceatlas.ingest import ingest
from traceatlas.testing.mpi import write_mpi_trace
from traceatlas.testing.results import assert_same_result

pytestmark = pytest.mark.dask


@pytest.fixture(scope="module")
def mpi(tmp_path_factory: pytest.TempPathFactory) -> traceatlas.Trace:
    root = tmp_path_factory.mktemp("mpi")
    made = write_mpi_trace(root / "mpi.prv", ranks=6, iterations=3, imbalance=0.4,
                           heavy_ranks=(2,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store = ingest(made.path, root / "store", engine=LocalEngine(1))
    return traceatlas.Trace(store)


@pytest.fixture(scope="module")
def dask_engine() -> Iterator[Any]:
    pytest.importorskip("distributed")
    from traceatlas.engine.dask import DaskEngine

    engine = DaskEngine(n_workers=1)
    yield engine
    engine.close()


def _broken(self: Any, trace: Any, params: Any) -> Any:
    raise AssertionError("ran in the client")


@pytest.mark.parametrize("window", [None, "0:4ms"])
def test_critical_path_runs_on_the_worker_with_the_same_result(
    mpi: traceatlas.Trace, dask_engine: Any, monkeypatch: pytest.MonkeyPatch,
    window: str | None,
) -> None:
    view = mpi if window is None else mpi.select(window=window)
    here = registry.run("critical_path", view, {})
    monkeypatch.setattr(CriticalPath, "run", _broken)
    there = registry.run("critical_path", view, {}, engine=dask_engine)
    assert here.table.height > 0
    assert_same_result(there, here)
    with pytest.raises(AssertionError, match="ran in the client"):  # the control
        registry.run("critical_path", view, {})


def test_an_error_on_the_worker_is_raised_as_it_is(mpi: traceatlas.Trace,
                                                   dask_engine: Any) -> None:
    with pytest.raises(InputError) as here:  # a region that does not exist
        registry.run("critical_path", mpi, {"region": "annotation:nothing"})
    with pytest.raises(type(here.value)) as there:
        registry.run("critical_path", mpi, {"region": "annotation:nothing"},
                     engine=dask_engine)
    assert str(there.value) == str(here.value)


def test_the_advisors_step_path_runs_on_the_worker(mpi: traceatlas.Trace, dask_engine: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """``Context.on_view`` (the critical path of the typical step and its command's
    check) sends a view's analysis to the engine when its workers run elsewhere."""
    from traceatlas.advisor import Context

    view = mpi.select(window="0:4ms")
    here = Context(mpi, engine=None).on_view(view, "critical_path")
    monkeypatch.setattr(CriticalPath, "run", _broken)
    there = Context(mpi, engine=dask_engine).on_view(view, "critical_path")
    assert_same_result(there, here)
    with pytest.raises(AssertionError, match="ran in the client"):
        Context(mpi, engine=None).on_view(view, "critical_path")
    with pytest.raises(AssertionError, match="ran in the client"):  # the local engine
        Context(mpi, engine=LocalEngine(1)).on_view(view, "critical_path")
