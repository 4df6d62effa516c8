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

__all__ = [
    "DEFAULT_BASE_TIME_NS",
    "Collective",
    "LaunchKind",
    "SyncKind",
    "TraceBuilder",
    "micros",
    "write_multi_rank",
]
