"""Paths inside a store directory (hive layout, one Parquet file per table per rank).

Store paths are never glob patterns: a store may be named ``exp[lr=0.1].tastore`` or live
in a cache directory holding ``*`` or ``?``. The part files of a table are found by
listing directories (``table_parts``), and readers get that explicit list.
"""

from __future__ import annotations

import re
from pathlib import Path

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
_RANK_DIR = re.compile(r"rank=(-?[0-9]+)")


def part_path(store: Path, table: str, rank: int) -> Path:
    """``<store>/<table>/rank=<rank>/part-0.parquet``."""
    return store / table / f"rank={rank}" / "part-0.parquet"


def table_parts(store: Path, table: str) -> list[Path]:
    """Every Parquet part of ``table``: ``<store>/<table>/rank=<r>/*.parquet``, ranks in
    ascending numeric order, then file names (hidden files skipped). Found by listing
    directories, never by pattern matching; empty when the table directory is missing."""
    root = Path(store) / table
    if not root.is_dir():
        return []
    ranks: list[tuple[int, Path]] = []
    for entry in root.iterdir():
        match = _RANK_DIR.fullmatch(entry.name)
        if match is not None and entry.is_dir():
            ranks.append((int(match.group(1)), entry))
    parts: list[Path] = []
    for _, directory in sorted(ranks, key=lambda item: item[0]):
        parts += sorted(p for p in directory.iterdir() if p.suffix == ".parquet"
                        and not p.name.startswith(".") and p.is_file())
    return parts
