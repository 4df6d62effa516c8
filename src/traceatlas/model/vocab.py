"""The canonical model's names as plain Python data (no Arrow): table names and interval
categories, for code that needs only the names (command-line help, option parsing, the
store checks on opening) without importing the table schema and Arrow.
``traceatlas.model.schema`` declares the tables (a test checks the names agree) and
re-exports the categories."""

from __future__ import annotations

TABLE_NAMES: tuple[str, ...] = (
    "tracks", "intervals", "instants", "counters", "messages", "flows", "metadata"
)
"""The canonical tables, in ``schema.TABLES`` order."""

CATEGORIES: tuple[str, ...] = (
    "cpu_op",
    "annotation",
    "gpu_annotation",
    "runtime",
    "driver",
    "kernel",
    "comm_kernel",
    "memcpy",
    "memset",
    "sync",
    "mpi",
    "nvtx",
    "osrt",
    "openmp",
    "region",
    "state",
    "step",
    "python",
    "other",
)
"""Canonical interval categories."""

DEVICE_CATEGORIES: frozenset[str] = frozenset(
    {"kernel", "comm_kernel", "memcpy", "memset", "gpu_annotation"}
)
"""Categories of activity that runs on a device rather than a host thread."""
