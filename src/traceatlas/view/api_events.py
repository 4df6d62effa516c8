"""``/api/events`` (raw intervals in a window) and ``/api/event`` (one interval and its
launch chain), read from the store's Parquet parts with Polars filters (row-group
statistics prune the parts). User text never becomes SQL or a regex: names are matched
as literal strings. ``/api/search`` is in ``api_search``."""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from traceatlas.model.schema import DEVICE_CATEGORIES
from traceatlas.ops.select import INT64_MAX
from traceatlas.view.api_common import (
    Context,
    NotFound,
    column_values,
    json_response,
    query_of,
)
from traceatlas.view.params import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    MAX_NAME,
    get_ids,
    get_int,
    get_text,
    get_window,
)

if TYPE_CHECKING:
    import polars as pl

EVENT_COLUMNS = ("track", "start_ns", "end_ns", "name", "category", "depth", "correlation",
                 "external_id", "step")
LAUNCH_CATEGORIES = ("runtime", "driver")
INT64_MIN = -INT64_MAX - 1
COLLECT_FACTOR = 10
MAX_COLLECT = 1_000_000
"""``/api/events`` collects at most ``min(limit * COLLECT_FACTOR, MAX_COLLECT)`` rows
in its one pass; beyond that it counts and truncates in a streaming second pass."""
MAX_CHAIN = 200
"""Linked events ``/api/event`` lists at most."""


def _on_tracks(ctx: Context, ids: list[int],
               window: tuple[int, int] | None = None) -> pl.LazyFrame:
    """Intervals of the store tracks behind ``ids`` (overlapping the inclusive
    ``window`` when given), with the viewer id as ``track`` (an interval shown by two
    requested rows comes once per row)."""
    import polars as pl

    keys = ctx.key_frame(ids)
    ranks = sorted(set(keys["rank"].to_list()))
    tids = sorted(set(keys["track_id"].to_list()))
    cond = pl.col("track_id").is_in(tids)
    if window is not None:
        cond = cond & _overlaps(ctx, ranks, *window)
    frame = ctx.intervals_of(ranks).filter(cond)
    return frame.join(keys.lazy(), on=["rank", "track_id"], how="inner")


def _overlaps(ctx: Context, ranks: list[int], start: int, end: int) -> pl.Expr:
    """``start_ns <= end and end_ns >= start``, plus ``start_ns >= start - longest``
    (the ranks' longest interval) so that both bounds of ``start_ns`` prune row groups."""
    import polars as pl

    cond = (pl.col("start_ns") <= end) & (pl.col("end_ns") >= start)
    longest = ctx.longest(ranks)
    if longest is not None:
        cond = (pl.col("start_ns") >= max(start - longest, INT64_MIN)) & cond
    return cond


def _columns(frame: pl.DataFrame, names: tuple[str, ...]) -> dict[str, Any]:
    """Columns for ``json_bytes``: numpy views of numeric columns without nulls."""
    return {name: column_values(frame[name].to_arrow()) for name in names}


def events(ctx: Context, request: Request) -> Response:
    """Intervals overlapping ``[start_ns, end_ns]`` (inclusive, as ``--window``) on
    ``tracks``, ordered by start; at most ``limit``: when more overlap, the longest are
    kept (``truncated``: true) so a zoomed-out fall back still shows the big ones."""
    import polars as pl

    query = query_of(request)
    start, end = get_window(query)
    ids = get_ids(query, ctx.n_tracks)
    limit = get_int(query, "limit", default=DEFAULT_LIMIT, lo=1, hi=MAX_LIMIT)
    frame = _on_tracks(ctx, ids, (start, end)).select(
        "track", "start_ns", "end_ns", "dur_ns", "name", "category", "depth",
        "correlation", "external_id", "step")
    longest = ["dur_ns", "start_ns"]
    cap = min(limit * COLLECT_FACTOR, MAX_COLLECT)
    rows = frame.head(cap + 1).collect()  # one pass: count and truncate in memory
    total = rows.height
    if total > cap:  # a huge window: count and keep the longest, streaming
        counted, rows = pl.collect_all([
            frame.select(pl.len()), frame.top_k(limit, by=longest, reverse=[False, True])])
        total = int(counted.item())
    elif total > limit:
        rows = rows.top_k(limit, by=longest, reverse=[False, True])
    truncated = total > limit
    rows = rows.sort("start_ns", "track", "depth").with_columns(
        pl.col("name").cast(pl.String), pl.col("category").cast(pl.String))
    out: dict[str, Any] = _columns(rows, EVENT_COLUMNS)
    out.update(count=rows.height, total=total, truncated=truncated, limit=limit)
    return json_response(out)


def event(ctx: Context, request: Request) -> Response:
    """One interval (``track``, ``start_ns``, optional ``name``; the deepest when several
    match) with every column (``args`` parsed) and ``chain``: host op -> runtime launch
    -> device activity, linked by ``external_id`` and ``correlation`` (flows when the
    interval has neither)."""
    import polars as pl

    query = query_of(request)
    track = get_int(query, "track", lo=0, hi=max(ctx.n_tracks - 1, 0))
    start = get_int(query, "start_ns")
    name = get_text(query, "name", required=False, limit=MAX_NAME)
    frame = _on_tracks(ctx, [track]).filter(pl.col("start_ns") == start)
    if name is not None:
        frame = frame.filter(pl.col("name").cast(pl.String) == name)
    found = frame.sort("depth", descending=True).head(1).collect()
    if found.height == 0:
        raise NotFound(f"no interval on track {track} starts at {start}"
                       + (" with that name" if name is not None else ""))
    row = {k: _plain(v) for k, v in found.row(0, named=True).items()}
    if isinstance(row.get("args"), str):
        with contextlib.suppress(ValueError):
            row["args"] = json.loads(row["args"])
    row["chain"] = chain(ctx, row)
    return json_response(row)


def _plain(value: Any) -> Any:
    return value if not hasattr(value, "to_list") else value.to_list()


def chain(ctx: Context, row: dict[str, Any]) -> list[dict[str, Any]]:
    """The events linked to ``row`` on its rank: host ops sharing its (or its launch's)
    ``external_id``, runtime/driver launches and device activities sharing its
    ``correlation`` (or, from a host op, its launches' correlations); each with
    ``role``, ``track``, ``name``, ``category``, ``start_ns``, ``end_ns``."""
    import polars as pl

    cat = pl.col("category").cast(pl.String)
    rank = int(row["rank"])
    iv = ctx.intervals_of([rank])
    corrs = {row["correlation"]} - {None}
    exts = {row["external_id"]} - {None}
    category = str(row["category"])
    is_host_op = category not in LAUNCH_CATEGORIES and category not in DEVICE_CATEGORIES
    if is_host_op and exts:
        launched = iv.filter(pl.col("category").is_in(LAUNCH_CATEGORIES)
                             & pl.col("external_id").is_in(list(exts))
                             & pl.col("correlation").is_not_null())
        corrs |= set(launched.select("correlation").head(MAX_CHAIN).collect()
                     ["correlation"].to_list())
    elif corrs:
        launches = iv.filter(pl.col("category").is_in(LAUNCH_CATEGORIES)
                             & pl.col("correlation").is_in(list(corrs))
                             & pl.col("external_id").is_not_null())
        exts |= set(launches.select("external_id").head(MAX_CHAIN).collect()
                    ["external_id"].to_list())
    parts = []
    if exts:
        parts.append(iv.filter(~pl.col("category").is_in([*LAUNCH_CATEGORIES, *DEVICE_CATEGORIES])
                               & pl.col("external_id").is_in(list(exts)))
                     .with_columns(role=pl.lit("host_op")))
    if corrs:
        linked = iv.filter(pl.col("correlation").is_in(list(corrs)))
        parts.append(linked.filter(pl.col("category").is_in(LAUNCH_CATEGORIES)).with_columns(
            role=pl.lit("launch")))
        parts.append(linked.filter(pl.col("category").is_in(list(DEVICE_CATEGORIES))).with_columns(
            role=pl.lit("device")))
    if not parts:
        return _flow_chain(ctx, row)
    order = {"host_op": 0, "launch": 1, "device": 2}
    found = (pl.concat([p.select("rank", "track_id", "role", pl.col("name").cast(pl.String),
                                 cat.alias("category"), "start_ns", "end_ns", "depth")
                        for p in parts])
             .with_columns(pl.col("role").replace_strict(order, return_dtype=pl.Int8)
                           .alias("_order"))
             .sort("_order", "start_ns", "depth").head(MAX_CHAIN).collect())
    return [_link(ctx, r) for r in found.iter_rows(named=True)]


def _link(ctx: Context, r: dict[str, Any]) -> dict[str, Any]:
    return {"role": r["role"], "track": ctx.by_key.get((int(r["rank"]), int(r["track_id"]))),
            "rank": int(r["rank"]), "name": r["name"], "category": r["category"],
            "start_ns": int(r["start_ns"]), "end_ns": int(r["end_ns"])}


def _flow_chain(ctx: Context, row: dict[str, Any]) -> list[dict[str, Any]]:
    """Events joined to ``row`` by a flow (start or end at its track and start time)."""
    import polars as pl

    rank, tid, ts = int(row["rank"]), int(row["track_id"]), int(row["start_ns"])
    flows = ctx.trace.flows.filter(pl.col("rank") == rank)
    ends = pl.concat([
        flows.filter((pl.col("src_track_id") == tid) & (pl.col("src_ts_ns") == ts))
        .select(pl.col("dst_track_id").alias("track_id"), pl.col("dst_ts_ns").alias("ts")),
        flows.filter((pl.col("dst_track_id") == tid) & (pl.col("dst_ts_ns") == ts))
        .select(pl.col("src_track_id").alias("track_id"), pl.col("src_ts_ns").alias("ts")),
    ]).drop_nulls().unique().head(MAX_CHAIN).collect()
    if ends.height == 0:
        return []
    iv = ctx.intervals_of([rank])
    found = (iv.join(ends.lazy(), left_on=["track_id", "start_ns"], right_on=["track_id", "ts"],
                     how="inner")
             .select("rank", "track_id", pl.col("name").cast(pl.String),
                     pl.col("category").cast(pl.String), "start_ns", "end_ns")
             .sort("start_ns").head(MAX_CHAIN).collect())
    return [_link(ctx, {**r, "role": "flow"}) for r in found.iter_rows(named=True)]
