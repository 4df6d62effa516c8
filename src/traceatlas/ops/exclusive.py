"""Exclusive time of intervals: the time each interval is the innermost open one on its stack.

Nesting is decided per *layer* of a track: rows with the same ``(rank, track_id, layer)``
form one call stack; a negative layer means "never nests" (device streams, where
overlapping kernels are concurrent, not nested: exclusive = inclusive).

Exclusive time (``with_exclusive``): each instant of a stack belongs to the innermost
OPEN interval, the one that started last (ties on the start: the shorter; ties on both:
the one listed last), as ``ops.owned`` does for the tree analysis (one implementation:
``ops.owned.owned_ns``). On any input the exclusive times of a stack sum to the union of
its intervals: no instant counted twice, none lost. For properly nested calls this is the
inclusive time minus the direct children's durations. Crossing intervals (``A = [0,10)``,
``B = [5,15)``: B starts inside A and ends after it) are counted by ``crossed_rows`` and
reported once per call with a ``DataQualityWarning`` (``exclusive_intervals``).

``parents`` / ``child_overlap`` give the call-stack parent of each row (the closest earlier
row one level up in ``ops.nesting.stack_depth``: an as-of lookup per depth level, a loop
over depth levels, never over rows) and its overlap with that parent; they are kept for
the callers that walk the stack (memory events, ``time_profile``). Times are int64 ns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from traceatlas.ops.nesting import BoolArray, IntArray, nesting_depth, sort_for_nesting
from traceatlas.ops.owned import owned_ns, paint_max, timeline_axis, timeline_order

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace


def parents(key: IntArray, start: IntArray, end: IntArray, nests: BoolArray) -> IntArray:
    """Index of each row's direct parent (-1: top level or not nesting), in input order.

    ``key`` identifies the stack (one int per (rank, track, layer)); rows with
    ``nests`` False never get nor are a parent.
    """
    n = len(start)
    out = np.full(n, -1, dtype=np.int64)
    rows = np.flatnonzero(nests)
    if len(rows) == 0:
        return out
    k, s, e = key[rows], start[rows], end[rows]
    order = sort_for_nesting(k, s, e)
    ks, ss, es = k[order], s[order], e[order]
    depth = nesting_depth(ks, ss, es)
    parent_sorted = np.full(len(order), -1, dtype=np.int64)
    previous = np.flatnonzero(depth == 0)
    for level in range(1, int(depth.max(initial=0)) + 1):
        here = np.flatnonzero(depth == level)
        if len(here) == 0:
            break
        # The closest earlier row one level up; depth > 0 guarantees one on the same
        # stack (rows of a stack are contiguous in the sort order).
        pos = previous[np.searchsorted(previous, here) - 1]
        same = ks[pos] == ks[here]
        parent_sorted[here[same]] = pos[same]
        previous = here
    has = parent_sorted >= 0
    child_rows = rows[order[has]]
    out[child_rows] = rows[order[parent_sorted[has]]]
    return out


def child_overlap(parent: IntArray, start: IntArray, end: IntArray) -> IntArray:
    """Per row: its overlap with its parent (0 for rows without a parent), ns."""
    has = parent >= 0
    overlap = np.zeros(len(start), dtype=np.int64)
    p = parent[has]
    overlap[has] = np.maximum(np.minimum(end[has], end[p]) - start[has], 0)
    return overlap


def crossed_rows(key: IntArray, start: IntArray, end: IntArray, nests: BoolArray) -> BoolArray:
    """Per row (input order): True when a later-starting row of the same stack crosses it
    (``start < other start < end < other end``); rows with ``nests`` False are never
    crossed nor crossing. Zero-length rows are never crossed.

    In ``ops.owned.timeline_order`` the first later row ending after row u crosses u iff
    it starts before u's end (any crossing row comes at or after it). Found by pointer
    jumping (every row skipped ends at or before u's end), stopping at the stack's end or
    at a row starting at or after u's end; no Python loop per row."""
    out = np.zeros(len(start), dtype=bool)
    rows = np.flatnonzero(nests)
    n = len(rows)
    if n < 2:
        return out
    order = timeline_order(key[rows], start[rows], end[rows])
    ks, ss, es = key[rows][order], start[rows][order], end[rows][order]
    ks_x = np.append(ks, 0)
    ss_x = np.append(ss, np.iinfo(np.int64).max)
    es_x = np.append(es, np.iinfo(np.int64).max)
    cand = np.arange(1, n + 1, dtype=np.int64)
    cand = np.append(cand, n)  # row n: the sentinel, points at itself

    def live(u: IntArray) -> IntArray:
        c = cand[u]
        keep = (c < n) & (ks_x[c] == ks[u]) & (ss_x[c] < es[u]) & (es_x[c] <= es[u])
        kept: IntArray = u[keep]
        return kept

    todo = live(np.arange(n, dtype=np.int64))
    while len(todo):
        cand[todo] = cand[cand[todo]]
        todo = live(todo)
    c = cand[:n]
    hit = (c < n) & (ks_x[c] == ks) & (ss_x[c] < es) & (es_x[c] > es)
    out[rows[order[hit]]] = True
    return out


def with_exclusive(frame: pl.DataFrame) -> pl.DataFrame:
    """Add ``parent`` (call-stack parent row index, -1 none), ``child_ns`` (overlap with
    the parent), ``exclusive_ns`` (ns the row is the innermost open interval of its stack;
    inclusive for rows that never nest) and ``crossed`` (a later-starting row of the
    stack crosses this one: ``crossed_rows``).

    ``frame`` needs ``rank``, ``track_id``, ``layer`` (int; < 0: never nests),
    ``start_ns`` and ``end_ns``; row order is kept.
    """
    import polars as pl

    if frame.height == 0:
        return frame.with_columns(parent=pl.lit(None, pl.Int64), child_ns=pl.lit(None, pl.Int64),
                                  exclusive_ns=pl.lit(None, pl.Int64),
                                  crossed=pl.lit(None, pl.Boolean)).clear()
    rank = frame["rank"].to_numpy().astype(np.int64)
    track = frame["track_id"].to_numpy().astype(np.int64)
    layer = frame["layer"].to_numpy().astype(np.int64) + 1  # -1.. -> 0..
    tracks = int(track.max()) - int(track.min()) + 1
    layers = int(layer.max()) + 1
    key = ((rank - int(rank.min())) * tracks + (track - int(track.min()))) * layers + layer
    start = frame["start_ns"].to_numpy().astype(np.int64)
    end = frame["end_ns"].to_numpy().astype(np.int64)
    nests = (frame["layer"] >= 0).to_numpy()
    parent = parents(key, start, end, nests)
    overlap = child_overlap(parent, start, end)
    exclusive = end - start
    rows = np.flatnonzero(nests)
    exclusive[rows] = owned_ns(key[rows], start[rows], end[rows])
    return frame.with_columns(parent=pl.Series(parent), child_ns=pl.Series(overlap),
                              exclusive_ns=pl.Series(exclusive),
                              crossed=pl.Series(crossed_rows(key, start, end, nests)))


def owned_pieces(key: IntArray, start: IntArray, end: IntArray) -> tuple[IntArray, ...]:
    """The pieces of the timeline each row owns (innermost open interval, as
    ``owned_ns``): (row index, piece start ns, piece end ns), pieces of one row disjoint.

    Every row's stack is placed on one axis (``ops.owned.timeline_axis``: each key's span
    shifted past the previous key's), its elementary segments painted with the row that started last
    (``ops.owned.paint_max`` in ``timeline_order``)."""
    n = len(start)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    order = timeline_order(key, start, end)
    ks, ss, es = key[order], start[order], end[order]
    xs, xe = timeline_axis(ks, ss, es)
    shift = xs - ss
    points = np.unique(np.concatenate((xs, xe)))
    owner = paint_max(np.searchsorted(points, xs), np.searchsorted(points, xe),
                      len(points) - 1)
    seg = np.flatnonzero(owner >= 0)
    who = owner[seg]
    return order[who], points[seg] - shift[who], points[seg + 1] - shift[who]


def exclusive_segments(frame: pl.DataFrame) -> pl.DataFrame:
    """Signed segments of a ``with_exclusive`` frame: ``row`` (index in ``frame``),
    ``start_ns``, ``end_ns``, ``sign`` (+1/-1). At every instant, the signed segments of a
    row covering it add to 1 when the row owns the instant (innermost open interval;
    rows that never nest own their whole span) and to 0 otherwise; so the signed overlap
    of a row's segments with any window is its exclusive time inside that window.

    Stacks without a crossed row: + the row, - each direct child's ``[start, start +
    child_ns)`` booked on its parent. Stacks with one: + the pieces each row owns
    (``owned_pieces``)."""
    import polars as pl

    f = frame.select("rank", "track_id", "layer", "start_ns", "end_ns", "parent", "child_ns",
                     "crossed").with_row_index("row").with_columns(pl.col("row").cast(pl.Int64))
    stack = ["rank", "track_id", "layer"]
    bad = f.filter(pl.col("layer") >= 0).group_by(stack).agg(pl.col("crossed").any())
    f = f.join(bad.filter(pl.col("crossed")).select(*stack, painted=pl.lit(True)),
               on=stack, how="left", maintain_order="left")
    f = f.with_columns(pl.col("painted").fill_null(False))
    plain = f.filter(~pl.col("painted"))
    cols = ["row", "start_ns", "end_ns", "sign"]
    parts = [
        plain.select("row", "start_ns", "end_ns", sign=pl.lit(1, pl.Int64)),
        plain.filter(pl.col("parent") >= 0).select(
            pl.col("parent").alias("row"), "start_ns",
            (pl.col("start_ns") + pl.col("child_ns")).alias("end_ns"), sign=pl.lit(-1, pl.Int64)),
    ]
    painted = f.filter(pl.col("painted"))
    if painted.height:
        rank = painted["rank"].to_numpy().astype(np.int64)
        track = painted["track_id"].to_numpy().astype(np.int64)
        layer = painted["layer"].to_numpy().astype(np.int64)
        tracks = int(track.max()) - int(track.min()) + 1
        key = ((rank - int(rank.min())) * tracks + (track - int(track.min()))) * (
            int(layer.max()) + 1) + layer
        who, lo, hi = owned_pieces(key, painted["start_ns"].to_numpy().astype(np.int64),
                                   painted["end_ns"].to_numpy().astype(np.int64))
        parts.append(pl.DataFrame({"row": painted["row"].to_numpy()[who], "start_ns": lo,
                                   "end_ns": hi, "sign": np.ones(len(who), dtype=np.int64)}))
    return pl.concat([p.select(cols).cast({c: pl.Int64 for c in cols}) for p in parts])


HOST_KIND = "host_thread"
STATE = "state"
"""Paraver states: a timeline of their own beside the call stack (layer 1)."""
ALL = "all"


def selected_categories(text: str) -> tuple[str, ...] | None:
    """``categories`` parameter: "" = host default (None), "all", or a comma list."""
    from traceatlas.errors import InputError
    from traceatlas.model.schema import CATEGORIES

    text = text.strip()
    if not text:
        return None
    if text == ALL:
        return CATEGORIES
    names = tuple(c.strip() for c in text.split(",") if c.strip())
    bad = [c for c in names if c not in CATEGORIES]
    if bad or not names:
        raise InputError("--param categories",
                         f"{bad[0] if bad else text!r} is not a category (use 'all' or a "
                         f"comma list of: {', '.join(CATEGORIES)})")
    return names


def exclusive_intervals(trace: Trace, categories: str) -> tuple[pl.DataFrame, list[str]]:
    """Every interval of ``trace`` with ``exclusive_ns`` and ``parent``, and ``keep``
    (the row's category is selected), plus notes on the conventions applied.

    Layers: rows on host-thread tracks nest (layer 0; Paraver ``state`` rows form their
    own layer 1, since states tile the thread's timeline beside the MPI call stack); rows
    on other tracks (GPU streams, devices) never nest (exclusive = inclusive). Exclusive
    time is computed over all rows of a track, before the category selection: selecting
    ``mpi`` does not give MPI calls their children's time. Default selection (empty
    ``categories``): every category on host-thread tracks except ``state``.

    Crossing intervals (``crossed_rows``): one ``DataQualityWarning`` with their count, and
    a note; each instant still counts once (the innermost open interval owns it).
    """
    import warnings

    import polars as pl

    from traceatlas.errors import DataQualityWarning

    chosen = selected_categories(categories)
    kinds = trace.tracks.select("rank", "track_id", pl.col("kind").cast(pl.String))
    cat = pl.col("category").cast(pl.String)
    frame = (
        trace.intervals.select("rank", "track_id", "start_ns", "end_ns",
                               pl.col("name").cast(pl.String), cat.alias("category"))
        .join(kinds, on=["rank", "track_id"], how="left")
        .with_columns(host=pl.col("kind").fill_null(HOST_KIND) == HOST_KIND)
        .with_columns(layer=pl.when(~pl.col("host")).then(-1)
                      .when(pl.col("category") == STATE).then(1).otherwise(0))
        .collect()
    )
    frame = with_exclusive(frame)
    if chosen is None:
        keep = pl.col("host") & (pl.col("category") != STATE)
    else:
        keep = pl.col("category").is_in(chosen)
    frame = frame.with_columns(keep=keep)
    notes = []
    states = frame.filter(pl.col("category") == STATE).height
    if chosen is None and states:
        notes.append(f"{states} Paraver state interval(s) left out (a timeline beside the "
                     "call stack); categories=state profiles them")
    if frame.filter(pl.col("keep") & ~pl.col("host")).height:
        notes.append("rows on GPU streams/devices do not nest: their exclusive time is "
                     "their inclusive time (concurrent kernels each count in full)")
    crossed = int(frame["crossed"].sum())
    if crossed:
        text = (f"{crossed} host interval(s) crossed by a later-starting interval of the same "
                "thread (not nested): each instant is counted once, for the innermost open "
                "interval (the one that started last)")
        warnings.warn(text, DataQualityWarning, stacklevel=2)
        notes.append(text)
    return frame, notes


def rank_stats(value: str, prefix: str, world: int | None) -> list[pl.Expr]:
    """Aggregations over the per-rank rows of one group (one row per rank that has it):
    ``<prefix>_mean_ns`` (rounded to ns), ``<prefix>_min_ns``, ``<prefix>_max_ns`` and
    ``imbalance`` = max / mean (exact mean; null when the mean is 0).

    ``world`` None: over the ranks that have the group (Pipit's ``flat_profile`` and
    ``load_imbalance``); an int: over that many ranks, absent ranks counting 0.
    """
    import polars as pl

    v = pl.col(value)
    mean = v.sum() / (pl.len() if world is None else pl.lit(world))
    low = v.min() if world is None else pl.when(pl.len() < world).then(0).otherwise(v.min())
    return [
        mean.round(0).cast(pl.Int64).alias(f"{prefix}_mean_ns"),
        low.cast(pl.Int64).alias(f"{prefix}_min_ns"),
        v.max().alias(f"{prefix}_max_ns"),
        pl.when(mean > 0).then(v.max() / mean).otherwise(None).alias("imbalance"),
    ]
