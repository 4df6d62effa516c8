"""Building the baseline summary of a trace (the format: ``traceatlas.compare.summary``).

The store's intervals are read once (``summary_frame.loaded``: the needed columns, in
memory); the iteration of each interval comes from the ``steps`` windows (or phases, or
the whole run); every kind's entities are interval unions per (key, rank, iteration) on
numpy columns (``summary_kinds``); device kinds take their launch context from
``launchers``; the ``efficiency`` analysis runs on the same in-memory frame.
``traceatlas.testing.summary_reference`` keeps the former all-Polars builder as the test
oracle: both give identical summaries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

import traceatlas
from traceatlas.compare.normalize import normalize
from traceatlas.compare.summary import FORMAT, KINDS, VERSION, finite_or_none
from traceatlas.compare.summary_kinds import Rows, codes, entities, positions
from traceatlas.errors import MissingDataError
from traceatlas.model.schema import DEVICE_CATEGORIES

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

I64 = npt.NDArray[np.int64]

KIND_CATEGORIES: dict[str, tuple[str, ...]] = {
    "annotation": ("annotation", "nvtx", "region"),
    "op": ("cpu_op",),
    "kernel": ("kernel", "comm_kernel", "memcpy", "memset"),
}
"""Canonical categories of each named kind (``category`` takes every one but ``step``;
``op_device`` / ``annotation_device`` take the ``kernel`` rows by launch context)."""


def build(trace: Trace, *, min_share: float, top: int) -> dict[str, Any]:
    """The summary of ``trace`` as JSON-ready data (see ``traceatlas.compare.summary``)."""
    from traceatlas.compare.summary_frame import loaded

    ranks = list(trace.ranks)
    notes: list[str] = []
    view = loaded(trace)  # the intervals read once; every step below reads this frame
    source, windows, rows = _iterations(view, trace, notes)
    labels = sorted(int(x) for x in windows["it"].unique().to_list())
    r_index = {r: i for i, r in enumerate(ranks)}
    i_index = {label: i for i, label in enumerate(labels)}
    present = np.zeros((len(ranks), len(labels)), dtype=bool)
    step_ns = np.full((len(ranks), len(labels)), -1, dtype=np.int64)
    for rank, it, dur in windows.select("rank", "it", "dur_ns").iter_rows():
        present[r_index[int(rank)], i_index[int(it)]] = True
        step_ns[r_index[int(rank)], i_index[int(it)]] = int(dur)
    if len(labels) and not present.all():
        missing = [r for r in ranks if not present[r_index[r]].all()]
        notes.append(f"ranks without every iteration (-1 where absent): {_ranks_text(missing)}")
    total = int(step_ns[step_ns > 0].sum())
    entities: dict[str, list[dict[str, Any]]] = {}
    other: dict[str, dict[str, Any]] = {}
    step_key = {"steps": "ProfilerStep#", "phases": "phase", "run": "run"}[source]
    step_count = np.where(present, 1, -1)
    entities["step"] = [{"key": step_key, "names": [step_key], "n_names": 1,
                         "ns": step_ns.tolist(), "count": step_count.tolist()}]
    table = rows.collect()
    device = _device_context(view, table)
    note = _attribution_note(device)
    if note:
        notes.append(note)
    host = _Columns.of(table, ranks, labels)
    dev = _Columns.of(device, ranks, labels)
    for kind in KINDS[1:]:
        items = _kind(kind, host, dev, device, present)
        kept, folded = _fold(items, total, min_share, top)
        entities[kind] = kept
        if folded:
            other[kind] = _other(folded, present)
    who = _launched_by(device, entities["kernel"])
    for item in entities["kernel"]:
        if item["key"] in who:
            item["launched_by"] = who[item["key"]]
    return {
        "format": FORMAT,
        "version": VERSION,
        "traceatlas": traceatlas.__version__,
        "sources": _sources(trace),
        "source_format": trace.source_format,
        "ranks": ranks,
        "rank_info": _rank_info(trace, ranks),
        "iterations": {"source": source, "labels": labels},
        "total_ns": total,
        "entities": entities,
        "other": other,
        "fold_rule": (f"an entity below {min_share:g} of total_ns and not among the {top} "
                      "largest of its kind is folded into other (summed)"),
        "efficiency": _efficiency(view, trace, notes),
        "notes": notes,
    }


def _ranks_text(ranks: Sequence[int]) -> str:
    return ", ".join(map(str, ranks[:20])) + (" ..." if len(ranks) > 20 else "")


def _iterations(view: Trace, trace: Trace, notes: list[str]
                ) -> tuple[str, pl.DataFrame, pl.LazyFrame]:
    """(source, windows with rank/it/dur_ns, intervals with rank/start_ns/end_ns/
    correlation/name/category/it, rows outside every iteration dropped). ``view``: the
    loaded intervals; ``trace``: the store, for an analysis needing other columns."""
    import polars as pl

    base = view.intervals.select("rank", "start_ns", "end_ns", "correlation", "step",
                                 "name", "category")
    has_steps = base.filter(pl.col("category") == "step").select(pl.len()).collect().item() > 0
    if has_steps:
        # the steps analysis' windows without its breakdown (most of its cost)
        from traceatlas.analysis.steps import _markers, _windows

        windows = (_windows(view, _markers(view, "").collect().lazy())
                   .select("rank", pl.col("step").cast(pl.Int64).alias("it"),
                           (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"))
                   .sort("rank", "it").collect())
        rows = base.filter(pl.col("step") >= 0).with_columns(pl.col("step").alias("it"))
        return "steps", windows, rows.drop("step")
    phases = _table("phases", view, trace)
    if phases is not None and phases.height:
        notes.append("no step markers: iterations are the phases analysis' repetitions")
        windows = phases.select("rank", pl.col("phase").alias("it"), "start_ns", "end_ns",
                                "dur_ns")
        return "phases", windows.select("rank", "it", "dur_ns"), _by_windows(base, windows)
    notes.append("no step markers and no repeating phase: the whole run is one sample")
    spans = (base.group_by("rank").agg(pl.col("start_ns").min(), pl.col("end_ns").max())
             .collect())
    windows = spans.select("rank", pl.lit(0, pl.Int64).alias("it"),
                           (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"))
    return "run", windows, base.with_columns(pl.lit(0, pl.Int64).alias("it")).drop("step")


def _table(name: str, view: Trace, trace: Trace) -> pl.DataFrame | None:
    """The main table of analysis ``name`` on the loaded view (on the store when it needs
    a column the view did not load); None when it does not apply."""
    import polars as pl

    from traceatlas.analysis.registry import run

    try:
        try:
            return run(name, view).table
        except pl.exceptions.ColumnNotFoundError:
            return run(name, trace).table
    except MissingDataError:
        return None


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


def _keys(names: pl.Series) -> pl.DataFrame:
    """``name`` -> ``key`` (``normalize``) for the distinct non-null names given."""
    import polars as pl

    distinct = [n for n in names.unique().to_list() if n is not None]
    return pl.DataFrame({"name": distinct, "key": [normalize(n) for n in distinct]},
                        schema={"name": pl.String, "key": pl.String})


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
    """A frame's rank / iteration positions (``summary_kinds.positions``), times, and the
    codes of its ``name`` and ``category`` columns (when it has them)."""

    frame: pl.DataFrame
    r: I64
    i: I64
    start: I64
    end: I64

    @classmethod
    def of(cls, frame: pl.DataFrame, ranks: list[int], labels: list[int]) -> _Columns:
        return cls(frame, positions(frame["rank"].to_numpy(), ranks),
                   positions(frame["it"].to_numpy(), labels),
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


def _kind(kind: str, host: _Columns, dev: _Columns, device: pl.DataFrame,
          present: npt.NDArray[np.bool_]) -> list[dict[str, Any]]:
    """Entities of ``kind`` (``summary_kinds.entities``). Device kinds: the device rows
    under their launching op's name, or once under each enclosing annotation's name (a
    name repeated in nested annotations counted once)."""
    import polars as pl

    if kind == "op_device":
        mask = device["op"].is_not_null().to_numpy()
        return entities(dev.rows("op", mask), normalize, present, raw_names=True)
    if kind == "annotation_device":
        exploded = (device.select("_d", "rank", "it", "start_ns", "end_ns",
                                  pl.col("annotations").alias("name"))
                    .explode("name").drop_nulls("name").unique(["_d", "name"]))
        d = exploded["_d"].to_numpy()
        cols = _Columns(exploded, dev.r[d], dev.i[d],
                        exploded["start_ns"].to_numpy().astype(np.int64),
                        exploded["end_ns"].to_numpy().astype(np.int64))
        return entities(cols.rows("name"), normalize, present, raw_names=True)
    category = host.frame["category"]
    if kind == "category":
        mask = (category != "step").to_numpy()
        return entities(host.rows("category", mask), str, present, raw_names=False)
    mask = category.is_in(KIND_CATEGORIES[kind]).to_numpy()
    return entities(host.rows("name", mask), normalize, present, raw_names=True)


def _launched_by(device: pl.DataFrame, kernels: list[dict[str, Any]]) -> dict[str, Any]:
    """Per kept kernel key: ``[op, op_share, annotation, annotation_share]``, the op key
    and the innermost annotation key that launched the largest part of its summed device
    time, with that part (0..1); None where none."""
    import polars as pl

    if not kernels or device.height == 0:
        return {}
    keyed = (device.join(_keys(device["name"]), on="name", how="left")
             .filter(pl.col("key").is_in([k["key"] for k in kernels]))
             .select("key", (pl.col("end_ns") - pl.col("start_ns")).alias("dur"),
                     pl.col("op").alias("op_name"),
                     pl.col("annotations").list.last().alias("ann_name")))
    if keyed.height == 0:
        return {}
    totals = keyed.group_by("key").agg(pl.col("dur").sum().alias("total"))
    out: dict[str, list[Any]] = {k: [None, 0.0, None, 0.0] for k in totals["key"].to_list()}
    for col, slot in (("op_name", 0), ("ann_name", 2)):
        named = keyed.filter(pl.col(col).is_not_null())
        if named.height == 0:
            continue
        names = _keys(named[col]).rename({"name": col, "key": "launcher"})
        best = (named.join(names, on=col, how="left")
                .group_by("key", "launcher").agg(pl.col("dur").sum().alias("d"))
                .sort(["key", "d", "launcher"], descending=[False, True, False])
                .group_by("key", maintain_order=True).first()
                .join(totals, on="key"))
        for key, launcher, d, total in best.select("key", "launcher", "d", "total").iter_rows():
            out[key][slot] = launcher
            out[key][slot + 1] = round(d / total, 3) if total else 0.0
    return out


def _attribution_note(device: pl.DataFrame) -> str | None:
    """How much of the device activities' summed time has a launching op / annotation."""
    import polars as pl

    if device.height == 0:
        return None
    dur = pl.col("end_ns") - pl.col("start_ns")
    total, with_op, with_ann = device.select(
        dur.sum().alias("t"), dur.filter(pl.col("op").is_not_null()).sum().alias("o"),
        dur.filter(pl.col("annotations").list.len() > 0).sum().alias("a")).row(0)
    if not total:
        return None
    return (f"device time launched inside an op: {with_op / total:.1%}, inside an "
            f"annotation: {with_ann / total:.1%} (summed durations; the rest is "
            "unattributed in op_device / annotation_device)")


def _total(item: dict[str, Any]) -> int:
    return int(item["_total"])


def _fold(items: list[dict[str, Any]], total: int, min_share: float,
          top: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(kept, folded): folded = below ``min_share`` of ``total`` and not in the top."""
    order = sorted(items, key=lambda it: (-_total(it), it["key"]))
    kept, folded = [], []
    for rank, item in enumerate(order):
        if rank < top or _total(item) >= min_share * total:
            kept.append(item)
        else:
            folded.append(item)
        del item["_total"]
    return kept, folded


def _other(folded: list[dict[str, Any]], present: npt.NDArray[np.bool_]) -> dict[str, Any]:
    ns = sum(np.maximum(np.asarray(f["ns"], dtype=np.int64), 0) for f in folded)
    count = sum(np.maximum(np.asarray(f["count"], dtype=np.int64), 0) for f in folded)
    ns_m = np.where(present, np.asarray(ns), -1)
    count_m = np.where(present, np.asarray(count), -1)
    return {"keys": sorted(f["key"] for f in folded), "ns": ns_m.tolist(),
            "count": count_m.tolist()}


def _sources(trace: Trace) -> list[dict[str, Any]]:
    """Each source file once (a file holding several ranks is listed once)."""
    seen: dict[tuple[str, str | None], dict[str, Any]] = {}
    for src in trace.manifest.get("sources", []):
        key = (str(src.get("path")), src.get("member"))
        if key not in seen:
            seen[key] = {"path": key[0], "member": key[1],
                         "format": str(src.get("format", trace.source_format)),
                         "bytes": int(src.get("size") or 0),
                         "fingerprint": src.get("sampled_blake2b")}
    return list(seen.values())


def _rank_info(trace: Trace, ranks: list[int]) -> list[dict[str, Any]]:
    import polars as pl

    tracks = trace.tracks.select(
        "rank", pl.col("kind").cast(pl.String), "host", "pid", "device").collect()
    info = []
    for rank in ranks:
        mine = tracks.filter(pl.col("rank") == rank)
        hosts = sorted({h for h in mine["host"].to_list() if h})
        pids = sorted({int(p) for p in mine.filter(pl.col("kind") == "host_thread")["pid"]
                       .to_list() if p is not None})
        devices = sorted({int(d) for d in mine["device"].to_list() if d is not None and d >= 0})
        info.append({"rank": rank, "hosts": hosts, "pids": pids, "devices": devices})
    return info


def _efficiency(view: Trace, trace: Trace, notes: list[str]) -> list[list[Any]] | None:
    import polars as pl

    from traceatlas.analysis.registry import run

    try:
        try:
            table = run("efficiency", view).table
        except pl.exceptions.ColumnNotFoundError:  # a column the view did not load
            table = run("efficiency", trace).table
    except MissingDataError as exc:
        notes.append(f"efficiency model not computed: {exc.problem}")
        return None
    return [[str(scope), str(side), str(metric), finite_or_none(value),
             None if parent is None else str(parent), int(level),
             None if label is None else str(label)]
            for scope, side, metric, value, parent, level, label in table.select(
                "scope", "side", "metric", "value", "parent", "level", "label").iter_rows()]
