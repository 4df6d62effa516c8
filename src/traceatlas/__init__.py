"""traceatlas: performance traces of HPC and AI runs into answers.

>>> import traceatlas
>>> trace = traceatlas.open("examples/sample_trace")      # doctest: +SKIP
>>> trace.intervals.filter(category="kernel").collect()   # doctest: +SKIP

``open``, ``summarize`` and ``Trace`` are imported on first use (module ``__getattr__``),
so ``import traceatlas`` (and the CLI's start-up) loads no Arrow, Polars or DuckDB.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from traceatlas._version import __version__
from traceatlas.errors import (
    CorruptTraceError,
    DataQualityWarning,
    InputError,
    InputNotFoundError,
    QueryError,
    RankConflictError,
    RankInferredWarning,
    StoreError,
    TraceAtlasError,
    UnsupportedFormatError,
)
from traceatlas.ingest import ingest  # light: the package imports its workers on first use

if TYPE_CHECKING:
    from traceatlas.api import open
    from traceatlas.model.trace import Trace
    from traceatlas.summary import summarize

_LAZY = {
    "open": "traceatlas.api",
    "Trace": "traceatlas.model.trace",
    "summarize": "traceatlas.summary",
}

__all__ = [
    "CorruptTraceError",
    "DataQualityWarning",
    "InputError",
    "InputNotFoundError",
    "QueryError",
    "RankConflictError",
    "RankInferredWarning",
    "StoreError",
    "Trace",
    "TraceAtlasError",
    "UnsupportedFormatError",
    "__version__",
    "ingest",
    "open",
    "summarize",
]


def __getattr__(name: str) -> Any:
    """The lazily imported public names (``open``, ``Trace``, ``summarize``)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
