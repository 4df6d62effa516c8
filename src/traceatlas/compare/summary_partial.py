"""The map step of the baseline summary: one batch of ranks, read on a worker.

``summary_partial(task)`` opens the batch's view (``analysis.partitioned.batch_view``:
the store's parts of ``task.ranks`` under the client's selections), reads its intervals
once into memory (``summary_frame.loaded``) and sends back only small tables
(``SummaryPartial``): the iteration windows of its ranks, and per kind the rows per raw
name and the union ns / count per (key, rank, iteration) (``summary_kinds.kind_cells``),
the summed device time per (kernel key, launcher key) and the device-time attribution
sums. ``summary_build`` merges every batch's partial (the whole run is one batch of every
rank). Peak memory per worker: one batch's intervals (``analysis.partitioned``: at most
4 ranks and 4 M stored rows, a bigger rank alone).

Iterations (decided by the client for the whole selection, ``SummaryTask.source``):
``steps``: the ``steps`` analysis' windows of each rank (per rank: its markers and the
device work they launch) and the intervals' ``step`` column; ``phases``: the client's
phase windows of the batch's ranks (``windows``), an interval's time being its start (a
device interval: its launch's start); ``run``: per rank, first start to last end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from traceatlas.compare.normalize import normalize
from traceatlas.compare.summary_kinds import Rows, codes, kind_cells
from traceatlas.model.schema import DEVICE_CATEGORIES

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace
    from traceatlas.ops.select import Selection

I64 = npt.NDArray[np.int64]

KIND_CATEGORIES: dict[str, tuple[str, ...]] = {
    "annotation": ("annotation", "nvtx", "region"),
    "op": ("cpu_op",),
    "kernel": ("kernel", "comm_kernel", "memcpy", "memset"),
}
"""Canonical categories of each named kind (``category`` takes every one but ``step``;
``op_device`` / ``annotation_device`` take the ``kernel`` rows by launch context)."""
NAMED_KINDS = ("annotation", "op", "kernel", "op_device", "annotation_device", "category")
"""The kinds built from intervals (every kind of the summary but ``step``)."""


@dataclass(frozen=True)
class SummaryTask:
    """What a worker needs for one batch: where to read it and how iterations are found
    (no data but the phase windows, a few rows per rank)."""

    store: str
    selections: tuple[Selection, ...]
    ranks: tuple[int, ...]
    source: str
    """``steps``, ``phases`` or ``run``."""
    windows: tuple[tuple[int, int, int, int], ...] = ()
    """``phases``: (rank, iteration, start_ns, end_ns) of the batch's ranks."""


@dataclass(frozen=True)
class SummaryPartial:
    """One batch's share of the summary (small tables; int64 ns)."""

    windows: pl.DataFrame
    """rank, it, dur_ns: the batch's iterations."""
    names: pl.DataFrame
    """kind, key, name, n: rows per raw name (``summary_kinds.kind_cells``)."""
    cells: pl.DataFrame
    """kind, key, rank, it, ns, count: per (kind, key, rank, iteration) with rows."""
    launchers: pl.DataFrame
    """key, slot (0: op, 2: innermost annotation), launcher, d: summed device ns of the
    kernel ``key`` launched under that launcher key."""
    totals: pl.DataFrame
    """key, total: summed device ns per kernel key."""
    device: tuple[int, int, int, int]
    """Device rows, their summed ns, of it launched inside an op, inside an annotation."""


def summary_partial(task: SummaryTask) -> SummaryPartial:
    """The mapped function: the batch's partial, read on the worker."""
    import polars as pl

    from traceatlas.analysis.partitioned import batch_view

    view = batch_view(task.store, task.selections, task.ranks)
    windows = None
    if task.source == "phases":
        windows = pl.DataFrame(list(task.windows), schema={
            "rank": pl.Int64, "it": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64},
            orient="row")
    return partial_of(view, task.source, windows)


def partial_of(trace: Trace, source: str, phases: pl.DataFrame | None) -> SummaryPartial:
    """The partial of every rank of ``trace`` (one batch). ``phases``: for source
    ``phases``, the windows (rank, it, start_ns, end_ns) of these ranks."""
    import polars as pl

    from traceatlas.compare.summary_frame import loaded

    view = loaded(trace)  # the batch's intervals read once; every step below reads it
    windows, rows = _iterations(view, source, phases)
    table = rows.collect()
    device = _device_context(view, table)
    host = _Columns.of(table)
    dev = _Columns.of(device)
    names, cells = [], []
    for kind in NAMED_KINDS:
        n, c = _kind(kind, host, dev, device)
        names.append(n.select(pl.lit(kind).alias("kind"), pl.all()))
        cells.append(c.select(pl.lit(kind).alias("kind"), pl.all()))
    launchers, totals = _launchers(device)
    return SummaryPartial(windows, pl.concat(names), pl.concat(cells), launchers, totals,
                          _attribution(device))


def _iterations(view: Trace, source: str, phases: pl.DataFrame | None
                ) -> tuple[pl.DataFrame, pl.LazyFrame]:
    """(windows with rank/it/dur_ns, intervals with rank/start_ns/end_ns/correlation/
    name/category/it, rows outside every iteration dropped)."""
    import polars as pl

    base = view.intervals.select("rank", "start_ns", "end_ns", "correlation", "step",
                                 "name", "category")
    if source == "steps":
        # the steps analysis' windows without its breakdown (most of its cost)
        from traceatlas.analysis.steps import _markers, _windows

        windows = (_windows(view, _markers(view, "").collect().lazy())
                   .select("rank", pl.col("step").cast(pl.Int64).alias("it"),
                           (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"))
                   .sort("rank", "it").collect())
        rows = base.filter(pl.col("step") >= 0).with_columns(pl.col("step").alias("it"))
        return windows, rows.drop("step")
    if source == "phases":
        assert phases is not None
        windows = phases.select("rank", "it", (pl.col("end_ns") - pl.col("start_ns"))
                                .alias("dur_ns"))
        return windows, _by_windows(base, phases)
    spans = (base.group_by("rank").agg(pl.col("start_ns").min(), pl.col("end_ns").max())
             .collect())
    windows = spans.select(pl.col("rank").cast(pl.Int64), pl.lit(0, pl.Int64).alias("it"),
                           (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"))
    return windows, base.with_columns(pl.lit(0, pl.Int64).alias("it")).drop("step")


def _by_windows(base: pl.LazyFrame, windows: pl.DataFrame) -> pl.LazyFrame:
    """Intervals with the iteration whose [start, end) holds their time: a device
    interval's time is its launch's start (same rank and correlation), else its own."""
    import polars as pl

    device = pl.col("category").is_in(tuple(DEVICE_CATEGORIES))
    launches = (base.filter(pl.col("category").is_in(("runtime", "driver"))
                            & pl.col("correlation").is_not_null())
                .group_by("rank", "correlation").agg(pl.col("start_ns").min().alias("ls")))
    timed = (base.join(launches, on=["rank", "correlation"], how="left")
             .with_columns(pl.when(device).then(pl.coalesce("ls", "start_ns"))
                           .otherwise(pl.col("start_ns")).alias("t")))
    wins = windows.lazy().select(pl.col("rank").cast(pl.Int32), "it",
                                 pl.col("start_ns").alias("ws"),
                                 pl.col("end_ns").alias("we")).sort("ws")
    return (timed.sort("t")
            .join_asof(wins, left_on="t", right_on="ws", by="rank", strategy="backward",
                       check_sortedness=False)
            .filter(pl.col("ws").is_not_null() & (pl.col("t") < pl.col("we")))
            .select("rank", "start_ns", "end_ns", "correlation", "name", "category", "it"))


def _device_context(view: Trace, rows: pl.DataFrame) -> pl.DataFrame:
    """Device rows (rank, it, start_ns, end_ns, name) with their launch context
    (``compare.launchers``): ``op`` and ``annotations``, plus a row id ``_d``."""
    import polars as pl

    from traceatlas.compare.launchers import launch_context

    device = (rows.filter(pl.col("category").is_in(KIND_CATEGORIES["kernel"]))
              .select("rank", "it", "start_ns", "end_ns", pl.col("name").cast(pl.String),
                      "correlation")
              .with_row_index("_d"))
    ctx = launch_context(view)
    return (device.with_columns(pl.col("rank").cast(pl.Int32),
                                pl.col("correlation").cast(pl.Int64))
            .join(ctx, on=["rank", "correlation"], how="left")
            .with_columns(pl.col("annotations").fill_null(pl.lit([], pl.List(pl.String))))
            .drop("correlation"))


@dataclass(frozen=True)
class _Columns:
    """A frame's ranks and iterations (the distinct values, ascending) with each row's
    positions in them, times, and the codes of its ``name`` / ``category`` columns."""

    frame: pl.DataFrame
    ranks: I64
    labels: I64
    r: I64
    i: I64
    start: I64
    end: I64

    @classmethod
    def of(cls, frame: pl.DataFrame) -> _Columns:
        rank = frame["rank"].to_numpy().astype(np.int64)
        it = frame["it"].to_numpy().astype(np.int64)
        ranks, r = np.unique(rank, return_inverse=True)
        labels, i = np.unique(it, return_inverse=True)
        return cls(frame, ranks, labels, r.astype(np.int64).ravel(),
                   i.astype(np.int64).ravel(),
                   frame["start_ns"].to_numpy().astype(np.int64),
                   frame["end_ns"].to_numpy().astype(np.int64))

    def rows(self, column: str, mask: npt.NDArray[np.bool_] | None = None) -> Rows:
        """``summary_kinds.Rows`` of the rows in ``mask`` (all when None), named by
        ``column`` (String or Categorical, no nulls in ``mask``)."""
        series = self.frame[column]
        if mask is not None:
            series = series.filter(mask)
        code, names = codes(series)
        if mask is None:
            return Rows(names, code, self.r, self.i, self.start, self.end)
        return Rows(names, code, self.r[mask], self.i[mask], self.start[mask], self.end[mask])

    def cells(self, rows: Rows, key_of: type[str] | None = None
              ) -> tuple[pl.DataFrame, pl.DataFrame]:
        """``summary_kinds.kind_cells`` of ``rows`` (keys: ``normalize``, or ``str``)."""
        return kind_cells(rows, key_of or normalize, self.ranks.tolist(),
                          self.labels.tolist())


def _kind(kind: str, host: _Columns, dev: _Columns, device: pl.DataFrame
          ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``kind_cells`` of ``kind``. Device kinds: the device rows under their launching
    op's name, or once under each enclosing annotation's name (a name repeated in nested
    annotations counted once)."""
    import polars as pl

    if kind == "op_device":
        mask = device["op"].is_not_null().to_numpy()
        return dev.cells(dev.rows("op", mask))
    if kind == "annotation_device":
        exploded = (device.select("_d", "rank", "it", "start_ns", "end_ns",
                                  pl.col("annotations").alias("name"))
                    .explode("name").drop_nulls("name").unique(["_d", "name"]))
        d = exploded["_d"].to_numpy()
        cols = _Columns(exploded, dev.ranks, dev.labels, dev.r[d], dev.i[d],
                        exploded["start_ns"].to_numpy().astype(np.int64),
                        exploded["end_ns"].to_numpy().astype(np.int64))
        return cols.cells(cols.rows("name"))
    category = host.frame["category"]
    if kind == "category":
        mask = (category != "step").to_numpy()
        return host.cells(host.rows("category", mask), str)
    mask = category.is_in(KIND_CATEGORIES[kind]).to_numpy()
    return host.cells(host.rows("name", mask))


def _launchers(device: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(launchers: key, slot, launcher, d; totals: key, total) of the batch's device
    rows: summed ns per kernel key, and per (kernel key, op key) (slot 0) and (kernel
    key, innermost annotation key) (slot 2)."""
    import polars as pl

    launchers = pl.DataFrame(schema={"key": pl.String, "slot": pl.Int64,
                                     "launcher": pl.String, "d": pl.Int64})
    totals = pl.DataFrame(schema={"key": pl.String, "total": pl.Int64})
    if device.height == 0:
        return launchers, totals
    keyed = (device.join(_keys(device["name"]), on="name", how="left")
             .filter(pl.col("key").is_not_null())
             .select("key", (pl.col("end_ns") - pl.col("start_ns")).alias("dur"),
                     pl.col("op").alias("op_name"),
                     pl.col("annotations").list.last().alias("ann_name")))
    totals = keyed.group_by("key").agg(pl.col("dur").sum().cast(pl.Int64).alias("total"))
    parts = [launchers]
    for col, slot in (("op_name", 0), ("ann_name", 2)):
        named = keyed.filter(pl.col(col).is_not_null())
        if named.height == 0:
            continue
        names = _keys(named[col]).rename({"name": col, "key": "launcher"})
        parts.append(named.join(names, on=col, how="left")
                     .group_by("key", "launcher").agg(pl.col("dur").sum().alias("d"))
                     .select("key", pl.lit(slot, pl.Int64).alias("slot"), "launcher",
                             pl.col("d").cast(pl.Int64)))
    return pl.concat(parts), totals


def _keys(names: pl.Series) -> pl.DataFrame:
    """``name`` -> ``key`` (``normalize``) for the distinct non-null names given."""
    import polars as pl

    distinct = [n for n in names.unique().to_list() if n is not None]
    return pl.DataFrame({"name": distinct, "key": [normalize(n) for n in distinct]},
                        schema={"name": pl.String, "key": pl.String})


def _attribution(device: pl.DataFrame) -> tuple[int, int, int, int]:
    """(rows, summed ns, ns launched inside an op, ns inside an annotation)."""
    import polars as pl

    if device.height == 0:
        return 0, 0, 0, 0
    dur = pl.col("end_ns") - pl.col("start_ns")
    total, with_op, with_ann = device.select(
        dur.sum().alias("t"), dur.filter(pl.col("op").is_not_null()).sum().alias("o"),
        dur.filter(pl.col("annotations").list.len() > 0).sum().alias("a")).row(0)
    return device.height, int(total or 0), int(with_op or 0), int(with_ann or 0)
