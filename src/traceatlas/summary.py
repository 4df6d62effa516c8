"""Summary of a trace for ``traceatlas info``: ranks, counts per category, span."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from traceatlas.model.trace import Trace
from traceatlas.model.vocab import CATEGORIES
from traceatlas.store.part_stats import count_rows, table_stats

_ROW_TABLES = ("tracks", "intervals", "instants", "counters", "flows", "messages")


@dataclass(frozen=True)
class Tallies:
    """What a summary counts: intervals per (rank, category), their span (ns, None when
    there are none), tracks per kind, rows per table."""

    per: dict[tuple[int, str], int]
    lo: int | None
    hi: int | None
    kinds: dict[str, int]
    rows: dict[str, int]


def summarize(trace: Trace) -> dict[str, Any]:
    """Counts per rank and per canonical category, span of the intervals (ns), tracks:
    from the store's part records when every part carries its stats and no selection
    applies (no row is read), else by a scan."""
    tallies = recorded_tallies(trace)
    return _summary(trace, tallies if tallies is not None else scanned_tallies(trace))


def recorded_tallies(trace: Trace) -> Tallies | None:
    """The tallies from the manifest's part records (``store/part_stats.py``); None when a
    selection applies or a part of intervals or tracks has no stats."""
    records = trace.manifest.get("parts")
    if trace.selections or not isinstance(records, list):
        return None
    intervals = table_stats(records, "intervals")
    tracks = table_stats(records, "tracks")
    if intervals is None or tracks is None:
        return None
    lows = [s["start_ns_min"] for s in intervals if s["start_ns_min"] is not None]
    highs = [s["end_ns_max"] for s in intervals if s["end_ns_max"] is not None]
    kinds: dict[str, int] = {}
    for (_rank, kind), n in count_rows(tracks, "tracks", "kind").items():
        kinds[kind] = kinds.get(kind, 0) + n
    rows = dict.fromkeys(_ROW_TABLES, 0)
    for rec in records:
        table = str(rec.get("path", "")).split("/", 1)[0]
        if table in rows:
            rows[table] += int(rec["rows"])
    per = count_rows(intervals, "intervals", "category")
    return Tallies(per, min(lows, default=None), max(highs, default=None), kinds, rows)


def scanned_tallies(trace: Trace) -> Tallies:
    """The tallies by reading the view's rows."""
    import polars as pl

    iv = trace.intervals
    per = (
        iv.group_by("rank", pl.col("category").cast(pl.String))
        .agg(pl.len().alias("n"))
        .collect()
    )
    span = iv.select(
        pl.col("start_ns").min().alias("lo"), pl.col("end_ns").max().alias("hi")
    ).collect()
    lo, hi = span.row(0)
    kinds = (
        trace.tracks.group_by(pl.col("kind").cast(pl.String)).agg(pl.len().alias("n")).collect()
    )
    rows = {
        name: int(trace.scan(name).select(pl.len()).collect().item()) for name in _ROW_TABLES
    }
    return Tallies(
        {(int(r), str(c)): int(n) for r, c, n in per.iter_rows()},
        None if lo is None else int(lo), None if hi is None else int(hi),
        {str(k): int(n) for k, n in kinds.iter_rows()}, rows,
    )


def _summary(trace: Trace, t: Tallies) -> dict[str, Any]:
    by_rank: dict[int, list[tuple[str, int]]] = {}
    for (rank, category), n in t.per.items():  # one pass: thousands of ranks stay cheap
        by_rank.setdefault(rank, []).append((category, n))
    per_rank = [
        {"rank": rank, "intervals": sum(n for _, n in by_rank.get(rank, ())),
         "by_category": _counts(by_rank.get(rank, ()))}
        for rank in trace.ranks
    ]
    lo, hi = t.lo, t.hi
    return {
        "path": trace.location,  # a remote store: its URL
        "source_format": trace.source_format,
        "ranks": trace.ranks,
        "intervals": t.rows["intervals"],
        "by_category": _counts((c, n) for (_, c), n in t.per.items()),
        "per_rank": per_rank,
        "span_ns": int(hi - lo) if lo is not None and hi is not None else 0,
        "start_ns": int(lo) if lo is not None else None,
        "end_ns": int(hi) if hi is not None else None,
        "rows": t.rows,
        "tracks_by_kind": dict(sorted(t.kinds.items())),
        "clock_alignment": trace.manifest.get("clock_alignment"),
        "clock": sorted(
            (_clock_row(int(r), c) for r, c in trace.manifest.get("clock", {}).items()),
            key=lambda row: int(row["rank"]),
        ),
    }


def _clock_row(rank: int, clock: dict[str, Any]) -> dict[str, Any]:
    """One rank's clock: the evidence used, the offset applied (ns), the refinement."""
    ref = clock.get("refinement") or {}
    return {
        "rank": rank,
        "method": clock.get("method"),
        "offset_ns": int(clock.get("offset_ns", 0)),
        "domain": clock.get("domain"),
        "estimated_offset_ns": ref.get("estimated_offset_ns"),
        "matches": ref.get("matches"),
        "applied": ref.get("applied"),
    }


def _counts(pairs: Iterable[tuple[str, int]]) -> dict[str, int]:
    """Rows per canonical category (CATEGORIES order) summed over ``pairs``."""
    found: dict[str, int] = {}
    for category, n in pairs:
        found[category] = found.get(category, 0) + n
    return {c: found[c] for c in CATEGORIES if c in found}
