"""The host context that launched each device activity, for the summary's device-time kinds.

A device activity (kernel, communication kernel, memcpy, memset) is linked to its launch
call (category ``runtime``/``driver``, same rank and ``correlation``; the first call when
a correlation repeats), and the launch call to the host intervals enclosing it on its
thread (``traceatlas.analysis.syncs`` finds them: one as-of lookup per nesting level):

- ``op``: the INNERMOST ``cpu_op`` enclosing the launch call, the op HTA and the
  TensorBoard plugin call the launching op (in Kineto traces it is the op whose
  ``External id`` the launch carries). The outermost op (``aten::linear`` around
  ``aten::addmm``) is not used: it would charge a module's every kernel to its wrapper;
- ``annotations``: every host annotation enclosing the launch call (categories
  ``annotation``, ``nvtx``, ``region``; ``ProfilerStep#N`` is a ``step``, not one),
  outermost first. An activity launched outside any annotation (a launch on the autograd
  backward thread, where ``record_function`` ranges of the forward thread do not reach)
  has none: it is left unattributed, never guessed from time overlap on another thread.

Activities whose launch is not in the trace (no ``correlation``, a launch dropped) have
null ``op`` and empty ``annotations``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

I64 = npt.NDArray[np.int64]
LAUNCH_CATEGORIES = ("runtime", "driver")
ANNOTATION_CATEGORIES = ("annotation", "nvtx", "region")
ANCESTORS = ("cpu_op", "annotation", "python", "nvtx", "step", "region")
"""Host categories read as enclosing context (as ``traceatlas.analysis.syncs``)."""


def launch_context(trace: Trace) -> pl.DataFrame:
    """Per launch call (``rank``, ``correlation``): ``op`` (innermost enclosing
    ``cpu_op`` name, null when none) and ``annotations`` (enclosing annotation names,
    outermost first; empty when none)."""
    import polars as pl

    cat = pl.col("category")  # compared as stored (Categorical): no cast per row
    calls = (trace.intervals
             .filter(cat.is_in(LAUNCH_CATEGORIES) & pl.col("correlation").is_not_null())
             .select("rank", "track_id", "start_ns", "end_ns", "depth", "correlation")
             .sort("rank", "correlation", "start_ns")
             .unique(["rank", "correlation"], keep="first", maintain_order=True)
             .collect())
    empty = pl.DataFrame(schema={"rank": pl.Int32, "correlation": pl.Int64, "op": pl.String,
                                 "annotations": pl.List(pl.String)})
    if calls.height == 0:
        return empty
    host = (trace.intervals.filter(pl.col("category").is_in(ANCESTORS))
            .select("rank", "track_id", "depth", "start_ns", "end_ns", "name", "category")
            .collect())
    found = _enclosing(calls, host)
    if found is None:  # times too far apart for one int64 search key
        return _launch_context_polars(trace, calls)
    call_of, anc = found
    kind = host["category"].gather(anc)
    is_op = (kind == "cpu_op").to_numpy()
    is_ann = kind.is_in(ANNOTATION_CATEGORIES).to_numpy()
    # innermost op: the last op ancestor of each call (pairs are in call, depth order)
    op_call, op_row = call_of[is_op], anc[is_op]
    last = np.r_[op_call[1:] != op_call[:-1], True] if len(op_call) else np.zeros(0, bool)
    ops = pl.DataFrame({"_id": op_call[last],
                        "op": host["name"].gather(op_row[last]).cast(pl.String)})
    anns = (pl.DataFrame({"_id": call_of[is_ann],
                          "annotations": host["name"].gather(anc[is_ann])})
            .group_by("_id", maintain_order=True).agg("annotations")
            .with_columns(pl.col("annotations").cast(pl.List(pl.String))))
    return (calls.with_row_index("_id").select(pl.col("_id").cast(pl.Int64), "rank",
                                                "correlation")
            .join(ops, on="_id", how="left").join(anns, on="_id", how="left")
            .select(pl.col("rank").cast(pl.Int32), pl.col("correlation").cast(pl.Int64),
                    "op", pl.col("annotations").fill_null(pl.lit([], pl.List(pl.String)))))


def _enclosing(calls: pl.DataFrame, host: pl.DataFrame) -> tuple[I64, I64] | None:
    """(call row, host row) of every host interval enclosing a call on its track, call
    by call, outermost (depth 0) first: for each depth above the call's, the last host
    interval at that depth starting at or before the call (one ``searchsorted`` on a
    (rank, track, depth, start) key), kept when it ends at or after the call's end.
    None when the key does not fit in int64."""
    n_calls = calls.height
    depth = calls["depth"].to_numpy().astype(np.int64)
    depth = np.maximum(depth, 0)
    total = int(depth.sum())
    if total == 0 or host.height == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    # asks: one per (call, depth above it), in call order then depth order
    call_of = np.repeat(np.arange(n_calls, dtype=np.int64), depth)
    first = np.cumsum(depth) - depth
    ask_depth = np.arange(total, dtype=np.int64) - np.repeat(first, depth)
    tracks = np.unique(_track_key(calls))
    c_t = np.searchsorted(tracks, _track_key(calls))
    h_track = _track_key(host)
    h_t = np.minimum(np.searchsorted(tracks, h_track), len(tracks) - 1)
    h_depth = host["depth"].to_numpy().astype(np.int64)
    max_depth = int(depth.max())
    # host rows on a track without calls, or deeper than any call, are never asked for
    h_ok = (tracks[h_t] == h_track) & (h_depth >= 0) & (h_depth < max_depth)
    h_group = h_t * max_depth + np.clip(h_depth, 0, max_depth - 1)
    a_group = c_t[call_of] * max_depth + ask_depth
    h_start = host["start_ns"].to_numpy().astype(np.int64)
    c_start = calls["start_ns"].to_numpy().astype(np.int64)
    lo = int(min(h_start.min(), c_start.min()))
    span = int(max(h_start.max(), c_start.max())) - lo + 1
    if span * (len(tracks) * max_depth + 1) >= 2 ** 62:
        return None
    h_key = np.where(h_ok, h_group * span + (h_start - lo), -1)
    order = np.argsort(h_key, kind="stable")
    sorted_key = h_key[order]
    a_key = a_group * span + (c_start[call_of] - lo)
    pos = np.searchsorted(sorted_key, a_key, side="right") - 1
    hit = pos >= 0
    row = order[np.maximum(pos, 0)]
    hit &= h_group[row] == a_group
    hit &= h_ok[row]
    c_end = calls["end_ns"].to_numpy().astype(np.int64)
    h_end = host["end_ns"].to_numpy().astype(np.int64)
    hit &= h_end[row] >= c_end[call_of]
    return call_of[hit], row[hit]


def _track_key(frame: pl.DataFrame) -> I64:
    """(rank, track_id) as one int64 (both are int32)."""
    rank = frame["rank"].to_numpy().astype(np.int64)
    track = frame["track_id"].to_numpy().astype(np.int64)
    return (rank << 32) + (track & 0xFFFFFFFF)


def _launch_context_polars(trace: Trace, calls: pl.DataFrame) -> pl.DataFrame:
    """``launch_context`` by ``traceatlas.analysis.syncs._ancestors`` (one as-of join per
    nesting level), for times too far apart for ``_enclosing``."""
    import polars as pl

    from traceatlas.analysis.syncs import _ancestors

    calls = calls.with_row_index("_id")
    anc = _ancestors(trace, calls)  # sorted by (_id, depth): outermost first
    acat = pl.col("acat")
    ctx = anc.group_by("_id").agg(
        pl.col("aname").filter(acat == "cpu_op").last().alias("op"),
        pl.col("aname").filter(acat.is_in(ANNOTATION_CATEGORIES)).alias("annotations"))
    return (calls.select("_id", "rank", "correlation")
            .join(ctx, on="_id", how="left")
            .select(pl.col("rank").cast(pl.Int32), pl.col("correlation").cast(pl.Int64),
                    "op", pl.col("annotations").fill_null(pl.lit([], pl.List(pl.String)))))
