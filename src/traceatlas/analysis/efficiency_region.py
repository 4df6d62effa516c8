"""Regions of the ``efficiency`` model (``region`` parameter), resolvable in rank batches.

A region needs values over every rank (the run's first start and last end, the step's
span over the ranks, the largest annotation union): ``probe`` reads one batch's share
(one row, nulls where the batch has none), ``resolve`` combines the probes of every
batch into the region's scope, window and runtime T (ns) with the whole run's errors,
and ``batch_region`` gives a batch its ``Region`` (its ranks' segments, the global T).
On one batch holding every rank, ``resolve_region`` is the whole-trace answer.
Semantics: ``traceatlas.analysis.efficiency``'s docstring.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from traceatlas.errors import InputError
from traceatlas.ops.unions import union_segments

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

ANNOTATION_CATEGORIES = ("annotation", "nvtx", "region")
WHAT = "--param region"


@dataclass(frozen=True)
class Region:
    """Where the model applies: per-rank segments, runtime T (ns), one window or None."""

    scope: str
    segments: pl.DataFrame          # rank, start_ns, end_ns (disjoint per rank)
    runtime_ns: int
    window: tuple[int, int] | None  # the same window on every rank (replay possible)


def parse_region(text: str) -> tuple[str, str]:
    """(kind, argument) of ``text``: kind "", "step", "window" or "annotation"; the
    argument checked (a step number, a window, a regex). InputError otherwise."""
    from traceatlas.ops import select as sel

    kind, _, arg = text.partition(":")
    kind = kind.strip()
    if kind == "":
        return kind, arg
    if kind == "step":
        try:
            int(arg)
        except ValueError:
            raise InputError(WHAT, f"bad step {arg!r} (use step:N)") from None
        return kind, arg
    if kind == "window":
        sel.parse_window(arg, WHAT)
        return kind, arg
    if kind == "annotation":
        sel.check_regex(arg, WHAT)
        return kind, arg
    raise InputError(WHAT, f"bad region {text!r} (use step:N, annotation:REGEX "
                     "or window:START:END)")


PROBE_SCHEMA: dict[str, Any] = {}
"""Filled on first use (polars is imported lazily): the probe row's columns."""


def _probe_schema() -> dict[str, Any]:
    import polars as pl

    if not PROBE_SCHEMA:
        PROBE_SCHEMA.update({
            "lo": pl.Int64, "hi": pl.Int64, "start_ns": pl.Int64,
            "step_lo": pl.Int64, "step_hi": pl.Int64, "steps": pl.List(pl.Int64),
            "step_rows": pl.Boolean, "step_null": pl.Boolean,
            "phase_lo": pl.Int64, "phase_hi": pl.Int64, "phase_last": pl.Int64,
            "phase_candidates": pl.Int64, "annotation_ns": pl.Int64, "mpi": pl.Boolean})
    return PROBE_SCHEMA


def probe(trace: Trace, text: str) -> pl.DataFrame:
    """One row: what this batch (``trace``) contributes to the region's global values.

    ``lo``/``hi``: first interval start, last end; ``start_ns`` (window regions): the
    earliest interval, instant or counter time (``select.trace_start_ns``); ``step_lo``/
    ``step_hi``: the span of step N's ``step`` intervals, ``steps``: the step numbers of
    the batch's ``step`` intervals; without any, the phases fallback (``phase_*``: span of
    iteration N, last iteration, candidate events); ``annotation_ns``: the largest
    per-rank union of matching annotations; ``mpi``: any ``mpi`` interval. Nulls where
    the batch has none."""
    import polars as pl

    kind, arg = parse_region(text)
    row: dict[str, Any] = dict.fromkeys(_probe_schema())
    cat = pl.col("category")  # compared as stored (Categorical): no cast per row
    lo, hi = trace.intervals.select(pl.col("start_ns").min(), pl.col("end_ns").max()
                                    ).collect().row(0)
    row.update(lo=lo, hi=hi, steps=[], step_rows=False, step_null=False, mpi=bool(
        trace.intervals.filter(cat == "mpi").select("rank").head(1).collect().height))
    if kind == "window":
        lows = [trace.intervals.select(pl.col("start_ns").min()).collect().item(),
                trace.instants.select(pl.col("ts_ns").min()).collect().item(),
                trace.counters.select(pl.col("ts_ns").min()).collect().item()]
        found = [int(v) for v in lows if v is not None]
        row["start_ns"] = min(found) if found else None
    elif kind == "step":
        row.update(_step_probe(trace, int(arg)))
    elif kind == "annotation":
        row["annotation_ns"] = _annotation_total(annotation_segments(trace, arg))
    return pl.DataFrame([row], schema=_probe_schema())


def _step_probe(trace: Trace, step: int) -> dict[str, Any]:
    import polars as pl

    from traceatlas.ops.phases import detect_phases

    steps = trace.intervals.filter(pl.col("category") == "step")
    lo, hi = steps.filter(pl.col("step") == step).select(
        pl.col("start_ns").min(), pl.col("end_ns").max()).collect().row(0)
    known = steps.select(pl.col("step").unique()).collect()["step"]
    out: dict[str, Any] = {"step_lo": lo, "step_hi": hi, "step_rows": known.len() > 0,
                           "step_null": known.null_count() > 0,
                           "steps": [int(s) for s in known.drop_nulls().to_list()]}
    if known.len() == 0:  # no step interval: the phases fallback
        found = detect_phases(trace)
        hits = [(s, e) for _, phase, s, e, _ in found.rows if phase == step]
        out.update(phase_candidates=found.candidates,
                   phase_last=max((p for _, p, _, _, _ in found.rows), default=None),
                   phase_lo=min((s for s, _ in hits), default=None),
                   phase_hi=max((e for _, e in hits), default=None))
    return out


def annotation_segments(trace: Trace, regex: str) -> pl.DataFrame:
    """Per rank, the union of the spans of the annotations whose name matches ``regex``
    (rank, start_ns, end_ns), sorted by rank and start."""
    import polars as pl

    hits = trace.intervals.filter(
        pl.col("category").is_in(ANNOTATION_CATEGORIES)
        & pl.col("name").cast(pl.String).str.contains(regex))
    return union_segments(hits, ["rank"]).sort("rank", "start_ns").collect()


def _annotation_total(segments: pl.DataFrame) -> int | None:
    import polars as pl

    if segments.height == 0:
        return None
    total = segments.group_by("rank").agg(
        (pl.col("end_ns") - pl.col("start_ns")).sum().alias("t"))["t"].max()
    return int(total)  # type: ignore[arg-type]


def resolve(probes: pl.DataFrame, text: str) -> dict[str, Any]:
    """The region of the whole selection from every batch's ``probe`` row: ``scope``,
    ``window`` ((lo, hi) ns or None), ``runtime_ns`` (T) and ``mpi`` (any MPI interval).
    Raises the whole run's InputError (no such step, no annotation match, empty window)."""
    from traceatlas.ops import select as sel
    from traceatlas.ops.phases import no_loop_problem

    kind, arg = parse_region(text)
    col = {c: [v for v in probes[c].to_list() if v is not None] for c in probes.columns}
    t0, t1 = min(col["lo"], default=0), max(col["hi"], default=0)
    mpi = any(col["mpi"])
    if kind == "":
        return _window("run", t0, t1, mpi)
    if kind == "step":
        step = int(arg)
        if col["step_lo"]:
            return _window(f"step {step}", min(col["step_lo"]), max(col["step_hi"]), mpi)
        if any(col["step_rows"]):  # (nulls sort first, as in select.step_spans)
            known = ["None"] * any(col["step_null"]) + [
                str(s) for s in sorted({s for steps in col["steps"] for s in steps})]
            listed = ", ".join(known[:20]) or "none"
            raise InputError("--step", f"no step {step} in the trace (steps: {listed})")
        if not col["phase_last"]:
            problem = no_loop_problem("", -1, 3, sum(col["phase_candidates"]))
            raise InputError("--step", f"the trace has no step markers and {problem}")
        if not col["phase_lo"]:
            raise InputError("--step", f"no step {step}: the trace has no step markers and "
                             f"the phases analysis found iterations 0-{max(col['phase_last'])}")
        return _window(f"step {step}", min(col["phase_lo"]), max(col["phase_hi"]), mpi)
    if kind == "window":
        lo, hi = sel.parse_window(arg, WHAT).resolve(min(col["start_ns"], default=0))
        return _window("window", t0 if lo is None else lo, t1 if hi is None else hi, mpi)
    if not col["annotation_ns"]:
        raise InputError(WHAT, f"no annotation matches {arg!r}")
    return {"scope": f"annotation {arg}", "window": None,
            "runtime_ns": max(col["annotation_ns"]), "mpi": mpi}


def _window(scope: str, lo: int, hi: int, mpi: bool) -> dict[str, Any]:
    if hi < lo:
        raise InputError(WHAT, f"empty window [{lo}, {hi}] ns")
    return {"scope": scope, "window": (int(lo), int(hi)), "runtime_ns": int(hi - lo),
            "mpi": mpi}


def batch_region(trace: Trace, text: str, resolved: Mapping[str, Any]) -> Region:
    """The ``Region`` of this batch (``trace``): segments for its ranks, the whole
    selection's window and T (``resolved``, from ``resolve``)."""
    import polars as pl

    scope, window = str(resolved["scope"]), resolved["window"]
    if window is None:
        _, arg = parse_region(text)
        return Region(scope, annotation_segments(trace, arg), int(resolved["runtime_ns"]),
                      None)
    lo, hi = int(window[0]), int(window[1])
    ranks = trace.ranks
    segments = pl.DataFrame({"rank": ranks, "start_ns": [lo] * len(ranks),
                             "end_ns": [hi] * len(ranks)},
                            schema={"rank": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64})
    return Region(scope, segments, hi - lo, (lo, hi))


def resolve_region(trace: Trace, text: str) -> Region:
    """Parse ``region`` (see the efficiency docstring) into per-rank segments and T over
    every rank of ``trace``."""
    return batch_region(trace, text, resolve(probe(trace, text), text))
