"""Loop detection without step markers: the algorithm behind the ``phases`` analysis and
``--step N`` on traces without ``step`` intervals (``ops/select.step_spans``). It sits below
the analyses so that selections never call the analysis registry. Definitions: the module
docstring of ``traceatlas.analysis.phases``. Times are int ns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

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


@dataclass(frozen=True)
class Detected:
    """Per-rank iterations found by ``detect_phases``.

    ``rows``: (rank, phase, start_ns, end_ns, events) per iteration; ``structure``: one
    dict per rank with a loop; ``missing``: ranks without one; ``candidates``: events looked
    at (all ranks)."""

    rows: list[tuple[int, int, int, int, int]]
    structure: list[dict[str, Any]]
    missing: list[int]
    candidates: int


def detect_phases(trace: Trace, names: str = "", level: int = -1,
                  min_repeats: int = 3) -> Detected:
    """Iterations of each rank's main loop. ``names``: an already checked regex (empty:
    every region/MPI call); ``level``: depth used, -1 the shallowest with a loop."""
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
    return Detected(rows, structure, missing, len(rank_col))


def no_loop_problem(names: str, level: int, min_repeats: int, candidates: int) -> str:
    """Why no iteration was found, with what to try."""
    used = f"names matching {names!r}" if names else "region/MPI calls"
    where = f"depth {level}" if level >= 0 else "any depth"
    return (f"no sequence of {used} at {where} repeats at least {min_repeats} times on any "
            f"rank ({candidates} candidate events); try --param names=<a call made once per "
            "iteration> or a lower min_repeats")


def _events(trace: Trace, names: str, level: int) -> tuple[dict[str, I64], list[str]]:
    """Candidate events of each rank's main host thread, sorted by rank, depth, start."""
    import polars as pl

    host = (trace.scan("tracks").filter(pl.col("kind").cast(pl.String) == "host_thread")
            .select("rank", "track_id").unique())
    frame = trace.intervals.filter(~pl.col("category").is_in(EXCLUDED))
    if names:
        frame = frame.filter(pl.col("name").cast(pl.String).str.contains(names))
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
