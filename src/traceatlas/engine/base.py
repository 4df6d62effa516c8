"""The engine seam: map a picklable function over partitions, results in input order."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

OnDone = Callable[[int], None]
"""Called with the number of partitions finished so far."""


class Engine(ABC):
    """Runs ``fn`` on each item; the first failure is raised, the rest are cancelled."""

    name: str = "engine"
    runs_elsewhere: bool = False
    """True when the engine's workers are other processes or machines that open the store
    themselves (Dask): analyses that need every rank at once then run there as one task,
    so the client holds their result, not their input."""

    @abstractmethod
    def workers(self, n_items: int) -> int:
        """How many items run at once for ``n_items`` items."""

    @abstractmethod
    def map(
        self, fn: Callable[[T], R], items: Sequence[T], on_done: OnDone | None = None
    ) -> list[R]:
        """``[fn(item) for item in items]``, possibly in parallel, in input order."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources the engine started."""
