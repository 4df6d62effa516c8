"""Dask engine: partitions run as tasks on a Dask cluster (an existing scheduler, or a
``LocalCluster`` started on demand). Needs the ``[dask]`` extra.

Workers must see the same filesystem as the client: they write store parts directly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from traceatlas.engine.base import Engine, OnDone
from traceatlas.errors import EngineError

T = TypeVar("T")
R = TypeVar("R")


class DaskEngine(Engine):
    """Connect to ``address`` (``tcp://host:port``), or start a LocalCluster when None."""

    name = "dask"

    def __init__(self, address: str | None = None, n_workers: int | None = None) -> None:
        try:
            from distributed import Client, LocalCluster
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise EngineError(
                "the Dask engine needs dask.distributed: pip install 'traceatlas[dask]'"
            ) from exc
        self._cluster: Any = None
        if address is None:
            self._cluster = LocalCluster(
                n_workers=n_workers, threads_per_worker=1, processes=True,
                dashboard_address=":0",
            )
            self._client: Any = Client(self._cluster)
        else:
            self._client = Client(address)

    def workers(self, n_items: int) -> int:
        """Items running at once: the cluster's worker count, at most ``n_items``."""
        n = len(self._client.scheduler_info().get("workers", {})) or 1
        return max(1, min(n, n_items))

    def map(
        self, fn: Callable[[T], R], items: Sequence[T], on_done: OnDone | None = None
    ) -> list[R]:
        """Submit one task per item; gather in input order, raising the first error."""
        from distributed import as_completed

        futures = self._client.map(fn, list(items), pure=False)
        try:
            for done, fut in enumerate(as_completed(futures), start=1):
                fut.result()
                if on_done:
                    on_done(done)
            results: list[R] = self._client.gather(futures)
        except BaseException:
            self._client.cancel(futures)
            raise
        return results

    def close(self) -> None:
        """Close the client, and the LocalCluster if this engine started it."""
        self._client.close()
        if self._cluster is not None:
            self._cluster.close()
