"""Analyses on any engine, in bounded memory: map over batches of ranks, reduce by merge.

One code path for every engine (``LocalEngine`` inline or in a process pool, ``DaskEngine``
on a LocalCluster or a scheduler). An analysis opts in with a class attribute:

``partition = "rank"``
    Running the analysis on each rank alone (``trace.select(ranks=[r])``) and
    concatenating the tables gives the whole-trace ``Result``. Analyses without it
    (``partition`` absent or ``"trace"``) need every rank at once (cross-rank matching,
    replay, trace-wide statistics) and run whole.

``partition = "message"``
    For analyses of the ``messages`` table: each batch reads the messages stored in its
    own ranks' parts (a message row lives in one part, the sender's in every reader here)
    and every other table by its ranks, so each message is counted by exactly one batch;
    the batches cover every rank of the store (a rank selection keeps a message when
    either side is selected, so its stored side may be outside the selection).
    ``analysis.partitioned_view`` builds both views.

``partition_for(params) -> str`` (optional)
    The same declaration when it depends on a parameter (per rank for one value, whole
    for another): overrides ``partition``.

``partials(trace, [params, ...]) -> [Result, ...]`` (optional)
    ``partial`` for several parameter sets on one batch, sharing what they read
    (``run_partitioned_together``).

``partial(trace, params) -> Result`` (optional)
    The map step when it is not ``run`` itself: what one batch sends back for the merge
    (``profile by=name`` sends its per-rank sums, ``message_histogram`` its sizes with
    their counts). Without it the worker runs ``run``.

``prepare(trace, params) -> Result`` and ``prepared(partials, params) -> dict`` (optional)
    A first pass for a value the map step needs from every batch (``comm_over_time``: the
    trace span its bins divide): ``prepare`` runs on each batch, ``prepared`` combines the
    answers into parameters added to ``params`` for the map step and the merge.

``passes`` / ``passes_for(params)`` and ``prepared_<pass>(partials, params) -> dict``
    (optional) Several first passes in order, each run on every batch and combined into
    parameters for the next (``critical_path``: the region, then the cross-rank stubs).

``batch_params(params, batch) -> dict`` (optional)
    The map step's parameters for one batch (what the first passes found, cut to what
    that batch needs: ``critical_path`` sends each batch the messages of its ranks).

``ranks_per_task``, ``whole_if_one_batch``, ``whole_after(params) -> bool`` (optional)
    The analysis' own batch size (still at most ``ROWS_PER_TASK`` rows a batch); run whole
    when one batch holds every rank, or when a first pass found the work small (these
    shortcuts are off when the caller gives ``ranks_per_task``).

``merge(partials, params) -> Result`` (optional)
    The reduce step, for analyses whose result is not the plain concatenation (summary
    rows that combine ranks, a table order that is not rank-first). Without it:
    ``concat`` (tables and extras concatenated in rank order, notes deduplicated);
    analyses whose notes count rows use ``merge = staticmethod(concat_counts)``, which
    adds up the counts of notes that differ only in their numbers.

The map step sends a ``RankTask`` (store path, the view's selections, a batch of ranks,
the analysis name and its typed parameters: never data frames) to the engine; the worker
opens the store itself (workers must see the store path: a local, shared or parallel file
system; a remote store travels as its URL and each worker fetches its batch's parts,
``store/remote.py``) and runs the analysis on that batch. Only the small result tables
travel back.
Peak memory per worker is what the analysis needs for one batch: at most
``DEFAULT_RANKS_PER_TASK`` ranks and ``ROWS_PER_TASK`` stored rows (the manifest's
counts; a bigger rank runs alone: ``trace_batches``), independent of the number of ranks
in the trace; the client holds the partial results (the size of the final result).

API: ``is_partitioned(analysis, params)``, ``partition_of``,
``run_partitioned(analysis, trace, params, engine)``, ``rank_batches``,
``trace_batches`` / ``sized_batches`` / ``rank_rows``, ``RankTask`` /
``run_task`` (the mapped function; its result ``detached_result``),
``run_partitioned_together`` / ``run_task_together`` (several parameter sets of one
analysis in one map, for analyses with a ``partials`` hook), ``run_whole`` (an
analysis that needs every rank, as one task on an engine whose workers run elsewhere),
``batch_view``,
``concat``, ``concat_counts``, ``summed_notes``, ``batch_ranks``.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.base import Analysis, Result

if TYPE_CHECKING:
    from traceatlas.engine.base import Engine
    from traceatlas.model.trace import Trace
    from traceatlas.ops.select import Selection

RANK = "rank"
"""``partition`` value: the analysis runs on each rank alone; results concatenate."""
MESSAGE = "message"
"""``partition`` value: each message read on the one rank whose part stores it."""
PARTITIONS = (RANK, MESSAGE)
WHOLE = "whole"
"""``RankTask.by`` of an analysis run whole on a worker (``run_whole``): the client's
selections, no batch."""
DEFAULT_RANKS_PER_TASK = 4
"""Ranks one task reads at most at once: tasks stay coarse, memory stays bounded by 4 ranks."""
ROWS_PER_TASK = 4_000_000
"""Stored rows (every table, from the manifest) one task reads at most, unless one rank
alone has more: big ranks (a 1 GB Kineto file is ~3.9 M rows) run one a task, so peak
memory follows the largest rank, not ``DEFAULT_RANKS_PER_TASK`` of them."""


def partition_of(analysis: Analysis, params: Mapping[str, Any] | None = None) -> str:
    """``analysis``'s ``partition`` (``partition_for(params)`` when it has one and
    ``params`` are given); ``"trace"`` when it declares none."""
    hook = getattr(analysis, "partition_for", None)
    if hook is not None and params is not None:
        return str(hook(params))
    return str(getattr(analysis, "partition", "trace"))


def is_partitioned(analysis: Analysis, params: Mapping[str, Any] | None = None) -> bool:
    """True when ``analysis`` declares ``partition = "rank"`` or ``"message"`` (or its
    ``partition_for`` returns one for the typed ``params``)."""
    return partition_of(analysis, params) in PARTITIONS


@dataclass(frozen=True)
class RankTask:
    """What a worker needs to run one batch: no data, only where to read it."""

    store: str
    selections: tuple[Selection, ...]
    ranks: tuple[int, ...]
    analysis: str
    params: tuple[tuple[str, Any], ...]
    by: str = RANK
    """``RANK`` or ``MESSAGE``: how the batch's view selects its rows; ``WHOLE``: the
    client's view itself (``ranks`` empty)."""
    step: str = "partial"
    """``partial`` (the map step: ``partial``, else ``run``) or ``prepare``."""
    also: tuple[tuple[tuple[str, Any], ...], ...] = ()
    """More parameter sets run in the same task (``run_task_together``)."""


def rank_batches(ranks: Sequence[int], ranks_per_task: int) -> list[tuple[int, ...]]:
    """``ranks`` (ascending) cut into consecutive batches of at most ``ranks_per_task``."""
    size = max(1, ranks_per_task)
    return [tuple(ranks[i:i + size]) for i in range(0, len(ranks), size)]


def rank_rows(manifest: Mapping[str, Any]) -> dict[int, int]:
    """Stored rows per rank over every table, from the manifest's part records
    (``<table>/rank=<r>/<file>``: ``rows``); ranks without records are absent."""
    rows: dict[int, int] = {}
    for part in manifest.get("parts") or ():
        match = re.search(r"(?:^|/)rank=(-?\d+)/", str(part.get("path", "")))
        if match:
            rank = int(match.group(1))
            rows[rank] = rows.get(rank, 0) + int(part.get("rows") or 0)
    return rows


def sized_batches(ranks: Sequence[int], rows: Mapping[int, int],
                  ranks_per_task: int = DEFAULT_RANKS_PER_TASK,
                  rows_per_task: int = ROWS_PER_TASK) -> list[tuple[int, ...]]:
    """``ranks`` (ascending) cut into consecutive batches of at most ``ranks_per_task``
    ranks whose ``rows`` (missing: 0) add up to at most ``rows_per_task``; a rank with
    more rows than that is a batch alone."""
    out: list[list[int]] = []
    total = 0
    for rank in ranks:
        size = int(rows.get(rank, 0))
        if not out or len(out[-1]) >= max(1, ranks_per_task) or total + size > rows_per_task:
            out.append([])
            total = 0
        out[-1].append(rank)
        total += size
    return [tuple(batch) for batch in out]


def trace_batches(trace: Trace, ranks: Sequence[int],
                  ranks_per_task: int = DEFAULT_RANKS_PER_TASK) -> list[tuple[int, ...]]:
    """``sized_batches`` of ``ranks`` with the rows ``trace``'s store records per rank."""
    return sized_batches(ranks, rank_rows(trace.manifest), ranks_per_task)


@functools.lru_cache(maxsize=4)
def _open(store: str, stamp: tuple[int, int]) -> Trace:
    """The store opened (and verified) once per worker process while its manifest is the
    same file (``stamp``: ``store.layout.store_stamp``, inode and mtime ns; a remote
    store's manifest size and ETag)."""
    from traceatlas.model.trace import Trace

    return Trace(store)


def _trace_view(task: RankTask) -> Trace:
    """The worker's view: the client's selections plus this batch's ranks (messages:
    the batch's own parts, ``partitioned_view``)."""
    from traceatlas.analysis.partitioned_view import message_view, rank_view
    from traceatlas.store.layout import store_stamp

    base = _open(task.store, store_stamp(task.store))  # a path, or a remote store's URL
    if task.by == WHOLE:
        view = copy.copy(base)
        view.selections = task.selections
        return view
    make = message_view if task.by == MESSAGE else rank_view
    return make(base, task.selections, task.ranks)


def batch_view(store: str, selections: tuple[Selection, ...], ranks: tuple[int, ...]
               ) -> Trace:
    """A worker's view of ``ranks`` of ``store`` with the client's ``selections`` (the
    store opened once per worker process), for mapped functions that are not analyses
    (the report's timeline)."""
    return _trace_view(RankTask(store, selections, ranks, "", ()))


def run_task(task: RankTask) -> Result | None:
    """The mapped function: run ``task.analysis`` (its ``partial`` when it has one) on
    its batch of ranks (in a worker). None when the batch has none of the data the
    analysis reads (``MissingDataError``): the whole trace has no row for those ranks
    either."""
    from traceatlas.analysis.registry import get_analysis
    from traceatlas.errors import MissingDataError

    analysis = get_analysis(task.analysis)
    if task.by == WHOLE:  # errors are the command's, as when it runs in the client
        return detached_result(analysis.run(_trace_view(task), dict(task.params)))
    step = getattr(analysis, task.step, None) or analysis.run
    try:
        result: Result = step(_trace_view(task), dict(task.params))
    except MissingDataError:
        return None
    return detached_result(result)


def run_task_together(task: RankTask) -> list[Result | None]:
    """The mapped function of ``run_partitioned_together``: the analysis' ``partials`` on
    the batch for ``task.params`` and each of ``task.also`` (one list entry each; None
    when the batch has none of the data)."""
    from traceatlas.analysis.registry import get_analysis
    from traceatlas.errors import MissingDataError

    analysis = get_analysis(task.analysis)
    try:
        results: list[Result] = analysis.partials(  # type: ignore[attr-defined]
            _trace_view(task), [dict(task.params), *(dict(p) for p in task.also)])
    except MissingDataError:
        return [None] * (1 + len(task.also))
    return [detached_result(r) for r in results]


def detached_result(result: Result) -> Result:
    """``result`` with every table in its own buffers (``ops.detach``): a partial held
    while the next batches run keeps none of its batch's data (peak memory stays one
    batch's, whatever the number of batches)."""
    from traceatlas.ops.detach import detached

    return Result(detached(result.table),
                  {name: detached(frame) for name, frame in result.extra.items()},
                  list(result.notes))


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
    merged.notes = summed_notes(partials)
    return merged


def summed_notes(partials: Sequence[Result]) -> list[str]:
    """The partials' notes, those that differ only in their counts merged into one with
    each count summed (``concat_counts``' note rule), in first-seen order."""
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
    return [template.format(*total) for template, total in sums.items()]


def batch_ranks(partials: Sequence[Result]) -> int:
    """Ranks of the selection over all batches, from each partial's extra table
    ``ranks`` (one row per rank of its view; the batches' ranks are disjoint)."""
    return sum(p.extra["ranks"].height for p in partials if "ranks" in p.extra)


def merge(analysis: Analysis, partials: Sequence[Result],
          params: Mapping[str, Any]) -> Result:
    """``analysis.merge(partials, params)`` when it has one, else ``concat``."""
    hook = getattr(analysis, "merge", None)
    if hook is not None:
        merged: Result = hook(partials, params)
        return merged
    return concat(partials)


def run_whole(analysis: Analysis, trace: Trace, params: Mapping[str, Any],
              engine: Engine) -> Result:
    """``analysis.run(trace, params)`` as one task on ``engine`` (its worker opens the
    store and applies ``trace``'s selections): for analyses that need every rank at once,
    on an engine whose workers run elsewhere (``Engine.runs_elsewhere``). The result is
    the same; the client holds it, not the analysis' input. A view that is not a plain
    store view (an in-memory ``Trace`` subclass) runs here."""
    from traceatlas.model.trace import Trace as StoreView

    if type(trace) is not StoreView:
        return analysis.run(trace, params)
    task = RankTask(trace.location, trace.selections, (), analysis.name,
                    tuple(sorted(params.items())), WHOLE, "run")
    result = engine.map(run_task, [task])[0]
    assert result is not None  # a WHOLE task returns its result or raises
    return result


def run_partitioned(analysis: Analysis, trace: Trace, params: Mapping[str, Any],
                    engine: Engine, *, ranks_per_task: int | None = None) -> Result:
    """``analysis`` (declared ``partition = "rank"``) mapped over batches of the ranks of
    ``trace`` on ``engine``, reduced by its merge. ``params`` are typed (``parse_params``);
    requirements are the caller's (``registry.run`` checks them on the whole view).
    ``ranks_per_task``: the analysis' own ``ranks_per_task`` when it declares one, else
    ``DEFAULT_RANKS_PER_TASK``; an analysis declaring ``whole_if_one_batch`` runs whole
    when one batch holds every rank (``run_whole``: on a worker when the engine's run
    elsewhere, else here), and one declaring ``whole_after(params)`` when that says so
    after a first pass (the size of a step it found); not with a ``ranks_per_task``
    given here."""
    by = partition_of(analysis, params)
    if by not in PARTITIONS:
        raise ValueError(f"{analysis.name} is not declared partition = {RANK!r} or "
                         f"{MESSAGE!r}")
    ranks = trace.ranks
    if by == MESSAGE:  # a selected message may be stored on an unselected rank
        ranks = sorted(int(r) for r in trace.manifest["ranks"])
    if len(ranks) <= 1:
        return analysis.run(trace, params)
    chosen = ranks_per_task is not None  # a caller's batch size: no whole-run shortcut
    if ranks_per_task is None:
        ranks_per_task = int(getattr(analysis, "ranks_per_task", DEFAULT_RANKS_PER_TASK))
    batches = trace_batches(trace, ranks, ranks_per_task)
    given = params

    def whole() -> Result:
        return run_whole(analysis, trace, given, engine) if engine.runs_elsewhere \
            else analysis.run(trace, given)

    if len(batches) == 1 and getattr(analysis, "whole_if_one_batch", False):
        return whole()

    own = getattr(analysis, "batch_params", None)

    def tasks(step: str, given: Mapping[str, Any]) -> list[RankTask]:
        def items(batch: tuple[int, ...]) -> tuple[tuple[str, Any], ...]:
            mine = own(given, batch) if own is not None and step == "partial" else given
            return tuple(sorted(mine.items()))

        return [RankTask(trace.location, trace.selections, batch, analysis.name,
                         items(batch), by, step) for batch in batches]

    for step in prepare_passes(analysis, params):  # first passes: what the map step needs
        first = [p for p in engine.map(run_task, tasks(step, params)) if p is not None]
        combine = getattr(analysis, "prepared" if step == "prepare" else f"prepared_{step}")
        params = {**params, **combine(first, params)}
        small = getattr(analysis, "whole_after", None)
        if small is not None and not chosen and small(params):
            return whole()  # what the passes found fits one batch: the whole run
    partials = [p for p in engine.map(run_task, tasks("partial", params)) if p is not None]
    if not partials:  # no batch has the data: the whole run raises the missing-data error
        return analysis.run(trace, params)
    return merge(analysis, partials, params)


def prepare_passes(analysis: Analysis, params: Mapping[str, Any] | None = None
                   ) -> tuple[str, ...]:
    """The passes run on every batch before the map step, in order: ``passes_for(params)``
    or ``passes`` (each combined by ``prepared_<pass>``), else ``prepare`` (``prepared``)
    when it has one."""
    hook = getattr(analysis, "passes_for", None)
    if hook is not None and params is not None:
        return tuple(hook(params))
    declared: tuple[str, ...] | None = getattr(analysis, "passes", None)
    if declared is not None:
        return tuple(declared)
    return ("prepare",) if hasattr(analysis, "prepare") else ()


def can_run_together(analysis: Analysis, param_sets: Sequence[Mapping[str, Any]]) -> bool:
    """True when ``analysis`` has a ``partials`` hook, no first pass, and every one of the
    (typed) ``param_sets`` runs per rank."""
    return (hasattr(analysis, "partials")
            and not any(prepare_passes(analysis, p) for p in param_sets)
            and all(partition_of(analysis, p) == RANK for p in param_sets))


def run_partitioned_together(analysis: Analysis, trace: Trace,
                             param_sets: Sequence[Mapping[str, Any]], engine: Engine, *,
                             ranks_per_task: int = DEFAULT_RANKS_PER_TASK) -> list[Result]:
    """``[run_partitioned(analysis, trace, p, engine) for p in param_sets]`` in one map:
    each batch runs the analysis' ``partials`` for every set, so what the sets share
    (``kernels``: the device rows and the ops' shapes) is read once per batch; each set's
    partials are then merged as ``run_partitioned`` merges them (same results)."""
    if not can_run_together(analysis, param_sets):
        raise ValueError(f"{analysis.name} cannot run several parameter sets together")
    ranks = trace.ranks
    if len(ranks) <= 1:
        return [analysis.run(trace, p) for p in param_sets]
    items = [tuple(sorted(p.items())) for p in param_sets]
    tasks = [RankTask(trace.location, trace.selections, batch, analysis.name, items[0], RANK,
                      "partial", tuple(items[1:]))
             for batch in trace_batches(trace, ranks, ranks_per_task)]
    answers = engine.map(run_task_together, tasks)
    out = []
    for i, params in enumerate(param_sets):
        partials = [p for p in (a[i] for a in answers) if p is not None]
        out.append(merge(analysis, partials, params) if partials
                   else analysis.run(trace, params))  # no batch has the data: its error
    return out
