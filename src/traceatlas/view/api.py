"""``/api/meta``, ``/api/tracks``, ``/api/tiles``, ``/api/counters`` and ``/api/rows``:
the pyramid's answers as compact columnar JSON (``format=arrow`` on tiles and counters:
Arrow IPC stream). Times are absolute epoch ns; every parameter is checked (400)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
from typing import Any

import numpy as np
import pyarrow as pa
from starlette.requests import Request
from starlette.responses import Response

from traceatlas.view import levels
from traceatlas.view.api_common import (
    Context,
    column_values,
    json_bytes,
    json_response,
    query_of,
    raw_json_response,
)
from traceatlas.view.params import (
    MAX_GROUPS,
    check_bins,
    check_cells,
    get_choice,
    get_ids,
    get_int,
    get_ranks,
    get_window,
)

ARROW_TYPE = "application/vnd.apache.arrow.stream"


def title_of(trace: Any) -> str:
    """A short title: the source file's name, or the store's name and its rank count."""
    sources = trace.manifest.get("sources", [])
    if len(sources) == 1 and sources[0].get("path"):
        return os.path.basename(str(sources[0]["path"]))
    return f"{trace.path.name} ({len(trace.ranks)} ranks)"


def prepare(ctx: Context) -> None:
    """Encode the static answers (``/api/meta``, ``/api/tracks``) once, at start-up:
    the store and its pyramid do not change while the server runs (``/api/tracks`` of
    1,024 ranks is about 1.6 MB of JSON)."""
    ctx.bodies["meta"] = json_bytes(meta_dict(ctx))
    ctx.bodies["tracks"] = json_bytes([_track_obj(t) for t in ctx.pyramid.tracks])


def meta_dict(ctx: Context) -> dict[str, Any]:
    """``Pyramid.meta()`` plus ``source_format``, ``store`` and ``title``."""
    out = dict(ctx.pyramid.meta())
    out.update(source_format=ctx.trace.source_format, store=str(ctx.trace.path),
               title=ctx.title)
    return out


def meta(ctx: Context, request: Request) -> Response:
    """``Pyramid.meta()`` plus ``source_format``, ``store`` and ``title``."""
    query_of(request)
    if "meta" not in ctx.bodies:
        prepare(ctx)
    return raw_json_response(ctx.bodies["meta"])


def tracks(ctx: Context, request: Request) -> Response:
    """Every viewer track with all ``TrackInfo`` fields."""
    query_of(request)
    if "tracks" not in ctx.bodies:
        prepare(ctx)
    return raw_json_response(ctx.bodies["tracks"])


def _track_obj(track: Any) -> Any:
    """A track as ``json_bytes`` takes it: dataclasses as they are (orjson writes their
    fields in order, as ``dataclasses.asdict`` would), anything else as a dict."""
    if dataclasses.is_dataclass(track) and not isinstance(track, type):
        return track
    return dict(track)


def tiles(ctx: Context, request: Request) -> Response:
    """Interval bins of ``tracks`` at ``level`` over ``[start_ns, end_ns]``."""
    return _binned(ctx, request, counters=False)


def counters(ctx: Context, request: Request) -> Response:
    """Counter bins (min/mean/max per series) of ``tracks`` at ``level``."""
    return _binned(ctx, request, counters=True)


def _binned(ctx: Context, request: Request, *, counters: bool) -> Response:
    """``/api/tiles`` or ``/api/counters``: parameters checked (at most ``MAX_BINS`` bins
    per track, ``MAX_ROW_CELLS`` tracks x bins), the pyramid's answer encoded."""
    query = query_of(request)
    fmt = get_choice(query, "format", ("json", "arrow"), "json")
    level = get_int(query, "level", lo=0, hi=levels.MAX_LEVEL)
    start, end = get_window(query)
    width = levels.bin_ns(level)
    check_bins(start, end, width)
    ids = get_ids(query, ctx.n_tracks)
    check_cells(len(ids), start, end, width, "tracks")
    get = ctx.pyramid.counter_tiles if counters else ctx.pyramid.tiles
    return _tiles_response(ctx, level, get(level, start, end, ids), fmt, counters=counters)


def _envelope(ctx: Context, level: int) -> dict[str, Any]:
    return {"level": level, "origin_ns": ctx.origin_ns,
            "categories": list(ctx.pyramid.categories)}


def _head(t: Any) -> dict[str, Any]:
    return {"id": int(t.id), "level": int(t.level), "bin_ns": int(t.bin_ns), "raw": bool(t.raw)}


def _tiles_response(ctx: Context, level: int, found: list[Any], fmt: str, *,
                    counters: bool) -> Response:
    if fmt == "arrow":
        return _arrow_response(ctx, level, found, counters=counters)
    out = _envelope(ctx, level)
    rows = []
    used: list[Any] = []
    for t, columns in zip(found, _track_columns([t.table for t in found]), strict=True):
        row = _head(t)
        row.update(columns)
        if counters:
            row["series_names"] = _series_names(ctx, int(t.id))
        elif "name" in row:
            codes_of = row["name"]
            used.append(codes_of if isinstance(codes_of, np.ndarray) else
                        np.array([c for c in codes_of if c is not None], dtype=np.int64))
        rows.append(row)
    out["tracks"] = rows
    if not counters:
        names = ctx.pyramid.names
        codes = np.unique(np.concatenate(used)).tolist() if used else []
        out["names"] = {str(i): names[i] for i in codes if 0 <= i < len(names)}
    return json_response(out)


def _track_columns(tables: list[pa.Table]) -> list[dict[str, Any]]:
    """Each table's columns as ``column_values`` gives them. Tables of one schema (the
    usual case) are stacked so each column is converted once and cut into numpy views
    per table: per-column work on hundreds of small tables cost more than the JSON."""
    if len(tables) > 1 and all(t.schema.equals(tables[0].schema) for t in tables[1:]):
        whole = pa.concat_tables(tables)
        cuts = np.cumsum([t.num_rows for t in tables])[:-1].tolist()
        out: list[dict[str, Any]] = [{} for _ in tables]
        for name, column in zip(whole.column_names, whole.columns, strict=True):
            values = column_values(column.combine_chunks())
            for row, (a, b) in zip(out, itertools.pairwise([0, *cuts, len(values)]),
                                   strict=True):
                row[name] = values[a:b]  # numpy: a view
        return out
    return [{name: column_values(column)
             for name, column in zip(t.column_names, t.columns, strict=True)} for t in tables]


def _series_names(ctx: Context, track: int) -> list[str]:
    return list(getattr(ctx.pyramid.tracks[track], "series", []) or [])


def _arrow_response(ctx: Context, level: int, found: list[Any], *, counters: bool) -> Response:
    """One Arrow IPC stream: the tracks' tables concatenated with an ``id`` column; the
    envelope, per-track heads and the names used in the schema metadata (JSON)."""
    heads = [_head(t) for t in found]
    parts = [t.table.append_column("id", pa.array([int(t.id)] * t.table.num_rows, pa.int32()))
             for t in found if t.table.num_rows]
    meta = _envelope(ctx, level)
    meta["tracks"] = heads
    if parts:
        table = pa.concat_tables(parts, promote_options="permissive")
    else:
        table = pa.table({"id": pa.array([], pa.int32())})
    if not counters and "name" in table.column_names:
        used = {int(i) for i in table.column("name").unique().to_pylist() if i is not None}
        meta["names"] = {str(i): ctx.pyramid.names[i] for i in sorted(used)}
    elif counters:
        meta["series_names"] = {str(h["id"]): _series_names(ctx, h["id"]) for h in heads}
    table = table.replace_schema_metadata({"traceatlas": json.dumps(meta)})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return Response(sink.getvalue().to_pybytes(), media_type=ARROW_TYPE)


def rows(ctx: Context, request: Request) -> Response:
    """Busy fraction (mean, min, max per bin) of rank groups' synthetic rows."""
    query = query_of(request)
    level = get_int(query, "level", lo=0, hi=levels.MAX_LEVEL)
    start, end = get_window(query)
    width = levels.bin_ns(level)
    check_bins(start, end, width)
    kind = get_choice(query, "kind", ("rank_device", "rank_host"))
    present = ctx.ranks
    ranks = get_ranks(query, present) or present
    groups = get_int(query, "groups", default=min(len(ranks), 64), lo=1, hi=MAX_GROUPS)
    check_cells(min(groups, len(ranks)), start, end, width)
    found = ctx.pyramid.rows(level, start, end, kind, ranks, groups)
    if found and "level" in found[0]:  # the pyramid may answer at a coarser level
        level, width = int(found[0]["level"]), int(found[0]["bin_ns"])
    return json_response({"level": level, "origin_ns": ctx.origin_ns,
                          "bin_ns": width, "groups": found})
