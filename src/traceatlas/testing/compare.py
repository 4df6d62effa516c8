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
