"""Pick an engine from a name: ``local``, ``dask`` (LocalCluster) or a scheduler address."""

from __future__ import annotations

from pathlib import Path

from traceatlas.engine.base import Engine
from traceatlas.engine.local import LocalEngine
from traceatlas.errors import EngineError, InputError

SCHEDULER_FILE = "scheduler-file:"
"""Prefix of an engine given as the scheduler file ``dask scheduler --scheduler-file``
writes (``scheduler-file:/shared/sched.json``)."""


def get_engine(spec: str | Engine | None = None) -> Engine:
    """``None``/``"local"`` -> LocalEngine; ``"dask"`` (``"dask:N"``: N workers) ->
    DaskEngine on a LocalCluster;
    ``"tcp://host:port"`` -> DaskEngine connected to that scheduler;
    ``"scheduler-file:PATH"`` -> DaskEngine connected to the scheduler PATH names."""
    if isinstance(spec, Engine):
        return spec
    if spec is None or spec == "local":
        return LocalEngine()
    from traceatlas.engine.dask import DaskEngine

    if spec.startswith(SCHEDULER_FILE):
        path = Path(spec[len(SCHEDULER_FILE):])
        if not path.is_file():
            raise InputError(path, "no such scheduler file (written by `dask scheduler "
                             "--scheduler-file PATH`; workers and client must see it)")
        return DaskEngine(scheduler_file=str(path))
    if spec == "dask":
        return DaskEngine()
    if spec.startswith("dask:") and spec[5:].isdigit() and int(spec[5:]) > 0:
        return DaskEngine(n_workers=int(spec[5:]))
    if "://" in spec:
        return DaskEngine(address=spec)
    raise EngineError(f"unknown engine {spec!r}: use 'local', 'dask', 'dask:N', a "
                      "scheduler address or scheduler-file:PATH")
