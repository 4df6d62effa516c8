"""One read of a store's intervals for the summary builder (``compare.summary_build``).

``loaded(trace)`` reads the columns that the summary, the ``steps`` windows, the launch
context and the ``efficiency`` analysis use, ONCE, into memory, and returns a view of
``trace`` whose ``intervals`` is that frame (lazy over memory). Every other table, and any
view derived from it with ``select``, reads the store as usual. The wide columns (``args``,
``grid``, ``block``, ...) are left out unless a category that needs them is present:
``args`` for Paraver ``state`` rows, ``collective`` / ``process_group`` for ``mpi``.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from traceatlas.model.trace import Trace

if TYPE_CHECKING:
    import polars as pl

COLUMNS = ("rank", "track_id", "start_ns", "end_ns", "depth", "correlation", "step", "name",
           "category", "device")
"""Always loaded."""
EXTRA = {"state": ("args",), "mpi": ("collective", "process_group")}
"""Loaded when a row of the category is present (efficiency: Running state, MPI replay)."""


class LoadedTrace(Trace):
    """A view whose ``intervals`` is an in-memory frame (``frame``, already filtered by
    the selections the view was made with, ``base``); other tables as ``Trace``."""

    frame: pl.DataFrame
    base: int

    def scan(self, table: str) -> pl.LazyFrame:
        """As ``Trace.scan``; ``intervals``: the loaded frame (the store again when a
        selection was added after loading)."""
        if table != "intervals" or len(self.selections) != self.base:
            return super().scan(table)
        return self.frame.lazy()


def loaded(trace: Trace) -> LoadedTrace:
    """``trace`` with its intervals (``COLUMNS`` plus the needed ``EXTRA``) in memory."""
    import polars as pl

    present = set(trace.intervals.select(pl.col("category").cast(pl.String).unique())
                  .collect().to_series().to_list())
    cols = list(COLUMNS)
    for category, extra in EXTRA.items():
        if category in present:
            cols += extra
    view = LoadedTrace.__new__(LoadedTrace)
    view.__dict__.update(copy.copy(trace.__dict__))
    view.frame = trace.intervals.select(cols).collect()
    view.base = len(trace.selections)
    return view
