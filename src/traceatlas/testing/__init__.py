"""Test helpers: write genuine Kineto JSON traces from code (see ``builder``).

Times given to the builder are integer nanoseconds relative to the trace start.
"""

from traceatlas.testing.builder import (
    DEFAULT_BASE_TIME_NS,
    Collective,
    LaunchKind,
    SyncKind,
    TraceBuilder,
    micros,
    write_multi_rank,
)
from traceatlas.testing.mpi import MpiTrace, write_mpi_trace, write_paraver

__all__ = [
    "DEFAULT_BASE_TIME_NS",
    "Collective",
    "LaunchKind",
    "MpiTrace",
    "SyncKind",
    "TraceBuilder",
    "micros",
    "write_mpi_trace",
    "write_multi_rank",
    "write_paraver",
]
