"""Interval unions: merged segments and their total length, per group.

Every "time spent" number of the analyses is a union of intervals, never a sum, so
overlapping kernels or nested annotations are not counted twice. Overlaps follow from
unions (|X| = union length): ``|A and B| = |A| + |B| - |A or B|`` and
``|A minus B| = |A or B| - |B|``. All times are integer ns.

Both functions stay lazy (a ``LazyFrame`` in, a ``LazyFrame`` out). When the group keys,
``start_ns`` and ``end_ns`` are integers without nulls, every ``end_ns >= start_ns`` and
every time lies within +-2**62 ns, the union runs on numpy at collect time: one sort by
(group, start) (a single int64 key, or ``numpy.lexsort`` when it would not fit), then
the segments of every group at once (a running maximum of the ends, made group-local by
shifting each group's values above the previous group's). Otherwise (string or
categorical keys, nulls, inverted intervals, extreme times) the Polars plan
(``_union_segments_polars``) runs, which the tests hold the numpy path against.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import polars as pl

    I64 = npt.NDArray[np.int64]
LIMIT = 2 ** 62
"""Bound on |time| and on the shifted values of the numpy path (int64 holds 2**63 - 1)."""
_INT_TYPES = ("Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32")


def union_segments(
    frame: pl.LazyFrame, by: Sequence[str], start: str = "start_ns", end: str = "end_ns"
) -> pl.LazyFrame:
    """Merged, disjoint segments (columns ``*by, start_ns, end_ns``) of the intervals of
    each group, ordered by (``*by``, start_ns). Touching intervals (end == next start)
    merge into one segment."""
    import polars as pl

    keys = list(by)
    selected = frame.select(*keys, pl.col(start).alias("start_ns"),
                            pl.col(end).alias("end_ns"))
    schema = _fast_schema(selected, keys, _union_segments_polars)
    if schema is None:
        return _union_segments_polars(selected, keys)
    return selected.map_batches(partial(_segments_batch, keys=tuple(keys), schema=schema),
                                schema=schema)


def union_ns(
    frame: pl.LazyFrame, by: Sequence[str], name: str = "union_ns"
) -> pl.LazyFrame:
    """Total length (ns) of the union of each group's intervals: columns ``*by, name``
    (one row per group; with no ``by``, one row, 0 when there are no intervals)."""

    keys = list(by)
    selected = frame.select(*keys, "start_ns", "end_ns")
    schema = _fast_schema(selected, keys, partial(_union_ns_polars, name=name))
    if schema is None:
        return _union_ns_polars(selected, keys, name)
    return selected.map_batches(
        partial(_ns_batch, keys=tuple(keys), name=name, schema=schema), schema=schema)


# -- the Polars plans (the reference; used where the numpy path does not apply) ------------

def _union_segments_polars(frame: pl.LazyFrame, keys: list[str]) -> pl.LazyFrame:
    """``union_segments`` in Polars on ``frame`` (columns ``*keys, start_ns, end_ns``)."""
    import polars as pl

    ordered = frame.select(*keys, "start_ns", "end_ns").sort([*keys, "start_ns"])
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


def _union_ns_polars(frame: pl.LazyFrame, keys: list[str], name: str) -> pl.LazyFrame:
    """``union_ns`` in Polars (group order unspecified)."""
    import polars as pl

    segments = _union_segments_polars(frame, keys)
    total = (pl.col("end_ns") - pl.col("start_ns")).sum().alias(name)
    if keys:
        return segments.group_by(keys).agg(total)
    return segments.select(total)


# -- the numpy path ---------------------------------------------------------------------------

def _fast_schema(selected: pl.LazyFrame, keys: list[str],
                 plan: Callable[[pl.LazyFrame, list[str]], pl.LazyFrame]) -> pl.Schema | None:
    """Output schema of the Polars ``plan`` when the numpy path may apply (integer keys
    and times), else None."""
    try:
        schema = selected.collect_schema()
        if not all(str(schema[c]) in _INT_TYPES for c in [*keys, "start_ns", "end_ns"]):
            return None
        out = plan(selected, keys).collect_schema()
    except Exception:  # a bad column: the Polars plan raises at collect, as before
        return None
    return out


def _segments_batch(df: pl.DataFrame, keys: tuple[str, ...], schema: pl.Schema
                    ) -> pl.DataFrame:
    """``union_segments`` of one collected frame (numpy, or the Polars plan)."""
    import polars as pl

    found = _segments(df, keys)
    if found is None:
        return _union_segments_polars(df.lazy(), list(keys)).collect()
    rows, seg_start, seg_end, _ = found
    cols = {k: df[k].to_numpy()[rows] for k in keys}
    cols["start_ns"] = seg_start
    cols["end_ns"] = seg_end
    return pl.DataFrame({c: pl.Series(c, cols[c], dtype=schema[c]) for c in schema})


def _ns_batch(df: pl.DataFrame, keys: tuple[str, ...], name: str, schema: pl.Schema
              ) -> pl.DataFrame:
    """``union_ns`` of one collected frame, groups in key order."""
    import numpy as np
    import polars as pl

    found = _segments(df, keys)
    if found is None:
        return _union_ns_polars(df.lazy(), list(keys), name).collect()
    rows, seg_start, seg_end, seg_gid = found
    length = seg_end - seg_start
    if not keys:
        total = np.asarray([int(length.sum())], dtype=np.int64)
        return pl.DataFrame({name: pl.Series(name, total, dtype=schema[name])})
    first = _firsts(seg_gid)
    cols = {k: df[k].to_numpy()[rows[first]] for k in keys}
    cols[name] = np.add.reduceat(length, first) if len(first) else length
    return pl.DataFrame({c: pl.Series(c, cols[c], dtype=schema[c]) for c in schema})


def _firsts(g: I64) -> I64:
    """Positions where a run of equal values of ``g`` starts."""
    import numpy as np

    if len(g) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.r_[True, g[1:] != g[:-1]]).astype(np.int64)


def _segments(df: pl.DataFrame, keys: tuple[str, ...]
              ) -> tuple[I64, I64, I64, I64] | None:
    """Per merged segment, in (group, start) order: (row of ``df`` of its first interval,
    start_ns, end_ns, group id); None where the numpy path does not apply."""
    import numpy as np

    cols = (*keys, "start_ns", "end_ns")
    if any(str(df[c].dtype) not in _INT_TYPES or df[c].null_count() for c in cols):
        return None
    s = df["start_ns"].to_numpy().astype(np.int64, copy=False)
    e = df["end_ns"].to_numpy().astype(np.int64, copy=False)
    n = len(s)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, empty
    lo, hi = int(s.min()), int(e.max())
    if lo <= -LIMIT or hi >= LIMIT or bool((e < s).any()):
        return None
    gid = _group_ids(df, keys)
    order = _order(gid, s, lo, hi)
    g, ss, ee = (gid, s, e) if order is None else (gid[order], s[order], e[order])
    first = _firsts(g)
    span = np.maximum.reduceat(ee, first) - ss[first] + 1  # each < 2**63: |times| < 2**62
    if float(span.astype(np.float64).sum()) >= LIMIT:
        return None
    off = np.cumsum(span) - span  # each group's values lie above every earlier group's
    shift = np.repeat(off - ss[first], np.diff(np.r_[first, n]))
    reached = np.maximum.accumulate(ee + shift)  # furthest end so far, group-local
    opens = np.empty(n, dtype=bool)
    opens[0] = True
    np.greater(ss[1:] + shift[1:], reached[:-1], out=opens[1:])
    opens[first] = True
    seg = np.flatnonzero(opens)
    rows = seg if order is None else order[seg]
    return rows.astype(np.int64), ss[seg], np.maximum.reduceat(ee, seg), g[seg]


def _group_ids(df: pl.DataFrame, keys: tuple[str, ...]) -> I64:
    """Per row, a group id >= 0 whose order is the lexicographic order of the keys."""
    import numpy as np

    gid = np.zeros(df.height, dtype=np.int64)
    size = 1
    for k in keys:
        v = df[k].to_numpy().astype(np.int64, copy=False)
        vmin = int(v.min())
        width = int(v.max()) - vmin + 1
        code = v - vmin
        if size * width >= LIMIT:  # densify (at most n distinct values each)
            gid = np.unique(gid, return_inverse=True)[1].astype(np.int64).reshape(-1)
            size = int(gid.max()) + 1
            uniq, inv = np.unique(v, return_inverse=True)
            code, width = inv.astype(np.int64).reshape(-1), len(uniq)
        gid = gid * width + code
        size *= width
    return gid


def _order(gid: I64, s: I64, lo: int, hi: int) -> I64 | None:
    """Row order by (gid, start); None when the rows are in that order already."""
    import numpy as np

    width = hi - lo + 1
    if (int(gid.max()) + 1) * width < LIMIT:
        key = gid * width + (s - lo)
        if bool((key[1:] >= key[:-1]).all()):
            return None
        return np.argsort(key, kind="stable").astype(np.int64)
    return np.lexsort((s, gid)).astype(np.int64)
