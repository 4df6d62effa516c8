"""``mpi_wait``: wait states of point-to-point messages (late sender, late receiver).

Each message's two *blocking calls* are found among the MPI calls (category ``mpi``
intervals): the receiver's is the MPI call on ``dst_rank`` that holds ``recv_end_ns``
(the latest call starting before it and ending at or after it: ``MPI_Recv`` itself, or
the ``MPI_Wait*`` that completed an ``MPI_Irecv``), the sender's the call on ``src_rank``
that holds ``send_end_ns`` (``MPI_Send``, or the ``MPI_Wait*`` completing an
``MPI_Isend``). Times used: OTF2: send_start_ns = start of the MPI call that sent,
recv_start_ns = start of the call that posted the receive (``MPI_Recv``/``MPI_Irecv``),
send_end_ns/recv_end_ns = end of the call that completed it. Paraver: logical send and
receive times (the calls) as starts, physical send and receive times (the data moving)
as ends, so a blocking call is the MPI call during which the data left or arrived. A
trace without MPI calls uses (recv_start_ns, recv_end_ns) and (send_start_ns,
send_end_ns) as the blocking calls.

- Late sender (attributed to the receiver, ``dst_rank``): the receiver's blocking call
  starts before the send starts; time lost = min(send start, blocking call end) -
  blocking call start.
- Late receiver (attributed to the sender, ``src_rank``): the receive is posted
  (``recv_start_ns``) while the sender's blocking call is running, i.e. the send was
  still blocked (synchronous or rendezvous protocol) when the receiver arrived; time
  lost = recv_start - blocking call start. A send that returned before the receive was
  posted (eager/buffered) has no late receiver.

One blocking call that completes several messages (``MPI_Waitall``) counts once: its
wait is the largest over its messages.

Main table, one row per rank (zeros when none): ``rank``, ``late_sender_ns``,
``late_sender_count`` (blocking calls with a late sender), ``late_receiver_ns``,
``late_receiver_count``. Extra table ``messages``: one row per message with both sides
known: src_rank, dst_rank, tag, bytes, send_start_ns, recv_start_ns,
recv_block_start_ns/recv_block_end_ns, send_block_start_ns/send_block_end_ns (null when
no MPI call holds the end time), late_sender_ns, late_receiver_ns (0 when none).

Definitions follow Scalasca's "Late Sender" (a blocking receive, e.g. MPI_Recv or
MPI_Wait, posted before the matching send) and "Late Receiver" (a send blocked until the
matching receive is posted, because of synchronous mode or a message above the eager
limit) performance properties (Scalasca 2.2 help, scalasca_patterns-2.2.html). Differs:
Scalasca knows the send mode and protocol from its runtime; we infer "blocked" from the
timing alone, and do not split out Scalasca's "wrong order" sub-patterns. Pipit has no
wait-state analysis.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.base import Result
from traceatlas.analysis.partitioned import summed_notes

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

_MESSAGE_COLUMNS = ("src_rank", "dst_rank", "tag", "bytes", "send_start_ns", "send_end_ns",
                    "recv_start_ns", "recv_end_ns")


class MpiWait:
    """Late-sender and late-receiver time per rank, and per message."""

    name = "mpi_wait"
    description = "Point-to-point wait states per rank: late sender, late receiver (ns)"
    params = ()
    requires = ("messages",)
    partition = "message"
    """Each message waited on by the batch whose part stores it (``analysis.partitioned``):
    a first pass tells whether the view has any MPI call (``prepare``); each batch reads
    the MPI calls of its ranks and of its messages' peers (``partitioned_view.widened``)
    and sends its messages' waits; the merge takes each blocking call's largest wait."""

    def prepare(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """A batch's number of MPI calls (column ``calls``)."""
        import polars as pl

        n = _calls(trace).select(pl.len()).collect().item()
        return Result(pl.DataFrame({"calls": [int(n)]}))

    def prepared(self, partials: Sequence[Result], params: Mapping[str, Any]
                 ) -> dict[str, Any]:
        """``has_calls``: whether the whole view has an MPI call."""
        return {"has_calls": any(p.table["calls"].sum() > 0 for p in partials)}

    def partial(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """A batch's messages with their blocking calls and waits (extra ``ranks``)."""
        import polars as pl

        from traceatlas.analysis.partitioned_view import widened

        sides = trace.messages.select("src_rank", "dst_rank").collect()
        peers = {int(r) for r in pl.concat([sides["src_rank"], sides["dst_rank"]]).unique()
                 if r is not None}
        msgs, notes = _waits(trace, widened(trace, peers), bool(params["has_calls"]))
        ranks = pl.DataFrame({"rank": trace.ranks}, schema={"rank": pl.Int32})
        return Result(msgs, extra={"ranks": ranks}, notes=notes)

    def merge(self, partials: Sequence[Result], params: Mapping[str, Any]) -> Result:
        """Per-rank totals from every batch's messages (a call's largest wait once)."""
        import polars as pl

        msgs = pl.concat([p.table for p in partials], how="vertical")
        ranks = pl.concat([p.extra["ranks"] for p in partials])["rank"].to_list()
        return Result(_per_rank(ranks, msgs), extra={"messages": _per_message(msgs)},
                      notes=summed_notes(partials))

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """Per-rank totals; extra table ``messages`` with each message's wait."""
        msgs, notes = _waits(trace, trace, None)
        return Result(_per_rank(trace.ranks, msgs), extra={"messages": _per_message(msgs)},
                      notes=notes)


def _calls(trace: Trace) -> pl.LazyFrame:
    """The MPI calls of ``trace``: rank, start_ns, end_ns."""
    import polars as pl

    return (trace.intervals.filter(pl.col("category") == "mpi")
            .select("rank", "start_ns", "end_ns"))


def _per_message(msgs: pl.DataFrame) -> pl.DataFrame:
    return msgs.select(
        "src_rank", "dst_rank", "tag", "bytes", "send_start_ns", "recv_start_ns",
        "recv_block_start_ns", "recv_block_end_ns", "send_block_start_ns",
        "send_block_end_ns", "late_sender_ns", "late_receiver_ns")


def _waits(trace: Trace, calls_of: Trace, has_calls: bool | None
           ) -> tuple[pl.DataFrame, list[str]]:
    """``trace``'s messages with both sides' times, their blocking calls (from
    ``calls_of``'s MPI calls; the messages' own times when the view has none:
    ``has_calls`` False, or None and ``calls_of`` has none) and waits; the notes."""
    import polars as pl

    msgs = trace.messages.select(*_MESSAGE_COLUMNS).filter(
        pl.all_horizontal(pl.col("send_start_ns", "recv_start_ns", "send_end_ns",
                                 "recv_end_ns").is_not_null())
    ).collect().with_row_index("message")
    calls = _calls(calls_of).collect()
    notes = []
    skipped = int(trace.messages.select(pl.len()).collect().item()) - msgs.height
    if skipped:
        notes.append(f"{skipped} message(s) without both sides' times left out")
    if calls.height if has_calls is None else has_calls:
        msgs = _block(msgs, calls, "dst_rank", "recv_end_ns", "recv_block")
        msgs = _block(msgs, calls, "src_rank", "send_end_ns", "send_block")
    else:
        notes.append("no MPI calls in the trace: the messages' own send and receive "
                     "times are the blocking calls")
        msgs = msgs.with_columns(
            recv_block_start_ns=pl.col("recv_start_ns"),
            recv_block_end_ns=pl.col("recv_end_ns"),
            send_block_start_ns=pl.col("send_start_ns"),
            send_block_end_ns=pl.col("send_end_ns"))
    rb0, rb1 = pl.col("recv_block_start_ns"), pl.col("recv_block_end_ns")
    sb0, sb1 = pl.col("send_block_start_ns"), pl.col("send_block_end_ns")
    send0, recv0 = pl.col("send_start_ns"), pl.col("recv_start_ns")
    msgs = msgs.with_columns(
        late_sender_ns=pl.when(send0 > rb0).then(pl.min_horizontal(send0, rb1) - rb0)
        .otherwise(0).fill_null(0),
        late_receiver_ns=pl.when((recv0 > sb0) & (recv0 < sb1)).then(recv0 - sb0)
        .otherwise(0).fill_null(0),
    ).sort("message")
    return msgs, notes


def _block(msgs: pl.DataFrame, calls: pl.DataFrame, rank: str, time: str,
           out: str) -> pl.DataFrame:
    """Add ``out``_start_ns/_end_ns: the MPI call on ``rank`` that holds ``time``."""
    import polars as pl

    right = calls.select(
        pl.col("rank").cast(pl.Int64).alias("_r"), pl.col("start_ns").alias("_s"),
        pl.col("end_ns").alias("_e")).sort("_r", "_s")
    left = msgs.with_columns(pl.col(rank).cast(pl.Int64).alias("_r")).sort("_r", time)
    joined = left.join_asof(right, left_on=time, right_on="_s", by="_r",
                            strategy="backward", allow_exact_matches=False,
                            check_sortedness=False)
    holds = pl.col("_e") >= pl.col(time)
    return joined.with_columns(
        pl.when(holds).then(pl.col("_s")).alias(f"{out}_start_ns"),
        pl.when(holds).then(pl.col("_e")).alias(f"{out}_end_ns"),
    ).drop("_r", "_s", "_e")


def _per_rank(world: list[int], msgs: pl.DataFrame) -> pl.DataFrame:
    """Per rank: the wait of each blocking call (largest over its messages), summed."""
    import polars as pl

    def side(rank: str, block: str, what: str) -> pl.DataFrame:
        col = f"{what}_ns"
        return (
            msgs.filter(pl.col(col) > 0)
            .group_by(pl.col(rank).alias("rank"), pl.col(block))
            .agg(pl.col(col).max())
            .group_by("rank")
            .agg(pl.col(col).sum().cast(pl.Int64),
                 pl.len().cast(pl.Int64).alias(f"{what}_count"))
            .with_columns(pl.col("rank").cast(pl.Int32))
        )

    ranks = pl.concat([
        pl.DataFrame({"rank": world}, schema={"rank": pl.Int32}),
        msgs.select(pl.col("src_rank").cast(pl.Int32).alias("rank")),
        msgs.select(pl.col("dst_rank").cast(pl.Int32).alias("rank")),
    ]).unique()
    return (
        ranks.join(side("dst_rank", "recv_block_start_ns", "late_sender"), on="rank",
                   how="left")
        .join(side("src_rank", "send_block_start_ns", "late_receiver"), on="rank",
              how="left")
        .with_columns(pl.exclude("rank").fill_null(0).cast(pl.Int64))
        .select("rank", "late_sender_ns", "late_sender_count", "late_receiver_ns",
                "late_receiver_count")
        .sort("rank")
    )
