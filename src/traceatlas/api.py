"""``open``: a store path, or raw traces ingested into the cache first."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from traceatlas.engine.base import Engine
from traceatlas.ingest import Progress, ingest_sources
from traceatlas.io.sources import resolve_inputs
from traceatlas.model.trace import Trace
from traceatlas.store.cache import cache_path, is_fresh
from traceatlas.store.manifest import is_store


def open(
    path: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    engine: str | Engine | None = None,
    progress: Progress | None = None,
) -> Trace:
    """Open a store, or ingest raw trace paths into the cache (reused while unchanged)."""
    paths = [os.fspath(path)] if isinstance(path, str | os.PathLike) else [
        os.fspath(p) for p in path
    ]
    if len(paths) == 1 and is_store(Path(paths[0])):
        return Trace(paths[0])
    sources = resolve_inputs(paths)
    store = cache_path(paths)
    if not is_fresh(store, sources):
        ingest_sources(sources, store, engine=engine, progress=progress)
    return Trace(store)
