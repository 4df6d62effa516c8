"""Summary of a trace for ``traceatlas info``: ranks, counts per category, span."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from traceatlas.model.trace import Trace
from traceatlas.model.vocab import CATEGORIES

if TYPE_CHECKING:
    import polars as pl


def summarize(trace: Trace) -> dict[str, Any]:
    """Counts per rank and per canonical category, span of the intervals (ns), tracks."""
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
    by_category = _counts(per)
    per_rank = []
    for rank in trace.ranks:
        sub = per.filter(pl.col("rank") == rank)
        per_rank.append(
            {"rank": rank, "intervals": int(sub["n"].sum()), "by_category": _counts(sub)}
        )
    rows = {
        name: int(trace.scan(name).select(pl.len()).collect().item())
        for name in ("tracks", "intervals", "instants", "counters", "flows", "messages")
    }
    return {
        "path": trace.location,  # a remote store: its URL
        "source_format": trace.source_format,
        "ranks": trace.ranks,
        "intervals": rows["intervals"],
        "by_category": by_category,
        "per_rank": per_rank,
        "span_ns": int(hi - lo) if lo is not None and hi is not None else 0,
        "start_ns": int(lo) if lo is not None else None,
        "end_ns": int(hi) if hi is not None else None,
        "rows": rows,
        "tracks_by_kind": dict(sorted(zip(kinds["kind"], map(int, kinds["n"]), strict=True))),
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


def _counts(frame: pl.DataFrame) -> dict[str, int]:
    import polars as pl

    sums = frame.group_by("category").agg(pl.col("n").sum())
    found = dict(zip(sums["category"], map(int, sums["n"]), strict=True))
    return {c: found[c] for c in CATEGORIES if c in found}
