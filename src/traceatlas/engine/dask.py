"""Dask engine: partitions run as tasks on a Dask cluster (an existing scheduler, or a
``LocalCluster`` started on demand). Needs the ``[dask]`` extra.

Workers must see the same filesystem as the client: they write store parts directly.

A LocalCluster started here runs one thread per worker process, and each worker's Polars
pool is sized to it (``POLARS_MAX_THREADS=1``, unless the environment sets it): Dask's
nanny already starts workers with ``OMP_NUM_THREADS=1`` (Arrow's pool, BLAS), but Polars
sizes its pool to every core of the machine, so N workers on N cores ran N x N Polars
threads. Workers of an existing cluster keep what their launcher set (docs/cluster.md).

Faults: a task whose worker dies (killed, out of memory) is run again on another worker by
the scheduler, up to ``distributed.scheduler.allowed-failures`` times (Dask's default 3);
past that the map raises ``EngineError`` naming the task. A task that raises is run again
``retries`` more times (default 0: a deterministic error would only repeat); the error
is raised after. Either way the map returns every item's result or raises: never a
partial list.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from traceatlas.engine.base import Engine, OnDone
from traceatlas.errors import EngineError

T = TypeVar("T")
R = TypeVar("R")


THREADS_PER_WORKER = 1
"""Dask threads of each worker of a LocalCluster started here (one task at a time)."""


def worker_environ(threads: int = THREADS_PER_WORKER) -> dict[str, str]:
    """Environment of a LocalCluster's worker processes: Polars' pool of ``threads``
    threads, unless ``POLARS_MAX_THREADS`` is set here (then the workers inherit it)."""
    return {} if "POLARS_MAX_THREADS" in os.environ else {"POLARS_MAX_THREADS": str(threads)}


class DaskEngine(Engine):
    """Connect to ``address`` (``tcp://host:port``) or to the scheduler a
    ``scheduler_file`` names (``dask scheduler --scheduler-file PATH``), or start a
    LocalCluster of ``n_workers`` when neither is given. ``retries``: extra runs of a task
    that raised (worker deaths are the scheduler's, see the module docstring)."""

    name = "dask"
    runs_elsewhere = True

    def __init__(self, address: str | None = None, n_workers: int | None = None,
                 retries: int = 0, scheduler_file: str | None = None) -> None:
        try:
            from distributed import Client, LocalCluster
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise EngineError(
                "the Dask engine needs dask.distributed: pip install 'traceatlas[dask]'"
            ) from exc
        self._cluster: Any = None
        self.retries = retries
        self._client: Any
        if scheduler_file is not None:
            self._client = Client(scheduler_file=scheduler_file)
        elif address is None:
            self._cluster = LocalCluster(
                n_workers=n_workers, threads_per_worker=THREADS_PER_WORKER,
                processes=True, dashboard_address=":0", env=worker_environ(),
            )
            self._client = Client(self._cluster)
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
        from distributed import KilledWorker, as_completed

        futures = self._client.map(fn, list(items), pure=False, retries=self.retries)
        try:
            for done, fut in enumerate(as_completed(futures), start=1):
                fut.result()
                if on_done:
                    on_done(done)
            results: list[R] = self._client.gather(futures)
        except KilledWorker as exc:
            self._client.cancel(futures)
            raise EngineError(
                f"Dask workers died running task {exc.task!r} (each attempt: out of memory "
                "or killed); see the worker logs") from exc
        except BaseException:
            self._client.cancel(futures)
            raise
        return results

    def close(self) -> None:
        """Close the client, and the LocalCluster if this engine started it."""
        self._client.close()
        if self._cluster is not None:
            self._cluster.close()
