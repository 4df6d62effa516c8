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

Granularity ``-p by=``: every (instance, counter) first gets a value
(``counters_instances``: gpu_metrics the time-weighted mean over the instance,
cupti_range the event's value), then rows are grouped per ``instance`` (one row each, no
grouping), ``kernel`` (name; the default), ``op`` (innermost ``cpu_op`` holding the
instance's launch on its thread; cupti_range: holding the range event's start), ``annotation``
(innermost ``annotation``/``nvtx`` span, same rule) or ``rank``; null op/annotation when
none holds it. Per group, counter and source: ``kernels`` (instances with a value),
``samples`` (gpu_metrics: samples whose timestamp lies in an instance, summed; cupti_range:
instances), ``mean`` (gpu_metrics: time-weighted over all instances, i.e. sum of integrals
/ sum of covered ns; cupti_range: arithmetic mean per instance), and the variability across
instances of their values (unweighted): ``std`` (population, ddof 0), ``min``, ``max``,
``cv`` = std / unweighted mean. All in the counter's own unit (``cv`` a ratio).

Extra table ``gemm_tensor`` (nsys2prv's "tensor core usage per GEMM kernel"): one row per
rank, tensor counter (``tensor_counters`` regex) and source, one column per kernel name
matching ``gemm_kernels`` (gemm, nvjet, cutlass, xmma, cublas, wgmma, hmma, matmul,
case-insensitive), value = that kernel's per-kernel ``mean`` on that rank (null: the
kernel did not run there).

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

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from traceatlas.analysis import counters_instances as ci
from traceatlas.analysis.base import Param, Result
from traceatlas.analysis.partitioned import concat_counts

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

CUPTI_RANGE = ci.CUPTI_RANGE
GRANULARITY = ("instance", "kernel", "op", "annotation", "rank")
GROUP = {"kernel": ["kernel"], "op": ["op"], "annotation": ["annotation"], "rank": []}
"""Keys (after ``rank``, before ``counter``, ``source``) of each ``by``."""
ATTRIBUTION = {"op": ("cpu_op",), "annotation": ("annotation", "nvtx")}
"""Span categories an instance is attributed to (innermost holding its launch)."""
GEMM_KERNELS = r"(?i)gemm|nvjet|cutlass|xmma|cublas|wgmma|hmma|matmul"
TENSOR_COUNTERS = r"(?i)^tensor (active|activity)|pipe_tensor"
GEMM_INDEX = ("rank", "counter", "source")


class Counters:
    """Device counters per instance, kernel, op, annotation or rank; bound class."""

    name = "counters"
    description = ("Device counters (GPU metrics, CUPTI range profiler) per instance, "
                   "kernel, op, annotation or rank; bound class; tensor use per GEMM kernel")
    params = (
        Param("by", str, "kernel", "granularity: instance, kernel, op (innermost cpu_op "
              "holding the launch), annotation (innermost record_function/NVTX range "
              "holding the launch) or rank", choices=GRANULARITY),
        Param("compute_counters", str, r"(?i)^(sms? active|sm issue|tensor active)",
              "regex of the counters giving compute utilisation (%)"),
        Param("memory_counters", str, r"(?i)^dram (read|write)",
              "regex of the counters giving DRAM bandwidth utilisation (%, summed)"),
        Param("compute_threshold", float, 50.0, "compute_pct at or above: compute-bound (%)",
              minimum=0.0, maximum=100.0),
        Param("memory_threshold", float, 50.0, "memory_pct at or above: memory-bound (%)",
              minimum=0.0, maximum=100.0),
        Param("gemm_kernels", str, GEMM_KERNELS,
              "regex of the GEMM kernel names (columns of the gemm_tensor table)"),
        Param("tensor_counters", str, TENSOR_COUNTERS,
              "regex of the tensor-core activity counters (gemm_tensor values)"),
    )
    requires = ("counters",)
    """Counter samples or CUPTI range events (``requirements.REQUIREMENTS``)."""
    partition = "rank"
    """Per rank: results concatenate (``analysis.partitioned``); ``gemm_tensor`` by
    column name, its kernel columns sorted (``merge``)."""

    @staticmethod
    def merge(partials: Sequence[Result], params: Mapping[str, Any]) -> Result:
        """``concat_counts`` of the per-rank results; ``gemm_tensor`` joined by column
        name (a GEMM kernel absent from a rank batch: null there)."""
        import polars as pl

        wide = [p.extra["gemm_tensor"] for p in partials if "gemm_tensor" in p.extra]
        rest = [Result(p.table, {k: v for k, v in p.extra.items() if k != "gemm_tensor"},
                       p.notes) for p in partials]
        merged = concat_counts(rest, params)
        if wide:
            frame = pl.concat(wide, how="diagonal_relaxed")
            kernels = sorted(c for c in frame.columns if c not in GEMM_INDEX)
            merged.extra["gemm_tensor"] = frame.select(*GEMM_INDEX, *kernels)
        return merged

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """Per ``by`` group and counter: kernels, samples, mean, std, min, max, cv; extra
        tables ``bound`` (per kernel) and ``gemm_tensor`` (ranks x GEMM kernels)."""
        import polars as pl

        rows = ci.instances(trace)
        by = str(params.get("by", "kernel"))
        notes = []
        if rows.height == 0:
            notes.append("no counter sample falls inside device activity on its device")
        per_kernel = aggregate(rows, GROUP["kernel"])
        extra = {"bound": _bound(per_kernel.filter(pl.col("source") == "gpu_metrics"), params),
                 "gemm_tensor": gemm_tensor(per_kernel, str(params["gemm_kernels"]),
                                            str(params["tensor_counters"]))}
        if by == "instance":
            table = rows.select("rank", "kernel", "counter", "source", "start_ns", "end_ns",
                                "covered_ns", "samples", pl.col("value").alias("mean")
                                ).sort("rank", "start_ns", "kernel", "counter", "source")
        elif by == "kernel":
            table = per_kernel
        else:
            if by in ATTRIBUTION:
                rows = ci.attribute(trace, rows, ATTRIBUTION[by], by)
                unattributed = rows.filter(pl.col(by).is_null())["iid"].n_unique()
                if unattributed and rows.height:
                    notes.append(f"{unattributed} instances were launched inside no "
                                 f"{' / '.join(ATTRIBUTION[by])} span (row with null {by})")
            table = aggregate(rows, GROUP[by])
        return Result(table, extra=extra, notes=notes)


def aggregate(rows: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Per rank, ``keys``, counter and source: ``kernels`` (instances), ``samples``
    (summed), ``mean`` (weighted by ``weight``: time-weighted for gpu_metrics, per instance
    for cupti_range), ``std`` (population, ddof 0), ``min``, ``max`` of the instances'
    values and ``cv`` = std / their unweighted mean (null when that mean is 0)."""
    import polars as pl

    group = ["rank", *keys, "counter", "source"]
    value = pl.col("value")
    plain = value.mean()
    return (
        rows.group_by(group).agg(
            kernels=pl.len().cast(pl.Int64), samples=pl.col("samples").sum().cast(pl.Int64),
            mean=(value * pl.col("weight")).sum() / pl.col("weight").sum(),
            std=value.std(ddof=0), min=value.min(), max=value.max(),
            cv=pl.when(plain != 0).then(value.std(ddof=0) / plain.abs()))
        .sort(group, nulls_last=True)
    )


def gemm_tensor(per_kernel: pl.DataFrame, gemm: str, tensor: str) -> pl.DataFrame:
    """nsys2prv's "tensor core usage per GEMM kernel": one row per rank and tensor counter,
    and source, one column per GEMM kernel name (sorted), value = the kernel's ``mean``."""
    import polars as pl

    picked = per_kernel.filter(pl.col("kernel").str.contains(gemm)
                               & pl.col("counter").str.contains(tensor))
    if picked.height == 0:
        return pl.DataFrame(schema={"rank": pl.Int32, "counter": pl.String, "source": pl.String})
    kernels = sorted(set(picked["kernel"].to_list()))
    wide = picked.pivot(on="kernel", index=["rank", "counter", "source"], values="mean",
                        aggregate_function="first").sort("rank", "counter", "source")
    return wide.select("rank", "counter", "source", *kernels)


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
