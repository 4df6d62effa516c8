"""Checks shared by tests and users comparing traces: interval multisets, Chrome nesting."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from traceatlas.model.trace import Trace


N = TypeVar("N", int, float, Decimal)


def plain_union_length(spans: Iterable[tuple[N, N]]) -> N | int:
    """Length of the union of [start, end) spans with a plain loop: the independent
    reference the tests hold the Polars unions (``ops/unions.py``) against."""
    total: N | int = 0
    reach: N | None = None
    for s, e in sorted(spans):
        if reach is None or s > reach:
            total, reach = total + e - s, e
        elif e > reach:
            total, reach = total + e - reach, e
    return total


def interval_multisets(trace: Trace) -> dict[tuple[int, str], list[tuple[int, int]]]:
    """(rank, category) -> sorted (start_ns, end_ns) of its intervals: equal for two
    traces exactly when they hold the same intervals per rank and category."""
    import polars as pl

    frame = trace.intervals.select(
        "rank", pl.col("category").cast(pl.String), "start_ns", "end_ns"
    ).sort(pl.all()).collect()
    out: dict[tuple[int, str], list[tuple[int, int]]] = defaultdict(list)
    for rank, category, start, end in frame.iter_rows():
        out[(rank, category)].append((start, end))
    return dict(out)


def crossing_slices(events: Iterable[Mapping[str, Any]]) -> list[str]:
    """Chrome ``X`` events that cross another on the same (pid, tid) (Perfetto needs
    proper nesting per thread). ``ts``/``dur`` are read exactly through ``Decimal``."""
    by_tid: dict[tuple[Any, Any], list[tuple[Decimal, Decimal]]] = defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            ts, dur = Decimal(str(e["ts"])), Decimal(str(e["dur"]))
            by_tid[(e["pid"], e["tid"])].append((ts, ts + dur))
    bad: list[str] = []
    for key, spans in by_tid.items():
        stack: list[Decimal] = []
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= start:
                stack.pop()
            if stack and end > stack[-1]:
                bad.append(f"{key}: [{start}, {end}] crosses")
            stack.append(end)
    return bad


def useful_ns_polars(events: Any) -> Any:
    """Frozen copy of the former Polars sweep in ``efficiency._host`` (the oracle of its
    numpy sweep): ``events`` (a Polars DataFrame or LazyFrame of rank, ts, d, b) ->
    per-rank ``useful_ns``, the time with an open interval (``d`` running sum > 0) and
    no blocking one (``b`` running sum <= 0)."""
    import polars as pl

    level = (events.lazy().group_by("rank", "ts").agg(pl.col("d").sum(), pl.col("b").sum())
             .sort("rank", "ts")
             .with_columns(level=pl.col("d").cum_sum().over("rank"),
                           blocked=pl.col("b").cum_sum().over("rank"),
                           nxt=pl.col("ts").shift(-1).over("rank")))
    return (level.filter((pl.col("level") > 0) & (pl.col("blocked") <= 0)
                         & pl.col("nxt").is_not_null())
            .group_by("rank").agg((pl.col("nxt") - pl.col("ts")).sum().alias("useful_ns"))
            .collect())
