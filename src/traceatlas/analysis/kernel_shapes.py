"""The input shapes of the op that launched each kernel (``record_shapes`` traces).

A kernel is linked to its launch call (``runtime``/``driver``, same rank and
``correlation``), the launch to its op through the ``External id`` Kineto writes on
both (``cpu_op`` with the same ``external_id``; a kernel that carries an
``External id`` itself, as older Kineto wrote, uses its own when the launch has none),
and the op's ``Input Dims`` arg (the shapes of its inputs, as written in the trace) is
the kernel's ``shape``. Null when the trace has no shapes (``record_shapes`` off, Nsight
Systems, OTF2) or the chain breaks (a kernel with no launch, a launch outside any op).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

LAUNCH_CATEGORIES = ("runtime", "driver")
INPUT_DIMS = r'"Input Dims"\s*:\s*(\[(?:[^\[\]]|\[(?:[^\[\]]|\[[^\[\]]*\])*\])*\])'
"""``"Input Dims": [...]`` with lists nested up to three deep (tensor lists), as text."""


def with_op(intervals: pl.LazyFrame, kernels: pl.LazyFrame,
            column: str = "op_external_id") -> pl.LazyFrame:
    """``kernels`` (with ``rank``, ``correlation``, ``external_id``) plus ``column``: the
    ``external_id`` of the op that launched each kernel (through its launch call), or
    null. The op itself is the ``cpu_op`` row of that rank and ``external_id``."""
    import polars as pl

    cat = pl.col("category")  # compared as stored (Categorical): no cast per row
    launches = (intervals.filter(cat.is_in(LAUNCH_CATEGORIES)
                                 & pl.col("correlation").is_not_null()
                                 & pl.col("external_id").is_not_null())
                .select("rank", "correlation", pl.col("external_id").alias(column))
                .unique(["rank", "correlation"], keep="first"))
    return kernels.join(launches, on=["rank", "correlation"], how="left").with_columns(
        pl.coalesce(column, "external_id").alias(column))


def with_shapes(intervals: pl.LazyFrame, kernels: pl.LazyFrame) -> pl.LazyFrame:
    """``kernels`` (with ``rank``, ``correlation``, ``external_id``) plus ``shape``:
    the launching op's ``Input Dims`` text, or null."""
    import polars as pl

    cat = pl.col("category")  # compared as stored (Categorical): no cast per row
    linked = with_op(intervals, kernels, "_op")
    ops = (intervals.filter((cat == "cpu_op") & pl.col("external_id").is_not_null())
           .select("rank", pl.col("external_id").alias("_op"), "args")
           .join(linked.select("rank", "_op").unique(), on=["rank", "_op"], how="semi")
           .select("rank", "_op", shape=pl.col("args").str.extract(INPUT_DIMS, 1))
           .unique(["rank", "_op"], keep="first"))
    return linked.join(ops, on=["rank", "_op"], how="left").drop("_op")
