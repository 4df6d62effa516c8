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
when the trace has no step intervals (``traceatlas.ops.select.step_spans``); the detection
itself lives in ``traceatlas.ops.phases`` so that selections do not call the analyses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.base import MAX_COUNT, MAX_LEVEL, Param, Result
from traceatlas.errors import MissingDataError
from traceatlas.ops.phases import Loop, detect_loop, detect_phases, no_loop_problem
from traceatlas.ops.select import check_regex

__all__ = ["Loop", "Phases", "detect_loop"]

if TYPE_CHECKING:

    from traceatlas.model.trace import Trace

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
    partition = "rank"
    """Per rank (``analysis.partitioned``): each batch sends its ranks' iterations, loop
    structure, ranks without a loop and candidate count; ``merge`` writes the notes."""

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """Per rank and iteration: start, end, duration, events; ``structure`` extra."""
        return self.merge([self.partial(trace, params)], params)

    def partial(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """The loops of ``trace``'s ranks: the table, extras ``structure``, ``_missing``
        (ranks without a loop) and ``_candidates`` (events looked at); no notes."""
        import polars as pl

        level, names = int(params["level"]), str(params["names"])
        if names:
            names = check_regex(names, "--param names")
        found = detect_phases(trace, names, level, int(params["min_repeats"]))
        table = pl.DataFrame(found.rows, schema={"rank": pl.Int64, "phase": pl.Int64,
                                                 "start_ns": pl.Int64, "end_ns": pl.Int64,
                                                 "events": pl.Int64}, orient="row")
        table = table.with_columns(dur_ns=pl.col("end_ns") - pl.col("start_ns")).select(
            "rank", "phase", "start_ns", "end_ns", "dur_ns", "events")
        return Result(table, {"structure": pl.DataFrame(found.structure),
                              "_missing": pl.DataFrame({"rank": found.missing},
                                                       schema={"rank": pl.Int64}),
                              "_candidates": pl.DataFrame({"n": [found.candidates]})})

    def merge(self, partials: Sequence[Result], params: Mapping[str, Any]) -> Result:
        """Tables and structures concatenated in batch (rank) order; the notes of the
        whole trace; MissingDataError when no rank has a loop."""
        import polars as pl

        table = pl.concat([p.table for p in partials], how="vertical")
        if table.height == 0:
            candidates = sum(int(p.extra["_candidates"]["n"].sum()) for p in partials)
            raise MissingDataError(self.name, no_loop_problem(
                str(params["names"]), int(params["level"]), int(params["min_repeats"]),
                candidates))
        structure = pl.concat([p.extra["structure"] for p in partials
                               if p.extra["structure"].height], how="vertical")
        missing = [int(r) for p in partials for r in p.extra["_missing"]["rank"]]
        return Result(table, {"structure": structure},
                      _notes(structure.to_dicts(), missing))


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
