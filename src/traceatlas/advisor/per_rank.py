"""Per-rank figures of the advisor's rules, computed one rank at a time: on the engine's
workers when the context has one, else here.

A rule names a function (``"module:function"``, called as ``function(view, rank, *args)``
with ``view`` the trace of that one rank) and the ranks; ``map_ranks`` sends batches of
ranks (``RankCall``: the store, the view's selections, the ranks, the function's name and
its arguments; never data) to the engine, each worker opens its ranks' parts and sends
back the small values. The client never holds every rank's rows, nor a per-event result
of every rank (``launch``: one row per launch; ``annotations``: one per kernel), only the
values and, where a rule needs details, one rank's result (``rank_result``).

An analysis declared per rank (``partition = "rank"``) run on one rank's view gives the
whole run's rows of that rank (``analysis.partitioned``): the figures equal those taken
from the whole result.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from traceatlas.advisor.base import Context
    from traceatlas.analysis.base import Result
    from traceatlas.model.trace import Trace
    from traceatlas.ops.select import Selection


@dataclass(frozen=True)
class RankCall:
    """One batch for a worker: where to read, which ranks, what to call with what."""

    store: str
    selections: tuple[Selection, ...]
    ranks: tuple[int, ...]
    function: str
    """``module:function``, called as ``function(view of one rank, rank, *args)``."""
    args: tuple[Any, ...] = ()


def _function(name: str) -> Any:
    module, _, attr = name.partition(":")
    return getattr(importlib.import_module(module), attr)


def call(task: RankCall) -> list[Any]:
    """The mapped function: ``task.function`` on each rank of the batch, in order."""
    from traceatlas.analysis.partitioned import batch_view

    view = batch_view(task.store, task.selections, task.ranks)
    fn = _function(task.function)
    return [fn(view.select(ranks=[rank]), rank, *task.args) for rank in task.ranks]


def map_ranks(ctx: Context, function: str, ranks: Iterable[int], *args: Any) -> list[Any]:
    """``function(view of one rank, rank, *args)`` for each of ``ranks`` (ascending): in
    rank batches (``DEFAULT_RANKS_PER_TASK``) on ``ctx.engine`` when it has one, else
    here, one rank after the other. Results in ascending rank order."""
    from traceatlas.analysis.partitioned import DEFAULT_RANKS_PER_TASK, rank_batches

    order = sorted(set(ranks))
    if ctx.engine is None or len(order) <= 1:
        fn = _function(function)
        return [fn(ctx.trace.select(ranks=[rank]), rank, *args) for rank in order]
    tasks = [RankCall(ctx.trace.location, ctx.trace.selections, batch, function, args)
             for batch in rank_batches(order, DEFAULT_RANKS_PER_TASK)]
    return [value for part in ctx.engine.map(call, tasks) for value in part]


def rank_result(view: Trace, name: str, **params: Any) -> Result | None:
    """The analysis ``name`` (declared per rank) run on ``view`` (one rank, in this
    process), None when the rank lacks its data (``MissingDataError``)."""
    from traceatlas.analysis import registry
    from traceatlas.errors import MissingDataError

    try:
        return registry.run(name, view, params)
    except MissingDataError:
        return None
