"""Cross-rank edges of the critical-path graph: collectives and point-to-point messages.

Collective instances are matched across ranks as clock alignment does
(``ingest/align.py``): NCCL/RCCL kernels (``comm_kernel``) by (process group, kernel name,
occurrence on the rank inside the region); MPI collective calls as ``ops/replay.py`` does
(communicator, operation, occurrence). An instance with at least two ranks, each once,
gets a virtual node at the last arrival (latest start): every participant's start -> the
node (bound ``wait``) -> every participant's end (``gpu_comm`` for kernels, ``comm`` for
MPI calls); the kernels' own duration edges are replaced, so a participant's end is set
by the last arrival plus the transfer. Messages: the send point (``send_start_ns``, on the
sender's thread holding an MPI call then) -> the receive point (``recv_end_ns``), bound
``comm``; the receive's call end is a blocking end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from traceatlas.ops.critical_graph import Builder, name_matches
from traceatlas.ops.replay import SYNC_COLLECTIVE

if TYPE_CHECKING:
    import polars as pl


def nccl_collectives(b: Builder, dev: pl.DataFrame) -> tuple[npt.NDArray[np.bool_], int]:
    """Instance nodes and edges for comm kernels; returns (eid mask of matched kernels,
    number of instances)."""
    import polars as pl

    comm = (dev.filter(pl.col("category") == "comm_kernel")
            .with_columns(pl.col("process_group").fill_null(""), pl.col("name").cast(pl.String))
            .sort("rank", "start_ns")
            .with_columns(occ=pl.int_range(pl.len()).over("rank", "name", "process_group")))
    return instances(b, comm, ["process_group", "name", "occ"], "gpu_comm",
                      comm["ks"].to_numpy(), comm["ke"].to_numpy(), blocking=False)


def mpi_collectives(b: Builder) -> int:
    """Instance nodes and edges for blocking MPI collective calls; returns instances."""
    import polars as pl

    ev = b.events
    calls = (ev.filter((pl.col("category") == "mpi")
                       & ~name_matches(ev["name"], r"(?i)^MPI_I")
                       & (pl.col("collective").is_not_null()
                          | name_matches(ev["name"], SYNC_COLLECTIVE)))
             .with_columns(comm=pl.col("process_group").fill_null(""),
                           op=pl.coalesce(pl.col("collective").str.to_lowercase(),
                                          pl.col("name").cast(pl.String)
                                          .str.replace(r"(?i)^MPI_", "").str.to_lowercase()))
             .sort("rank", "start_ns")
             .with_columns(occ=pl.int_range(pl.len()).over("rank", "comm", "op")))
    eid = calls["eid"].to_numpy()
    _, n = instances(b, calls, ["comm", "op", "occ"], "comm", b.start_node[eid],
                      b.end_node[eid], blocking=True)
    return n


def instances(b: Builder, frame: pl.DataFrame, key: list[str], bound: str,
               start_node: npt.NDArray[np.int64], end_node: npt.NDArray[np.int64],
               *, blocking: bool) -> tuple[npt.NDArray[np.bool_], int]:
    """Instance node per ``key`` value held once by each of >= 2 ranks, at the latest
    ``start_ns`` (the last arrival): start node -> instance (``wait``) -> end node
    (``bound``); end nodes are blocking when ``blocking``. Returns (eid mask, count)."""
    import polars as pl

    matched = np.zeros(b.events.height, bool)
    if frame.height == 0:
        return matched, 0
    f = frame.with_columns(ks=pl.Series(start_node), ke=pl.Series(end_node)).filter(
        (pl.col("ks") >= 0) & (pl.col("ke") >= 0))
    f = (f.with_columns(n=pl.len().over(key), nr=pl.col("rank").n_unique().over(key))
         .filter((pl.col("nr") >= 2) & (pl.col("n") == pl.col("nr"))))
    if f.height == 0:
        return matched, 0
    f = f.with_columns(inst=pl.struct(key).rank("dense").cast(pl.Int64) - 1)
    last = (f.sort("start_ns", "rank").group_by("inst").agg(
        pl.col("start_ns").last(), pl.col("rank").last(), pl.col("track_id").last())
        .sort("inst"))
    ids = b.nodes(last["start_ns"].to_numpy(), last["rank"].to_numpy(),
                  np.full(last.height, -1, np.int64))
    inst_node = ids[f["inst"].to_numpy()]
    eid = f["eid"].to_numpy()
    ks = f["ks"].to_numpy().astype(np.int64)
    ke = f["ke"].to_numpy().astype(np.int64)
    b.edges.add(ks, inst_node, 0, "collective", "wait", eid)
    b.edges.add(inst_node, ke, 0, "collective", bound, eid)
    if blocking:
        b.blocking.append(ke)
    matched[eid] = True
    return matched, last.height


MESSAGE_KEY = ("src_rank", "dst_rank", "send_start_ns", "recv_end_ns", "tag")
"""A message's identity (rows equal on these are one message)."""
POINTS_SCHEMA = {"src_rank": "Int64", "dst_rank": "Int64", "send_start_ns": "Int64",
                 "recv_end_ns": "Int64", "send_track": "Int64", "recv_track": "Int64",
                 "recv_eid": "Int64"}
"""Columns of ``message_points`` (Polars type names)."""


def message_points(events: pl.DataFrame, messages: pl.DataFrame) -> pl.DataFrame:
    """The messages (deduplicated, both ranks present, both times inside the events'
    span) with the host track of each side: columns src_rank, dst_rank, send_start_ns,
    recv_end_ns, send_track, recv_track, recv_eid (the receive's MPI call)."""
    import polars as pl

    if messages.height == 0 or events.height == 0:
        return _empty_points()
    lo, hi = int(events["start_ns"].min()), int(events["end_ns"].max())  # type: ignore[arg-type]
    msgs = message_rows(messages, lo, hi, events["rank"].unique().to_list()).with_row_index("m")
    out = (msgs.join(message_side(events, msgs, "src_rank", "send_start_ns", "send"), on="m")
           .join(message_side(events, msgs, "dst_rank", "recv_end_ns", "recv"), on="m"))
    return out.select("src_rank", "dst_rank", "send_start_ns", "recv_end_ns",
                      pl.col("send_track").cast(pl.Int64), pl.col("recv_track").cast(pl.Int64),
                      pl.col("recv_eid").cast(pl.Int64))


def _empty_points() -> pl.DataFrame:
    import polars as pl

    return pl.DataFrame(schema={k: getattr(pl, v) for k, v in POINTS_SCHEMA.items()})


def message_rows(messages: pl.DataFrame, lo: int, hi: int, ranks: list[int]) -> pl.DataFrame:
    """``messages`` deduplicated (``MESSAGE_KEY``), both times in [lo, hi] and both ranks
    in ``ranks``: the messages the graph may use."""
    import polars as pl

    return (messages.select(pl.col("src_rank").cast(pl.Int64), pl.col("dst_rank")
                            .cast(pl.Int64), "send_start_ns", "recv_end_ns", "tag")
            .drop_nulls(["send_start_ns", "recv_end_ns"]).unique()
            .filter(pl.col("send_start_ns").is_between(lo, hi)
                    & pl.col("recv_end_ns").is_between(lo, hi)
                    & pl.col("src_rank").is_in(ranks) & pl.col("dst_rank").is_in(ranks)))


def message_side(events: pl.DataFrame, msgs: pl.DataFrame, rank: str, t: str,
                 prefix: str) -> pl.DataFrame:
    """For each message of ``msgs`` (with row index ``m``) whose point ``t`` on rank
    ``rank`` lies inside an MPI call of ``events``: m, ``{prefix}_track`` and
    ``{prefix}_eid`` (the call)."""
    import polars as pl

    mpi = (events.filter(pl.col("category") == "mpi")
           .select(pl.col("rank").cast(pl.Int64), pl.col("track_id").cast(pl.Int64),
                   "start_ns", pl.col("end_ns").alias("c_end"), "eid", "depth")
           .sort("start_ns"))
    got = (msgs.sort(t).rename({rank: "rank"})
           .join_asof(mpi.sort("depth").unique(["rank", "start_ns"], keep="first")
                      .sort("start_ns"), left_on=t, right_on="start_ns",
                      by="rank", strategy="backward", check_sortedness=False)
           .filter(pl.col("c_end") >= pl.col(t)).sort("m"))
    return got.select("m", pl.col("track_id").alias(f"{prefix}_track"),
                      pl.col("eid").alias(f"{prefix}_eid"))


def extra_points(msgs: pl.DataFrame) -> pl.DataFrame:
    """Chain points for ``message_points``: sends then receives (rank, track_id, t_ns)."""
    import polars as pl

    return pl.concat([
        msgs.select(pl.col("src_rank").alias("rank"), pl.col("send_track").alias("track_id"),
                    pl.col("send_start_ns").alias("t_ns")),
        msgs.select(pl.col("dst_rank").alias("rank"), pl.col("recv_track").alias("track_id"),
                    pl.col("recv_end_ns").alias("t_ns"))])


def message_edges(b: Builder, msgs: pl.DataFrame) -> int:
    """Send point -> receive point for each message (after ``host_chains``)."""
    n = msgs.height
    nodes = b.extra_node
    src, dst = nodes[:n], nodes[n:2 * n]
    b.edges.add(src, dst, 0, "message", "comm", msgs["recv_eid"].to_numpy())
    b.blocking.append(dst)
    return n
