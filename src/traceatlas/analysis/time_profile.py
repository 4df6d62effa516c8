"""``time_profile``: the run cut into ``bins`` equal time bins; per bin, the exclusive time
of each function summed over all ranks (Vampir's function summary over time, Pipit's
``Trace.time_profile``).

Bins: ``bins`` (default 50, Pipit's ``num_bins``) equal bins from the earliest to the
latest timestamp of the selection (interval starts and ends and instants, every rank and
category: Pipit's ``np.linspace(min, max, num_bins + 1)`` over all events), with integer
edges ``edge_k = first + floor(k * span / bins)``; bin k is ``[edge_k, edge_k+1)``.

Exclusive time in a bin (Pipit's per-bin ``inc_time_in_bin`` minus the children's): the
time the function is on top of its stack inside the bin (``ops.exclusive.
exclusive_segments``: for nested calls, the interval's overlap with the bin minus its
direct children's; crossing intervals count each ns once), so an interval split across
two bins gives each bin the part it covers. Summed over ranks and threads.

Columns: ``bin`` (0-based), ``bin_start_ns``, ``bin_end_ns``, name, category,
``exclusive_ns``; with ``normalize=true`` also ``fraction`` = exclusive_ns / (ranks x
bin width), ranks = ranks with intervals in the selection (Pipit's ``normalized=True``;
several threads per rank can exceed 1). Every bin lists every selected name (0 when
absent). Extra table ``idle``: per bin, ``idle_ns`` = ranks x width - the bin's total
(Pipit's ``idle_time`` column), and ``fraction`` when normalized.

Differences from Pipit: integer ns edges (Pipit float edges; at most 1 ns per edge);
Pipit zeroes values below 0.01 ns, ours are exact integers; long format instead of one
column per function; a category filter (default: host-thread categories except Paraver
states, see ``profile``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from traceatlas.analysis.base import Param, Result
from traceatlas.analysis.partitioned import summed_notes
from traceatlas.analysis.profile import CATEGORIES_HELP
from traceatlas.ops.exclusive import exclusive_intervals, exclusive_segments

if TYPE_CHECKING:
    from traceatlas.model.trace import Trace
    from traceatlas.ops.nesting import IntArray

MAX_PROFILE_BINS = 10_000
"""Most bins: the table has a row per (name, bin), so memory grows as names x bins."""


def run_span(trace: Trace) -> tuple[int, int] | None:
    """Earliest and latest timestamp over the selection's intervals and instants (ns)."""
    import polars as pl

    ends = [trace.intervals.select(lo=pl.col("start_ns").min(), hi=pl.col("end_ns").max()),
            trace.instants.select(lo=pl.col("ts_ns").min(), hi=pl.col("ts_ns").max())]
    both = pl.concat([e.collect() for e in ends])
    lo, hi = both["lo"].min(), both["hi"].max()
    if lo is None or hi is None:
        return None
    return int(lo), int(hi)  # type: ignore[arg-type]


def bin_edges(lo: int, hi: int, bins: int) -> IntArray:
    """``bins + 1`` integer edges from lo to hi: lo + floor(k * (hi - lo) / bins)."""
    span = hi - lo
    return np.array([lo + k * span // bins for k in range(bins + 1)], dtype=np.int64)


def split_by_bin(start: IntArray, end: IntArray, edges: IntArray) -> tuple[IntArray, ...]:
    """Cut segments ``[start, end)`` at the edges: (segment index, bin, overlap ns) for
    every bin a segment overlaps (zero-length segments give nothing)."""
    nbins = len(edges) - 1
    live = np.flatnonzero(end > start)
    s, e = start[live], end[live]
    first = np.clip(np.searchsorted(edges, s, side="right") - 1, 0, nbins - 1)
    last = np.clip(np.searchsorted(edges, e, side="left") - 1, first, nbins - 1)
    counts = last - first + 1
    seg = np.repeat(np.arange(len(live)), counts)
    offset = np.arange(len(seg)) - np.repeat(np.cumsum(counts) - counts, counts)
    b = first[seg] + offset
    overlap = np.minimum(e[seg], edges[b + 1]) - np.maximum(s[seg], edges[b])
    return live[seg], b, np.maximum(overlap, 0)


class TimeProfile:
    """Exclusive time per function in equal time bins, summed over ranks."""

    name = "time_profile"
    description = ("Exclusive time per function in equal time bins over the run, summed "
                   "over ranks (Vampir/Pipit time profile)")
    params = (
        Param("bins", int, 50, "number of equal time bins (Pipit's default 50); the table has "
              "names x bins rows", minimum=1, maximum=MAX_PROFILE_BINS),
        Param("normalize", bool, False, "add fraction = exclusive_ns / (ranks x bin width)"),
        Param("categories", str, "", CATEGORIES_HELP),
    )
    requires = ("intervals",)
    partition = "rank"
    """Per rank (``analysis.partitioned``), in two passes: ``prepare`` sends each batch's
    span, the bins divide the whole span (``prepared``); ``partial`` sends each batch's
    exclusive time per (bin, name, category), its names and rank count; ``merge`` sums."""

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """Long table: one row per bin and name."""
        return self.merge([self.partial(trace, params)], params)

    def prepare(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """A batch's span: one row ``lo``, ``hi`` (ns; null when it has no events)."""
        import polars as pl

        span = run_span(trace)
        lo, hi = span if span is not None else (None, None)
        return Result(pl.DataFrame({"lo": [lo], "hi": [hi]},
                                   schema={"lo": pl.Int64, "hi": pl.Int64}))

    def prepared(self, partials: Sequence[Result], params: Mapping[str, Any]
                 ) -> dict[str, Any]:
        """The span over every batch (``run_span`` of the whole selection)."""
        import polars as pl

        both = pl.concat([p.table for p in partials]).select(
            pl.col("lo").min(), pl.col("hi").max())
        lo, hi = both.row(0)
        return {"span_ns": (int(lo), int(hi))}

    def partial(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """Exclusive ns per (bin, name, category) of ``trace``'s rows in the bins of
        ``params["span_ns"]`` (default: ``trace``'s own span); extras ``names`` (the kept
        name, category pairs) and ``_ranks`` (one row: ranks with intervals)."""
        import polars as pl

        from traceatlas.errors import InputError

        nbins = int(params["bins"])
        if nbins < 1:
            raise InputError("--param bins", f"needs at least 1 bin, got {nbins}")
        frame, notes = exclusive_intervals(trace, str(params["categories"]))
        span = params.get("span_ns") or run_span(trace)
        assert span is not None  # the "intervals" requirement holds
        edges = bin_edges(int(span[0]), int(span[1]), nbins)
        kept = frame.with_row_index("row").filter(pl.col("keep"))
        # Signed segments whose overlap with a bin is the row's exclusive time in it.
        segs = exclusive_segments(frame).join(
            kept.select(pl.col("row").cast(pl.Int64), "name", "category"), on="row")
        seg, b, overlap = split_by_bin(segs["start_ns"].to_numpy().astype(np.int64),
                                       segs["end_ns"].to_numpy().astype(np.int64), edges)
        parts = pl.DataFrame({
            "bin": b, "name": segs["name"].gather(seg), "category": segs["category"].gather(seg),
            "exclusive_ns": overlap * segs["sign"].to_numpy()[seg]})
        sums = parts.group_by("bin", "name", "category").agg(pl.col("exclusive_ns").sum())
        return Result(sums, extra={"names": kept.select("name", "category").unique(),
                                   "_ranks": pl.DataFrame({"n": [frame["rank"].n_unique()]}),
                                   "_span": pl.DataFrame({"lo": [int(span[0])],
                                                          "hi": [int(span[1])]})},
                      notes=notes)

    def merge(self, partials: Sequence[Result], params: Mapping[str, Any]) -> Result:
        """The batches' sums added per (bin, name, category); every name in every bin;
        idle per bin over the ranks of every batch."""
        import polars as pl

        nbins = int(params["bins"])
        lo, hi = partials[0].extra["_span"].row(0)
        edges = bin_edges(lo, hi, nbins)
        ranks = sum(int(p.extra["_ranks"]["n"].sum()) for p in partials)
        names = pl.concat([p.extra["names"] for p in partials]).unique()
        sums = (pl.concat([p.table for p in partials]).group_by("bin", "name", "category")
                .agg(pl.col("exclusive_ns").sum()))
        bins = pl.DataFrame({"bin": np.arange(nbins, dtype=np.int64),
                             "bin_start_ns": edges[:-1], "bin_end_ns": edges[1:]})
        table = (
            names.join(bins, how="cross")
            .join(sums, on=["bin", "name", "category"], how="left")
            .with_columns(pl.col("exclusive_ns").fill_null(0))
            .select("bin", "bin_start_ns", "bin_end_ns", "name", "category", "exclusive_ns")
            .sort(["bin", "exclusive_ns", "name", "category"],
                  descending=[False, True, False, False])
        )
        idle = (
            bins.join(table.group_by("bin").agg(busy=pl.col("exclusive_ns").sum()), on="bin",
                      how="left")
            .with_columns(idle_ns=ranks * (pl.col("bin_end_ns") - pl.col("bin_start_ns"))
                          - pl.col("busy").fill_null(0))
            .drop("busy").sort("bin")
        )
        if params["normalize"]:
            width = ranks * (pl.col("bin_end_ns") - pl.col("bin_start_ns"))
            table = table.with_columns(fraction=pl.col("exclusive_ns") / width)
            idle = idle.with_columns(fraction=pl.col("idle_ns") / width)
        notes = summed_notes(partials)
        notes.append(f"{nbins} bins of ~{(hi - lo) / nbins:.0f} ns from "
                     f"{lo} to {hi} ns; {ranks} rank(s)")
        return Result(table, extra={"idle": idle}, notes=notes)
