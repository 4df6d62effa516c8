"""Analyses on any engine, in bounded memory: map over batches of ranks, reduce by merge.

One code path for every engine (``LocalEngine`` inline or in a process pool, ``DaskEngine``
on a LocalCluster or a scheduler). An analysis opts in with a class attribute:

``partition = "rank"``
    Running the analysis on each rank alone (``trace.select(ranks=[r])``) and
    concatenating the tables gives the whole-trace ``Result``. Analyses without it
    (``partition`` absent or ``"trace"``) need every rank at once (cross-rank matching,
    replay, trace-wide statistics) and run whole.

``partition_for(params) -> str`` (optional)
    The same declaration when it depends on a parameter (``kernels`` with ``by=rank`` is
    per rank, with ``by=name`` it combines ranks): overrides ``partition``.

``merge(partials, params) -> Result`` (optional)
    The reduce step, for analyses whose result is not the plain concatenation (summary
    rows that combine ranks, a table order that is not rank-first). Without it:
    ``concat`` (tables and extras concatenated in rank order, notes deduplicated);
    analyses whose notes count rows use ``merge = staticmethod(concat_counts)``, which
    adds up the counts of notes that differ only in their numbers.

The map step sends a ``RankTask`` (store path, the view's selections, a batch of ranks,
the analysis name and its typed parameters: never data frames) to the engine; the worker
opens the store itself (workers must see the store path: a local, shared or parallel file
system) and runs the analysis on that batch. Only the small result tables travel back.
Peak memory per worker is what the analysis needs for ``ranks_per_task`` ranks
(``DEFAULT_RANKS_PER_TASK``), independent of the number of ranks in the trace; the client
holds the partial results (the size of the final result).

API: ``is_partitioned(analysis, params)``, ``run_partitioned(analysis, trace, params, engine)``,
``rank_batches``, ``RankTask`` / ``run_task`` (the mapped function), ``concat``,
``concat_counts``.
"""

from __future__ import annotations

import copy
import functools
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.base import Analysis, Result

if TYPE_CHECKING:
    from traceatlas.engine.base import Engine
    from traceatlas.model.trace import Trace
    from traceatlas.ops.select import Selection

RANK = "rank"
"""``partition`` value: the analysis runs on each rank alone; results concatenate."""
DEFAULT_RANKS_PER_TASK = 4
"""Ranks one task reads at once: tasks stay coarse, memory stays bounded by 4 ranks."""


def is_partitioned(analysis: Analysis, params: Mapping[str, Any] | None = None) -> bool:
    """True when ``analysis`` declares ``partition = "rank"`` (or its ``partition_for``
    returns it for the typed ``params``)."""
    hook = getattr(analysis, "partition_for", None)
    if hook is not None and params is not None:
        return bool(hook(params) == RANK)
    return getattr(analysis, "partition", "trace") == RANK


@dataclass(frozen=True)
class RankTask:
    """What a worker needs to run one batch: no data, only where to read it."""

    store: str
    selections: tuple[Selection, ...]
    ranks: tuple[int, ...]
    analysis: str
    params: tuple[tuple[str, Any], ...]


def rank_batches(ranks: Sequence[int], ranks_per_task: int) -> list[tuple[int, ...]]:
    """``ranks`` (ascending) cut into consecutive batches of at most ``ranks_per_task``."""
    size = max(1, ranks_per_task)
    return [tuple(ranks[i:i + size]) for i in range(0, len(ranks), size)]


@functools.lru_cache(maxsize=4)
def _open(store: str, stamp: tuple[int, int]) -> Trace:
    """The store opened (and verified) once per worker process while its manifest is the
    same file (``stamp``: inode and mtime ns)."""
    from traceatlas.model.trace import Trace

    return Trace(store)


def _trace_view(task: RankTask) -> Trace:
    """The worker's view: the client's selections plus this batch's ranks."""
    from traceatlas.ops.select import Selection
    from traceatlas.store.layout import MANIFEST

    info = os.stat(Path(task.store) / MANIFEST)
    view = copy.copy(_open(task.store, (info.st_ino, info.st_mtime_ns)))
    view.selections = (*task.selections, Selection(ranks=task.ranks))
    return view


def run_task(task: RankTask) -> Result | None:
    """The mapped function: run ``task.analysis`` on its batch of ranks (in a worker).
    None when the batch has none of the data the analysis reads (``MissingDataError``):
    the whole trace has no row for those ranks either."""
    from traceatlas.analysis.registry import get_analysis
    from traceatlas.errors import MissingDataError

    try:
        return get_analysis(task.analysis).run(_trace_view(task), dict(task.params))
    except MissingDataError:
        return None


def concat(partials: Sequence[Result]) -> Result:
    """The default reduce: tables and each extra table concatenated in partial (rank)
    order; notes kept once each, in first-seen order."""
    import polars as pl

    table = pl.concat([p.table for p in partials], how="vertical")
    names = list(dict.fromkeys(k for p in partials for k in p.extra))
    extra = {k: pl.concat([p.extra[k] for p in partials if k in p.extra], how="vertical")
             for k in names}
    notes = list(dict.fromkeys(n for p in partials for n in p.notes))
    return Result(table, extra, notes)


_COUNT = re.compile(r"(?<![-\w.])\d+(?![\w.])")
"""A count inside a note: digits not part of a word, a negative number or a decimal."""


def concat_counts(partials: Sequence[Result], params: Mapping[str, Any]) -> Result:
    """``concat``, with notes that differ only in their counts (``"64 device activities
    ..."``) merged into one note carrying the sum of each count over the partials. Notes
    naming ranks are kept as they are, once each (a rank list stays one note per batch)."""
    merged = concat(partials)
    sums: dict[str, list[int]] = {}
    for note in (n for p in partials for n in p.notes):
        if "rank" in note:  # names ranks, not counts: kept once (one note per batch)
            sums.setdefault(note.replace("{", "{{").replace("}", "}}"), [])
            continue
        counts = [int(c) for c in _COUNT.findall(note)]
        total = sums.setdefault(_COUNT.sub("{}", note.replace("{", "{{").replace("}", "}}")),
                                [0] * len(counts))
        for i, c in enumerate(counts):
            total[i] += c
    merged.notes = [template.format(*total) for template, total in sums.items()]
    return merged


def merge(analysis: Analysis, partials: Sequence[Result],
          params: Mapping[str, Any]) -> Result:
    """``analysis.merge(partials, params)`` when it has one, else ``concat``."""
    hook = getattr(analysis, "merge", None)
    if hook is not None:
        merged: Result = hook(partials, params)
        return merged
    return concat(partials)


def run_partitioned(analysis: Analysis, trace: Trace, params: Mapping[str, Any],
                    engine: Engine, *, ranks_per_task: int = DEFAULT_RANKS_PER_TASK
                    ) -> Result:
    """``analysis`` (declared ``partition = "rank"``) mapped over batches of the ranks of
    ``trace`` on ``engine``, reduced by its merge. ``params`` are typed (``parse_params``);
    requirements are the caller's (``registry.run`` checks them on the whole view)."""
    if not is_partitioned(analysis, params):
        raise ValueError(f"{analysis.name} is not declared partition = {RANK!r}")
    ranks = trace.ranks
    if len(ranks) <= 1:
        return analysis.run(trace, params)
    items = tuple(sorted(params.items()))
    tasks = [RankTask(str(trace.path), trace.selections, batch, analysis.name, items)
             for batch in rank_batches(ranks, ranks_per_task)]
    partials = [p for p in engine.map(run_task, tasks) if p is not None]
    if not partials:  # no batch has the data: the whole run raises the missing-data error
        return analysis.run(trace, params)
    return merge(analysis, partials, params)
