"""``comm_matrix``: point-to-point messages per (sender, receiver) pair.

Main table, long format, one row per pair that exchanged at least one message, sorted by
(src, dst): ``src`` sender rank, ``dst`` receiver rank, ``count`` messages, ``bytes``
their summed size (bytes; messages of unknown size count in ``count`` only).

Every row of the ``messages`` table is one message: OTF2 matched send/receive pairs (and
unmatched sends or receives, which the reader keeps and warns about), Paraver type-3
records. Notes report unmatched messages and messages of unknown size.

Differs from Pipit (``Trace.comm_matrix``, hpcgroup/pipit ``pipit/trace.py``): Pipit
returns a dense ranks x ranks numpy array of one quantity (``output="size"`` or
``"count"``) built from ``MpiSend``/``MpiIsend`` events only; here both quantities are
columns in long format (pairs without messages are absent), and a receive whose send
was not recorded counts too (it is noted).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.base import Result
from traceatlas.analysis.partitioned import summed_notes

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace


class CommMatrix:
    """Messages and bytes per (sender, receiver) pair."""

    name = "comm_matrix"
    description = "Point-to-point messages per sender x receiver pair: count and bytes"
    params = ()
    requires = ("messages",)

    partition = "message"
    """Each message counted by the batch whose part stores it (``analysis.partitioned``)."""

    def merge(self, partials: Sequence[Result], params: Mapping[str, Any]) -> Result:
        """The batches' pair totals added up per (src, dst)."""
        import polars as pl

        table = (pl.concat([p.table for p in partials], how="vertical")
                 .group_by("src", "dst")
                 .agg(pl.col("count").sum().cast(pl.Int64),
                      pl.col("bytes").sum().cast(pl.Int64))
                 .sort("src", "dst"))
        return Result(table, notes=summed_notes(partials))

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """One row per (src, dst) pair with messages."""
        table = pair_totals(trace.messages).collect()
        return Result(table, notes=message_notes(trace.messages))


def pair_totals(messages: pl.LazyFrame) -> pl.LazyFrame:
    """(src, dst, count, bytes) per pair, sorted; bytes sums known sizes (0 when none)."""
    import polars as pl

    return (
        messages.group_by(src="src_rank", dst="dst_rank")
        .agg(count=pl.len().cast(pl.Int64), bytes=pl.col("bytes").sum().cast(pl.Int64))
        .sort("src", "dst")
    )


def message_notes(messages: pl.LazyFrame) -> list[str]:
    """Notes on messages with a side missing (unmatched) or an unknown size."""
    import polars as pl

    counts = messages.select(
        no_send=pl.col("send_start_ns").is_null().sum(),
        no_recv=pl.col("recv_start_ns").is_null().sum(),
        no_bytes=pl.col("bytes").is_null().sum(),
    ).collect().row(0)
    texts = ("receive(s) without a recorded send (counted)",
             "send(s) without a recorded receive (counted)",
             "message(s) of unknown size (counted, 0 bytes)")
    return [f"{n} {text}" for n, text in zip(counts, texts, strict=True) if n]
