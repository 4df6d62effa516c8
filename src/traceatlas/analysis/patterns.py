"""``patterns``: the most frequent device kernel sequences launched under an op.

Definitions:

- Roots: host intervals of ``--param categories`` (default ``cpu_op,annotation,nvtx``)
  whose name matches the regex ``op`` (search, not full match; default empty: every op),
  keeping only the outermost matches: a match nested inside another match on the same
  thread is not a root of its own (with the default, the roots are the top-level ops).
- A root instance's sequence: the device activity (kernel, comm_kernel, memcpy, memset)
  whose launch (``runtime`` / ``driver`` call with a correlation id) starts inside the
  instance on its thread, ``start_ns <= launch.start_ns < end_ns``, linked by
  ``(rank, correlation)``, ordered by device start (then launch order).
- ``length`` = 0 (default): the pattern is the whole sequence of an instance. ``length``
  = n > 0: every run of n consecutive entries of a sequence (n-grams; an instance with
  fewer than n entries contributes none).

Main table, per rank, root op name and pattern: ``sequence`` (device names joined with
``' > '``), ``length`` (entries), ``count`` (occurrences), ``total_ns`` (sum over the
occurrences of the union of their device intervals, ns), ``mean_ns`` (total_ns / count,
integer ns). Sorted by count then total_ns, descending; ``top`` rows per rank (0 = all).

Differs from HTA (``get_frequent_cuda_kernel_sequences``): HTA matches ``operator_name``
as a substring, keeps the matches at the globally shallowest depth with at least
``min_pattern_len`` kernels, includes the op name in the pattern, and sums kernel
durations (and the CPU op duration). Here: regex; outermost per thread; unions instead of
sums; n-grams available; every rank, not one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.annotations import device_rows, launched_by, nesting_levels
from traceatlas.analysis.base import MAX_COUNT, MAX_NGRAM, Param, Result
from traceatlas.analysis.partitioned import concat_counts
from traceatlas.errors import InputError, MissingDataError
from traceatlas.ops.unions import union_ns

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

SEPARATOR = " > "
KEYS = ["rank", "op", "sequence", "length"]


class Patterns:
    """Frequent device kernel sequences launched under matching host ops."""

    name = "patterns"
    description = "Most frequent device kernel sequences launched under an op (regex)"
    params = (
        Param("op", str, "", "regex on op / annotation names (search); empty: top-level ops"),
        Param("length", int, 0, "n-gram length in kernels; 0: whole sequence per op "
              "instance (memory grows with length)", minimum=0, maximum=MAX_NGRAM),
        Param("top", int, 20, "rows per rank, most frequent first; 0: all",
              minimum=0, maximum=MAX_COUNT),
        Param("categories", str, "cpu_op,annotation,nvtx",
              "host categories of the ops, comma-separated"),
    )
    requires = ("device", "correlation")
    partition = "rank"
    """Per rank: results concatenate (``analysis.partitioned``)."""
    merge = staticmethod(concat_counts)

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """Per rank, op and pattern: count, total_ns, mean_ns."""
        import polars as pl

        length, top = int(params["length"]), int(params["top"])
        if length < 0 or top < 0:
            raise InputError("--param length/top", "must be >= 0")
        cats = [c.strip() for c in str(params["categories"]).split(",") if c.strip()]
        cat = pl.col("category")  # compared as stored (Categorical): no cast per row
        try:
            matching = (
                trace.intervals.filter(cat.is_in(cats))
                .select("rank", "track_id", "start_ns", "end_ns",
                        pl.col("name").cast(pl.String))
                .filter(pl.col("name").str.contains(str(params["op"])))
                .collect()
            )
        except pl.exceptions.ComputeError as exc:
            problem = " ".join(str(exc).split("This error occurred")[0].split())
            raise InputError("--param op", f"bad regex: {problem}") from None
        if matching.height == 0:
            raise MissingDataError(self.name, f"no {'/'.join(cats)} interval matches "
                                   f"op={params['op']!r}")
        roots = (nesting_levels(matching).filter(pl.col("level") == 0)
                 .drop("level").with_row_index("span_id"))
        device = device_rows(trace)
        entries = (
            launched_by(roots, trace, device)
            .join(device.lazy(), on="kid")
            .join(roots.lazy().select("span_id", pl.col("name").alias("op")), on="span_id")
            .sort("span_id", "start_ns", "correlation")
            .with_columns(pos=pl.int_range(pl.len()).over("span_id"))
        )
        occ = _whole(entries) if length == 0 else _ngrams(entries, length)
        table = (
            occ.group_by(KEYS).agg(count=pl.len(), total_ns=pl.col("busy_ns").sum())
            .with_columns(pl.col("count").cast(pl.Int64),
                          mean_ns=pl.col("total_ns") // pl.col("count"))
            .sort(["rank", "count", "total_ns", "sequence"],
                  descending=[False, True, True, False])
            .collect()
        )
        if top:
            table = table.group_by("rank", maintain_order=True).head(top)
        with_kernels = entries.select(pl.col("span_id").n_unique()).collect().item()
        notes = [f"{roots.height} op instances matched (outermost), {with_kernels} launched "
                 "device activity"]
        return Result(table, notes=notes)


def _whole(entries: pl.LazyFrame) -> pl.LazyFrame:
    """One occurrence per root instance: its whole sequence and busy time."""
    import polars as pl

    busy = union_ns(entries.select("span_id", "start_ns", "end_ns"), ["span_id"], "busy_ns")
    return (
        entries.group_by("span_id").agg(
            pl.col("rank").first(), pl.col("op").first(),
            pl.col("name").str.join(SEPARATOR).alias("sequence"),
            pl.len().cast(pl.Int64).alias("length"))
        .join(busy, on="span_id")
    )


def _ngrams(entries: pl.LazyFrame, n: int) -> pl.LazyFrame:
    """One occurrence per window of ``n`` consecutive entries of an instance."""
    import polars as pl

    shifted = entries.with_columns(
        [pl.col(c).shift(-j).over("span_id").alias(f"{c}_{j}")
         for j in range(n) for c in ("name", "start_ns", "end_ns")]
    ).filter(pl.col(f"name_{n - 1}").is_not_null()).with_row_index("wid")
    windows = shifted.select(
        "wid", "rank", "op", pl.lit(n, pl.Int64).alias("length"),
        pl.concat_str([f"name_{j}" for j in range(n)], separator=SEPARATOR).alias("sequence"))
    spans = pl.concat([
        shifted.select("wid", pl.col(f"start_ns_{j}").alias("start_ns"),
                       pl.col(f"end_ns_{j}").alias("end_ns"))
        for j in range(n)
    ])
    return windows.join(union_ns(spans, ["wid"], "busy_ns"), on="wid")
