"""traceatlas: performance traces of HPC and AI runs into answers.

>>> import traceatlas
>>> trace = traceatlas.open("examples/sample_trace")      # doctest: +SKIP
>>> trace.intervals.filter(category="kernel").collect()   # doctest: +SKIP
"""

from traceatlas._version import __version__
from traceatlas.api import open
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
from traceatlas.ingest import ingest
from traceatlas.model.trace import Trace
from traceatlas.summary import summarize

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
