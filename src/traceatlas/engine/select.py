"""Pick an engine from a name: ``local``, ``dask`` (LocalCluster) or a scheduler address."""

from __future__ import annotations

from traceatlas.engine.base import Engine
from traceatlas.engine.local import LocalEngine
from traceatlas.errors import EngineError


def get_engine(spec: str | Engine | None = None) -> Engine:
    """``None``/``"local"`` -> LocalEngine; ``"dask"`` (``"dask:N"``: N workers) ->
    DaskEngine on a LocalCluster;
    ``"tcp://host:port"`` -> DaskEngine connected to that scheduler."""
    if isinstance(spec, Engine):
        return spec
    if spec is None or spec == "local":
        return LocalEngine()
    from traceatlas.engine.dask import DaskEngine

    if spec == "dask":
        return DaskEngine()
    if spec.startswith("dask:") and spec[5:].isdigit() and int(spec[5:]) > 0:
        return DaskEngine(n_workers=int(spec[5:]))
    if "://" in spec:
        return DaskEngine(address=spec)
    raise EngineError(f"unknown engine {spec!r}: use 'local', 'dask', 'dask:N' or a "
                      "scheduler address")
