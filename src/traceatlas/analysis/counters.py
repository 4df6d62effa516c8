"""``counters``: device counter samples aggregated per kernel, and a bound classification.

Two sources:

- ``gpu_metrics``: sampled counters (Nsight Systems GPU metrics: ``SMs Active``,
  ``Tensor Active``, ``DRAM Read Bandwidth``, NVLink ...) on counter tracks with a
  device index. A sample holds its value from its timestamp until the next sample of the
  same series (sample-and-hold; the last sample of a series covers nothing). For a device
  activity row (kernel, comm_kernel, memcpy, memset) on the same rank and device, the
  counter's time-weighted mean over ``[start_ns, end_ns)`` is the integral of that step
  function over the part of the interval inside the series' first..last sample, divided
  by that part's length. Computed with cumulative integrals and as-of joins.
  Memory series (``GPU 0 memory allocated (bytes)``, from Kineto ``[memory]`` events) are
  not GPU metrics and are left out: ``analyze memory`` reads them.
- ``cupti_range``: Kineto's CUPTI range-profiler events (source category
  ``cuda_profiler_range``, one interval per kernel, the counter values in ``args``).

Main table, per rank, kernel name, counter and source: ``kernels`` (instances with a
value), ``samples`` (gpu_metrics: samples whose timestamp lies in an instance, summed;
cupti_range: instances), ``mean`` (gpu_metrics: time-weighted over all instances, i.e.
sum of integrals / sum of covered ns; cupti_range: arithmetic mean per instance), in the
counter's own unit.

Extra table ``bound`` (gpu_metrics only), per rank and kernel name: ``compute_pct`` = the
largest mean among counters matching ``compute_counters``; ``memory_pct`` = the sum of the
means of counters matching ``memory_counters`` (DRAM read + write share one peak);
``bound``: with r_c = compute_pct / compute_threshold and r_m = memory_pct /
memory_threshold, ``compute`` if r_c >= 1 and r_c >= r_m, ``memory`` if r_m >= 1 and
r_m > r_c, ``latency`` if both are known and below 1, null otherwise.

Differs from HTA: HTA (``get_counter_data_with_operators``) only reads CUPTI range events,
pairs them with ``cudaLaunchKernel`` calls by order and returns raw per-kernel values with
the op stack; it has no sampled metrics and no classification.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.base import Param, Result
from traceatlas.analysis.requirements import DEVICE_WORK
from traceatlas.io.kineto_memory import MEMORY_SERIES

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

CUPTI_RANGE = "cuda_profiler_range"
SERIES = ["rank", "track_id", "counter"]
KEYS = ["rank", "kernel", "counter", "source"]


class Counters:
    """Per kernel means of device counters; compute/memory/latency-bound classification."""

    name = "counters"
    description = "Device counters per kernel (GPU metrics, CUPTI range profiler), bound class"
    params = (
        Param("compute_counters", str, r"(?i)^(sms? active|sm issue|tensor active)",
              "regex of the counters giving compute utilisation (%)"),
        Param("memory_counters", str, r"(?i)^dram (read|write)",
              "regex of the counters giving DRAM bandwidth utilisation (%, summed)"),
        Param("compute_threshold", float, 50.0, "compute_pct at or above: compute-bound (%)",
              minimum=0.0, maximum=100.0),
        Param("memory_threshold", float, 50.0, "memory_pct at or above: memory-bound (%)",
              minimum=0.0, maximum=100.0),
    )
    requires = ("counters",)
    partition = "rank"
    """Per rank: results concatenate (``analysis.partitioned``)."""
    """Counter samples or CUPTI range events (``requirements.REQUIREMENTS``)."""

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """Per kernel name and counter: kernels, samples, mean; extra table ``bound``."""
        import polars as pl

        cupti = _cupti(trace)
        metrics = _gpu_metrics(trace)
        table = pl.concat([metrics, cupti]).sort(KEYS)
        notes = []
        if metrics.height == 0 and cupti.height == 0:
            notes.append("no counter sample falls inside device activity on its device")
        return Result(table, extra={"bound": _bound(metrics, params)}, notes=notes)


def _gpu_metrics(trace: Trace) -> pl.DataFrame:
    import polars as pl

    tracks = trace.tracks.filter(
        (pl.col("kind").cast(pl.String) == "counter") & (pl.col("device") >= 0)
    ).select("rank", "track_id", "device")
    by = pl.col("ts_ns").shift(-1).over(SERIES) - pl.col("ts_ns")
    samples = (
        trace.counters.join(tracks, on=["rank", "track_id"])
        .select("rank", "track_id", "device", pl.col("name").cast(pl.String).alias("counter"),
                "ts_ns", "value")
        .filter(pl.col("value").is_not_null()
                & ~pl.col("counter").str.contains(MEMORY_SERIES))
        .sort([*SERIES, "ts_ns"])
        .with_columns(seg=(pl.col("value") * by).fill_null(0.0))
        .with_columns(F=(pl.col("seg").cum_sum() - pl.col("seg")).over(SERIES),
                      idx=pl.int_range(pl.len(), dtype=pl.Int64).over(SERIES))
        .collect()
    )
    if samples.height == 0:
        return _empty()
    series = samples.group_by([*SERIES, "device"]).agg(
        t0=pl.col("ts_ns").min(), tn=pl.col("ts_ns").max())
    cat = pl.col("category").cast(pl.String)
    kernels = (
        trace.intervals.filter(cat.is_in(DEVICE_WORK) & pl.col("device").is_not_null())
        .select("rank", "device", "start_ns", "end_ns", pl.col("name").cast(pl.String)
                .alias("kernel"))
        .join(series.lazy(), on=["rank", "device"])
        .with_columns(a=pl.col("start_ns").clip(pl.col("t0"), pl.col("tn")),
                      b=pl.col("end_ns").clip(pl.col("t0"), pl.col("tn")))
        .filter(pl.col("b") > pl.col("a"))
        .with_row_index("qid")
    )
    right = samples.lazy().select(*SERIES, "ts_ns", "value", "F", "idx")
    per_instance = (
        kernels.select("qid", *SERIES, "kernel", "a", "b", "start_ns", "end_ns")
        .join(_at(kernels, right, "a", exact=True), on="qid")
        .join(_at(kernels, right, "b", exact=True), on="qid")
        .join(_at(kernels, right, "start_ns", exact=False), on="qid")
        .join(_at(kernels, right, "end_ns", exact=False), on="qid")
        .with_columns(integral=pl.col("F_b") - pl.col("F_a"),
                      covered=pl.col("b") - pl.col("a"),
                      samples=pl.col("n_end_ns") - pl.col("n_start_ns"))
    )
    return (
        per_instance.group_by(["rank", "kernel", "counter"]).agg(
            kernels=pl.len().cast(pl.Int64), samples=pl.col("samples").sum().cast(pl.Int64),
            mean=pl.col("integral").sum() / pl.col("covered").sum())
        .select("rank", "kernel", "counter", pl.lit("gpu_metrics").alias("source"),
                "kernels", "samples", "mean")
        .collect()
    )


def _at(points: pl.LazyFrame, series: pl.LazyFrame, col: str, *, exact: bool) -> pl.LazyFrame:
    """Per ``qid``: with ``exact``, ``F_<col>`` = integral of the series from its first
    sample to ``col``; without, ``n_<col>`` = number of samples before ``col``."""
    import polars as pl

    joined = points.select("qid", *SERIES, col).sort(col).join_asof(
        series.sort("ts_ns"), left_on=col, right_on="ts_ns", by=SERIES, strategy="backward",
        allow_exact_matches=exact, check_sortedness=False,
    )
    if exact:
        value = pl.col("F") + pl.col("value") * (pl.col(col) - pl.col("ts_ns"))
        return joined.select("qid", value.alias(f"F_{col}"))
    return joined.select("qid", (pl.col("idx") + 1).fill_null(0).alias(f"n_{col}"))


def _cupti(trace: Trace) -> pl.DataFrame:
    import duckdb
    import polars as pl

    ranges = (
        trace.intervals.filter(pl.col("source_category").cast(pl.String) == CUPTI_RANGE)
        .select("rank", pl.col("name").cast(pl.String), "args")
        .filter(pl.col("args").is_not_null())
        .collect()
    )
    if ranges.height == 0:
        return _empty()
    con = duckdb.connect(":memory:")
    try:
        con.register("ranges", ranges.to_arrow())
        values = pl.from_arrow(con.sql(
            "SELECT rank, name AS kernel, key AS counter, TRY_CAST(json_extract_string("
            "args, '$.\"' || replace(key, '\"', '') || '\"') AS DOUBLE) AS value "
            "FROM (SELECT rank, name, args, unnest(json_keys(args)) AS key FROM ranges)"
        ).to_arrow_table())
    finally:
        con.close()
    assert isinstance(values, pl.DataFrame)
    return (
        values.filter(pl.col("value").is_not_null())
        .group_by("rank", "kernel", "counter").agg(
            kernels=pl.len().cast(pl.Int64), samples=pl.len().cast(pl.Int64),
            mean=pl.col("value").mean())
        .select(pl.col("rank").cast(pl.Int32), "kernel", "counter",
                pl.lit("cupti_range").alias("source"), "kernels", "samples", "mean")
    )


def _empty() -> pl.DataFrame:
    import polars as pl

    return pl.DataFrame(schema={"rank": pl.Int32, "kernel": pl.String, "counter": pl.String,
                                "source": pl.String, "kernels": pl.Int64,
                                "samples": pl.Int64, "mean": pl.Float64})


def _bound(metrics: pl.DataFrame, params: Mapping[str, Any]) -> pl.DataFrame:
    import polars as pl

    counter = pl.col("counter")
    compute = pl.col("mean").filter(counter.str.contains(str(params["compute_counters"])))
    memory = pl.col("mean").filter(counter.str.contains(str(params["memory_counters"])))
    has_memory = counter.str.contains(str(params["memory_counters"])).any()
    frame = metrics.group_by("rank", "kernel").agg(
        compute_pct=compute.max(),
        memory_pct=pl.when(has_memory).then(memory.sum()),
    )
    rc = pl.col("compute_pct") / float(params["compute_threshold"])
    rm = pl.col("memory_pct") / float(params["memory_threshold"])
    bound = (
        pl.when((rc >= 1) & ((rc >= rm) | rm.is_null())).then(pl.lit("compute"))
        .when(rm >= 1).then(pl.lit("memory"))
        .when((rc < 1) & (rm < 1)).then(pl.lit("latency"))
    )
    return frame.with_columns(bound=bound).sort("rank", "kernel")
