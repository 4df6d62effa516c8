"""``steps``: per rank and iteration, the step window and where its time goes.

Markers: the ``step`` intervals (``ProfilerStep#N``; the number comes from the step
column) or, with ``marker=REGEX``, host intervals whose name matches (annotations, NVTX
ranges, ...); the step number is the regex's first group when it is an integer, else the
marker's ordinal on its rank (0, 1, ...). Markers of one number on one rank merge into
[first start, last end).

Step window (the TensorBoard profiler plugin's, ``step_parser.py``): a step starts at the
later of its marker start and the previous step's end, and ends at the later of its marker
end and the end of the last device activity (kernel, comm kernel, memcpy, memset) launched
inside it: launched = its runtime/driver launch (same ``correlation`` on the rank) starts
in [marker start, marker end). Windows of one rank never overlap.

Columns (ns): ``rank``, ``step``, ``start_ns``, ``end_ns``, ``dur_ns`` = end - start, and
the breakdown of ``dur_ns``, in priority order, each category taking the part of its
interval union (all tracks of the rank, clipped to the window) not taken by an earlier
one:

- ``kernel_ns``: device kernels, NCCL/RCCL communication kernels included;
- ``memcpy_ns``, ``memset_ns``: device memory activity;
- ``runtime_ns``: host runtime and driver API calls (``cudaLaunchKernel``, syncs, ...);
- ``dataloader_ns``: host intervals named ``enumerate(DataLoader)#....__next__``;
- ``cpu_exec_ns``: host operators (category ``cpu_op``, any host thread) not covered by
  the above. Annotations (``record_function``, NVTX), Python-function events and the step
  markers themselves do not count, as in the plugin;
- ``other_ns``: step time covered by none of the above.

The parts sum to ``dur_ns`` exactly. Differences from the TensorBoard plugin: communication
kernels count as kernel time (the plugin has a separate Communication column); a launch
belongs to a step when it starts inside the marker (the plugin wants it entirely inside);
the first step starts at its marker (the plugin may push it to the end of earlier
unattributed device work); trailing steps with few device events are kept (the plugin drops
them). HTA's ``get_profiler_steps`` only lists step numbers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.base import Param, Result
from traceatlas.analysis.requirements import DEVICE_WORK
from traceatlas.errors import InputError, MissingDataError
from traceatlas.model.schema import DEVICE_CATEGORIES

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

DATALOADER_RE = r"^enumerate\(DataLoader\)#.*\.__next__$"
"""Host intervals of DataLoader iteration (PyTorch names them this way)."""

PARTS: tuple[str, ...] = ("kernel", "memcpy", "memset", "runtime", "dataloader", "cpu_exec")
"""Breakdown categories in priority order; ``other`` is the rest of the window."""

COLUMNS: tuple[str, ...] = ("rank", "step", "start_ns", "end_ns", "dur_ns",
                            *(f"{p}_ns" for p in PARTS), "other_ns")


def _part_filters(loader_names: list[str] | None = None) -> list[pl.Expr]:
    """One row filter per entry of ``PARTS``. ``loader_names``: the distinct names that
    match ``DATALOADER_RE`` (``_loader_names``), so the regex runs once per name instead
    of once per row; None: the regex on every row."""
    import polars as pl

    cat = pl.col("category")  # compared as stored (Categorical): no cast per row
    host = ~cat.is_in(tuple(DEVICE_CATEGORIES))
    if loader_names is None:
        loader = host & pl.col("name").cast(pl.String).str.contains(DATALOADER_RE)
    else:
        loader = host & pl.col("name").is_in(loader_names)
    return [
        cat.is_in(("kernel", "comm_kernel")),
        cat == "memcpy",
        cat == "memset",
        cat.is_in(("runtime", "driver")),
        loader,
        cat == "cpu_op",
    ]


class Steps:
    """Per rank and step: window and time breakdown (kernel > memcpy > ... > other)."""

    name = "steps"
    description = ("Per rank and iteration: start, end, duration and its breakdown "
                   "(kernel, memcpy, memset, runtime, dataloader, cpu_exec, other)")
    params = (
        Param("marker", str, "", "regex on host interval names marking iterations (e.g. "
              "'^train_step (\\d+)$'); empty: the ProfilerStep#N step intervals"),
    )
    requires = ("intervals",)
    partition = "rank"
    """Per rank: results concatenate (``analysis.partitioned``)."""

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """Step windows per rank and their breakdown in priority order."""
        import polars as pl

        marker = str(params["marker"])
        markers = _markers(trace, marker).collect()
        if markers.height == 0:
            _no_markers(trace, marker)
        windows = _windows(trace, markers.lazy())
        table = _breakdown(trace, windows).select(COLUMNS).sort("rank", "step").collect()
        notes = []
        if marker:
            notes.append(f"steps marked by host intervals matching {marker!r}")
        if table.height and (table["dur_ns"] == 0).any():
            notes.append("some steps have zero duration (marker inside the previous step's "
                         "device tail)")
        return Result(table.with_columns(pl.col("step").cast(pl.Int64)), notes=notes)


def _no_markers(trace: Trace, marker: str) -> None:
    from traceatlas.analysis.registry import require

    if not marker:  # the default markers: the standard missing-data message
        require("steps", ("steps",), trace)
    raise MissingDataError(
        "steps", f"no host interval name matches --param marker={marker!r}"
        if marker else "this trace has no iteration markers (ProfilerStep#N)")


def _markers(trace: Trace, marker: str) -> pl.LazyFrame:
    """Columns rank, step, hs (marker start), he (marker end), one row per rank and step."""
    import polars as pl

    cat = pl.col("category")  # compared as stored (Categorical): no cast per row
    frame = trace.intervals
    if marker:
        try:
            pattern = re.compile(marker)
        except re.error as exc:
            raise InputError("--param marker", f"bad regex {marker!r}: {exc}") from None
        name = pl.col("name").cast(pl.String)
        rows = frame.filter(~cat.is_in(tuple(DEVICE_CATEGORIES))
                            & name.str.contains(marker))
        if pattern.groups:
            number = name.str.extract(marker, 1).cast(pl.Int64, strict=False)
        else:
            number = pl.lit(None, pl.Int64)
        rows = rows.select("rank", "start_ns", "end_ns", number.alias("step"))
    else:
        rows = frame.filter(cat == "step").select(
            "rank", "start_ns", "end_ns",
            pl.when(pl.col("step") >= 0).then(pl.col("step")).cast(pl.Int64).alias("step"))
    # Unnumbered markers (no group, or step -1): their ordinal on the rank.
    ordinal = pl.int_range(pl.len()).over("rank")
    rows = rows.sort("rank", "start_ns").with_columns(
        pl.when(pl.col("step").is_null().any().over("rank")).then(ordinal)
        .otherwise(pl.col("step")).alias("step"))
    return rows.group_by("rank", "step").agg(
        pl.col("start_ns").min().alias("hs"), pl.col("end_ns").max().alias("he"))


def _windows(trace: Trace, markers: pl.LazyFrame) -> pl.LazyFrame:
    """Step windows: columns rank, step, start_ns, end_ns (non-overlapping per rank)."""
    import polars as pl

    cat = pl.col("category")  # compared as stored (Categorical): no cast per row
    rows = trace.intervals.filter(pl.col("correlation").is_not_null())
    launches = (rows.filter(cat.is_in(("runtime", "driver")))
                .group_by("rank", "correlation").agg(pl.col("start_ns").min().alias("ls")))
    device = (rows.filter(cat.is_in(DEVICE_WORK)).select("rank", "correlation", "end_ns")
              .join(launches, on=["rank", "correlation"], how="inner")
              .sort("ls"))
    ordered = markers.sort("hs")
    # Each launch to the last marker starting at or before it, kept if inside the marker.
    owned = (device.join_asof(ordered, left_on="ls", right_on="hs", by="rank",
                              strategy="backward", check_sortedness=False)
             .filter(pl.col("hs").is_not_null() & (pl.col("ls") < pl.col("he")))
             .group_by("rank", "step").agg(pl.col("end_ns").max().alias("dev_end")))
    reach = pl.max_horizontal("he", "dev_end")
    return (
        markers.join(owned, on=["rank", "step"], how="left")
        .sort("rank", "hs", "step")
        .with_columns(end_ns=reach.cum_max().over("rank"))
        .with_columns(start_ns=pl.max_horizontal(
            "hs", pl.col("end_ns").shift(1).over("rank")))
        .select("rank", "step", "start_ns", "end_ns")
    )


def _breakdown(trace: Trace, windows: pl.LazyFrame) -> pl.LazyFrame:
    """Windows with dur_ns and the exclusive part of each category, plus other_ns.

    One sweep per rank instead of one union per category (``_sweep``): the intervals are
    read once (rank, start_ns, end_ns and their highest-priority category), the sweep runs
    on NumPy arrays.
    """
    import polars as pl

    win = windows.collect()
    flags = list(_part_filters(_loader_names(trace)))
    # Highest-priority part of each row (a DataLoader cpu_op is dataloader, not cpu_exec).
    part = pl.coalesce(*(pl.when(f).then(pl.lit(k, pl.Int8)) for k, f in enumerate(flags)))
    rows = (trace.intervals.join(win.lazy().select("rank").unique(), on="rank", how="semi")
            .select("rank", "start_ns", "end_ns", part.alias("k"))
            .filter(pl.col("k").is_not_null() & (pl.col("end_ns") > pl.col("start_ns")))
            .collect())
    parts = _sweep(rows, win)
    return (
        win.lazy().with_columns(dur_ns=pl.col("end_ns") - pl.col("start_ns"))
        .join(parts.lazy(), on=["rank", "step"], how="left")
        .with_columns(pl.col(f"{name}_ns").fill_null(0) for name in PARTS)
        .with_columns(other_ns=pl.col("dur_ns") - pl.sum_horizontal(
            f"{name}_ns" for name in PARTS))
    )


def _loader_names(trace: Trace) -> list[str]:
    """Distinct interval names matching ``DATALOADER_RE``."""
    import polars as pl

    names = trace.intervals.select(pl.col("name").unique()).collect()["name"]
    names = names.cast(pl.String).drop_nulls()
    return names.filter(names.str.contains(DATALOADER_RE)).to_list()


def _sweep(rows: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Per window (rank, step), the ns owned by each part: columns ``{part}_ns``.

    ``rows``: rank, start_ns, end_ns, k (index into ``PARTS``, end > start). ``windows``:
    rank, step, start_ns, end_ns, non-overlapping per rank. Per rank, every row adds +1 at
    its start and -1 at its end to the count of its part; window bounds are extra event
    times so no piece straddles a window; between two consecutive event times the time
    goes to the first part whose count is positive. Ties need no care: the pieces between
    equal times have zero length. A piece belongs to the window whose [start, end) holds
    its start time.
    """
    import numpy as np
    import polars as pl

    n_parts = len(PARTS)
    by_rank = rows.partition_by("rank", as_dict=True)
    frames = []
    for (rank,), win in windows.partition_by("rank", as_dict=True).items():
        ws = win["start_ns"].to_numpy().astype(np.int64)
        we = win["end_ns"].to_numpy().astype(np.int64)
        sums = np.zeros((n_parts, len(ws)), dtype=np.int64)
        got = by_rank.get((rank,))
        if got is not None and got.height:
            start = got["start_ns"].to_numpy().astype(np.int64)
            end = got["end_ns"].to_numpy().astype(np.int64)
            kind = got["k"].to_numpy().astype(np.int8)
            ts = np.concatenate([start, end, ws, we])
            ks = np.concatenate([kind, kind, np.full(2 * len(ws), -1, np.int8)])
            ds = np.concatenate([np.ones(len(start), np.int32), np.full(len(end), -1, np.int32),
                                 np.zeros(2 * len(ws), np.int32)])
            order = np.argsort(ts, kind="stable")
            ts, ks, ds = ts[order], ks[order], ds[order]
            owner = np.full(len(ts), -1, np.int8)
            wide = len(ts) >= 2**31     # counts fit int32 otherwise (and it is faster)
            for k in range(n_parts - 1, -1, -1):
                step_d = np.where(ks == k, ds, 0)
                count = np.cumsum(step_d.astype(np.int64)) if wide else np.cumsum(
                    step_d, dtype=np.int32)
                owner[count > 0] = k
            length = np.diff(ts)        # piece i: [ts[i], ts[i + 1])
            owner = owner[:-1]
            # Pieces in window j: those starting in [ws[j], we[j]) (ts is sorted).
            lo = np.searchsorted(ts[:-1], ws, side="left")
            hi = np.searchsorted(ts[:-1], we, side="left")
            window = np.full(len(length), -1, np.int64)
            for j in range(len(ws)):
                window[lo[j]:hi[j]] = j
            keep = (owner >= 0) & (window >= 0)
            np.add.at(sums, (owner[keep], window[keep]), length[keep])
        frames.append(pl.DataFrame(
            {"rank": win["rank"], "step": win["step"],
             **{f"{name}_ns": pl.Series(sums[k], dtype=pl.Int64)
                for k, name in enumerate(PARTS)}}))
    return pl.concat(frames) if frames else pl.DataFrame(
        schema={"rank": windows.schema["rank"], "step": windows.schema["step"],
                **{f"{name}_ns": pl.Int64 for name in PARTS}})
