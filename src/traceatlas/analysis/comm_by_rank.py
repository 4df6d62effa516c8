"""``comm_by_rank``: point-to-point messages sent and received per rank.

Main table, one row per rank of the trace (ranks without messages give zeros), sorted by
rank: ``rank``, ``sent_count`` and ``sent_bytes`` (messages with ``src_rank`` = rank and
their summed size, bytes), ``recv_count`` and ``recv_bytes`` (``dst_rank`` = rank).
These are the row and column sums of ``comm_matrix``.

Same as Pipit (``Trace.comm_by_process(output="size"|"count")``, hpcgroup/pipit
``pipit/trace.py``: row and column sums of its dense comm matrix, columns Sent and
Received), with both quantities as columns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.base import Result
from traceatlas.analysis.comm_matrix import message_notes, pair_totals
from traceatlas.analysis.partitioned import summed_notes

if TYPE_CHECKING:
    from traceatlas.model.trace import Trace


class CommByRank:
    """Sent and received messages and bytes per rank."""

    name = "comm_by_rank"
    description = "Point-to-point messages and bytes sent and received per rank"
    params = ()
    requires = ("messages",)
    partition = "message"
    """Each message counted by the batch whose part stores it (``analysis.partitioned``)."""

    def merge(self, partials: Sequence[Result], params: Mapping[str, Any]) -> Result:
        """The batches' per-rank counts and bytes added up per rank."""
        import polars as pl

        table = (pl.concat([p.table for p in partials], how="vertical")
                 .group_by("rank").agg(pl.exclude("rank").sum().cast(pl.Int64))
                 .select("rank", "sent_count", "sent_bytes", "recv_count", "recv_bytes")
                 .sort("rank"))
        return Result(table, notes=summed_notes(partials))

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """One row per rank: sent and received counts and bytes."""
        import polars as pl

        pairs = pair_totals(trace.messages)
        sent = pairs.group_by(rank="src").agg(
            sent_count=pl.col("count").sum(), sent_bytes=pl.col("bytes").sum())
        recv = pairs.group_by(rank="dst").agg(
            recv_count=pl.col("count").sum(), recv_bytes=pl.col("bytes").sum())
        ranks = pl.concat([
            pl.LazyFrame({"rank": trace.ranks}, schema={"rank": pl.Int32}),
            pairs.select(rank=pl.col("src").cast(pl.Int32)),
            pairs.select(rank=pl.col("dst").cast(pl.Int32)),
        ]).unique()
        table = (
            ranks.join(sent.with_columns(pl.col("rank").cast(pl.Int32)), on="rank", how="left")
            .join(recv.with_columns(pl.col("rank").cast(pl.Int32)), on="rank", how="left")
            .with_columns(pl.exclude("rank").fill_null(0).cast(pl.Int64))
            .select("rank", "sent_count", "sent_bytes", "recv_count", "recv_bytes")
            .sort("rank").collect()
        )
        return Result(table, notes=message_notes(trace.messages))
