"""``/api/critical_path``: the ``critical_path`` analysis of one step or window, as the
viewer draws it (segments on their viewer tracks, the breakdown by bound).

The region is ``step=N`` (as ``analyze critical_path --step N``), ``start_ns``/``end_ns``
(absolute ns, as ``--window @A:@B``), ``at_ns=T`` (the step whose span, first start to
last end of its ``step`` intervals over the ranks, holds ``T``; 404 when none does), or
nothing (the whole trace); ``ranks`` narrows the ranks. The analysis runs once per
region and ranks and is kept in an LRU of ``CACHE_SIZE`` results per server; two
requests for one region wait on one computation. At most ``MAX_SEGMENTS`` segments are
sent: beyond ``limit`` the longest are kept, in path order, with ``truncated`` and a
note; ``by_bound``/``by_rank`` always cover the whole path."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from traceatlas.errors import InputError
from traceatlas.view.api_common import (
    Context,
    NotFound,
    column_values,
    json_response,
    query_of,
)
from traceatlas.view.params import get_int, get_ranks

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

MAX_SEGMENTS = 20_000
"""Path segments one answer carries at most (the ``limit`` default and maximum)."""
CACHE_SIZE = 16
"""Regions whose path a server keeps."""
SEGMENT_COLUMNS = ("track", "rank", "track_id", "name", "category", "start_ns", "end_ns",
                   "bound", "on_path_ns", "event_start_ns", "event_end_ns")
_MEMO = "critical_path"

Key = tuple[str, int | None, int | None, tuple[int, ...] | None]
"""(kind ``step``/``window``/``trace``, step or start, end, ranks)."""


@dataclass
class PathResult:
    """One region's path: segments with viewer ids, summaries, notes."""

    segments: pl.DataFrame
    by_bound: pl.DataFrame
    by_rank: pl.DataFrame
    notes: list[str]


@dataclass
class _Cache:
    """The LRU of results and one lock per region being computed."""

    results: OrderedDict[Key, PathResult] = field(default_factory=OrderedDict)
    busy: dict[Key, threading.Lock] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    computed: int = 0
    """Analyses run (for tests: a repeated request runs none)."""


def _cache(ctx: Context) -> _Cache:
    with ctx._lock:
        found = ctx.memo.get(_MEMO)
        if not isinstance(found, _Cache):
            found = ctx.memo[_MEMO] = _Cache()
        return found


def region_trace(trace: Trace, key: Key) -> Trace:
    """The view of ``trace`` the analysis runs on, as ``analyze --step/--window``."""
    kind, a, b, ranks = key
    if kind == "trace" and ranks is None:
        return trace
    return trace.select(ranks=list(ranks) if ranks is not None else None,
                        step=a if kind == "step" else None,
                        window=(a, b) if kind == "window" else None, clip=True)


def path_of(ctx: Context, key: Key) -> PathResult:
    """The cached result for ``key``, computed on first use (once, however many ask)."""
    cache = _cache(ctx)
    with cache.lock:
        if key in cache.results:
            cache.results.move_to_end(key)
            return cache.results[key]
        gate = cache.busy.setdefault(key, threading.Lock())
    with gate:
        with cache.lock:
            if key in cache.results:
                cache.results.move_to_end(key)
                return cache.results[key]
        try:
            result = _compute(ctx, key)
        finally:
            with cache.lock:
                cache.busy.pop(key, None)
        with cache.lock:
            cache.computed += 1
            cache.results[key] = result
            while len(cache.results) > CACHE_SIZE:
                cache.results.popitem(last=False)
        return result


def _compute(ctx: Context, key: Key) -> PathResult:
    import polars as pl

    from traceatlas import analysis

    res = analysis.run("critical_path", region_trace(ctx.trace, key), {})
    keys = pl.DataFrame([(r, t, i) for (r, t), i in ctx.by_key.items()],
                        schema={"rank": pl.Int32, "track_id": pl.Int32, "track": pl.Int64},
                        orient="row")
    table = res.table.with_row_index("seg")
    segs = (table.join(keys, on=["rank", "track_id"], how="left")
            .sort("seg").select(SEGMENT_COLUMNS))
    return PathResult(segs, res.extra["by_bound"], res.extra["by_rank"], list(res.notes))


def _key(ctx: Context, query: dict[str, str]) -> Key:
    """The region named by the query (400 on a bad or contradictory one)."""
    has_window = "start_ns" in query or "end_ns" in query
    given = [k for k, on in (("step", "step" in query), ("start_ns/end_ns", has_window),
                             ("at_ns", "at_ns" in query)) if on]
    if len(given) > 1:
        raise InputError(given[1].split("/")[0], f"give one of step, start_ns/end_ns, at_ns "
                         f"(got {' and '.join(given)})")
    ranks = get_ranks(query, ctx.trace.ranks)
    rk = tuple(ranks) if ranks is not None else None
    if "step" in query:
        return ("step", get_int(query, "step", lo=0), None, rk)
    if "at_ns" in query:
        return ("step", step_at(ctx, get_int(query, "at_ns")), None, rk)
    if has_window:
        start = get_int(query, "start_ns") if "start_ns" in query else None
        end = get_int(query, "end_ns") if "end_ns" in query else None
        if start is not None and end is not None and end < start:
            raise InputError("end_ns", f"{end} is before start_ns {start}")
        return ("window", start, end, rk)
    return ("trace", None, None, rk)


def step_spans(ctx: Context) -> pl.DataFrame:
    """``step``, ``start_ns``, ``end_ns``: per step number, first start to last end of
    its ``step`` intervals over the ranks (read once)."""
    import polars as pl

    with ctx._lock:
        found = ctx.memo.get("step_spans")
    if found is None:
        found = (ctx.trace.intervals
                 .filter((pl.col("category") == "step")
                         & pl.col("step").is_not_null())
                 .group_by("step").agg(pl.col("start_ns").min(), pl.col("end_ns").max())
                 .sort("step").collect())
        with ctx._lock:
            ctx.memo["step_spans"] = found
    return found


def step_at(ctx: Context, t_ns: int) -> int:
    """The lowest step number whose span holds ``t_ns`` (404 when none does)."""
    import polars as pl

    spans = step_spans(ctx)
    hit = spans.filter((pl.col("start_ns") <= t_ns) & (pl.col("end_ns") > t_ns))
    if hit.height == 0:
        raise NotFound(f"no step at {t_ns}"
                       + ("" if spans.height else " (the trace has no step markers)"))
    return int(hit["step"][0])


def _columns(frame: pl.DataFrame, names: tuple[str, ...]) -> dict[str, Any]:
    return {n: column_values(frame[n].to_arrow()) for n in names}


def critical_path(ctx: Context, request: Request) -> Response:
    """Path segments of the region in path order (columns ``SEGMENT_COLUMNS``; ``track``
    is the viewer id of ``(rank, track_id)``, null when the viewer has no such track),
    ``count``, ``total``, ``truncated``, ``limit``, ``length_ns`` (the whole path),
    ``path_start_ns``/``path_end_ns``, ``region``, ``by_bound``, ``by_rank``, ``notes``."""
    import polars as pl

    query = query_of(request)
    limit = get_int(query, "limit", default=MAX_SEGMENTS, lo=1, hi=MAX_SEGMENTS)
    key = _key(ctx, query)
    res = path_of(ctx, key)
    segs = res.segments
    total = segs.height
    notes = list(res.notes)
    if total > limit:
        keep = (segs.with_row_index("seg")
                .top_k(limit, by=["on_path_ns", "seg"], reverse=[False, True])
                .sort("seg").drop("seg"))
        notes.append(f"{limit:,} of {total:,} path segments sent (the longest); the "
                     "breakdown covers the whole path")
        segs = keep
    length = int(res.segments["on_path_ns"].sum()) if total else 0
    kind, a, b, ranks = key
    region: dict[str, Any] = {"kind": kind, "ranks": list(ranks) if ranks else None}
    if kind == "step":
        region["step"] = a
    elif kind == "window":
        region["window"] = [a, b]
    out: dict[str, Any] = _columns(segs.with_columns(pl.col("name").fill_null("")),
                                   SEGMENT_COLUMNS)
    out.update(
        count=segs.height, total=total, truncated=total > limit, limit=limit,
        length_ns=length,
        path_start_ns=int(res.segments["start_ns"][0]) if total else None,
        path_end_ns=int(res.segments["end_ns"][-1]) if total else None,
        region=region,
        by_bound=_columns(res.by_bound, tuple(res.by_bound.columns)),
        by_rank=_columns(res.by_rank, tuple(res.by_rank.columns)),
        notes=notes)
    return json_response(out)
