"""The host context that launched each device activity, for the summary's device-time kinds.

A device activity (kernel, communication kernel, memcpy, memset) is linked to its launch
call (category ``runtime``/``driver``, same rank and ``correlation``; the first call when
a correlation repeats), and the launch call to the host intervals enclosing it on its
thread (``traceatlas.analysis.syncs`` finds them: one as-of lookup per nesting level):

- ``op``: the INNERMOST ``cpu_op`` enclosing the launch call, the op HTA and the
  TensorBoard plugin call the launching op (in Kineto traces it is the op whose
  ``External id`` the launch carries). The outermost op (``aten::linear`` around
  ``aten::addmm``) is not used: it would charge a module's every kernel to its wrapper;
- ``annotations``: every host annotation enclosing the launch call (categories
  ``annotation``, ``nvtx``, ``region``; ``ProfilerStep#N`` is a ``step``, not one),
  outermost first. An activity launched outside any annotation (a launch on the autograd
  backward thread, where ``record_function`` ranges of the forward thread do not reach)
  has none: it is left unattributed, never guessed from time overlap on another thread.

Activities whose launch is not in the trace (no ``correlation``, a launch dropped) have
null ``op`` and empty ``annotations``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

LAUNCH_CATEGORIES = ("runtime", "driver")
ANNOTATION_CATEGORIES = ("annotation", "nvtx", "region")


def launch_context(trace: Trace) -> pl.DataFrame:
    """Per launch call (``rank``, ``correlation``): ``op`` (innermost enclosing
    ``cpu_op`` name, null when none) and ``annotations`` (enclosing annotation names,
    outermost first; empty when none)."""
    import polars as pl

    from traceatlas.analysis.syncs import _ancestors

    cat = pl.col("category").cast(pl.String)
    calls = (trace.intervals
             .filter(cat.is_in(LAUNCH_CATEGORIES) & pl.col("correlation").is_not_null())
             .select("rank", "track_id", "start_ns", "end_ns", "depth", "correlation")
             .sort("rank", "correlation", "start_ns")
             .unique(["rank", "correlation"], keep="first", maintain_order=True)
             .collect().with_row_index("_id"))
    if calls.height == 0:
        return pl.DataFrame(schema={"rank": pl.Int32, "correlation": pl.Int64, "op": pl.String,
                                    "annotations": pl.List(pl.String)})
    anc = _ancestors(trace, calls)  # sorted by (_id, depth): outermost first
    acat = pl.col("acat")
    ctx = anc.group_by("_id").agg(
        pl.col("aname").filter(acat == "cpu_op").last().alias("op"),
        pl.col("aname").filter(acat.is_in(ANNOTATION_CATEGORIES)).alias("annotations"))
    return (calls.select("_id", "rank", "correlation")
            .join(ctx, on="_id", how="left")
            .select(pl.col("rank").cast(pl.Int32), pl.col("correlation").cast(pl.Int64),
                    "op", pl.col("annotations").fill_null(pl.lit([], pl.List(pl.String)))))
