"""``comm_over_time``: point-to-point messages (count and bytes) in equal time bins.

The trace span (earliest to latest time over intervals, instants and messages, ns) is cut
into ``bins`` equal bins. Bin ``i`` covers ``[bin_start_ns, bin_end_ns)`` with
``bin_start_ns = t0 + floor(i * span / bins)`` (integer ns); the last bin includes the
span's end. A message falls in the bin of its send start (``by=send``: ``send_start_ns``,
the start of the MPI call that sent it) or of its receive end (``by=recv``:
``recv_end_ns``, the end of the MPI call that completed the receive).

Main table, one row per bin (every bin, empty ones too): ``bin``, ``bin_start_ns``,
``bin_end_ns``, ``count`` (messages), ``bytes`` (their summed size, bytes).

Same binning as Pipit (``Trace.comm_over_time(output, message_type, bins=50)``,
hpcgroup/pipit ``pipit/trace.py``: ``np.histogram`` of the send or receive event
timestamps over [first, last event timestamp]); Pipit uses the ``MpiSend``/``MpiRecv``
event's own timestamp (inside the MPI call) where we use the call's start (send) or end
(receive), and returns one quantity (size or count) where we give both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.base import MAX_BINS, Param, Result
from traceatlas.analysis.partitioned import summed_notes

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

DEFAULT_BINS = 50
"""Pipit's default number of bins."""
TIME_OF: Mapping[str, str] = {"send": "send_start_ns", "recv": "recv_end_ns"}
"""``by`` -> the messages column a message is binned by."""
_MESSAGE_TIMES = ("send_start_ns", "send_end_ns", "recv_start_ns", "recv_end_ns")


class CommOverTime:
    """Messages and bytes per time bin."""

    name = "comm_over_time"
    description = "Point-to-point messages and bytes in equal time bins (by send start)"
    params = (
        Param("bins", int, DEFAULT_BINS, "number of time bins (Pipit's default: 50)", minimum=1,
              maximum=MAX_BINS),
        Param("by", str, "send", "bin by send start (send) or by receive end (recv)",
              ("send", "recv")),
    )
    requires = ("messages",)

    partition = "message"
    """Each message counted by the batch whose part stores it (``analysis.partitioned``):
    a first pass finds the span over all batches (``prepare``), then each batch counts
    its messages per bin (``partial``) and the merge adds the bins up."""

    def prepare(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """A batch's span: one row ``lo``, ``hi`` (ns; null when the batch has no rows)."""
        return Result(span_frame(trace).collect())

    def prepared(self, partials: Sequence[Result], params: Mapping[str, Any]
                 ) -> dict[str, Any]:
        """The span over every batch, as ``trace_span`` gives it for the whole trace."""
        import polars as pl

        both = pl.concat([p.table for p in partials]).select(
            pl.col("lo").min(), pl.col("hi").max())
        lo, hi = both.row(0)
        return {"span_ns": (int(lo or 0), int(hi or 0))}

    def partial(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """A batch's messages counted per bin of the whole span (``params["span_ns"]``)."""
        t0, t1 = params["span_ns"]
        return _counted(trace, params, t0, t1)

    def merge(self, partials: Sequence[Result], params: Mapping[str, Any]) -> Result:
        """The batches' counts and bytes added up per bin."""
        import polars as pl

        counted = (pl.concat([p.table for p in partials], how="vertical")
                   .group_by("bin").agg(pl.col("count").sum(), pl.col("bytes").sum()))
        t0, t1 = params["span_ns"]
        return Result(_bins(counted, t0, t1, int(params["bins"])),
                      notes=summed_notes(partials))

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """One row per bin: edges (ns), message count and bytes."""
        t0, t1 = trace_span(trace)
        counted = _counted(trace, params, t0, t1)
        return Result(_bins(counted.table, t0, t1, int(params["bins"])),
                      notes=counted.notes)


def _counted(trace: Trace, params: Mapping[str, Any], t0: int, t1: int) -> Result:
    """Messages per non-empty bin of ``[t0, t1]``: bin, count, bytes; the note on
    messages without the binned time."""
    import polars as pl

    from traceatlas.errors import InputError

    bins = int(params["bins"])
    if bins < 1:
        raise InputError("--param bins", f"must be at least 1, got {bins}")
    span = max(t1 - t0, 1)
    column = TIME_OF[str(params["by"])]
    msgs = trace.messages.select(pl.col(column).alias("t"), "bytes")
    missing = int(msgs.select(pl.col("t").is_null().sum()).collect().item())
    counted = (
        msgs.filter(pl.col("t").is_not_null())
        .with_columns(bin=(((pl.col("t") - t0) * bins) // span).clip(0, bins - 1))
        .group_by("bin")
        .agg(count=pl.len().cast(pl.Int64), bytes=pl.col("bytes").sum().cast(pl.Int64))
        .collect()
    )
    notes = [f"{missing} message(s) without a {column} left out"] if missing else []
    return Result(counted, notes=notes)


def _bins(counted: pl.DataFrame, t0: int, t1: int, bins: int) -> pl.DataFrame:
    """Every bin of ``[t0, t1]`` with its edges (ns) and the counts (0 when none)."""
    import polars as pl

    span = max(t1 - t0, 1)
    idx = pl.int_range(0, bins, dtype=pl.Int64, eager=True)
    frame = pl.DataFrame({"bin": idx}).with_columns(
        bin_start_ns=t0 + (pl.col("bin") * span) // bins,
        bin_end_ns=t0 + ((pl.col("bin") + 1) * span) // bins,
    )
    return (
        frame.lazy().join(counted.lazy().with_columns(pl.col("bin").cast(pl.Int64)),
                          on="bin", how="left")
        .with_columns(pl.col("count", "bytes").fill_null(0))
        .sort("bin").collect()
    )


def span_frame(trace: Trace) -> pl.LazyFrame:
    """One row ``lo``, ``hi``: the earliest and latest time in ns over intervals,
    instants and messages (null when there are none)."""
    import polars as pl

    parts = [
        trace.intervals.select(lo=pl.col("start_ns").min(), hi=pl.col("end_ns").max()),
        trace.instants.select(lo=pl.col("ts_ns").min(), hi=pl.col("ts_ns").max()),
        trace.messages.select(lo=pl.min_horizontal(*_MESSAGE_TIMES).min(),
                              hi=pl.max_horizontal(*_MESSAGE_TIMES).max()),
    ]
    return pl.concat([p.cast(pl.Int64) for p in parts]).select(
        pl.col("lo").min(), pl.col("hi").max())


def trace_span(trace: Trace) -> tuple[int, int]:
    """(earliest, latest) time in ns over intervals, instants and messages."""
    lo, hi = span_frame(trace).collect().row(0)
    return (int(lo or 0), int(hi or 0))
