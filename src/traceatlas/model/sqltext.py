"""SQL text for values built into DuckDB statements: string literals and file lists.

DuckDB's file readers (``read_parquet``, ``read_json``, ``read_csv``) treat a path string
as a glob pattern (``*``, ``?``, ``[...]``), so ``exp[lr=0.1].tastore`` would silently read
``expl.tastore``. ``file_list`` passes each file as a file struct (``{'filename': ...}``,
DuckDB >= 2.0), which DuckDB opens as written, never expanded.
"""

from __future__ import annotations

import os
from collections.abc import Iterable


def quote(text: str) -> str:
    """``text`` as a SQL string literal (single quotes doubled)."""
    if "\x00" in text:
        raise ValueError("a SQL string literal cannot hold a NUL character")
    return "'" + text.replace("'", "''") + "'"


def file_list(paths: Iterable[str | os.PathLike[str]]) -> str:
    """A DuckDB list of literal files for a reader's first argument: every path is
    opened as written (no glob expansion). ``paths`` must not be empty."""
    items = [f"{{'filename': {quote(os.fspath(p))}}}" for p in paths]
    if not items:
        raise ValueError("file_list needs at least one path")
    return "[" + ", ".join(items) + "]"
