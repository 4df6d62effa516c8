"""Data an analysis can require, each with a check and a plain description; and why
it is missing when a reader lost it (``explain``: the readers' data-quality notes in
the ``metadata`` table, e.g. "job.sqlite: table CUPTI_ACTIVITY_KIND_KERNEL lacks column(s)
start, so its 12 row(s) were not read").

Each check asks whether the view has a row matching one or more ``Clause``s (a table,
allowed values of string columns, columns that must be set). The store's metadata answers
first (``requirements_meta``: manifest row counts per rank, the selections, Parquet
footer statistics; exact or undecided); only an undecided clause is scanned in the
client (``scan_any``: the first matching row). Undecided: step / window / name /
minimum-duration selections when the rows may exist, ``messages`` under any selection,
stores without part records, and categories the footer statistics leave open (see
``requirements_meta``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from traceatlas.analysis.requirements_meta import Clause, decide
from traceatlas.io.quality import DATA_QUALITY_KEY, Note, parse_notes

if TYPE_CHECKING:
    from traceatlas.model.trace import Trace

DEVICE_WORK = ("kernel", "comm_kernel", "memcpy", "memset")
"""Categories of device activity (not annotations)."""


_SHOWN_NOTES = 3
"""Notes quoted in one missing-data message (the rest are counted)."""


@dataclass(frozen=True)
class Requirement:
    """A named precondition on the data; ``categories``, ``columns`` and ``tables``
    (canonical names) are what it reads, to find the notes that explain its absence."""

    description: str
    check: Callable[[Trace], bool]
    categories: tuple[str, ...] = ()
    columns: tuple[str, ...] = ()
    tables: tuple[str, ...] = ()

    def explained_by(self, note: Note) -> bool:
        """True when ``note`` lost data this requirement reads: rows of its categories
        (or tables, when either side names no category), or one of its columns."""
        if note.columns and not set(note.columns) & set(self.columns):
            return False
        if self.categories and note.categories:
            return bool(set(note.categories) & set(self.categories))
        return bool(set(note.tables) & set(self.tables))


_MEMO = "_any_row_memo"
"""Attribute of a ``Trace`` view holding its answers by clause (see ``any_row``)."""


def any_row(trace: Trace, clause: Clause) -> bool:
    """True when ``trace`` (a view) has a row matching ``clause``: from metadata where it
    decides (``requirements_meta.decide``), else by a scan (``scan_any``). The answer is
    kept on the view (a view reads the parts its manifest, read on opening, names, and
    its selections never change), so the requirement checks of every analysis a report
    or the advisor runs on one view decide or scan each clause once. The memo holds the
    very objects it was made for (path, manifest, selections): a copy of the view given
    other selections (``copy.copy``, as the workers' batch views are made) starts afresh."""
    owner = (trace.path, trace.manifest, trace.selections)
    kept = vars(trace).get(_MEMO)
    if kept is None or any(a is not b for a, b in zip(kept[0], owner, strict=True)):
        kept = vars(trace)[_MEMO] = (owner, {})
    memo: dict[Clause, bool] = kept[1]
    if clause not in memo:
        known = decide(trace, clause)
        memo[clause] = scan_any(trace, clause) if known is None else known
    return memo[clause]


def scan_any(trace: Trace, clause: Clause) -> bool:
    """The scan: the first selected row of ``clause.table`` matching ``clause``."""
    import polars as pl

    frame = trace.scan(clause.table)
    for column, values in clause.values:
        frame = frame.filter(pl.col(column).cast(pl.String).is_in(values))
    for column in clause.not_null:
        frame = frame.filter(pl.col(column).is_not_null())
    return bool(frame.select("rank").head(1).collect().height)


def _check(*groups: Sequence[Clause]) -> Callable[[Trace], bool]:
    """A check: every group has a matching row in one of its clauses (AND of ORs)."""
    def check(trace: Trace) -> bool:
        return all(any(any_row(trace, c) for c in group) for group in groups)
    return check


def _cats(*categories: str, not_null: tuple[str, ...] = ()) -> Clause:
    return Clause("intervals", (("category", categories),), not_null)


_DEVICE = _cats(*DEVICE_WORK)
_HOST_CALLS = ("runtime", "driver")
_INTERVALS = ("intervals",)
REQUIREMENTS: Mapping[str, Requirement] = {
    "intervals": Requirement("events with a duration", _check([Clause("intervals")]),
                             tables=_INTERVALS, columns=("start_ns",)),
    "device": Requirement("device activity (kernels, memcpy or memset)", _check([_DEVICE]),
                          DEVICE_WORK, ("start_ns",), _INTERVALS),
    "correlation": Requirement(
        "correlation ids linking host launches (runtime/driver calls) to device activity",
        _check([_cats(*DEVICE_WORK, not_null=("correlation",))],
               [_cats(*_HOST_CALLS, not_null=("correlation",))]),
        (*DEVICE_WORK, *_HOST_CALLS), ("correlation", "start_ns"), _INTERVALS),
    "steps": Requirement("iteration markers (ProfilerStep#N, or --param marker=...)",
                         _check([_cats("step")]), ("step",), ("start_ns", "name"),
                         _INTERVALS),
    "comm": Requirement("communication kernels (NCCL/RCCL)", _check([_cats("comm_kernel")]),
                        ("comm_kernel",), ("start_ns", "name"), _INTERVALS),
    "counters": Requirement(
        "counter samples (GPU metrics, PAPI, ...) or CUPTI range-profiler events",
        _check([Clause("counters"), Clause("intervals", (("source_category",
                                                           ("cuda_profiler_range",)),))]),
        tables=("counters",), columns=("ts_ns", "value")),
    "messages": Requirement("point-to-point messages (MPI)",
                            _check([Clause("messages")]),
                            tables=("messages",),
                            columns=("send_start_ns", "recv_start_ns", "src_rank", "dst_rank")),
    "mpi": Requirement("MPI calls (category mpi intervals)", _check([_cats("mpi")]),
                       ("mpi",), ("start_ns",), _INTERVALS),
}
"""Requirement name -> check; analyses list the names they need in ``requires``."""


def explain(trace: Trace, missing: Sequence[str]) -> str:
    """Why the ``missing`` requirements are not met, from the readers' notes: ``""``
    when no note explains them, else ``" (<file>: <table> <problem>; ...)"``."""
    notes = [n for n in _notes(trace)
             if any(REQUIREMENTS[r].explained_by(n) for r in missing)]
    if not notes:
        return ""
    shown = "; ".join(n.text() for n in notes[:_SHOWN_NOTES])
    more = len(notes) - _SHOWN_NOTES
    return f" ({shown}{f'; and {more} more data-quality note(s)' if more > 0 else ''})"


def _notes(trace: Trace) -> list[Note]:
    import polars as pl

    values = (trace.scan("metadata").filter(pl.col("key") == DATA_QUALITY_KEY)
              .select("value").collect())
    return parse_notes([str(v) for v in values["value"].to_list()])
