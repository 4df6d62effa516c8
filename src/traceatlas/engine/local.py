"""In-process engine: one process per partition on this machine (a pool), or inline."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

from traceatlas.engine.base import Engine, OnDone
from traceatlas.errors import EngineError

T = TypeVar("T")
R = TypeVar("R")


class LocalEngine(Engine):
    """Runs partitions in a process pool of at most ``max_workers`` (default: CPU count).

    A single partition, or ``max_workers=1``, runs inline in this process.
    """

    name = "local"

    def __init__(self, max_workers: int | None = None) -> None:
        self.max_workers = max_workers or os.cpu_count() or 1

    def workers(self, n_items: int) -> int:
        """Processes used for ``n_items`` partitions."""
        return max(1, min(self.max_workers, n_items))

    def map(
        self, fn: Callable[[T], R], items: Sequence[T], on_done: OnDone | None = None
    ) -> list[R]:
        """Apply ``fn`` to every item; results in input order."""
        if self.workers(len(items)) == 1:
            results = []
            for i, item in enumerate(items):
                results.append(fn(item))
                if on_done:
                    on_done(i + 1)
            return results
        ctx = multiprocessing.get_context("spawn")
        out: list[R | None] = [None] * len(items)
        with ProcessPoolExecutor(self.workers(len(items)), mp_context=ctx) as pool:
            futures: dict[Future[R], int] = {pool.submit(fn, it): i for i, it in enumerate(items)}
            try:
                for done, fut in enumerate(as_completed(futures), start=1):
                    out[futures[fut]] = fut.result()
                    if on_done:
                        on_done(done)
            except BrokenProcessPool as exc:
                pool.shutdown(cancel_futures=True)
                raise EngineError(
                    "a worker process died (out of memory, or a script calling traceatlas "
                    "without an `if __name__ == '__main__':` guard)"
                ) from exc
            except BaseException:
                pool.shutdown(cancel_futures=True)
                raise
        return out  # type: ignore[return-value]
