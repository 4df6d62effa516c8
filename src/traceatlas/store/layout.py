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


def store_location(store: str | Path) -> Path:
    """The local path of a store given as a path or an fsspec-style URL: ``file://`` URLs
    (``file:///lustre/run.tastore``) become their path; other schemes (``s3://``,
    ``gs://``, ``memory://``) raise ``StoreError``: stores are read from a file system every
    worker sees (docs/cluster.md)."""
    text = str(store)
    scheme, sep, rest = text.partition("://")
    if not sep or not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme):
        return Path(store)
    if scheme.lower() in ("file", "local"):
        from urllib.parse import unquote, urlsplit

        return Path(unquote(urlsplit("file://" + rest).path))
    from traceatlas.errors import StoreError

    raise StoreError(f"{text}: {scheme}:// stores are not supported; copy the store to a "
                     "file system the client and workers share (docs/cluster.md)")


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
