"""Paths inside a store directory (hive layout, one Parquet file per table per rank).

Store paths are never glob patterns: a store may be named ``exp[lr=0.1].tastore`` or live
in a cache directory holding ``*`` or ``?``. The part files of a table are found by
listing directories (``table_parts``), and readers get that explicit list.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from pathlib import Path

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
_RANK_DIR = re.compile(r"rank=(-?[0-9]+)")


def store_location(store: str | Path) -> Path:
    """The local path of a store given as a path or an fsspec-style URL: ``file://`` URLs
    (``file:///lustre/run.tastore``) become their path; a remote URL (``s3://``, ``gs://``,
    any other fsspec scheme) is opened (manifest read, store listed and checked) and its
    local mirror under the cache root is returned, whose parts are fetched when first read
    (``store/remote.py``; ``StoreError`` when it cannot be read)."""
    text = str(store)
    scheme, sep, rest = text.partition("://")
    if not sep and re.match(r"(?i)(file|local):/[^/]", text) and not os.path.lexists(text):
        scheme, sep, rest = "file", "://", text.partition(":")[2]  # pathlib's file:/x
    if sep and scheme.lower() in ("file", "local"):
        from urllib.parse import unquote, urlsplit

        return Path(unquote(urlsplit("file://" + rest).path))
    from traceatlas.store import remote

    url = remote.remote_url(text)
    if url is None:
        return Path(store)
    return remote.open_mirror(url)


def store_stamp(store: str | Path) -> tuple[int, int]:
    """What changes when the store at ``store`` (path or URL) is written again: the
    manifest's (inode, mtime ns), or for a remote store its (size, ETag hash)."""
    from traceatlas.store import remote

    url = remote.remote_url(str(store))
    if url is not None:
        return remote.manifest_stamp(url)
    info = os.stat(store_location(store) / MANIFEST)
    return info.st_ino, info.st_mtime_ns


def part_path(store: Path, table: str, rank: int) -> Path:
    """``<store>/<table>/rank=<rank>/part-0.parquet`` (fetched first when ``store`` is a
    remote store's local mirror, ``store/remote.py``)."""
    _fetch(store, table, (rank,))
    return store / table / f"rank={rank}" / "part-0.parquet"


def table_parts(store: Path, table: str, ranks: Collection[int] | None = None
                ) -> list[Path]:
    """Every Parquet part of ``table``: ``<store>/<table>/rank=<r>/*.parquet``, ranks in
    ascending numeric order, then file names (hidden files skipped). Found by listing
    directories, never by pattern matching; empty when the table directory is missing.
    ``ranks``: only those ranks' parts. A remote store's mirror fetches the parts first."""
    _fetch(store, table, ranks)
    root = Path(store) / table
    if not root.is_dir():
        return []
    found: list[tuple[int, Path]] = []
    for entry in root.iterdir():
        match = _RANK_DIR.fullmatch(entry.name)
        if match is not None and (ranks is None or int(match.group(1)) in ranks) and (
                entry.is_dir()):
            found.append((int(match.group(1)), entry))
    parts: list[Path] = []
    for _, directory in sorted(found, key=lambda item: item[0]):
        parts += sorted(p for p in directory.iterdir() if p.suffix == ".parquet"
                        and not p.name.startswith(".") and p.is_file())
    return parts


def _fetch(store: Path, table: str, ranks: Collection[int] | None) -> None:
    """Fetch the parts into a remote store's mirror (nothing for any other store: no I/O
    unless ``store`` lies under the cache root's mirrors)."""
    from traceatlas.store.remote import ensure_parts

    ensure_parts(store, table, ranks)
