"""In-process engine: one process per partition on this machine (a pool), or inline."""

from __future__ import annotations

import functools
import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.process import BaseProcess
from typing import TypeVar

from traceatlas import signals, tempfiles
from traceatlas.engine.base import Engine, OnDone
from traceatlas.errors import EngineError

T = TypeVar("T")
R = TypeVar("R")

TERMINATE_GRACE_S = 2.0
"""Seconds a worker has to unwind after SIGTERM (its ``finally`` blocks) before SIGKILL."""


class LocalEngine(Engine):
    """Runs partitions in a process pool of at most ``max_workers`` (default: CPU count).

    A single partition, or ``max_workers=1``, runs inline in this process. When the map
    fails or is interrupted (Ctrl-C, SIGTERM, SIGHUP in the CLI), running workers are
    ended (SIGTERM, then SIGKILL after ``TERMINATE_GRACE_S``), not waited for, and the
    staging files of workers that had to be killed are removed.
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
        pool = None
        try:
            with signals.spawning():  # workers and tracker start with signals blocked
                pool = ProcessPoolExecutor(
                    self.workers(len(items)), mp_context=ctx,
                    initializer=signals.init_worker, initargs=(os.getpid(),),
                )
                futures: dict[Future[R], int] = {
                    pool.submit(functools.partial(signals.run_job, fn), it): i
                    for i, it in enumerate(items)
                }
            for done, fut in enumerate(as_completed(futures), start=1):
                out[futures[fut]] = fut.result()
                if on_done:
                    on_done(done)
        except BrokenProcessPool as exc:
            _end_workers(pool)
            raise EngineError(
                "a worker process died (out of memory, or a script calling traceatlas "
                "without an `if __name__ == '__main__':` guard)"
            ) from exc
        except BaseException:
            _end_workers(pool)
            raise
        finally:
            if pool is not None:
                pool.shutdown(wait=True)
        return out  # type: ignore[return-value]


GUARD_PROBLEM = (
    "traceatlas was called while a worker process was starting: worker processes re-import "
    "the script that started them, so a script calling traceatlas needs an "
    "`if __name__ == '__main__':` guard"
)


def check_not_bootstrapping() -> None:
    """Raise ``EngineError`` when this process is a spawned worker still importing its
    parent's main script (a script without a ``__main__`` guard): the call would wait
    forever on a lock its parent holds (the ingest cache) instead of failing."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise EngineError(GUARD_PROBLEM)


def _end_workers(pool: ProcessPoolExecutor | None) -> None:
    """Cancel queued work and end the running workers: SIGTERM (they unwind), SIGKILL
    after the grace period; then sweep the staging files ended workers left (also after a
    clean unwind: a signal landing between a worker's ``mkstemp`` and its ``try`` leaves
    the file behind, which the CI's group-SIGTERM test caught once)."""
    if pool is None:
        return
    with signals.deferred():
        procs: list[BaseProcess] = list((pool._processes or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for p in procs:
            if p.is_alive():
                p.terminate()
        deadline = time.monotonic() + TERMINATE_GRACE_S
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        tempfiles.sweep_staging()  # owners reaped above: their pids are no longer alive
