"""``breakdown``: where device time goes, per rank and device (or per stream).

Columns (ns): ``span_ns`` first device activity start to last end; ``busy_ns`` union of
all device activity (kernels, communication kernels, memcpy, memset); ``compute_ns`` union
of non-communication kernels; ``comm_ns`` union of communication kernels;
``exposed_comm_ns`` communication not overlapped by compute (``|C or K| - |K|``);
``memory_ns`` union of memcpy and memset; ``exposed_memory_ns`` memory activity not
overlapped by compute or communication (``|busy| - |C or K|``); ``idle_ns`` span - busy;
``host_comm_ns`` union of the rank's collectives run on the host (gloo, MPI, c10d ops:
``ops.host_activity.HOST_COLLECTIVE`` on host ops and annotations, and ``mpi`` intervals;
as in the efficiency model's host communication) over all its threads, the
same for every device row of the rank (communication the device does not see).
Unions, never sums: overlapping kernels on several streams count once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.base import Param, Result
from traceatlas.analysis.requirements import DEVICE_WORK
from traceatlas.ops.host_activity import HOST_COLLECTIVE
from traceatlas.ops.unions import union_ns

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

GROUPINGS: Mapping[str, tuple[str, ...]] = {
    "device": ("rank", "device"),
    "stream": ("rank", "device", "stream"),
}


class Breakdown:
    """Device time per rank and device: busy, compute, communication, memory, idle."""

    name = "breakdown"
    description = "Device time per rank and device (or stream): compute, comm, memory, idle"
    params = (Param("by", str, "device", "device (default) or stream", ("device", "stream")),)
    requires = ("device",)
    partition = "rank"
    """Per rank: results concatenate (``analysis.partitioned``)."""

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """Per group: span, busy, compute, comm, exposed comm, memory, exposed memory, idle."""
        import polars as pl

        keys = list(GROUPINGS[str(params["by"])])
        cat = pl.col("category").cast(pl.String)
        base = trace.intervals.filter(pl.col("category").is_in(DEVICE_WORK)).select(
            "rank", pl.col("device").fill_null(-1), pl.col("stream").fill_null(-1),
            cat.alias("category"), "start_ns", "end_ns",
        )

        def union(where: pl.Expr | None, name: str) -> pl.LazyFrame:
            frame = base if where is None else base.filter(where)
            return union_ns(frame, keys, name)

        kernel = pl.col("category") == "kernel"
        comm = pl.col("category") == "comm_kernel"
        parts = [
            base.group_by(keys).agg(
                (pl.col("end_ns").max() - pl.col("start_ns").min()).alias("span_ns")),
            union(None, "busy_ns"),
            union(kernel, "compute_ns"),
            union(comm, "comm_ns"),
            union(kernel | comm, "kc_ns"),
            union(pl.col("category").is_in(("memcpy", "memset")), "memory_ns"),
        ]
        frame = parts[0]
        for part in parts[1:]:
            frame = frame.join(part, on=keys, how="left")
        host = trace.intervals.filter(
            (pl.col("device").fill_null(-1) < 0)
            & ((pl.col("category") == "mpi")
               | (pl.col("category").is_in(("annotation", "cpu_op", "python", "other"))
                  & pl.col("name").cast(pl.String).str.contains(HOST_COLLECTIVE)))
        ).select("rank", "start_ns", "end_ns")
        frame = frame.join(union_ns(host, ["rank"], "host_comm_ns"), on="rank", how="left")
        table = (
            frame.with_columns(pl.exclude(keys).fill_null(0))
            .with_columns(
                exposed_comm_ns=pl.col("kc_ns") - pl.col("compute_ns"),
                exposed_memory_ns=pl.col("busy_ns") - pl.col("kc_ns"),
                idle_ns=pl.col("span_ns") - pl.col("busy_ns"),
            )
            .select(*keys, "span_ns", "busy_ns", "compute_ns", "comm_ns", "exposed_comm_ns",
                    "memory_ns", "exposed_memory_ns", "idle_ns", "host_comm_ns")
            .sort(keys)
            .collect()
        )
        return Result(table, notes=_notes(table))


def _notes(table: pl.DataFrame) -> list[str]:
    if "device" in table.columns and (table["device"] == -1).any():
        return ["device -1: device activity without a device index in the source"]
    return []
