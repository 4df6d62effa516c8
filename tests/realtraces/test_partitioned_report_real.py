"""``report`` on an engine: the analyses declared per rank run in rank batches (inline
``LocalEngine(1)``; a Dask LocalCluster of 2 worker processes), the rest whole; the
report's JSON equals the report computed whole in one process (no engine: the code path
every other report test checks). DLRM, 8 ranks, and Extrae LULESH, 20 MPI ranks (the
report has no timing fields: the dicts are compared in full; through the CLI, all but the
store path)."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import traceatlas
from traceatlas.analysis import partitioned
from traceatlas.engine import Engine, LocalEngine
from traceatlas.report import data as report_data

pytestmark = pytest.mark.realtrace
DLRM = "param-et_replay/dlrm_kineto.tar.gz"


@pytest.fixture(scope="module")
def dlrm(traces_dir: Path) -> tuple[str, traceatlas.Trace]:
    path = str(traces_dir / DLRM)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return path, traceatlas.open(path)


@pytest.fixture(scope="module")
def whole(dlrm: tuple[str, traceatlas.Trace]) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return report_data.build([dlrm]).to_dict()


def _spied(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the analyses that ran in rank batches: through ``run_partitioned``, or
    ``run_partitioned_together`` (several parameter sets in one map: the kernels)."""
    seen: list[str] = []
    for entry in ("run_partitioned", "run_partitioned_together"):
        real = getattr(partitioned, entry)

        def spy(analysis: Any, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            seen.append(analysis.name)
            return _real(analysis, *args, **kwargs)

        monkeypatch.setattr(partitioned, entry, spy)
    return seen


def _report(dlrm: tuple[str, traceatlas.Trace], engine: Engine) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return report_data.build([dlrm], engine=engine).to_dict()


def test_report_in_rank_batches_equals_whole(dlrm: tuple[str, traceatlas.Trace],
                                             whole: dict[str, Any],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spied(monkeypatch)
    got = _report(dlrm, LocalEngine(1))
    assert {"breakdown", "kernels", "idle", "syncs"} <= set(seen), seen
    assert got == whole
    assert whole["runs"][0]["findings"]  # a report with content, not two empty ones


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as made:
        yield made


@pytest.mark.dask
def test_report_on_dask_equals_whole(dlrm: tuple[str, traceatlas.Trace],
                                     whole: dict[str, Any], cluster: Any,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from traceatlas.engine.dask import DaskEngine

    seen = _spied(monkeypatch)
    engine = DaskEngine(cluster.scheduler_address)
    try:
        assert engine.workers(8) == 2
        got = _report(dlrm, engine)
    finally:
        engine.close()
    assert {"breakdown", "kernels", "idle", "syncs"} <= set(seen), seen
    assert got == whole


@pytest.mark.dask
def test_cli_report_engine_from_environment(dlrm: tuple[str, traceatlas.Trace],
                                            whole: dict[str, Any], cluster: Any,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """``TRACEATLAS_ENGINE=tcp://...`` ``report -f json``: the same JSON; a bad engine is
    one line, exit 2, before any work."""
    from typer.testing import CliRunner

    from traceatlas.cli.main import app

    seen = _spied(monkeypatch)
    monkeypatch.setenv("TRACEATLAS_ENGINE", cluster.scheduler_address)
    out = CliRunner().invoke(app, ["report", dlrm[0], "-f", "json"])
    assert out.exit_code == 0, out.output
    got = json.loads(out.stdout.splitlines()[-1])
    # the CLI ingests into its own cache (the store path differs); the rest is equal
    assert [r.pop("store") for r in got["runs"]] != []
    want = json.loads(json.dumps(whole))  # tuples as JSON lists
    assert [r.pop("store") for r in want["runs"]] != []
    assert got == want
    assert "kernels" in seen
    monkeypatch.setenv("TRACEATLAS_ENGINE", "nonsense")
    bad = CliRunner().invoke(app, ["report", dlrm[0], "-f", "json"])
    assert bad.exit_code == 2 and "--engine" in bad.output
    assert "Traceback" not in bad.output


def test_report_mpi_trace_in_rank_batches_equals_whole(
        traces_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Extrae LULESH (20 MPI ranks): the message analyses (mpi_wait), load_imbalance and
    profile go through rank batches; the report equals the whole one."""
    path = str(traces_dir / "profet-paraver/lulesh_7+1_with_uncores_sockets1+2.chop8.prv")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = (path, traceatlas.open(path))
        want = report_data.build([run]).to_dict()
    seen = _spied(monkeypatch)
    assert _report(run, LocalEngine(1)) == want
    assert {"mpi_wait", "load_imbalance", "profile"} <= set(seen), seen
