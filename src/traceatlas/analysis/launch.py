"""``launch``: per device launch, the host launch call, the device duration and the delay
between them; a per-rank summary of short kernels and long delays.

A row is one device activity (kernel or comm kernel; with ``memory=true``, the default as
in HTA, also memcpy and memset) whose ``correlation`` matches a host runtime or driver
call on the same rank (the first such call when several share the id). A CUDA graph launch
gives one row per kernel, all with the same launch call: ``graph`` is true on those rows
(the call is a ``*GraphLaunch*`` or its correlation id has more than one device activity)
and ``launch_kernels`` counts the device activities of the row's launch call.

Columns: ``rank``, ``correlation``, ``name`` and ``category`` of the device activity,
``stream``, ``launch_name`` (e.g. ``cudaLaunchKernel``), ``cpu_start_ns`` and
``cpu_launch_ns`` (start and duration of the launch call), ``gpu_start_ns`` and
``gpu_ns`` (start and duration of the device activity), ``launch_delay_ns`` = device
start - launch call END, clipped at 0 (HTA's ``launch_delay`` in
``cuda_kernel_launch_stats``: the time the work waited after the call returned), and
``start_to_start_ns`` = device start - launch call start (not clipped), ``step`` (the
device row's step, -1 outside steps).

Extra table ``summary``, per rank. Counted per launch *call* (a graph launch is one
launch, its kernels are not compared with a call of their own): ``launches`` (calls);
``graph_launches`` and ``graph_kernels`` (device activities they launched);
``shorter_than_launch`` (calls whose device time, summed over their activities, is below
``cpu_launch_ns``: the device ran for less time than the host took to launch it, the
"short kernel" of HTA and of the TensorBoard plugin); ``long_launches`` (``cpu_launch_ns >
long_launch_ns``, HTA's runtime outliers, cutoff 50 us) and their ``long_launches_cpu_ns``;
``long_delays`` (delay of the call's first activity > ``long_delay_ns``, HTA's
launch-delay outliers, cutoff 100 us) and their ``long_delays_ns``. Counted per device
activity: ``short_kernels`` (``gpu_ns < short_kernel_ns``) and their
``short_kernels_gpu_ns``. Times in ns.

Extra table ``graphs``, one row per graph launch call: ``rank``, ``correlation``,
``launch_name``, ``cpu_start_ns``, ``cpu_launch_ns``, ``step``, ``kernels`` (device
activities launched), ``streams``, ``gpu_start_ns`` (first activity start), ``gpu_end_ns``
(last end), ``gpu_ns`` (sum of the activities' durations), ``busy_ns`` (their union),
``launch_delay_ns`` (first activity start - call end, clipped at 0).

Differences from HTA: HTA matches only ``cudaLaunchKernel``, ``cudaLaunchKernelExC`` and
``cudaMemcpyAsync``/``cudaMemsetAsync`` by name; we take any runtime or driver call with
the device row's correlation (e.g. ``cuLaunchKernel``, ``cudaGraphLaunch``, HIP, nsys).
HTA's short-kernel plot also requires ``cpu_duration <= runtime_cutoff``; our
``shorter_than_launch`` does not (as the TensorBoard plugin). HTA has no absolute
short-kernel threshold; ``short_kernel_ns`` (default 10 us) is ours.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.base import MAX_NS, Param, Result
from traceatlas.analysis.partitioned import concat_counts
from traceatlas.analysis.requirements import DEVICE_WORK

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

KERNELS = ("kernel", "comm_kernel")
LAUNCH_CATEGORIES = ("runtime", "driver")
COLUMNS = ("rank", "correlation", "name", "category", "stream", "launch_name",
           "cpu_start_ns", "cpu_launch_ns", "gpu_start_ns", "gpu_ns", "launch_delay_ns",
           "start_to_start_ns", "step", "graph", "launch_kernels")
GRAPH_LAUNCH = r"(?i)graphlaunch"
"""Runtime/driver calls that replay a captured graph (cudaGraphLaunch, cuGraphLaunch,
hipGraphLaunch)."""


class Launch:
    """Per launch (correlation): CPU launch duration, GPU duration, launch delay."""

    name = "launch"
    description = ("Per kernel launch: CPU launch time, GPU time, launch delay; summary of "
                   "short kernels and long delays")
    params = (
        Param("short_kernel_ns", int, 10_000, "device activity shorter than this (ns) "
              "counts as a short kernel", minimum=0, maximum=MAX_NS),
        Param("long_delay_ns", int, 100_000, "launch delay above this (ns) counts as long "
              "(HTA launch_delay_cutoff: 100 us)", minimum=0, maximum=MAX_NS),
        Param("long_launch_ns", int, 50_000, "launch call longer than this (ns) counts as "
              "long (HTA runtime_cutoff: 50 us)", minimum=0, maximum=MAX_NS),
        Param("memory", bool, True, "include memcpy and memset (HTA include_memory_events)"),
    )
    requires = ("correlation",)
    partition = "rank"
    """Per rank: results concatenate (``analysis.partitioned``)."""
    merge = staticmethod(concat_counts)

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """One row per matched device activity, and the per-rank summary."""
        import polars as pl

        cats = DEVICE_WORK if params["memory"] else KERNELS
        cat = pl.col("category").cast(pl.String)
        rows = trace.intervals.filter(pl.col("correlation").is_not_null())
        host = (
            rows.filter(pl.col("category").is_in(LAUNCH_CATEGORIES))
            .sort("rank", "correlation", cat != "runtime", "start_ns")
            .group_by("rank", "correlation", maintain_order=True)
            .first()
            .select("rank", "correlation", pl.col("name").cast(pl.String).alias("launch_name"),
                    pl.col("start_ns").alias("cpu_start_ns"),
                    pl.col("end_ns").alias("_cpu_end"),
                    pl.col("dur_ns").alias("cpu_launch_ns"))
        )
        device = rows.filter(pl.col("category").is_in(cats)).select(
            "rank", "correlation", pl.col("name").cast(pl.String), cat.alias("category"),
            "stream", pl.col("start_ns").alias("gpu_start_ns"), pl.col("dur_ns").alias("gpu_ns"),
            pl.col("end_ns").alias("_gpu_end"), "step")
        per_call = pl.len().over("rank", "correlation").cast(pl.Int64)
        table = (
            device.join(host, on=["rank", "correlation"], how="inner")
            .with_columns(
                launch_delay_ns=(pl.col("gpu_start_ns") - pl.col("_cpu_end")).clip(lower_bound=0),
                start_to_start_ns=pl.col("gpu_start_ns") - pl.col("cpu_start_ns"),
                launch_kernels=per_call,
                graph=(per_call > 1) | pl.col("launch_name").str.contains(GRAPH_LAUNCH),
            )
            .sort("rank", "correlation", "gpu_start_ns")
        )
        # Collected once: collect_all ran the join twice (once per output).
        joined = table.collect()
        frame = joined.select(COLUMNS)
        graphs = graph_launches(joined.lazy()).collect()
        summary = _summary(frame.lazy(), params).collect()
        notes = ["launch_delay_ns = device start - launch call end, clipped at 0 (HTA)"]
        if graphs.height:
            notes.append(f"{graphs.height} graph launches ran {int(graphs['kernels'].sum())} "
                         "device activities; each graph launch counts as one launch")
        return Result(frame, extra={"summary": summary, "graphs": graphs}, notes=notes)


def calls(table: pl.LazyFrame) -> pl.LazyFrame:
    """One row per launch call (``rank, correlation``): ``launch_name``, ``cpu_start_ns``,
    ``cpu_launch_ns``, ``graph``, ``kernels``, ``gpu_ns`` (summed device time),
    ``launch_delay_ns`` (of its first activity), ``step``, ``name`` (its first activity)."""
    import polars as pl

    return (table.sort("rank", "correlation", "gpu_start_ns")
            .group_by("rank", "correlation", maintain_order=True).agg(
                pl.col("launch_name", "cpu_start_ns", "cpu_launch_ns", "graph", "name",
                       "step").first(),
                pl.len().cast(pl.Int64).alias("kernels"),
                pl.col("gpu_ns").sum(),
                pl.col("launch_delay_ns").min()))


def graph_launches(table: pl.LazyFrame) -> pl.LazyFrame:
    """The ``graphs`` table from the joined rows (needs ``_gpu_end`` and ``_cpu_end``)."""
    import polars as pl

    from traceatlas.ops.unions import union_ns

    keys = ["rank", "correlation"]
    rows = table.filter(pl.col("graph"))
    busy = union_ns(rows.select(*keys, pl.col("gpu_start_ns").alias("start_ns"),
                                pl.col("_gpu_end").alias("end_ns")), keys, "busy_ns")
    return (rows.group_by(keys).agg(
        pl.col("launch_name", "cpu_start_ns", "cpu_launch_ns", "step").first(),
        pl.len().cast(pl.Int64).alias("kernels"),
        pl.col("stream").n_unique().cast(pl.Int64).alias("streams"),
        pl.col("gpu_start_ns").min(), pl.col("_gpu_end").max().alias("gpu_end_ns"),
        pl.col("gpu_ns").sum(), pl.col("launch_delay_ns").min())
        .join(busy, on=keys, how="left")
        .select(*keys, "launch_name", "cpu_start_ns", "cpu_launch_ns", "step", "kernels",
                "streams", "gpu_start_ns", "gpu_end_ns", "gpu_ns", "busy_ns",
                "launch_delay_ns")
        .sort(*keys))


def _summary(table: pl.LazyFrame, params: Mapping[str, Any]) -> pl.LazyFrame:
    import polars as pl

    short = pl.col("gpu_ns") < int(params["short_kernel_ns"])
    long_launch = pl.col("cpu_launch_ns") > int(params["long_launch_ns"])
    long_delay = pl.col("launch_delay_ns") > int(params["long_delay_ns"])

    def count(cond: pl.Expr) -> pl.Expr:
        return cond.sum().cast(pl.Int64)

    per_call = calls(table).group_by("rank").agg(
        pl.len().cast(pl.Int64).alias("launches"),
        count(pl.col("graph")).alias("graph_launches"),
        pl.col("kernels").filter(pl.col("graph")).sum().cast(pl.Int64).alias("graph_kernels"),
        count(pl.col("gpu_ns") < pl.col("cpu_launch_ns")).alias("shorter_than_launch"),
        count(long_launch).alias("long_launches"),
        pl.col("cpu_launch_ns").filter(long_launch).sum().alias("long_launches_cpu_ns"),
        count(long_delay).alias("long_delays"),
        pl.col("launch_delay_ns").filter(long_delay).sum().alias("long_delays_ns"))
    per_row = table.group_by("rank").agg(
        count(short).alias("short_kernels"),
        pl.col("gpu_ns").filter(short).sum().alias("short_kernels_gpu_ns"))
    return per_call.join(per_row, on="rank", how="left").select(
        "rank", "launches", "graph_launches", "graph_kernels", "short_kernels",
        "short_kernels_gpu_ns", "shorter_than_launch", "long_launches",
        "long_launches_cpu_ns", "long_delays", "long_delays_ns").sort("rank")
