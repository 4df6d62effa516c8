"""``/api/search``: occurrences of intervals whose name contains a text (case-insensitive
literal substring, never a regex or SQL), ordered by start.

A name index is built on the first search (one read of every interval part's ``name``
column, dictionary codes only): per Parquet row group, the names it holds and how many
times, and its ``start_ns`` range (statistics). A search matches the text against the
distinct names and takes ``total`` from the index's counts. Walking the groups holding a
match by their smallest start until they hold ``limit`` matches gives a bound S (their
largest start) that the ``limit`` earliest occurrences cannot pass; one Polars scan of the
parts holding a match, filtered on the names and ``start_ns <= S``, then skips every row
group starting after S (parts are written sorted by start)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from starlette.requests import Request
from starlette.responses import Response

from traceatlas.errors import InputError
from traceatlas.view.api_common import Context, column_values, json_response, query_of
from traceatlas.view.params import MAX_LIMIT, get_int, get_text

if TYPE_CHECKING:
    import polars as pl

COLUMNS = ["rank", "track_id", "start_ns", "end_ns", "name"]


@dataclass
class NameIndex:
    """Distinct interval names and, per row group of the interval parts, which names it
    holds (``entry_group``/``entry_name``/``entry_count``: one entry per (group, name))."""

    names: list[str]
    groups: list[tuple[str, int]]
    """(part file, row group index)."""
    group_start: np.ndarray[Any, np.dtype[np.int64]]
    """Smallest ``start_ns`` of each group (int64 min when the part has no statistics)."""
    group_end: np.ndarray[Any, np.dtype[np.int64]]
    """Largest ``start_ns`` of each group (int64 max when the part has no statistics)."""
    entry_group: np.ndarray[Any, np.dtype[np.int64]]
    entry_name: np.ndarray[Any, np.dtype[np.int64]]
    entry_count: np.ndarray[Any, np.dtype[np.int64]]


_LOCK = threading.Lock()


def name_index(ctx: Context) -> NameIndex:
    """The index of ``ctx``'s interval parts, built on first use (kept in ``ctx.memo``)."""
    with _LOCK:
        found = ctx.memo.get("name_index")
        if not isinstance(found, NameIndex):
            found = ctx.memo["name_index"] = _build(
                [p for r in sorted(ctx.rank_parts) for p in ctx.rank_parts[r]])
        return found


def _build(parts: list[str]) -> NameIndex:
    code: dict[str, int] = {}
    groups: list[tuple[str, int]] = []
    starts: list[int] = []
    ends: list[int] = []
    e_group: list[np.ndarray[Any, Any]] = []
    e_name: list[np.ndarray[Any, Any]] = []
    e_count: list[np.ndarray[Any, Any]] = []
    for part in parts:
        pf = pq.ParquetFile(part, read_dictionary=["name"])
        meta = pf.metadata
        start_col = meta.schema.names.index("start_ns")
        for g in range(meta.num_row_groups):
            if meta.row_group(g).num_rows == 0:
                continue
            stats = meta.row_group(g).column(start_col).statistics
            known = stats is not None and stats.has_min_max
            starts.append(int(stats.min) if known else -(2**63))
            ends.append(int(stats.max) if known else 2**63 - 1)
            column = pf.read_row_group(g, columns=["name"]).column(0)
            counts: dict[int, int] = {}
            for chunk in column.chunks:
                if not pa.types.is_dictionary(chunk.type):
                    chunk = pc.dictionary_encode(chunk)
                values = chunk.dictionary.to_pylist()
                tally = np.bincount(chunk.indices.to_numpy(zero_copy_only=False),
                                    minlength=len(values))
                for i in np.flatnonzero(tally).tolist():
                    c = code.setdefault(values[i], len(code))
                    counts[c] = counts.get(c, 0) + int(tally[i])
            e_group.append(np.full(len(counts), len(groups), np.int64))
            e_name.append(np.fromiter(counts.keys(), np.int64, len(counts)))
            e_count.append(np.fromiter(counts.values(), np.int64, len(counts)))
            groups.append((part, g))

    def cat(arrays: list[np.ndarray[Any, Any]]) -> np.ndarray[Any, np.dtype[np.int64]]:
        return np.concatenate(arrays).astype(np.int64) if arrays else np.empty(0, np.int64)

    return NameIndex(list(code), groups, np.array(starts, np.int64),
                     np.array(ends, np.int64), cat(e_group), cat(e_name), cat(e_count))


def search(ctx: Context, request: Request) -> Response:
    """Intervals whose name contains ``name`` (case-insensitive literal substring),
    ordered by start: ``track``, ``start_ns``, ``end_ns``, ``name``; ``total`` matches."""
    query = query_of(request)
    text = get_text(query, "name") or ""
    if not text:
        raise InputError("name", "empty search text")
    limit = get_int(query, "limit", default=1000, lo=1, hi=MAX_LIMIT)
    folded = text.casefold()
    if ctx.trace.selections:
        rows, total = _scan(ctx, folded, limit)
    else:
        rows, total = _indexed(ctx, folded, limit)
    out: dict[str, Any] = {c: column_values(rows[c].to_arrow())
                           for c in ("track", "start_ns", "end_ns", "name")}
    out.update(count=rows.height, total=total, truncated=total > rows.height)
    return json_response(out)


def _finish(ctx: Context, frame: pl.LazyFrame, limit: int) -> pl.DataFrame:
    import polars as pl

    return (frame.join(ctx.all_keys().lazy(), on=["rank", "track_id"], how="inner")
            .sort("start_ns", "track").head(limit)
            .select("track", "start_ns", "end_ns", pl.col("name").cast(pl.String)).collect())


def _indexed(ctx: Context, folded: str, limit: int) -> tuple[pl.DataFrame, int]:
    """The ``limit`` earliest matches, scanning only the parts and row groups that can
    hold them (see the module's docstring)."""
    import polars as pl

    index = name_index(ctx)
    names, parts, bound, total = plan(index, folded, limit)
    if total == 0:
        return _finish(ctx, _empty(), limit), 0
    frame = pl.scan_parquet(parts, hive_partitioning=False, glob=False).filter(
        (pl.col("start_ns") <= bound) & pl.col("name").cast(pl.String).is_in(names))
    rows = _finish(ctx, frame, limit)
    if rows.height < min(limit, total):  # matches off the viewer's tracks: no bound
        rows = _finish(ctx, pl.scan_parquet(parts, hive_partitioning=False, glob=False)
                       .filter(pl.col("name").cast(pl.String).is_in(names)), limit)
    return rows, total


def plan(index: NameIndex, folded: str, limit: int) -> tuple[list[str], list[str], int, int]:
    """The names containing ``folded``, the parts holding one, the bound S on the start of
    the ``limit`` earliest occurrences, and the occurrences' total."""
    matches = [i for i, n in enumerate(index.names) if folded in n.casefold()]
    hit = np.isin(index.entry_name, np.array(matches, np.int64))
    total = int(index.entry_count[hit].sum())
    if total == 0:
        return [], [], 0, 0
    per_group = np.bincount(index.entry_group[hit], weights=index.entry_count[hit],
                            minlength=len(index.groups)).astype(np.int64)
    held = np.flatnonzero(per_group)
    order = held[np.argsort(index.group_start[held], kind="stable")]
    enough = int(np.searchsorted(np.cumsum(per_group[order]), limit))
    bound = int(index.group_end[order[: enough + 1]].max())
    parts = sorted({index.groups[g][0] for g in held.tolist()})
    return [index.names[i] for i in matches], parts, bound, total


def _empty() -> pl.LazyFrame:
    import polars as pl

    return pl.DataFrame(schema={"rank": pl.Int32, "track_id": pl.Int32, "start_ns": pl.Int64,
                                "end_ns": pl.Int64, "name": pl.String}).lazy()


def _scan(ctx: Context, folded: str, limit: int) -> tuple[pl.DataFrame, int]:
    """Every (selected) interval's name read: a trace with selections."""
    import polars as pl

    names = ctx.interval_names()
    matches = [n for n in names if folded in n.casefold()]
    frame = ctx.trace.intervals.filter(pl.col("name").cast(pl.String).is_in(matches)).join(
        ctx.all_keys().lazy(), on=["rank", "track_id"], how="inner")
    total = int(frame.select(pl.len()).collect().item()) if matches else 0
    return _finish(ctx, frame.drop("track"), limit), total
