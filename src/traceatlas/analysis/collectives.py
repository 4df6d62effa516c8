"""``collectives``: NCCL/RCCL collective kernels matched across ranks (GPU side).

Matching: a communication kernel's ``op`` is its ``collective`` column (Kineto's
``Collective name``) or, when absent, the word after ``Kernel_`` in its name, lower case
(``ncclKernel_AllReduce_RING_LL_Sum_float`` -> ``allreduce``). On each rank the kernels of
one (process_group, op) are numbered by start time (``occurrence`` 0, 1, ...); the kernels
with the same (process_group, op, occurrence) on every rank form one *instance*, as
``traceatlas.ingest.align`` keys its sync events (which use the kernel name instead of op).

Main table, one row per instance (numbered by first start): ``instance``, ``op``,
``process_group`` (null when the source has none), ``occurrence``, ``ranks`` (ranks that
have it), ``bytes`` (largest ``in_msg_nelems`` x dtype size over the ranks, bytes; null
when unknown), ``start_ns`` (first start), ``end_ns`` (last end), ``skew_ns`` (arrival
skew: last start - first start), ``straggler`` (the rank that started last; lowest rank on
a tie; null when one rank only).

Times (``start_ns``, ``end_ns`` here and in ``per_rank``) are ns since the run start (the
first event of the trace, as the report's timeline, the advisor's windows and
``--window`` count); a note gives that start in epoch ns.

Extra tables: ``per_rank`` (instance, rank, start_ns, end_ns, dur_ns, lag_ns = start -
first start of the instance); ``stragglers`` (rank, instances: multi-rank instances it
joined, last: how often it started last, share = last / instances).

Differs from HTA: HTA's straggler analysis (``find_stragglers_with_late_start_comm_kernels``)
picks one (stream, kernel) per iteration by duration variance and ranks stragglers by a
normalized start time; it does not match every collective instance. Point-to-point kernels
(SendRecv) are matched by occurrence like collectives, which pairs unrelated transfers
when ranks exchange with different peers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.base import Result

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

DTYPE_BYTES: Mapping[str, int] = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2,
    "bfloat16": 2, "int": 4, "int32": 4, "long": 8, "int64": 8, "short": 2, "int16": 2,
    "char": 1, "int8": 1, "byte": 1, "uint8": 1, "bool": 1, "complexfloat": 8,
    "complexdouble": 16, "complexhalf": 4, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "uint16": 2, "uint32": 4, "uint64": 8,
}
"""Element size in bytes per dtype name (Kineto's ``dtype`` arg), lower case."""
INSTANCE = ["process_group", "op", "occurrence"]


class Collectives:
    """Collective kernels matched across ranks: bytes, arrival skew, straggler rank."""

    name = "collectives"
    description = "NCCL collective kernels matched across ranks: skew and straggler rank"
    params = ()
    requires = ("comm",)

    partition = "rank"
    """Per rank (``analysis.partitioned``): each batch sends its ranks' communication
    kernels numbered per (rank, process group, op) and its first event; ``merge`` matches
    the instances across batches (the rows sent are those of ``per_rank``)."""

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """One row per collective instance; extra tables per_rank and stragglers."""
        return self.merge([self.partial(trace, params)], params)

    def partial(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """The communication kernels of ``trace`` (rank, start_ns, end_ns, op,
        process_group ('' when none), bytes, occurrence); extra ``_t0`` (one row: the
        first interval start, null when none)."""
        import polars as pl

        op = pl.coalesce(
            pl.col("collective").cast(pl.String),
            pl.col("name").str.extract(r"Kernel_([A-Za-z0-9]+)", 1).str.to_lowercase(),
            pl.col("name"),
        )
        size = pl.col("dtype").str.to_lowercase().replace_strict(
            dict(DTYPE_BYTES), default=None, return_dtype=pl.Int64)
        kernels = (
            trace.intervals.filter(pl.col("category") == "comm_kernel")
            .select("rank", "start_ns", "end_ns", pl.col("name").cast(pl.String),
                    "collective", "process_group", "in_msg_nelems", "dtype")
            .with_columns(op=op, bytes=pl.col("in_msg_nelems") * size,
                          process_group=pl.col("process_group").fill_null(""))
            .sort("rank", "start_ns", "end_ns")
            .with_columns(occurrence=pl.int_range(pl.len(), dtype=pl.Int64)
                          .over("rank", "process_group", "op"))
            .select("rank", "start_ns", "end_ns", "op", "process_group", "bytes",
                    "occurrence")
        )
        t0 = trace.intervals.select(pl.col("start_ns").min().alias("t0"))
        rows, first = pl.collect_all([kernels, t0])
        return Result(rows, extra={"_t0": first})

    def merge(self, partials: Sequence[Result], params: Mapping[str, Any]) -> Result:
        """Instances matched over every batch's kernels (``partial``)."""
        import polars as pl

        per_rank_keyed = pl.concat([p.table for p in partials], how="vertical").lazy().with_columns(
            first=pl.col("start_ns").min().over(INSTANCE),
            last=pl.col("start_ns").max().over(INSTANCE),
        )
        straggler = (pl.col("rank").filter(pl.col("start_ns") == pl.col("last")).min())
        table = (
            per_rank_keyed.group_by(INSTANCE).agg(
                ranks=pl.col("rank").n_unique().cast(pl.Int64),
                bytes=pl.col("bytes").max(),
                start_ns=pl.col("start_ns").min(),
                end_ns=pl.col("end_ns").max(),
                skew_ns=pl.col("start_ns").max() - pl.col("start_ns").min(),
                straggler=straggler,
            )
            .with_columns(straggler=pl.when(pl.col("ranks") > 1).then("straggler"))
            .sort("start_ns", *INSTANCE)
            .with_row_index("instance")
            .with_columns(pl.col("instance").cast(pl.Int64),
                          pl.col("process_group").replace("", None))
            .select("instance", "op", "process_group", "occurrence", "ranks", "bytes",
                    "start_ns", "end_ns", "skew_ns", "straggler")
            .collect()
        )
        ids = table.lazy().select("instance", pl.col("process_group").fill_null(""),
                                  "op", "occurrence")
        per_rank = (
            per_rank_keyed.join(ids, on=INSTANCE)
            .select("instance", "rank", "start_ns", "end_ns",
                    (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"),
                    (pl.col("start_ns") - pl.col("first")).alias("lag_ns"))
            .sort("instance", "rank")
            .collect()
        )
        firsts = [v for p in partials for v in p.extra["_t0"]["t0"] if v is not None]
        t0 = int(min(firsts)) if firsts else 0
        since = [(pl.col("start_ns") - t0), (pl.col("end_ns") - t0)]
        return Result(table.with_columns(*since),
                      extra={"per_rank": per_rank.with_columns(*since),
                             "stragglers": _stragglers(table, per_rank)},
                      notes=[f"start_ns, end_ns: ns since the run start (first event of "
                             f"the trace, {t0} ns since the epoch)", *_notes(table)])


def _stragglers(table: pl.DataFrame, per_rank: pl.DataFrame) -> pl.DataFrame:
    import polars as pl

    multi = table.filter(pl.col("ranks") > 1)
    joined = per_rank.join(multi.select("instance", "straggler"), on="instance")
    return (
        joined.group_by("rank").agg(
            instances=pl.len().cast(pl.Int64),
            last=(pl.col("rank") == pl.col("straggler")).sum().cast(pl.Int64),
        )
        .with_columns(share=pl.col("last") / pl.col("instances"))
        .sort("rank")
    )


def _notes(table: pl.DataFrame) -> list[str]:
    import polars as pl

    notes = []
    if table.height and table["ranks"].n_unique() > 1:
        counts = ", ".join(map(str, sorted(table["ranks"].unique().to_list())))
        notes.append(f"instances span different numbers of ranks ({counts}): process groups "
                     "of different sizes, or ranks that launched different numbers of kernels "
                     "of one (group, op)")
    if table.filter(pl.col("bytes").is_null()).height:
        notes.append("bytes null where the source gives no message size or dtype")
    return notes
