"""``annotations``: time per user annotation, host and device, through the correlation chain.

Annotations are intervals of the categories in ``--param categories`` (default all three):
``annotation`` (PyTorch ``record_function`` / ``user_annotation``), ``nvtx`` (NVTX ranges;
the domain is ``args.domain``, null for the default domain) and ``gpu_annotation``
(Kineto's ``gpu_user_annotation``, a device-side span).

Main table, one row per rank, category, domain and annotation name:

- ``count``: instances of the annotation.
- ``host_ns``: union of the annotation's own intervals (ns; null for ``gpu_annotation``,
  which has no host side).
- ``device_ns``: union of the device activity (kernel, comm_kernel, memcpy, memset)
  attributed to the annotation (ns). Host annotations: the device rows whose launch (a
  ``runtime`` / ``driver`` call with a correlation id) starts inside an instance on the
  same host thread, ``ann.start_ns <= launch.start_ns < ann.end_ns``, linked launch ->
  device by ``(rank, correlation)``. ``gpu_annotation``: the device rows on the same
  stream starting inside an instance.
- ``kernels``: number of device rows attributed (each row once per annotation name).

Extra table ``kernels``: every device activity row (rank, correlation, category, name,
start_ns, dur_ns) with the ``innermost`` and ``outermost`` host annotation (annotation /
nvtx) enclosing its launch (latest-starting and earliest-starting enclosing instance; at
equal starts the shorter is inner; of instances over the same interval, the later in store
order); null when the launch is in none.

Intervals joins are as-of joins per annotation nesting level (annotations nest on a
thread, so the instances of one level are disjoint): no pairwise range join.

Differs from HTA: HTA has no per-annotation analysis; its call graph attributes a kernel to
the CPU op stack of its launch (``get_counter_data_with_operators``: top/bottom-level op).
Here only annotations count, device time is an interval union (never a sum), and launches
on another thread than the annotation (e.g. autograd's backward thread) are not attributed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.base import Param, Result
from traceatlas.analysis.partitioned import concat_counts
from traceatlas.analysis.requirements import DEVICE_WORK
from traceatlas.errors import InputError, MissingDataError
from traceatlas.ops.nesting import nesting_depth, sort_for_nesting
from traceatlas.ops.unions import union_ns

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

HOST_ANNOTATIONS = ("annotation", "nvtx")
"""Annotation categories on host threads (attributed through launches)."""
ANNOTATION_CATEGORIES = (*HOST_ANNOTATIONS, "gpu_annotation")
LAUNCHES = ("runtime", "driver")
"""Host categories of launch calls (linked to device activity by correlation)."""
KEYS = ["rank", "category", "domain", "name"]


def nesting_levels(spans: pl.DataFrame) -> pl.DataFrame:
    """``spans`` (rank, track_id, start_ns, end_ns, ...) sorted for nesting, with
    ``level``: stack depth among these spans only, per (rank, track_id)."""
    import polars as pl

    if spans.height == 0:
        return spans.with_columns(level=pl.lit(0, pl.Int64))
    key = (spans["rank"].cast(pl.Int64) * (1 << 32) + spans["track_id"].cast(pl.Int64)
           ).to_numpy()
    start, end = spans["start_ns"].to_numpy(), spans["end_ns"].to_numpy()
    order = sort_for_nesting(key, start, end)
    level = nesting_depth(key[order], start[order], end[order])
    return spans[order].with_columns(level=pl.Series(level, dtype=pl.Int64))


def spans_containing(spans: pl.DataFrame, points: pl.LazyFrame) -> pl.LazyFrame:
    """Pairs (``points`` columns + ``span_id``) for every span holding a point.

    ``spans``: rank, track_id, start_ns, end_ns, span_id. ``points``: rank, track_id,
    ``at_ns`` and any other columns. A span holds a point on the same (rank, track_id)
    when ``start_ns <= at_ns < end_ns``. One as-of join per nesting level; a point held by
    no span of a level is held by none deeper (nested spans lie inside their parents).
    """
    import polars as pl

    levelled = nesting_levels(spans.filter(pl.col("end_ns") > pl.col("start_ns")))
    right = levelled.lazy().select("rank", "track_id", "start_ns", "end_ns", "span_id", "level")
    pending = points.sort("at_ns")
    found: list[pl.LazyFrame] = []
    top = int(levelled.select(pl.col("level").max()).item()) if levelled.height else -1
    for level in range(top + 1):
        side = right.filter(pl.col("level") == level).drop("level").sort("start_ns")
        joined = pending.join_asof(
            side, left_on="at_ns", right_on="start_ns", by=["rank", "track_id"],
            strategy="backward", check_sortedness=False,
        ).filter(pl.col("span_id").is_not_null() & (pl.col("at_ns") < pl.col("end_ns")))
        joined = joined.drop("start_ns", "end_ns").collect().lazy()
        found.append(joined)
        pending = joined.drop("span_id")
    if not found:
        return points.with_columns(span_id=pl.lit(None, pl.UInt32)).head(0)
    return pl.concat(found)


def _categories(text: str) -> list[str]:
    cats = [c.strip() for c in text.split(",") if c.strip()]
    bad = [c for c in cats if c not in ANNOTATION_CATEGORIES]
    if bad or not cats:
        raise InputError("--param categories", f"{bad[0] if bad else text!r} is not one of "
                         f"{', '.join(ANNOTATION_CATEGORIES)}")
    return cats


def device_rows(trace: Trace) -> pl.DataFrame:
    """Device activity rows with a row id ``kid``."""
    import polars as pl

    return (
        trace.intervals.filter(pl.col("category").is_in(DEVICE_WORK))
        .select("rank", "track_id", "start_ns", "end_ns", "dur_ns", "correlation",
                pl.col("category").cast(pl.String), pl.col("name").cast(pl.String))
        .collect()
        .with_row_index("kid")
    )


def launch_points(trace: Trace) -> pl.LazyFrame:
    """Host launches with a correlation id: rank, track_id, at_ns (launch start), correlation."""
    import polars as pl

    return trace.intervals.filter(
        pl.col("category").is_in(LAUNCHES) & pl.col("correlation").is_not_null()
    ).select("rank", "track_id", pl.col("start_ns").alias("at_ns"), "correlation")


def launched_by(spans: pl.DataFrame, trace: Trace, device: pl.DataFrame) -> pl.LazyFrame:
    """(kid, span_id) for each device row whose launch starts inside a host span."""
    pairs = spans_containing(spans, launch_points(trace))
    return pairs.join(device.lazy().select("rank", "correlation", "kid"),
                      on=["rank", "correlation"]).select("kid", "span_id")


class Annotations:
    """Host and device time per user annotation (record_function, NVTX, gpu annotation)."""

    name = "annotations"
    description = "Host and device time per user annotation (record_function, NVTX ranges)"
    params = (Param("categories", str, ",".join(ANNOTATION_CATEGORIES),
                    "annotation categories, comma-separated: annotation (record_function), "
                    "nvtx, gpu_annotation"),)
    requires = ("intervals",)
    partition = "rank"
    """Per rank: results concatenate (``analysis.partitioned``)."""
    merge = staticmethod(concat_counts)

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """Per annotation: count, host_ns, device_ns, kernels; extra table ``kernels``."""
        import polars as pl

        cats = _categories(str(params["categories"]))
        anns = _annotation_rows(trace, cats)
        if anns.height == 0:
            raise MissingDataError(self.name, "this trace has no annotations of categories "
                                   f"{', '.join(cats)} (record_function, NVTX ranges, "
                                   "gpu_user_annotation)")
        device = device_rows(trace)
        host = anns.filter(pl.col("category").is_in(HOST_ANNOTATIONS))
        host_pairs = launched_by(host, trace, device).collect()
        gpu_points = device.lazy().select("rank", "track_id", pl.col("start_ns").alias("at_ns"),
                                          "kid")
        gpu_pairs = spans_containing(anns.filter(pl.col("category") == "gpu_annotation"),
                                     gpu_points).select("kid", "span_id").collect()
        pairs = pl.concat([host_pairs, gpu_pairs])
        table = _table(anns, device, pairs)
        kernels = _kernels(anns, device, host_pairs)
        notes = [f"{kernels['innermost'].null_count()} of {kernels.height} device rows were "
                 "launched inside no host annotation"] if host.height and device.height else []
        return Result(table, extra={"kernels": kernels}, notes=notes)


def _annotation_rows(trace: Trace, cats: list[str]) -> pl.DataFrame:
    """Annotation intervals of ``cats`` with ``span_id`` (row number in store order) and
    ``domain`` (``args.domain`` of nvtx rows, '' otherwise). ``args`` is read for the
    nvtx rows only, by a second scan of the same filter (same rows, same order)."""
    import polars as pl

    in_cats = pl.col("category").is_in(cats)
    anns = (
        trace.intervals.filter(in_cats)
        .select("rank", "track_id", "start_ns", "end_ns", pl.col("category").cast(pl.String),
                pl.col("name").cast(pl.String))
        .collect()
    )
    is_nvtx = (anns["category"] == "nvtx").fill_null(value=False)
    domain = pl.Series("domain", [""] * anns.height, dtype=pl.String)
    if is_nvtx.any():
        found = (trace.intervals.filter(in_cats & (pl.col("category") == "nvtx"))
                 .select(pl.col("args").str.json_path_match("$.domain").fill_null(""))
                 .collect().to_series())
        if found.len() != int(is_nvtx.sum()):  # the store changed between the two reads
            raise InputError(str(trace.path), "the intervals changed while being read")
        domain = domain.scatter(is_nvtx.arg_true(), found)
    return (anns.insert_column(5, domain).select("rank", "track_id", "start_ns", "end_ns",
                                                  "category", "domain", "name")
            .with_row_index("span_id"))


def _table(anns: pl.DataFrame, device: pl.DataFrame, pairs: pl.DataFrame) -> pl.DataFrame:
    """Per annotation (``KEYS``): count, host and device unions, kernels. Spans carry an
    integer group id (``gid``) so the unions and the deduplication run on integers."""
    import polars as pl

    groups = anns.select(KEYS).unique(maintain_order=True).with_row_index("gid")
    keyed = anns.join(groups, on=KEYS, how="left", nulls_equal=True, maintain_order="left")
    attributed = (
        pairs.lazy().join(keyed.lazy().select("span_id", "gid"), on="span_id")
        .join(device.lazy().select("kid", "start_ns", "end_ns"), on="kid")
        .unique(["gid", "kid"])
    )
    host = keyed.lazy().filter(pl.col("category").is_in(HOST_ANNOTATIONS))
    frame = (
        keyed.lazy().group_by("gid").agg(count=pl.len())
        .join(groups.lazy(), on="gid")
        .join(union_ns(host, ["gid"], "host_ns"), on="gid", how="left")
        .join(union_ns(attributed, ["gid"], "device_ns"), on="gid", how="left")
        .join(attributed.group_by("gid").agg(kernels=pl.len()), on="gid", how="left")
    )
    return (
        frame.with_columns(pl.col("device_ns", "kernels").fill_null(0),
                           pl.col("domain").replace("", None))
        .select(*KEYS, pl.col("count").cast(pl.Int64), "host_ns", "device_ns",
                pl.col("kernels").cast(pl.Int64))
        .sort(["rank", "device_ns", "host_ns", "name"], descending=[False, True, True, False],
              nulls_last=True)
        .collect()
    )


def _kernels(anns: pl.DataFrame, device: pl.DataFrame, host_pairs: pl.DataFrame
             ) -> pl.DataFrame:
    """Every device row with the names of the innermost and outermost host annotation
    enclosing its launch (span ids chosen first, names looked up after). Instances over
    the same interval: the later in store order counts as the inner one."""
    import polars as pl

    spans = anns.lazy().select("span_id", "start_ns", "end_ns")
    ends = (
        host_pairs.lazy().join(spans, on="span_id")
        .sort(["kid", "start_ns", "end_ns", "span_id"], descending=[False, False, True, False])
        .group_by("kid", maintain_order=True).agg(_outer=pl.col("span_id").first(),
                             _inner=pl.col("span_id").last())
    )
    names = anns["name"]
    picked = ends.collect()
    ends_named = picked.select(
        "kid", innermost=names.gather(picked["_inner"]), outermost=names.gather(picked["_outer"]))
    return (
        device.lazy().join(ends_named.lazy(), on="kid", how="left")
        .select("rank", "correlation", "category", "name", "start_ns", "dur_ns",
                "innermost", "outermost")
        .sort("rank", "start_ns")
        .collect()
    )
