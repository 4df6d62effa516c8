"""``memory``: where the device memory went (Kineto ``profile_memory=True`` traces).

Per rank and device (``CPU``, ``GPU 0``: the memory counter tracks' names), from the
``[memory]`` events (``analysis.memory_events``); bytes and ns throughout. Definitions:
docs/definitions.md, "memory".

Main table ``peaks``: ``peak_allocated_bytes`` (the largest ``Total Allocated``, as the
TensorBoard plugin's peak) and the first time it is reached (``peak_ns``), the ``step``,
``op`` (innermost operator) and ``annotation`` active then; ``reserved_at_peak_bytes`` and
``fragmentation_bytes`` (reserved minus allocated at the peak); ``peak_reserved_bytes`` and
its time; ``device_total_bytes`` (``deviceProperties`` totalGlobalMem, GPUs) and
``peak_share`` of it; ``live_at_peak_bytes`` (what the allocations live at the peak that the
trace saw add up to; the rest was allocated before the trace began); ``note`` (non-empty when
the curve was rebuilt from the running sum of ``Bytes``: relative to the trace start);
``peak_seq``: the peak event's index among the rank's ``[memory]`` events (0-based, time order).

Extra tables: ``holders`` (allocations live at the peak, by ``op`` and ``annotation``:
``live_bytes``, ``allocations``, ``share`` of the peak; ``op`` ``(before the trace)`` for
what was already allocated), ``by_op`` (the plugin's Memory View statistics per operator
name: ``calls``, ``self_alloc_count``, ``self_alloc_bytes``, ``self_increase_bytes``, the
same including children, ``increase_bytes``), ``unfreed`` (allocations never freed in the
trace, by op and annotation), ``steps`` (per step: allocated and reserved bytes at its
start, ``growth_bytes`` from the previous step start, ``allocations`` and ``alloc_bytes`` in
the step, ``carried_bytes`` allocated in the step and still live at its end, ``top_carrier``
the op carrying most), ``carried`` (the same carry per step and op), ``allocations``
(every event: ``time_ns``, ``addr``, signed ``bytes``, ``action`` alloc|free, ``op``,
``annotation``, ``step``, ``paired_time_ns`` of the matching free or allocation).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from traceatlas.analysis.base import Result
from traceatlas.analysis.memory_events import MemoryEvents, ancestors, events, pair
from traceatlas.errors import DataQualityWarning, MissingDataError

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

DEV = ["rank", "device_type", "device_id", "device"]
GPU_TYPES = (1, 6)
"""c10 device types whose size ``deviceProperties`` gives (CUDA, HIP)."""
BEFORE_TRACE = "(before the trace)"
REBUILT_NOTE = ("Total Allocated missing: rebuilt from the running sum of Bytes, relative to "
                "the trace start")


class Memory:
    """Peaks, holders at the peak, per-operator allocations, unfreed memory, step growth."""

    name = "memory"
    description = ("Device memory (profile_memory traces): peak allocated/reserved per device "
                   "with the op and annotation then, who holds memory at the peak, per-op "
                   "allocations (TensorBoard Memory View), unfreed memory, growth per step")
    params = ()
    requires = ("intervals",)
    partition = "rank"
    """Per rank (``analysis.partitioned``): every table is per rank and device; the
    batches' tables concatenate in rank order (``merge``)."""

    @staticmethod
    def merge(partials: Sequence[Result], params: Mapping[str, Any]) -> Result:
        """``concat``, the per-device rebuilt-curve notes first (as a whole run writes
        them), then the other notes once each."""
        from traceatlas.analysis.partitioned import concat

        merged = concat(partials)
        rebuilt = [n for n in merged.notes if n.endswith(REBUILT_NOTE)]
        merged.notes = rebuilt + [n for n in merged.notes if not n.endswith(REBUILT_NOTE)]
        return merged

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """``peaks`` table; ``holders``, ``by_op``, ``unfreed``, ``steps``, ``carried``,
        ``allocations``."""
        mem = events(trace)
        if mem.frame.height == 0:
            raise MissingDataError(self.name, "this trace has no [memory] events (record "
                                   "with torch.profiler's profile_memory=True)")
        notes = []
        for rank, dtype, dev in mem.rebuilt:
            text = f"rank {rank} device type {dtype} id {dev}: {REBUILT_NOTE}"
            warnings.warn(text, DataQualityWarning, stacklevel=2)
            notes.append(text)
        allocs = pair(mem.frame)
        if allocs.filter(allocs["addr"].is_null()).height:
            notes.append("some allocations have no Addr (PyTorch before 1.10): they cannot "
                         "be matched with their free and are left out of holders/unfreed")
        peaks = _peaks(trace, mem, allocs)
        steps, carried = _steps(trace, mem.frame, allocs)
        holders = _holders(peaks, allocs)
        return Result(_rank_seq(peaks, mem.frame), extra={
            "holders": holders, "by_op": by_op(trace, mem),
            "unfreed": _unfreed(allocs), "steps": steps, "carried": carried,
            "allocations": allocations(mem.frame, allocs)}, notes=notes)


def _device_totals(trace: Trace) -> pl.DataFrame:
    """(rank, device_id, device_total_bytes) from Kineto's ``deviceProperties``."""
    import polars as pl

    rows = []
    meta = (trace.metadata.filter(pl.col("key") == "deviceProperties")
            .select("rank", "value").collect())
    for rank, value in meta.iter_rows():
        try:
            props = json.loads(value)
        except ValueError:
            continue
        for prop in props if isinstance(props, list) else []:
            if isinstance(prop, dict) and isinstance(prop.get("totalGlobalMem"), int):
                rows.append((int(rank), int(prop.get("id", 0)), int(prop["totalGlobalMem"])))
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "device_id": pl.Int64,
                                      "device_total_bytes": pl.Int64}, orient="row")


def _live_at(allocs: pl.DataFrame, at: pl.DataFrame) -> pl.DataFrame:
    """Allocations live at each ``at`` row's ``peak_seq`` (same device): allocated at or
    before it, freed after it or never."""
    import polars as pl

    return (allocs.join(at.select(*DEV, "peak_seq"), on=DEV)
            .filter((pl.col("seq") <= pl.col("peak_seq"))
                    & (pl.col("free_seq").is_null() | (pl.col("free_seq") > pl.col("peak_seq"))))
            .filter(pl.col("addr").is_not_null()))


def _peaks(trace: Trace, mem: MemoryEvents, allocs: pl.DataFrame) -> pl.DataFrame:
    import polars as pl

    ev = mem.frame
    at_peak = (ev.filter(pl.col("total_allocated").is_not_null())
               .sort("total_allocated", "seq", descending=[True, False])
               .group_by(DEV, maintain_order=True).first()
               .select(*DEV, pl.col("seq").alias("peak_seq"),
                       pl.col("total_allocated").alias("peak_allocated_bytes"),
                       pl.col("ts_ns").alias("peak_ns"), "step", "op", "annotation",
                       pl.col("total_reserved").alias("reserved_at_peak_bytes"), "rebuilt"))
    reserved = (ev.filter(pl.col("total_reserved").is_not_null())
                .sort("total_reserved", "seq", descending=[True, False])
                .group_by(DEV, maintain_order=True).first()
                .select(*DEV, pl.col("total_reserved").alias("peak_reserved_bytes"),
                        pl.col("ts_ns").alias("peak_reserved_ns")))
    counts = ev.group_by(DEV).agg(pl.len().cast(pl.Int64).alias("events"))
    live = (_live_at(allocs, at_peak).group_by(DEV)
            .agg(pl.col("bytes").sum().alias("live_at_peak_bytes")))
    totals = _device_totals(trace)
    out = (at_peak.join(reserved, on=DEV, how="left").join(counts, on=DEV, how="left")
           .join(live, on=DEV, how="left")
           .join(totals, on=["rank", "device_id"], how="left")
           .with_columns(device_total_bytes=pl.when(pl.col("device_type").is_in(GPU_TYPES))
                         .then("device_total_bytes"))
           .with_columns(pl.col("live_at_peak_bytes").fill_null(0),
                         fragmentation_bytes=pl.col("reserved_at_peak_bytes")
                         - pl.col("peak_allocated_bytes"),
                         peak_share=pl.col("peak_allocated_bytes")
                         / pl.col("device_total_bytes"),
                         note=pl.when("rebuilt").then(pl.lit(REBUILT_NOTE)).otherwise(pl.lit(""))))
    return out.select(
        "rank", "device", "device_type", "device_id", "peak_allocated_bytes", "peak_ns",
        "step", "op", "annotation", "reserved_at_peak_bytes", "fragmentation_bytes",
        "peak_reserved_bytes", "peak_reserved_ns", "device_total_bytes", "peak_share",
        "live_at_peak_bytes", "events", "peak_seq", "note").sort("rank", "device_type",
                                                                  "device_id")


def _rank_seq(peaks: pl.DataFrame, frame: pl.DataFrame) -> pl.DataFrame:
    """``peak_seq`` counted from the rank's first memory event (0-based, time order), so a
    rank's row does not depend on the other ranks in the view (``partition = "rank"``)."""
    import polars as pl

    first = frame.group_by("rank").agg(pl.col("seq").min().alias("_first"))
    return (peaks.join(first, on="rank", how="left", maintain_order="left")
            .with_columns((pl.col("peak_seq") - pl.col("_first")).alias("peak_seq"))
            .drop("_first"))


def _holders(peaks: pl.DataFrame, allocs: pl.DataFrame) -> pl.DataFrame:
    """Live bytes at the peak by (op, annotation), largest first; the part allocated
    before the trace began as one row (not for rebuilt curves: they start at 0)."""
    import polars as pl

    live = (_live_at(allocs, peaks).group_by(*DEV, "op", "annotation")
            .agg(pl.col("bytes").sum().alias("live_bytes"),
                 pl.len().cast(pl.Int64).alias("allocations")))
    before = (peaks.filter(pl.col("note") == "")
              .select(*DEV, pl.lit(BEFORE_TRACE).alias("op"),
                      pl.lit(None, pl.String).alias("annotation"),
                      (pl.col("peak_allocated_bytes") - pl.col("live_at_peak_bytes"))
                      .alias("live_bytes"), pl.lit(None, pl.Int64).alias("allocations"))
              .filter(pl.col("live_bytes") != 0))
    both = pl.concat([live, before], how="vertical_relaxed")
    return (both.join(peaks.select(*DEV, "peak_allocated_bytes"), on=DEV)
            .with_columns(share=pl.col("live_bytes") / pl.col("peak_allocated_bytes"))
            .drop("peak_allocated_bytes")
            .sort(["rank", "device_type", "device_id", "live_bytes", "op", "annotation",
                   "allocations"], descending=[False, False, False, True, False, False, False],
                  nulls_last=True))


def by_op(trace: Trace, mem: MemoryEvents) -> pl.DataFrame:
    """The TensorBoard plugin's Memory View per operator name and device: an event
    belongs to the innermost tree node (operator, annotation or step) on its thread and
    counts only when that node is an operator (``self``); an operator's totals add its
    descendants' (``including children``); an operator that is the only child of one of
    the same name is merged into it, as the plugin does. ``calls``: operator nodes of that
    name (merged ones counted once)."""
    import polars as pl

    ev = mem.frame.filter(pl.col("node") >= 0)
    nodes = mem.nodes
    rows, anc = ancestors(ev["node"].to_numpy(), nodes["parent"].to_numpy())
    is_op = nodes["is_op"].to_numpy()
    keep = is_op[anc] if len(anc) else np.zeros(0, dtype=bool)
    cols = ev.select(*DEV, "bytes", "node")
    inc = cols[rows[keep]].with_columns(
        name=nodes["name"].gather(anc[keep]), is_self=pl.Series(anc[keep]) == cols[
            "node"].gather(rows[keep]))
    pos = pl.col("bytes") > 0
    stats = inc.group_by(*DEV, "name").agg(
        pl.col("bytes").filter(pos & pl.col("is_self")).len().cast(pl.Int64)
        .alias("self_alloc_count"),
        pl.col("bytes").filter(pos & pl.col("is_self")).sum().alias("self_alloc_bytes"),
        pl.col("bytes").filter(pl.col("is_self")).sum().alias("self_increase_bytes"),
        pl.col("bytes").filter(pos).len().cast(pl.Int64).alias("alloc_count"),
        pl.col("bytes").filter(pos).sum().alias("alloc_bytes"),
        pl.col("bytes").sum().alias("increase_bytes"))
    calls = (nodes.filter("is_op").group_by("rank", "name")
             .agg(pl.len().cast(pl.Int64).alias("calls")))
    table: pl.DataFrame = (
        stats.join(calls, on=["rank", "name"], how="left").rename({"name": "op"})
        .select(*DEV, "op", "calls", "self_alloc_count", "self_alloc_bytes",
                "self_increase_bytes", "alloc_count", "alloc_bytes", "increase_bytes")
        .sort(["rank", "device_type", "device_id", "alloc_bytes", "op"],
              descending=[False, False, False, True, False]))
    return table


def allocations(ev: pl.DataFrame, allocs: pl.DataFrame) -> pl.DataFrame:
    """One row per ``[memory]`` event in event order: ``time_ns``, ``addr``, ``bytes``
    (signed: negative for a free), ``action`` (``alloc`` bytes > 0, ``free`` bytes < 0,
    null for 0), ``op``, ``annotation``, ``step``; ``paired_time_ns`` the time of the
    matching free (for an allocation) or allocation (for a free), null when the trace holds
    none (freed after the trace, allocated before it, or no ``Addr``)."""
    import polars as pl

    pairs = allocs.filter(pl.col("free_seq").is_not_null())
    to_free = pairs.select("seq", pl.col("free_ns").alias("_to_free"))
    to_alloc = pairs.select(pl.col("free_seq").alias("seq"), pl.col("ts_ns").alias("_to_alloc"))
    return (ev.join(to_free, on="seq", how="left").join(to_alloc, on="seq", how="left")
            .sort("seq")
            .select(*DEV, pl.col("ts_ns").alias("time_ns"), "addr", "bytes",
                    pl.when(pl.col("bytes") > 0).then(pl.lit("alloc"))
                    .when(pl.col("bytes") < 0).then(pl.lit("free"))
                    .otherwise(pl.lit(None, pl.String)).alias("action"),
                    "op", "annotation", "step",
                    pl.coalesce("_to_free", "_to_alloc").alias("paired_time_ns")))


def _unfreed(allocs: pl.DataFrame) -> pl.DataFrame:
    """Allocations (with an address) not freed before the trace ends, by op/annotation."""
    import polars as pl

    return (allocs.filter(pl.col("addr").is_not_null() & pl.col("free_seq").is_null())
            .group_by(*DEV, "op", "annotation")
            .agg(pl.col("bytes").sum().alias("bytes"),
                 pl.len().cast(pl.Int64).alias("allocations"),
                 pl.col("ts_ns").min().alias("first_ns"), pl.col("ts_ns").max().alias("last_ns"))
            .sort(["rank", "device_type", "device_id", "bytes", "op"],
                  descending=[False, False, False, True, False], nulls_last=True))


def _value_at(ev: pl.DataFrame, spans: pl.DataFrame) -> pl.DataFrame:
    """Per (device, step): allocated and reserved bytes at the step's start (after the
    last event at or before it; before any event, the first event's value minus its
    bytes)."""
    import polars as pl

    last = (ev.sort("seq").group_by(*DEV, "ts_ns", maintain_order=True).last()
            .select(*DEV, "ts_ns", "total_allocated", "total_reserved").sort("ts_ns"))
    first = (ev.sort("seq").group_by(DEV, maintain_order=True).first()
             .select(*DEV, (pl.col("total_allocated") - pl.col("bytes")).alias("_a0")))
    grid = spans.join(first, on="rank").sort("start_ns")
    joined = grid.join_asof(last, left_on="start_ns", right_on="ts_ns", by=DEV,
                            strategy="backward", check_sortedness=False)
    return joined.select(
        *DEV, "step", "start_ns", "end_ns",
        pl.coalesce("total_allocated", "_a0").alias("allocated_bytes"),
        pl.col("total_reserved").alias("reserved_bytes"))


def _steps(trace: Trace, ev: pl.DataFrame, allocs: pl.DataFrame
           ) -> tuple[pl.DataFrame, pl.DataFrame]:
    import polars as pl

    spans = (trace.intervals.filter((pl.col("category") == "step")
                                    & (pl.col("step") >= 0))
             .group_by("rank", pl.col("step").cast(pl.Int64))
             .agg(pl.col("start_ns").min(), pl.col("end_ns").max()).collect())
    at = _value_at(ev, spans).sort(*DEV[:3], "step")
    at = at.with_columns(growth_bytes=pl.col("allocated_bytes")
                         - pl.col("allocated_bytes").shift(1).over(DEV))
    in_step = allocs.filter(pl.col("step").is_not_null()).join(
        spans.select("rank", "step", pl.col("end_ns").alias("_end")), on=["rank", "step"])
    made = in_step.group_by(*DEV, "step").agg(
        pl.len().cast(pl.Int64).alias("allocations"), pl.col("bytes").sum().alias("alloc_bytes"))
    still = pl.col("addr").is_not_null() & (pl.col("free_ns").is_null()
                                            | (pl.col("free_ns") >= pl.col("_end")))
    carried = (in_step.filter(still).group_by(*DEV, "step", "op")
               .agg(pl.col("bytes").sum().alias("carried_bytes"),
                    pl.len().cast(pl.Int64).alias("allocations"))
               .sort(["rank", "device_type", "device_id", "step", "carried_bytes", "op"],
                     descending=[False, False, False, False, True, False], nulls_last=True))
    per_step = carried.group_by(*DEV, "step", maintain_order=True).agg(
        pl.col("carried_bytes").sum(), pl.col("op").first().alias("top_carrier"))
    steps = (at.join(made, on=[*DEV, "step"], how="left")
             .join(per_step, on=[*DEV, "step"], how="left")
             .with_columns(pl.col("allocations", "alloc_bytes", "carried_bytes").fill_null(0))
             .select(*DEV, "step", "start_ns", "end_ns", "allocated_bytes", "reserved_bytes",
                     "growth_bytes", "allocations", "alloc_bytes", "carried_bytes",
                     "top_carrier")
             .sort("rank", "device_type", "device_id", "step"))
    return steps, carried
