"""The critical path marked in a Chrome/Perfetto export (``-p critical_path=true``).

From the ``critical_path`` analysis of the region (the trace, or ``--step N``):

- every interval that owns time on the path gets ``args.on_critical_path = true``,
  ``args.critical_path_ns`` (its on-path time, ns), ``args.critical_path_share`` (that
  over the region's length) and ``args.critical_path_bound`` (the bound holding most of
  its on-path time). A path row is matched to the stored interval with the same rank,
  track, name, start and end; a row clipped at the region's edge to the shortest
  interval of that rank, track and name containing it.
- consecutive path segments owned by different events are joined by a flow arrow: an
  ``s`` event inside the earlier segment and an ``f`` event (``bp: "e"``: bind to the
  enclosing slice) inside the later one, each at its segment's midpoint moved into the
  event's own span (a launch segment precedes its kernel) on the row
  (``tid``) of its interval, ``cat`` and ``name`` ``critical_path``, ids 1, 2, ... in path
  order. Perfetto keys v1 flows by (id, cat, name), so these never join the trace's own
  flows; arrows cross ranks (``pid``) and streams like any flow. Host time outside any
  event (``(untraced)`` rows) carries no mark and no arrow end: the arrow skips it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import pyarrow as pa

from traceatlas.store.layout import part_path

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

CATEGORY = "critical_path"
_ENCODE = msgspec.json.encode
_DECODE = msgspec.json.decode


@dataclass
class CriticalMarks:
    """Per rank: the part row numbers to mark and their args, and the flow ends."""

    length_ns: int
    marks: dict[int, dict[int, dict[str, Any]]] = field(default_factory=dict)
    """rank -> row number in the rank's intervals part -> keys to add to its args."""
    ends: pl.DataFrame | None = None
    """One row per flow end: ``rank, track_id, row_start_ns, ts_ns, flow, phase``."""

    def args(self, rank: int, first_row: int, args: pa.Array) -> pa.Array:
        """``args`` (JSON texts of the part rows ``first_row...``) with the marks added."""
        rows = self.marks.get(rank)
        if not rows:
            return args
        hit = [r - first_row for r in rows if first_row <= r < first_row + len(args)]
        if not hit:
            return args
        texts: list[str | None] = args.to_pylist()
        for i in hit:
            text = texts[i]
            obj = _DECODE(text) if text else {}
            obj = obj if isinstance(obj, dict) else {"args": obj}
            obj.update(rows[first_row + i])
            texts[i] = _ENCODE(obj).decode()
        return pa.array(texts, pa.string())

    def flow_events(self, rank: int, tids: Any, base: int) -> list[str]:
        """The ``s``/``f`` texts whose end lies on ``rank``; ``tids(track, start)`` gives
        the tid of the row holding the interval of that track starting there."""
        import polars as pl

        from traceatlas.export.chrome import micros

        if self.ends is None or self.ends.height == 0:
            return []
        mine = self.ends.filter(pl.col("rank") == rank)
        if mine.height == 0:
            return []
        tid = tids(mine["track_id"].to_numpy().astype(np.int64),
                   mine["row_start_ns"].to_numpy().astype(np.int64))
        out = []
        for (flow, phase, ts), t in zip(mine.select("flow", "phase", "ts_ns").iter_rows(),
                                         tid.tolist(), strict=True):
            bind = ',"bp":"e"' if phase == "f" else ""
            out.append(f'{{"ph":"{phase}"{bind},"id":{flow},"cat":"{CATEGORY}",'
                       f'"name":"{CATEGORY}","pid":{rank},"tid":{t},'
                       f'"ts":{micros(int(ts) - base)}}}')
        return out


def critical_marks(trace: Trace, step: int | None = None) -> CriticalMarks:
    """Run ``critical_path`` on the trace (or step ``step``) and locate its events."""
    import polars as pl

    from traceatlas.analysis import registry

    region = trace.select(step=step) if step is not None else trace
    result = registry.run("critical_path", region, {})
    path = result.table.with_row_index("seg")
    length = int(path["on_path_ns"].sum()) if path.height else 0
    owned = path.filter(pl.col("event_start_ns").is_not_null())
    found = _locate(trace, owned)
    marks = CriticalMarks(length_ns=length)
    if found.height == 0:
        return marks
    by_bound = found.group_by("rank", "row", "bound").agg(pl.col("on_path_ns").sum())
    per_event = (by_bound.sort("on_path_ns", "bound", descending=[True, False])
                 .group_by("rank", "row", maintain_order=True)
                 .agg(pl.col("on_path_ns").sum(), pl.col("bound").first()))
    for rank, row, ns, bound in per_event.iter_rows():
        marks.marks.setdefault(int(rank), {})[int(row)] = {
            "on_critical_path": True, "critical_path_ns": int(ns),
            "critical_path_share": round(ns / length, 6) if length else 0.0,
            "critical_path_bound": bound}
    marks.ends = _flow_ends(found)
    return marks


def _part_rows(trace: Trace, rank: int) -> pl.DataFrame:
    """``row, track_id, name, start_ns, end_ns`` of the rank's intervals part, in order."""
    import polars as pl

    path = part_path(trace.path, "intervals", rank)
    if not path.is_file():
        return pl.DataFrame(schema={"row": pl.Int64, "track_id": pl.Int32, "name": pl.String,
                                    "start_ns": pl.Int64, "end_ns": pl.Int64})
    return (pl.read_parquet(path, columns=["track_id", "name", "start_ns", "end_ns"])
            .with_row_index("row").select(
                pl.col("row").cast(pl.Int64), pl.col("track_id").fill_null(-1).cast(pl.Int32),
                pl.col("name").cast(pl.String).fill_null(""),
                pl.col("start_ns").cast(pl.Int64), pl.col("end_ns").cast(pl.Int64)))


def _locate(trace: Trace, owned: pl.DataFrame) -> pl.DataFrame:
    """Path rows with an event, plus ``row`` and ``row_start_ns`` (its stored interval)."""
    import polars as pl

    keys = ["track_id", "name"]
    parts = []
    for rank in sorted(int(r) for r in owned["rank"].unique()):
        rows = _part_rows(trace, rank)
        mine = owned.filter(pl.col("rank") == rank).with_columns(
            pl.col("track_id").cast(pl.Int32), pl.col("name").fill_null(""))
        exact = mine.join(rows, left_on=[*keys, "event_start_ns", "event_end_ns"],
                          right_on=[*keys, "start_ns", "end_ns"], how="inner")
        exact = exact.with_columns(row_start_ns=pl.col("event_start_ns"))
        rest = mine.join(exact.select("seg"), on="seg", how="anti")
        if rest.height:  # clipped at the region's edges: the shortest containing interval
            inside = (rest.join(rows.rename({"start_ns": "row_start_ns", "end_ns": "row_end"}),
                                on=keys, how="inner")
                      .filter((pl.col("row_start_ns") <= pl.col("event_start_ns"))
                              & (pl.col("row_end") >= pl.col("event_end_ns")))
                      .sort("seg", pl.col("row_end") - pl.col("row_start_ns"))
                      .unique("seg", keep="first").drop("row_end"))
            exact = pl.concat([exact, inside.select(exact.columns)])
        parts.append(exact.unique("seg", keep="first"))
    if not parts:
        return owned.clear().with_columns(row=pl.lit(0, pl.Int64),
                                          row_start_ns=pl.lit(0, pl.Int64))
    return pl.concat(parts).sort("seg")


def _flow_ends(found: pl.DataFrame) -> pl.DataFrame:
    """An ``s`` end in segment i and an ``f`` end in segment j for consecutive located
    segments (i, j) owned by different events."""
    import polars as pl

    mid = (pl.col("start_ns") + pl.col("end_ns")) // 2  # inside the event's own span:
    last = pl.max_horizontal("event_start_ns", pl.col("event_end_ns") - 1)  # a launch
    seg = found.select("rank", "track_id", "row", "row_start_ns",  # segment precedes it
                       pl.min_horizontal(pl.max_horizontal(mid, "event_start_ns"), last)
                       .alias("ts_ns"))
    change = (pl.col("rank") != pl.col("rank").shift(-1)) | (
        pl.col("row") != pl.col("row").shift(-1))
    src = seg.with_columns(change.alias("to_next")).head(max(seg.height - 1, 0))
    dst = seg.slice(1)
    take = src["to_next"]
    src, dst = src.filter(take).drop("to_next"), dst.filter(take)
    flow = pl.Series("flow", np.arange(1, src.height + 1, dtype=np.int64))
    return (pl.concat([src.with_columns(flow, phase=pl.lit("s")),
                       dst.with_columns(flow, phase=pl.lit("f"))])
            .select("rank", "track_id", "row_start_ns", "ts_ns", "flow", "phase"))
