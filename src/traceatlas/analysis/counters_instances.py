"""Counter values per device-activity instance, and the op / annotation that launched it.

One row per (instance, counter): ``rank``, ``iid`` (instance id, unique per source),
``kernel``, ``counter``, ``source``, ``start_ns``, ``end_ns``, ``covered_ns``, ``samples``,
``value`` (the instance's mean, the counter's unit), ``weight`` and the attribution point
``track_id``/``at_ns`` (null when none).

- ``gpu_metrics``: ``value`` = time-weighted mean over the part of ``[start_ns, end_ns)``
  inside the series' first..last sample (sample-and-hold), ``covered_ns`` that part's
  length, ``weight`` = ``covered_ns``; ``samples`` = samples with a timestamp inside the
  instance. Attribution point: the launch call (``runtime``/``driver``, same rank and
  ``correlation``), its thread and start.
- ``cupti_range``: ``value`` = the range event's own value, ``covered_ns`` = its duration,
  ``weight`` = 1, ``samples`` = 1. Attribution point: the range event's own track and start.

``attribute`` adds the innermost span of the given categories (``cpu_op`` for ops;
``annotation``/``nvtx`` for annotations) holding the point on the same thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from traceatlas.analysis.annotations import launch_points, spans_containing
from traceatlas.analysis.requirements import DEVICE_WORK
from traceatlas.io.kineto_memory import MEMORY_SERIES

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

CUPTI_RANGE = "cuda_profiler_range"
SERIES = ["rank", "track_id", "counter"]
COLUMNS = ["rank", "iid", "kernel", "counter", "source", "start_ns", "end_ns", "covered_ns",
           "samples", "value", "weight", "track_id", "at_ns"]


def instances(trace: Trace) -> pl.DataFrame:
    """Both sources' per-instance rows (``COLUMNS``)."""
    import polars as pl

    return pl.concat([gpu_metric_instances(trace), cupti_instances(trace)])


def empty() -> pl.DataFrame:
    """No instance rows, with the ``COLUMNS`` types."""
    import polars as pl

    i64, f64 = pl.Int64, pl.Float64
    return pl.DataFrame(schema={
        "rank": pl.Int32, "iid": i64, "kernel": pl.String, "counter": pl.String,
        "source": pl.String, "start_ns": i64, "end_ns": i64, "covered_ns": i64,
        "samples": i64, "value": f64, "weight": f64, "track_id": pl.Int32, "at_ns": i64})


def gpu_metric_instances(trace: Trace) -> pl.DataFrame:
    """Per device-activity row and GPU metric: the time-weighted mean (see module doc)."""
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
        return empty()
    series = samples.group_by([*SERIES, "device"]).agg(
        t0=pl.col("ts_ns").min(), tn=pl.col("ts_ns").max())
    cat = pl.col("category")  # compared as stored (Categorical): no cast per row
    device_rows = (
        trace.intervals.filter(cat.is_in(DEVICE_WORK) & pl.col("device").is_not_null())
        .select("rank", "device", "start_ns", "end_ns", "correlation",
                pl.col("name").cast(pl.String).alias("kernel"))
        .with_row_index("iid")
    )
    kernels = (
        device_rows.join(series.lazy(), on=["rank", "device"])
        .with_columns(a=pl.col("start_ns").clip(pl.col("t0"), pl.col("tn")),
                      b=pl.col("end_ns").clip(pl.col("t0"), pl.col("tn")))
        .filter(pl.col("b") > pl.col("a"))
        .with_row_index("qid")
    )
    right = samples.lazy().select(*SERIES, "ts_ns", "value", "F", "idx")
    launches = (launch_points(trace).unique(["rank", "correlation"], keep="first")
                .rename({"track_id": "launch_track"}))
    per_instance = (
        kernels.select("qid", "iid", *SERIES, "kernel", "a", "b", "start_ns", "end_ns",
                       "correlation")
        .join(_at(kernels, right, "a", exact=True), on="qid")
        .join(_at(kernels, right, "b", exact=True), on="qid")
        .join(_at(kernels, right, "start_ns", exact=False), on="qid")
        .join(_at(kernels, right, "end_ns", exact=False), on="qid")
        .join(launches, on=["rank", "correlation"], how="left")
        .with_columns(covered_ns=pl.col("b") - pl.col("a"))
        .select("rank", pl.col("iid").cast(pl.Int64), "kernel", "counter",
                pl.lit("gpu_metrics").alias("source"), "start_ns", "end_ns",
                pl.col("covered_ns").cast(pl.Int64),
                (pl.col("n_end_ns") - pl.col("n_start_ns")).cast(pl.Int64).alias("samples"),
                ((pl.col("F_b") - pl.col("F_a")) / pl.col("covered_ns")).alias("value"),
                pl.col("covered_ns").cast(pl.Float64).alias("weight"),
                pl.col("launch_track").cast(pl.Int32).alias("track_id"),
                pl.col("at_ns").cast(pl.Int64))
    )
    return per_instance.collect().cast(empty().schema)


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


def cupti_instances(trace: Trace) -> pl.DataFrame:
    """Per CUPTI range-profiler event and counter in its ``args`` (numeric values only)."""
    import duckdb
    import polars as pl

    ranges = (
        trace.intervals.filter(pl.col("source_category").cast(pl.String) == CUPTI_RANGE)
        .select("rank", "track_id", "start_ns", "end_ns", pl.col("name").cast(pl.String),
                "args")
        .filter(pl.col("args").is_not_null())
        .collect()
        .with_row_index("iid")
    )
    if ranges.height == 0:
        return empty()
    con = duckdb.connect(":memory:")
    try:
        con.register("ranges", ranges.to_arrow())
        values = pl.from_arrow(con.sql(
            "SELECT iid, key AS counter, TRY_CAST(json_extract_string("
            "args, '$.\"' || replace(key, '\"', '') || '\"') AS DOUBLE) AS value "
            "FROM (SELECT iid, args, unnest(json_keys(args)) AS key FROM ranges)"
        ).to_arrow_table())
    finally:
        con.close()
    assert isinstance(values, pl.DataFrame)
    return (
        values.filter(pl.col("value").is_not_null())
        .join(ranges.drop("args"), on="iid")
        .select("rank", pl.col("iid").cast(pl.Int64), pl.col("name").alias("kernel"),
                "counter", pl.lit("cupti_range").alias("source"), "start_ns", "end_ns",
                (pl.col("end_ns") - pl.col("start_ns")).alias("covered_ns"),
                pl.lit(1, pl.Int64).alias("samples"), "value",
                pl.lit(1.0).alias("weight"), "track_id", pl.col("start_ns").alias("at_ns"))
        .cast(empty().schema)
    )


def attribute(trace: Trace, rows: pl.DataFrame, categories: tuple[str, ...],
              column: str) -> pl.DataFrame:
    """``rows`` plus ``column``: the name of the innermost span of ``categories`` holding
    the row's attribution point (``track_id``, ``at_ns``) on its rank; null when none."""
    import polars as pl

    cat = pl.col("category")  # compared as stored (Categorical): no cast per row
    spans = (
        trace.intervals.filter(cat.is_in(categories))
        .select("rank", "track_id", "start_ns", "end_ns", pl.col("name").cast(pl.String))
        .collect()
        .with_row_index("span_id")
    )
    points = (rows.select("source", "iid", "rank", "track_id", "at_ns").unique()
              .filter(pl.col("at_ns").is_not_null()))
    if spans.height == 0 or points.height == 0:
        return rows.with_columns(pl.lit(None, pl.String).alias(column))
    pairs = spans_containing(spans.drop("name"), points.lazy()).collect()
    inner = (
        pairs.join(spans.select("span_id", "start_ns", "end_ns", "name"), on="span_id")
        .sort(["source", "iid", "start_ns", "end_ns"], descending=[False, False, False, True])
        .group_by("source", "iid").agg(pl.col("name").last().alias(column))
    )
    return rows.join(inner, on=["source", "iid"], how="left")
