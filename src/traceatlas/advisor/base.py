"""What a rule returns (``Finding``) and what it reads (``Context``: the trace and the
analysis results it needs, computed on first use and cached)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from traceatlas.errors import MissingDataError, TraceAtlasError
from traceatlas.names import display_name

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.analysis.base import Result
    from traceatlas.engine.base import Engine
    from traceatlas.model.trace import Trace

POP_THRESHOLD = 0.8
"""POP practice: an efficiency below this deserves attention (severity ``high``)."""


@dataclass
class Finding:
    """One problem found in the trace and the time it costs.

    ``statement``: one line in plain words with the user's names (kernels, annotations,
    ranks); ``cost_ns``: the time it costs (ns; each rule documents its definition);
    ``evidence``: numbers, ranks and time window behind it; ``next_step``: what to look
    at or try; ``command``: the traceatlas command that zooms in. ``metric``: the POP
    efficiency metric the finding explains (``efficiency`` analysis names), and
    ``efficiency`` the rule's own estimate of it (0..1) when it has one; the advisor
    sets ``severity`` to ``high`` when the efficiency (the ``efficiency`` analysis'
    value when available, else this estimate) is below ``POP_THRESHOLD``.

    Machine-readable: ``cause`` (a word of ``traceatlas.advisor.causes.CAUSES``; empty =
    the rule's default cause), ``ranks`` (the ranks it concerns), ``per_step`` (when steps
    exist: ``{"ms": median cost per step in ms, "count": events per step}``, count only
    where the cause is counted), ``where`` (``annotation``, ``op``, ``kernel``,
    ``call_site`` it points at; only the keys known).

    ``window_ns``: the (start, end) absolute ns the rule's evidence points at, when it
    has one; ``view``: the ``traceatlas view`` command opening the viewer there (set by
    ``view_link.attach``, "" until then).
    """

    rule: str
    statement: str
    cost_ns: int
    evidence: str
    next_step: str
    command: str
    metric: str | None = None
    efficiency: float | None = None
    severity: str = "info"
    cause: str = ""
    ranks: list[int] = field(default_factory=list)
    per_step: dict[str, float] | None = None
    where: dict[str, str] = field(default_factory=dict)
    window_ns: tuple[int, int] | None = None
    view: str = ""
    cost_bytes: int | None = None
    """Memory findings: the bytes at stake (their ``cost_ns`` is 0); ranked after the
    time findings, never compared with ns (``advisor.rank_findings``)."""


@dataclass
class Context:
    """The trace plus lazily computed, cached analysis results for the rules.

    ``path`` is written into the suggested commands (the user's trace or store path).
    ``notes`` collects why rules were skipped (missing data).
    """

    trace: Trace
    path: str = "PATH"
    notes: list[str] = field(default_factory=list)
    _results: dict[tuple[str, tuple[tuple[str, Any], ...]], Result | None] = field(
        default_factory=dict, repr=False)
    _requirements: dict[str, bool] = field(default_factory=dict, repr=False)
    _efficiency: dict[str, float] | None = field(default=None, repr=False)
    parents: dict[str, str | None] = field(default_factory=dict, repr=False)
    """Efficiency metric -> its parent in the efficiency tree (filled with ``efficiency``)."""
    _span: tuple[int, int] | None = field(default=None, repr=False)
    engine: Engine | None = field(default=None, repr=False)
    """Runs the analyses declared per rank in rank batches (``analysis.partitioned``)."""
    _views: dict[tuple[Any, ...], Result] = field(default_factory=dict, repr=False)

    def cached(self, name: str, **params: Any) -> bool:
        """Whether ``result(name, **params)`` has already run (its answer is cached)."""
        return (name, tuple(sorted(params.items()))) in self._results

    def on_view(self, view: Trace, name: str, **params: Any) -> Result:
        """The analysis ``name`` with ``params`` on ``view`` (a selection of ``trace``:
        one step, some ranks; what a suggested ``--step``/``--ranks`` command runs),
        computed once per (view selections, name, params): the advisor's critical path
        of the typical step and the check of its suggested command share one run.

        ``view`` with the trace's own selections is the whole trace: the ``result``
        cache is shared (a result found there is returned; a new one is stored there).
        Otherwise the analysis runs on ``view`` on the engine (``registry.run``: rank
        batches for a per-rank analysis, the critical path included; on Dask one task for
        the others), or whole in this process without one. Errors (``TraceAtlasError``,
        missing data included) propagate and are not cached."""
        from traceatlas.analysis import registry

        items = tuple(sorted(params.items()))
        if view.selections == self.trace.selections:
            found = self._results.get((name, items))
            if found is not None:
                return found
            whole = registry.run(name, view, params, engine=self.engine)
            self._results[(name, items)] = whole
            return whole
        key = (view.location, view.selections, name, items)
        if key not in self._views:
            self._views[key] = registry.run(name, view, params, engine=self.engine)
        return self._views[key]

    def result(self, name: str, **params: Any) -> Result | None:
        """The analysis ``name`` run with ``params``, or None when the trace lacks its
        data (MissingDataError) or the analysis is not registered."""
        from traceatlas.analysis import registry

        key = (name, tuple(sorted(params.items())))
        if key not in self._results:
            if name not in registry.ANALYSES:
                self._results[key] = None
            else:
                try:
                    self._results[key] = registry.run(name, self.trace, params,
                                                      engine=self.engine)
                except MissingDataError as err:
                    why = str(err).split(". Analyses that apply", 1)[0]
                    why = why if why.startswith(name) else f"{name}: {why}"
                    self.notes.append(f"skipped: {why}")
                    self._results[key] = None
        return self._results[key]

    def results_together(self, name: str, param_sets: Sequence[Mapping[str, Any]]) -> None:
        """Compute ``result(name, **p)`` for each of ``param_sets`` not cached yet, in one
        pass over the rank batches when the analysis shares work between them
        (``registry.run_together``; the report's ``kernels`` by rank and by name). When
        the trace lacks the data nothing is cached: each ``result`` call then notes it."""
        from traceatlas.analysis import registry

        todo = {(name, tuple(sorted(p.items()))): p for p in param_sets}
        todo = {k: p for k, p in todo.items() if k not in self._results}
        if len(todo) < 2 or name not in registry.ANALYSES:
            return
        try:
            found = registry.run_together(name, self.trace, list(todo.values()),
                                          engine=self.engine)
        except MissingDataError:
            return
        self._results.update(zip(todo, found, strict=True))

    def has(self, requirement: str) -> bool:
        """Whether the trace meets ``requirements.REQUIREMENTS[requirement]``."""
        from traceatlas.analysis.requirements import REQUIREMENTS

        if requirement not in self._requirements:
            self._requirements[requirement] = REQUIREMENTS[requirement].check(self.trace)
        return self._requirements[requirement]

    @property
    def efficiency(self) -> dict[str, float]:
        """Run-scope POP metrics (metric -> value) from the ``efficiency`` analysis; empty
        when it is not registered or cannot run on this trace."""
        if self._efficiency is None:
            self._efficiency = {}
            try:
                result = self.result("efficiency")
            except TraceAtlasError as err:  # e.g. a region the model cannot use
                self.notes.append(f"efficiency analysis failed, severities are the rules' "
                                  f"own estimates: {type(err).__name__}: {err}")
                result = None
            if result is not None and {"metric", "value"} <= set(result.table.columns):
                table = result.table
                if "scope" in table.columns:
                    table = table.filter(table["scope"] == "run")
                parents = (table["parent"].to_list() if "parent" in table.columns
                           else [None] * table.height)
                for metric, value, parent in zip(table["metric"], table["value"], parents,
                                                 strict=True):
                    if value is not None and metric not in self._efficiency:
                        self._efficiency[str(metric)] = float(value)
                        self.parents[str(metric)] = None if parent is None else str(parent)
        return self._efficiency

    @property
    def window(self) -> tuple[int, int]:
        """First start and last end (ns) over all intervals of the trace."""
        if self._span is None:
            import polars as pl

            row = self.trace.intervals.select(pl.col("start_ns").min(),
                                              pl.col("end_ns").max()).collect().row(0)
            self._span = (int(row[0] or 0), int(row[1] or 0))
        return self._span

    @property
    def span_ns(self) -> int:
        """Trace duration (ns): last interval end - first interval start."""
        start, end = self.window
        return max(end - start, 0)

    def when(self, start_ns: int, end_ns: int) -> str:
        """``start_ns``..``end_ns`` as seconds from the trace start, e.g. ``0.120-1.500 s``."""
        t0 = self.window[0]
        return f"{(start_ns - t0) / 1e9:.3f}-{(end_ns - t0) / 1e9:.3f} s"

    def command(self, analysis: str, *options: str) -> str:
        """``traceatlas analyze ANALYSIS PATH OPTIONS...``, quoted for a POSIX shell
        (``shlex.join``): a path such as ``run 1 (a)`` or ``$(x)`` pastes as one argument;
        a relative path starting with ``-`` gets ``./`` so that it is not an option."""
        path = f"./{self.path}" if self.path.startswith("-") else self.path
        return shlex.join(("traceatlas", "analyze", analysis, path, *options))


def fmt_ns(ns: float) -> str:
    """A duration in readable units: ``1.25 s``, ``12.3 ms``, ``450 us``, ``80 ns``."""
    value = abs(ns)
    if value >= 1e9:
        return f"{ns / 1e9:.3g} s"
    if value >= 1e6:
        return f"{ns / 1e6:.3g} ms"
    if value >= 1e3:
        return f"{ns / 1e3:.3g} us"
    return f"{ns:.0f} ns"


def short_name(name: str, limit: int = 60) -> str:
    """A kernel or region name for a statement: demangled, template arguments shortened,
    cut to ``limit`` characters (``traceatlas.names.display_name``)."""
    return display_name(name, width=limit)


def per_rank_sum(frame: pl.DataFrame, column: str) -> dict[int, int]:
    """Sum of ``column`` per ``rank`` (nulls count 0), as {rank: int}."""
    import polars as pl

    grouped = frame.group_by("rank").agg(pl.col(column).fill_null(0).sum()).sort("rank")
    return {int(r): int(v) for r, v in grouped.iter_rows()}


def heaviest(values: dict[int, int]) -> tuple[int, int]:
    """(rank, value) with the largest value; the lowest rank on a tie."""
    rank = min(values, key=lambda r: (-values[r], r))
    return rank, values[rank]
