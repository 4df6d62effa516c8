"""``phases``: the repeating iteration structure of a trace without step markers.

Events used, per rank: intervals on the rank's main host thread (the ``host_thread``
track with the most candidate intervals; ties: lowest ``track_id``), excluding Paraver
``state`` and ``step`` intervals, whose name matches ``names`` (regex search) when given,
at one ``depth``: ``level`` when given, else the shallowest depth at which a repetition is
found (depth 0 first). They are ordered by (start, end) and their names form a sequence.

Detection (exact repetition of names): candidate periods ``p`` are the most common
distances between an occurrence of a name and its next 1..8 occurrences (a name called
``c`` times per iteration recurs exactly ``p`` events later at lag ``c``). For each
candidate, the longest run of positions ``i`` with ``name[i] == name[i + p]`` gives a
periodic stretch of ``L + p`` events holding ``k = (L + p) // p`` full iterations. The
candidate covering the most events in full iterations wins (ties: the smaller ``p``;
divisors of the winner are tried too), and it needs ``k >= min_repeats``. The main loop
starts at the first event of that stretch: events before it are the prologue, events after
its last full iteration the epilogue (not in any phase). When the end of the prologue
equals the end of an iteration, the stretch starts that many events earlier (the boundary
is rotated; the names alone cannot tell); pass ``names`` (e.g. ``'^MPI_Allreduce$'``:
one iteration per call) to anchor iterations on a chosen call. Only the longest periodic
stretch is used: a loop interrupted by an irregular event (checkpoint) yields the longest
uninterrupted part.

Table, one row per rank and iteration: ``rank``; ``phase`` (0-based iteration number
within the detected loop); ``start_ns`` (start of the iteration's first event);
``end_ns`` (start of the next iteration's first event; the last iteration ends at the
latest end of its own events); ``dur_ns``; ``events`` (events at the detection level in
the iteration, = the period). Extra table ``structure``, one row per rank with a loop:
``rank``, ``track_id``, ``level``, ``period``, ``repeats``, ``prologue_events``,
``epilogue_events``, ``events`` (sequence length), ``pattern`` (the period's names).
Ranks without a repetition are listed in the notes; when no rank has one a
MissingDataError says so. ``filter --step N`` / ``Trace.select(step=N)`` use phase N
when the trace has no step intervals (``traceatlas.ops.select.step_spans``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from traceatlas.analysis.base import MAX_COUNT, MAX_LEVEL, Param, Result
from traceatlas.errors import MissingDataError

if TYPE_CHECKING:

    from traceatlas.model.trace import Trace

I64 = npt.NDArray[np.int64]
MAX_LAG = 8
"""Occurrence lags tried per name for candidate periods."""
EXCLUDED = ("state", "step")
"""Categories never used: Paraver states cover the whole run, steps are markers."""
PATTERN_SHOWN = 24
"""Names of a period shown in ``structure.pattern`` (then ``...``)."""


@dataclass(frozen=True)
class Loop:
    """A detected main loop: first event index, period and full iterations."""

    start: int
    period: int
    repeats: int


def detect_loop(codes: I64, min_repeats: int) -> Loop | None:
    """The main loop of a name-code sequence (module docstring), or None."""
    n = len(codes)
    if min_repeats < 1 or n < min_repeats:
        return None
    best: Loop | None = None
    for p in sorted(_candidates(codes, min_repeats)):
        best = _better(best, _run(codes, p))
    if best is None:
        return None
    period = best.period
    for d in range(period, 1, -1):  # divisors: the smallest period covering as much
        if period % d == 0:
            best = _better(best, _run(codes, period // d))
    return best if best is not None and best.repeats >= min_repeats else None


def _better(a: Loop | None, b: Loop | None) -> Loop | None:
    """More events in full iterations wins; ties: smaller period, then earlier start."""
    if a is None or b is None:
        return a or b
    ka, kb = a.repeats * a.period, b.repeats * b.period
    if kb != ka:
        return b if kb > ka else a
    return b if (b.period, b.start) < (a.period, a.start) else a


def _candidates(codes: I64, min_repeats: int) -> set[int]:
    """Per name and lag 1..MAX_LAG, the most common distance to that later occurrence."""
    n = len(codes)
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    out: set[int] = set()
    for lag in range(1, min(MAX_LAG, n - 1) + 1):
        same = sorted_codes[lag:] == sorted_codes[:-lag]
        dist = (order[lag:] - order[:-lag])[same]
        name = sorted_codes[lag:][same]
        keep = dist * min_repeats <= n
        if not keep.any():
            continue
        key = name[keep] * (n + 1) + dist[keep]
        pairs, counts = np.unique(key, return_counts=True)
        pair_name = pairs // (n + 1)
        # Most common distance per name (ties: the smaller), seen often enough for a loop.
        by = np.lexsort((pairs % (n + 1), -counts, pair_name))
        first = by[np.r_[True, pair_name[by][1:] != pair_name[by][:-1]]]
        ok = counts[first] >= min_repeats - 1
        out.update(int(p) for p in (pairs[first][ok] % (n + 1)).tolist())
    return out


def _run(codes: I64, p: int) -> Loop | None:
    """Longest stretch of period ``p`` (earliest when tied)."""
    if p <= 0 or p >= len(codes):
        return None
    match = (codes[:-p] == codes[p:]).astype(np.int8)
    edges = np.diff(np.concatenate(([0], match, [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    if not len(starts):
        return Loop(0, p, 1)
    i = int(np.argmax(ends - starts))
    length = int(ends[i] - starts[i])
    return Loop(int(starts[i]), p, (length + p) // p)


class Phases:
    """Iterations found from repeating call/region sequences (no step markers needed)."""

    name = "phases"
    description = "Repeating iteration structure per rank (loop detection without steps)"
    params = (
        Param("level", int, -1, "depth of the events used; -1 (default): the shallowest "
              "depth with a repetition", minimum=-1, maximum=MAX_LEVEL),
        Param("names", str, "", "regex restricting the events used (e.g. "
              "'^MPI_Allreduce$'); empty: every region/MPI call"),
        Param("min_repeats", int, 3, "fewest full iterations that make a loop", minimum=1,
              maximum=MAX_COUNT),
    )
    requires = ("intervals",)

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """Per rank and iteration: start, end, duration, events; ``structure`` extra."""
        import polars as pl

        level, names = int(params["level"]), str(params["names"])
        min_repeats = int(params["min_repeats"])
        events, labels = _events(trace, names, level)
        rows: list[tuple[int, int, int, int, int]] = []
        structure: list[dict[str, Any]] = []
        missing: list[int] = []
        rank_col = events["rank"]
        bounds = np.flatnonzero(np.diff(rank_col)) + 1
        for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(rank_col)], strict=True):
            if hi <= lo:
                continue
            found = _rank_loop({k: v[lo:hi] for k, v in events.items()}, min_repeats)
            rank = int(rank_col[lo])
            if found is None:
                missing.append(rank)
                continue
            sel, loop, depth = found
            rows += _spans(rank, sel, loop)
            codes = sel["name"][loop.start:loop.start + loop.period].tolist()
            pattern = ", ".join(labels[c] for c in codes[:PATTERN_SHOWN])
            structure.append({
                "rank": rank, "track_id": int(sel["track_id"][0]), "level": depth,
                "period": loop.period, "repeats": loop.repeats,
                "prologue_events": loop.start,
                "epilogue_events": len(sel["name"]) - loop.start - loop.period * loop.repeats,
                "events": len(sel["name"]),
                "pattern": pattern + (", ..." if len(codes) > PATTERN_SHOWN else ""),
            })
        if not rows:
            used = f"names matching {names!r}" if names else "region/MPI calls"
            where = f"depth {level}" if level >= 0 else "any depth"
            raise MissingDataError(
                self.name, f"no sequence of {used} at {where} repeats at least "
                f"{min_repeats} times on any rank ({len(rank_col)} candidate events); try "
                "--param names=<a call made once per iteration> or a lower min_repeats")
        table = pl.DataFrame(rows, schema={"rank": pl.Int64, "phase": pl.Int64,
                                           "start_ns": pl.Int64, "end_ns": pl.Int64,
                                           "events": pl.Int64}, orient="row")
        table = table.with_columns(dur_ns=pl.col("end_ns") - pl.col("start_ns")).select(
            "rank", "phase", "start_ns", "end_ns", "dur_ns", "events")
        return Result(table, {"structure": pl.DataFrame(structure)},
                      _notes(structure, missing))


def _events(trace: Trace, names: str, level: int) -> tuple[dict[str, I64], list[str]]:
    """Candidate events of each rank's main host thread, sorted by rank, depth, start."""
    import polars as pl

    host = (trace.scan("tracks").filter(pl.col("kind").cast(pl.String) == "host_thread")
            .select("rank", "track_id").unique())
    frame = trace.intervals.filter(~pl.col("category").cast(pl.String).is_in(EXCLUDED))
    if names:
        from traceatlas.ops.select import check_regex

        frame = frame.filter(pl.col("name").cast(pl.String).str.contains(
            check_regex(names, "--param names")))
    if level >= 0:
        frame = frame.filter(pl.col("depth") == level)
    frame = frame.join(host, on=["rank", "track_id"], how="semi").select(
        "rank", "track_id", "depth", "start_ns", "end_ns", pl.col("name").cast(pl.String))
    main = (frame.group_by("rank", "track_id").agg(pl.len().alias("n"))
            .sort(["rank", "n", "track_id"], descending=[False, True, False])
            .group_by("rank", maintain_order=True).first().select("rank", "track_id"))
    df = (frame.join(main, on=["rank", "track_id"], how="semi")
          .sort("rank", "depth", "start_ns", "end_ns").collect())
    codes = df["name"].cast(pl.Categorical).to_physical()
    labels_frame = pl.DataFrame({"c": codes, "n": df["name"]}).unique("c").sort("c")
    labels = dict(zip(labels_frame["c"].to_list(), labels_frame["n"].to_list(), strict=True))
    out = {c: df[c].cast(pl.Int64).to_numpy() for c in
           ("rank", "track_id", "depth", "start_ns", "end_ns")}
    out["name"] = codes.cast(pl.Int64).to_numpy()
    return out, [labels.get(i, "") for i in range(max(labels, default=-1) + 1)]


def _rank_loop(ev: dict[str, I64], min_repeats: int
               ) -> tuple[dict[str, I64], Loop, int] | None:
    """The shallowest depth of one rank's events with a loop: (events, loop, depth)."""
    depth = ev["depth"]
    bounds = np.flatnonzero(np.diff(depth)) + 1
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(depth)], strict=True):
        loop = detect_loop(ev["name"][lo:hi], min_repeats)
        if loop is not None:
            return {k: v[lo:hi] for k, v in ev.items()}, loop, int(depth[lo])
    return None


def _spans(rank: int, ev: dict[str, I64], loop: Loop) -> list[tuple[int, int, int, int, int]]:
    """(rank, phase, start, end, events) per full iteration of ``loop``."""
    first = loop.start + loop.period * np.arange(loop.repeats + 1)
    starts = ev["start_ns"]
    last_end = int(ev["end_ns"][first[-2]:first[-1]].max())
    ends = np.r_[starts[first[1:-1]], last_end]
    return [(rank, k, int(s), int(e), loop.period)
            for k, (s, e) in enumerate(zip(starts[first[:-1]].tolist(), ends.tolist(),
                                           strict=True))]


def _notes(structure: list[dict[str, Any]], missing: list[int]) -> list[str]:
    notes = ["phase: 0-based iteration of the detected main loop; an iteration ends where "
             "the next begins (the last one at the end of its own events)"]
    for s in structure[:8]:
        notes.append(f"rank {s['rank']}: {s['repeats']} iterations of {s['period']} "
                     f"event(s) at depth {s['level']} (prologue {s['prologue_events']}, epilogue "
                     f"{s['epilogue_events']}): {s['pattern']}")
    if len(structure) > 8:
        notes.append(f"... {len(structure) - 8} more ranks in the 'structure' table")
    if missing:
        shown = ", ".join(map(str, missing[:20])) + (", ..." if len(missing) > 20 else "")
        notes.append(f"no repetition found on {len(missing)} rank(s): {shown}")
    return notes
