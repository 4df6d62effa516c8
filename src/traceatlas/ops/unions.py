"""Interval unions in Polars: merged segments and their total length, per group.

Every "time spent" number of the analyses is a union of intervals, never a sum, so
overlapping kernels or nested annotations are not counted twice. Overlaps follow from
unions (|X| = union length): ``|A and B| = |A| + |B| - |A or B|`` and
``|A minus B| = |A or B| - |B|``. All times are integer ns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl


def union_segments(
    frame: pl.LazyFrame, by: Sequence[str], start: str = "start_ns", end: str = "end_ns"
) -> pl.LazyFrame:
    """Merged, disjoint segments (columns ``*by, start_ns, end_ns``) of the intervals of
    each group. Touching intervals (end == next start) merge into one segment."""
    import polars as pl

    keys = list(by)
    ordered = frame.select(*keys, pl.col(start).alias("start_ns"), pl.col(end).alias("end_ns"))
    ordered = ordered.sort([*keys, "start_ns"])
    # Furthest end reached by the earlier intervals of the group; a start beyond it opens
    # a new segment. The first row of a group has no predecessor, so segment ids from
    # one global running sum never span two groups.
    prev = pl.col("end_ns").cum_max().shift(1)
    if keys:
        prev = prev.over(keys)
    seg = (prev.is_null() | (pl.col("start_ns") > prev)).cast(pl.Int64).cum_sum()
    return (
        ordered.with_columns(_seg=seg)
        .group_by([*keys, "_seg"], maintain_order=True)
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .drop("_seg")
    )


def union_ns(
    frame: pl.LazyFrame, by: Sequence[str], name: str = "union_ns"
) -> pl.LazyFrame:
    """Total length (ns) of the union of each group's intervals: columns ``*by, name``."""
    import polars as pl

    segments = union_segments(frame, by)
    total = (pl.col("end_ns") - pl.col("start_ns")).sum().alias(name)
    if by:
        return segments.group_by(list(by)).agg(total)
    return segments.select(total)
