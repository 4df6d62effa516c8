"""Synchronisation edges of the critical-path graph (host waits for device, stream waits
for stream), on columns.

The host call (category runtime/driver) is matched to Kineto's ``cuda_sync`` record
(category ``sync``, same rank and correlation), whose args give ``cuda_sync_kind``,
``stream``, ``wait_on_stream`` and ``wait_on_cuda_event_record_corr_id``:

- ``Stream Sync``: the latest-ending activity of that stream ending by the call's end;
- ``Context Sync`` (``cudaDeviceSynchronize``, ``cuCtxSynchronize``, HIP's): the
  latest-ending activity of the rank ending by the call's end;
- ``Event Sync`` (``cudaEventSynchronize``): the record call (``cudaEventRecord`` with
  the given correlation); the last activity launched on ``wait_on_stream`` before it
  (older Kineto writes ``wait_on_cuda_event_id`` and no record correlation: the last
  activity launched there before the waiting call itself);
- ``Stream Wait Event`` (``cudaStreamWaitEvent``): the same producer -> the first
  activity launched on the waiting stream after the call (a device -> device edge);
- a synchronous copy call (``cudaMemcpy``, no ``Async``): its own device copy.

Without a ``cuda_sync`` record (older Kineto, AMD, nsys) a ``*Synchronize*`` call waits
for the rank's latest-ending activity (``context`` fallback, counted in ``fallback``).
The edge's target is a blocking end: the call's own chain edge gets no minimum time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from traceatlas.ops.critical_graph import SYNC_CALL_RE, SYNC_COPY_RE, Builder, name_matches

if TYPE_CHECKING:
    import polars as pl


def sync_edges(b: Builder, dev: pl.DataFrame) -> dict[str, int]:
    """Add the sync edges; returns counts per kind (and ``fallback``)."""
    import polars as pl

    ev = b.events
    info = (ev.filter(pl.col("category") == "sync").select(
        "rank",
        pl.col("args").str.json_path_match("$.correlation").cast(pl.Int64, strict=False)
        .fill_null(pl.col("correlation")).alias("correlation"),
        pl.col("args").str.json_path_match("$.cuda_sync_kind").alias("kind"),
        pl.col("args").str.json_path_match("$.stream").cast(pl.Int64, strict=False)
        .alias("sync_stream"),
        pl.col("args").str.json_path_match("$.wait_on_stream").cast(pl.Int64, strict=False)
        .alias("wait_stream"),
        pl.col("args").str.json_path_match("$.wait_on_cuda_event_record_corr_id")
        .cast(pl.Int64, strict=False).alias("rec_corr"),
        pl.col("start_ns").alias("sync_ns"))
        .unique(["rank", "correlation"], keep="first"))
    # only the calls any of the name tests below can match, and only the columns used:
    # the names are matched once per distinct name (Categorical) before the String cast
    tests = (r"(?i)eventrecord", SYNC_CALL_RE, SYNC_COPY_RE, r"(?i)streamwaitevent")
    wanted = name_matches(ev["name"], "(?i)" + "|".join(
        f"(?:{t.removeprefix('(?i)')})" for t in tests))
    calls = ev.select("eid", "rank", "name", "start_ns", "end_ns", "correlation").filter(
        ev["category"].is_in(("runtime", "driver")) & wanted.fill_null(value=False)
    ).with_columns(pl.col("name").cast(pl.String))
    records = (calls.filter(pl.col("name").str.contains(r"(?i)eventrecord"))
               .select("rank", pl.col("correlation").alias("rec_corr"),
                       pl.col("start_ns").alias("rec_ns"))
               .unique(["rank", "rec_corr"], keep="first"))
    sync_copy = (pl.col("name").str.contains(SYNC_COPY_RE)
                 & ~pl.col("name").str.contains(r"(?i)async"))
    waits = calls.filter(pl.col("name").str.contains(SYNC_CALL_RE) | sync_copy
                         | pl.col("name").str.contains(r"(?i)streamwaitevent"))
    waits = (waits.select("eid", "rank", "name", "start_ns", "end_ns", "correlation")
             .join(info, on=["rank", "correlation"], how="left")
             .join(records, on=["rank", "rec_corr"], how="left")
             # older Kineto: wait_on_cuda_event_id, no record correlation: the event was
             # recorded by the waiting call at the latest
             .with_columns(rec_ns=pl.when(pl.col("rec_ns").is_null()
                                          & pl.col("rec_corr").is_null()
                                          & (pl.col("wait_stream") >= 0))
                           .then(pl.col("start_ns")).otherwise(pl.col("rec_ns"))))
    d = dev.select("rank", "stream", "launch_ns", "ks", "ke",
                   pl.col("start_ns").alias("d_start"), pl.col("end_ns").alias("d_end"),
                   pl.col("correlation").alias("d_corr"), pl.col("eid").alias("d_eid"))
    counts: dict[str, int] = {}
    kind = pl.col("kind")
    name = pl.col("name")
    copy = waits.filter(sync_copy)
    stream_sync = waits.filter(kind == "Stream Sync")
    event_sync = waits.filter((kind == "Event Sync") & (pl.col("rec_ns").is_not_null()))
    context = waits.filter(kind == "Context Sync")
    fallback = waits.filter(kind.is_null() & name.str.contains(SYNC_CALL_RE))
    swe = waits.filter((kind == "Stream Wait Event") & pl.col("rec_ns").is_not_null())

    # Latest-ending activity by the call's end (per stream or per rank).
    by_end = d.filter(pl.col("d_end").is_not_null()).sort("d_end")
    s = _asof(stream_sync.rename({"sync_stream": "stream"}).sort("end_ns"), by_end,
              "end_ns", "d_end", ["rank", "stream"], "backward")
    counts["sync_stream"] = _add(b, s, "ke", "sync_stream")
    ctx = pl.concat([context.select("eid", "rank", "end_ns"),
                     fallback.select("eid", "rank", "end_ns")])
    c = _asof(ctx.sort("end_ns"), by_end, "end_ns", "d_end", ["rank"], "backward")
    counts["sync_context"] = _add(b, c, "ke", "sync_context")
    counts["fallback"] = int(fallback.height)
    b.fallback_ranks = fallback["rank"].to_numpy().astype(np.int64)
    # Event producers: last activity launched on wait_stream before the record.
    by_launch = d.filter(pl.col("launch_ns").is_not_null()).sort("launch_ns")
    e = _asof(event_sync.rename({"wait_stream": "stream"}).sort("rec_ns"),
              by_launch, "rec_ns", "launch_ns", ["rank", "stream"], "backward", exact=False)
    counts["sync_event"] = _add(b, e, "ke", "sync_event")
    cp = copy.join(d, left_on=["rank", "correlation"], right_on=["rank", "d_corr"],
                   how="inner")
    counts["sync_copy"] = _add(b, cp, "ke", "sync_copy")
    # Stream waits: producer end -> consumer start.
    prod = _asof(swe.rename({"wait_stream": "stream"}).sort("rec_ns"), by_launch, "rec_ns",
                 "launch_ns", ["rank", "stream"], "backward", exact=False)
    prod = prod.filter(pl.col("ke").is_not_null()).select(
        "eid", "rank", "start_ns", "sync_stream", pl.col("ke").alias("p_ke"))
    cons = _asof(prod.rename({"sync_stream": "stream"}).sort("start_ns"), by_launch,
                 "start_ns", "launch_ns", ["rank", "stream"], "forward", exact=False)
    cons = cons.filter(pl.col("ks").is_not_null())
    src = cons["p_ke"].to_numpy().astype(np.int64)
    dst = cons["ks"].to_numpy().astype(np.int64)
    b.edges.add(src, dst, 0, "stream_wait_event", "sync", cons["d_eid"].to_numpy())
    counts["stream_wait_event"] = len(src)
    return counts


def _asof(left: pl.DataFrame, right: pl.DataFrame, left_on: str, right_on: str,
          by: list[str], strategy: str, *, exact: bool = True) -> pl.DataFrame:
    import polars as pl

    if left.height == 0:
        return left.with_columns(*[pl.lit(None, right.schema[c]).alias(c)
                                   for c in right.columns if c not in left.columns])
    cast = [pl.col(c).cast(pl.Int64) for c in by]
    return left.with_columns(cast).join_asof(
        right.with_columns(cast), left_on=left_on, right_on=right_on, by=by,
        strategy=strategy, allow_exact_matches=exact, check_sortedness=False)  # type: ignore[arg-type]


def _add(b: Builder, frame: pl.DataFrame, col: str, kind: str) -> int:
    """Edges ``frame[col]`` (device end node) -> end node of the host call ``eid``."""
    import polars as pl

    got = frame.filter(pl.col(col).is_not_null())
    src = got[col].to_numpy().astype(np.int64)
    call = got["eid"].to_numpy().astype(np.int64)
    dst = b.end_node[call]
    ok = dst >= 0
    b.edges.add(src[ok], dst[ok], 0, kind, "sync", call[ok])
    b.blocking.append(dst[ok])
    return int(ok.sum())
