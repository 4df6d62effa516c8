"""Data an analysis can require, each with a check and a plain description."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

DEVICE_WORK = ("kernel", "comm_kernel", "memcpy", "memset")
"""Categories of device activity (not annotations)."""


@dataclass(frozen=True)
class Requirement:
    """A named precondition on the data."""

    description: str
    check: Callable[[Trace], bool]


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


REQUIREMENTS: Mapping[str, Requirement] = {
    "intervals": Requirement("events with a duration", _intervals),
    "device": Requirement("device activity (kernels, memcpy or memset)", _device),
    "correlation": Requirement(
        "correlation ids linking host launches (runtime/driver calls) to device activity",
        _correlation),
    "steps": Requirement("iteration markers (ProfilerStep#N, or --param marker=...)", _steps),
    "comm": Requirement("communication kernels (NCCL/RCCL)", _comm),
    "counters": Requirement(
        "counter samples (GPU metrics, PAPI, ...) or CUPTI range-profiler events", _counters),
    "messages": Requirement("point-to-point messages (MPI)", _messages),
    "mpi": Requirement("MPI calls (category mpi intervals)", _mpi),
}
"""Requirement name -> check; analyses list the names they need in ``requires``."""
