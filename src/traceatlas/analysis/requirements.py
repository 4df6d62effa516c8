"""Data an analysis can require, each with a check and a plain description; and why
it is missing when a reader lost it (``explain``: the readers' data-quality notes in
the ``metadata`` table, e.g. "job.sqlite: table CUPTI_ACTIVITY_KIND_KERNEL lacks column(s)
start, so its 12 row(s) were not read")."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from traceatlas.io.quality import DATA_QUALITY_KEY, Note, parse_notes

if TYPE_CHECKING:
    import polars as pl

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


def _any(trace: Trace, table: str, condition: pl.Expr | None = None) -> bool:
    frame = trace.scan(table)
    if condition is not None:
        frame = frame.filter(condition)
    return bool(frame.select("rank").head(1).collect().height)


def _device(trace: Trace) -> bool:
    import polars as pl

    return _any(trace, "intervals", pl.col("category").cast(pl.String).is_in(DEVICE_WORK))


def _correlation(trace: Trace) -> bool:
    import polars as pl

    cat = pl.col("category").cast(pl.String)
    return _any(trace, "intervals", cat.is_in(DEVICE_WORK) & pl.col("correlation").is_not_null()
                ) and _any(trace, "intervals", cat.is_in(("runtime", "driver"))
                           & pl.col("correlation").is_not_null())


def _steps(trace: Trace) -> bool:
    import polars as pl

    return _any(trace, "intervals", pl.col("category").cast(pl.String) == "step")


def _comm(trace: Trace) -> bool:
    import polars as pl

    return _any(trace, "intervals", pl.col("category").cast(pl.String) == "comm_kernel")


def _counters(trace: Trace) -> bool:
    """Sampled counters, or Kineto's CUPTI range-profiler events (counters in ``args``)."""
    import polars as pl

    return _any(trace, "counters") or _any(
        trace, "intervals",
        pl.col("source_category").cast(pl.String) == "cuda_profiler_range")


def _messages(trace: Trace) -> bool:
    return _any(trace, "messages")


def _mpi(trace: Trace) -> bool:
    import polars as pl

    return _any(trace, "intervals", pl.col("category").cast(pl.String) == "mpi")


def _intervals(trace: Trace) -> bool:
    return _any(trace, "intervals")


_HOST_CALLS = ("runtime", "driver")
_INTERVALS = ("intervals",)
REQUIREMENTS: Mapping[str, Requirement] = {
    "intervals": Requirement("events with a duration", _intervals,
                             tables=_INTERVALS, columns=("start_ns",)),
    "device": Requirement("device activity (kernels, memcpy or memset)", _device,
                          DEVICE_WORK, ("start_ns",), _INTERVALS),
    "correlation": Requirement(
        "correlation ids linking host launches (runtime/driver calls) to device activity",
        _correlation, (*DEVICE_WORK, *_HOST_CALLS), ("correlation", "start_ns"), _INTERVALS),
    "steps": Requirement("iteration markers (ProfilerStep#N, or --param marker=...)", _steps,
                         ("step",), ("start_ns", "name"), _INTERVALS),
    "comm": Requirement("communication kernels (NCCL/RCCL)", _comm, ("comm_kernel",),
                        ("start_ns", "name"), _INTERVALS),
    "counters": Requirement(
        "counter samples (GPU metrics, PAPI, ...) or CUPTI range-profiler events", _counters,
        tables=("counters",), columns=("ts_ns", "value")),
    "messages": Requirement("point-to-point messages (MPI)", _messages,
                            tables=("messages",),
                            columns=("send_start_ns", "recv_start_ns", "src_rank", "dst_rank")),
    "mpi": Requirement("MPI calls (category mpi intervals)", _mpi, ("mpi",), ("start_ns",),
                       _INTERVALS),
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
