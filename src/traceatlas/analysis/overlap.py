"""``overlap``: communication time overlapped by computation, per rank (HTA's comm-comp
overlap), and the in-flight series (how many kernels run at once).

Main table, one row per rank with kernels or communication kernels (ns):
``comm_ns`` union of communication kernels (category ``comm_kernel``); ``compute_ns``
union of non-communication kernels (category ``kernel``); ``overlapped_ns`` time when
both run (``|C| + |K| - |C or K|``); ``overlap_pct`` = overlapped_ns / comm_ns * 100
(null when the rank has no communication). memcpy and memset are neither, as in HTA.

Extra table ``series``: the number of kernels (communication included, memcpy and memset
not) running at once, as a step function per rank: ``rank, start_ns, end_ns, in_flight``
with ``in_flight`` constant over [start_ns, end_ns); consecutive rows differ, gaps with
nothing running are rows with ``in_flight`` 0, the series covers first kernel start to
last kernel end. Built by an event sweep (+1 at each start, -1 at each end, running sum).

Differs from HTA (``hta/analyzers/communication_analysis.py``,
``get_comm_comp_overlap``): HTA returns only the ratio (``comp_comm_overlap_pctg``),
rounded to 2 decimals; we also give the ns and do not round. HTA classifies kernels by
name (``get_kernel_type``: "nccl" in the name -> communication; Memcpy/Memset -> memory);
we use the canonical category, which the readers set the same way. Both work over all
devices of a rank together.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.base import Result
from traceatlas.analysis.partitioned import concat_counts
from traceatlas.ops.unions import union_ns

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

KERNELS = ("kernel", "comm_kernel")
"""Categories counted as running kernels (computation and communication)."""


class Overlap:
    """Communication overlapped by computation per rank, and kernels in flight."""

    name = "overlap"
    description = "Communication overlapped by computation per rank; kernels in flight"
    params = ()
    requires = ("device",)
    partition = "rank"
    """Per rank: results concatenate (``analysis.partitioned``)."""
    merge = staticmethod(concat_counts)

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """Per rank: comm_ns, compute_ns, overlapped_ns, overlap_pct; extra ``series``."""
        import polars as pl

        cat = pl.col("category").cast(pl.String)
        base = trace.intervals.filter(pl.col("category").is_in(KERNELS)).select(
            "rank", cat.alias("category"), "start_ns", "end_ns")
        keys = ["rank"]
        comm = pl.col("category") == "comm_kernel"
        frame = base.select("rank").unique()
        for part in (union_ns(base.filter(comm), keys, "comm_ns"),
                     union_ns(base.filter(~comm), keys, "compute_ns"),
                     union_ns(base, keys, "either_ns")):
            frame = frame.join(part, on=keys, how="left")
        table = (
            frame.with_columns(pl.exclude(keys).fill_null(0))
            .with_columns(overlapped_ns=pl.col("comm_ns") + pl.col("compute_ns")
                          - pl.col("either_ns"))
            .with_columns(overlap_pct=pl.when(pl.col("comm_ns") > 0).then(
                pl.col("overlapped_ns") * 100.0 / pl.col("comm_ns")))
            .select("rank", "comm_ns", "compute_ns", "overlapped_ns", "overlap_pct")
            .sort(keys)
            .collect()
        )
        series = in_flight_series(base, keys).collect()
        notes = []
        no_comm = table.filter(pl.col("comm_ns") == 0)["rank"].to_list()
        if no_comm:
            notes.append(f"no communication kernels on rank(s) {_ranks(no_comm)}: "
                         "overlap_pct is null there")
        return Result(table, extra={"series": series}, notes=notes)


def in_flight_series(frame: pl.LazyFrame, keys: list[str]) -> pl.LazyFrame:
    """Step function of how many intervals of ``frame`` are open, per group ``keys``:
    columns ``*keys, start_ns, end_ns, in_flight`` (value over [start_ns, end_ns))."""
    import polars as pl

    events = pl.concat([
        frame.select(*keys, pl.col("start_ns").alias("ts"), pl.lit(1, pl.Int64).alias("d")),
        frame.select(*keys, pl.col("end_ns").alias("ts"), pl.lit(-1, pl.Int64).alias("d")),
    ])
    return (
        events.group_by(*keys, "ts").agg(pl.col("d").sum())
        .filter(pl.col("d") != 0)          # an end and a start at one instant: no change
        .sort(*keys, "ts")
        .with_columns(in_flight=pl.col("d").cum_sum().over(keys),
                      end_ns=pl.col("ts").shift(-1).over(keys))
        .filter(pl.col("end_ns").is_not_null())   # the last end: nothing runs after it
        .select(*keys, pl.col("ts").alias("start_ns"), "end_ns", "in_flight")
    )


def _ranks(ranks: list[int]) -> str:
    shown = ", ".join(str(r) for r in ranks[:10])
    return shown + (f" and {len(ranks) - 10} more" if len(ranks) > 10 else "")
