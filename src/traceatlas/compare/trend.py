"""``traceatlas trend``: the key figures of a series of runs (baseline summaries), and the
runs where a figure changed beyond the noise.

Runs are summaries (``traceatlas.compare.summary``), in the order given. Figures:

- ``step``: the step time (per iteration and rank, every rank pooled): the median and the
  interquartile range (``numpy.percentile``, linear interpolation) in ns;
- the top ``top`` entities of each of ``TOP_KINDS`` (kernel, op, annotation) by time: an
  entity's weight is the largest, over the runs, of its median per-sample ns; its value
  in a run is that median (absent where the run does not have it);
- the efficiency model's labelled metrics (run scope): one value per run in 0..1.

Change vs the previous run: for a time figure, ``compare.stats.compare_samples`` of the
previous run's samples and this run's (the Hodges-Lehmann shift over the previous median,
as ``diff`` reports it); for an efficiency metric, ``new - previous``. A run is a
**change point** of a time figure when that comparison is significant (two-sided
Mann-Whitney, p-values Holm-corrected over every time figure of that pair of runs, as
``diff`` corrects over every entity of one comparison) at ``alpha`` AND the relative shift
is past ``threshold`` in either direction (strictly). Efficiency values have no samples:
they are shown, never flagged.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from traceatlas.compare.stats import Change, adjust, compare_samples
from traceatlas.errors import InputError

TOP = 5
"""Entities per kind followed by default."""
TOP_KINDS: tuple[str, ...] = ("kernel", "op", "annotation")
THRESHOLD = 0.05
"""Default change-point threshold: 5 % of the previous run's median."""
ALPHA = 0.05
SUFFIXES = (".json", ".json.gz")
"""Files of a directory read as summaries."""

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class RunInfo:
    """One run of the series: where it comes from and its shape."""

    label: str
    path: str
    ranks: int
    iterations: int
    iteration_source: str


@dataclass(frozen=True)
class Point:
    """A figure in one run. Times: ``value`` the median ns, ``low``/``high`` the 25th and
    75th percentiles, ``n`` the samples; ``change`` the relative shift vs the previous run
    (None for the first run, when either run lacks the figure, or from a median of 0).
    Efficiency: ``value`` in 0..1, ``change`` the absolute delta. ``p_adjusted`` None
    when untested."""

    value: float | None
    low: float | None = None
    high: float | None = None
    n: int = 0
    change: float | None = None
    p_adjusted: float | None = None
    change_point: bool = False


@dataclass
class Figure:
    """One row of the trend table: ``unit`` is ``ns`` (times) or ``fraction``."""

    kind: str
    key: str
    label: str
    unit: str
    points: list[Point]


@dataclass
class TrendResult:
    """The whole series; ``order`` says how the runs were ordered."""

    runs: list[RunInfo]
    figures: list[Figure]
    order: str
    threshold: float
    alpha: float
    correction: str = "holm"
    notes: list[str] = field(default_factory=list)

    def change_points(self) -> list[tuple[int, Figure, Point]]:
        """(run index, figure, point) of every flagged change, by run then table order."""
        found = [(i, f, p) for f in self.figures for i, p in enumerate(f.points)
                 if p.change_point]
        return sorted(found, key=lambda t: t[0])

    def to_dict(self) -> dict[str, Any]:
        """The ``--format json`` object."""
        return {
            "order": self.order,
            "threshold": self.threshold,
            "alpha": self.alpha,
            "correction": self.correction,
            "runs": [asdict(r) for r in self.runs],
            "figures": [{"kind": f.kind, "key": f.key, "label": f.label, "unit": f.unit,
                         "points": [asdict(p) for p in f.points]} for f in self.figures],
            "change_points": [{"run": i, "label": self.runs[i].label, "kind": f.kind,
                               "key": f.key, "change": p.change, "p_adjusted": p.p_adjusted}
                              for i, f, p in self.change_points()],
            "notes": self.notes,
        }


def parse_threshold(text: str) -> float:
    """``5%`` or ``5`` -> 0.05 (a percentage of the previous median); InputError if bad."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*%?\s*", text)
    if match is None or not math.isfinite(float(match.group(1))):
        raise InputError("--threshold", f"{text!r} is not a percentage such as 5%")
    return float(match.group(1)) / 100.0


def _natural(name: str) -> list[Any]:
    """Sort key: digits compared as numbers (``run-2`` before ``run-10``)."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def list_runs(paths: Sequence[Path]) -> tuple[list[Path], str]:
    """The summary files of ``paths`` in trend order and how that order was chosen: files
    in the order given; one directory: its ``*.json``/``*.json.gz`` files by file name
    (summaries record no time of their own), digits compared as numbers."""
    if len(paths) == 1 and paths[0].is_dir():
        files = sorted((p for p in paths[0].iterdir()
                        if p.is_file() and p.name.endswith(SUFFIXES)),
                       key=lambda p: _natural(p.name))
        return files, "by file name (summaries record no time)"
    for p in paths:
        if p.is_dir():
            raise InputError(p, "is a directory: give one directory of summaries, or "
                             "summary files")
    return list(paths), "as given"


def check_runs(summaries: Sequence[tuple[Path, dict[str, Any]]]) -> None:
    """InputError when fewer than 2 runs, or when a run's entity kinds differ from the
    first run's (the figures would not be comparable)."""
    if len(summaries) < 2:
        where = summaries[0][0] if summaries else "trend"
        raise InputError(where, f"a trend needs at least 2 summaries, got {len(summaries)}")
    first_path, first = summaries[0]
    kinds = _kinds(first)
    for path, summary in summaries[1:]:
        mine = _kinds(summary)
        if mine != kinds:
            raise InputError(path, f"has entity kinds {', '.join(sorted(mine)) or 'none'}; "
                             f"{first_path.name} has {', '.join(sorted(kinds)) or 'none'}: "
                             "runs of a trend must be summaries of the same kind of trace")


def _kinds(summary: dict[str, Any]) -> set[str]:
    return {k for k, items in summary["entities"].items() if items}


def _samples(entity: dict[str, Any]) -> F64:
    """Per-iteration, per-rank ns of an entity, ``-1`` (absent) left out."""
    ns = np.asarray(entity["ns"], dtype=np.float64).ravel()
    return ns[ns >= 0]


def _entities(summary: dict[str, Any], kind: str) -> dict[str, F64]:
    items = summary["entities"].get(kind) or []
    if kind == "step":  # one entity, whatever its key (steps, phases or the run)
        return {"step": _samples(items[0])} if items else {}
    return {e["key"]: _samples(e) for e in items}


def trend(runs: Sequence[tuple[str, dict[str, Any]]], *, top: int = TOP,
          threshold: float = THRESHOLD, alpha: float = ALPHA, order: str = "as given",
          paths: Sequence[str] | None = None) -> TrendResult:
    """The trend of ``runs`` (label, summary), in that order; see the module doc."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0, got {threshold}")
    summaries = [s for _, s in runs]
    infos = [RunInfo(label, (paths or [label] * len(runs))[i], len(s["ranks"]),
                     len(s["iterations"]["labels"]), str(s["iterations"]["source"]))
             for i, (label, s) in enumerate(runs)]
    series: list[tuple[str, str, str, list[F64 | None]]] = []
    step = [_entities(s, "step").get("step") for s in summaries]
    series.append(("step", "step", "step time", step))
    for kind in TOP_KINDS:
        per_run = [_entities(s, kind) for s in summaries]
        weight: dict[str, float] = {}
        for entities in per_run:
            for key, xs in entities.items():
                if xs.size:
                    weight[key] = max(weight.get(key, 0.0), float(np.median(xs)))
        for key in sorted(weight, key=lambda k: (-weight[k], k))[:top]:
            series.append((kind, key, key, [e.get(key) for e in per_run]))
    figures = _time_figures(series, threshold, alpha)
    figures += _efficiency_figures(summaries)
    return TrendResult(infos, figures, order, threshold, alpha, notes=_notes(runs))


def _time_figures(series: list[tuple[str, str, str, list[F64 | None]]], threshold: float,
                  alpha: float) -> list[Figure]:
    n_runs = len(series[0][3]) if series else 0
    changes: dict[tuple[int, int], Change] = {}
    for f, (_, _, _, samples) in enumerate(series):
        for i in range(1, n_runs):
            prev, cur = samples[i - 1], samples[i]
            if prev is not None and cur is not None and prev.size and cur.size:
                changes[(f, i)] = compare_samples(prev, cur)
    adjusted: dict[tuple[int, int], float | None] = {}
    for i in range(1, n_runs):  # one family per pair of consecutive runs, as in diff
        keys = [k for k in changes if k[1] == i]
        adjusted.update(zip(keys, adjust([changes[k].p_value for k in keys], "holm"),
                            strict=True))
    figures = []
    for f, (kind, key, label, samples) in enumerate(series):
        points = []
        for i, xs in enumerate(samples):
            if xs is None or not xs.size:
                points.append(Point(None))
                continue
            low, high = (float(v) for v in np.percentile(xs, [25, 75]))
            ch = changes.get((f, i))
            p = adjusted.get((f, i))
            rel = None if ch is None else _relative(ch)
            flagged = (p is not None and p < alpha and rel is not None
                       and abs(rel) > threshold)
            points.append(Point(float(np.median(xs)), low, high, int(xs.size),
                                None if rel is None or math.isinf(rel) else rel, p, flagged))
        figures.append(Figure(kind, key, label, "ns", points))
    return figures


def _relative(change: Change) -> float | None:
    """The relative shift; +-inf from a median of 0 (as the gate reads it)."""
    if change.rel_change is not None:
        return change.rel_change
    if change.abs_change_ns == 0.0:
        return None
    return math.copysign(math.inf, change.abs_change_ns)


def _efficiency_figures(summaries: Sequence[dict[str, Any]]) -> list[Figure]:
    """Labelled run-scope efficiency rows, in the first run's order, then new ones."""
    tables: list[dict[tuple[str, str], tuple[float | None, str]]] = []
    order: dict[tuple[str, str], str] = {}
    for s in summaries:
        rows = {(str(r[1]), str(r[2])): (r[3], str(r[6])) for r in s.get("efficiency") or []
                if r[6] is not None and r[0] == "run"}
        tables.append(rows)
        for key, (_, label) in rows.items():
            order.setdefault(key, f"{key[0]} {label}")
    figures = []
    for key, label in order.items():
        points: list[Point] = []
        prev: float | None = None
        for rows in tables:
            value = rows[key][0] if key in rows else None
            delta: float | None = None if value is None or prev is None else value - prev
            points.append(Point(value, change=delta))
            prev = value
        figures.append(Figure("efficiency", f"{key[0]}.{key[1]}", label, "fraction", points))
    return figures


def _notes(runs: Sequence[tuple[str, dict[str, Any]]]) -> list[str]:
    notes = []
    sources = {str(s["iterations"]["source"]) for _, s in runs}
    if len(sources) > 1:
        notes.append("iterations come from " + " and ".join(sorted(sources))
                     + " in different runs: compare with care")
    small = [label for label, s in runs
             if len(s["iterations"]["labels"]) * len(s["ranks"]) < 3]
    if small:
        notes.append("fewer than 3 samples per figure (changes shown, not tested): "
                     + ", ".join(small[:5]) + (" ..." if len(small) > 5 else ""))
    return notes
