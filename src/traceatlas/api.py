"""``open``: a store path, or raw traces ingested into the cache first."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path

from traceatlas import tempfiles
from traceatlas.engine.base import Engine
from traceatlas.errors import DataQualityWarning, StoreDamagedError, StoreError
from traceatlas.ingest import Progress, ingest_sources
from traceatlas.io.sources import Source, resolve_inputs
from traceatlas.model.trace import Trace
from traceatlas.store.cache import cache_lock, cache_path, is_fresh, remove_entry
from traceatlas.store.layout import MANIFEST, store_location
from traceatlas.store.manifest import looks_like_store, traceatlas_manifest


def open(
    path: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    engine: str | Engine | None = None,
    progress: Progress | None = None,
) -> Trace:
    """Open a store, or ingest raw trace paths into the cache (reused while unchanged).

    A store is checked on opening (``traceatlas.store.parts``): a damaged store raises
    ``StoreDamagedError``. A damaged cache entry is rebuilt from the sources with a
    ``DataQualityWarning`` naming the damage. The cache entry is checked and filled under
    a lock, so concurrent first uses of one trace ingest it once.
    """
    paths = [os.fspath(path)] if isinstance(path, str | os.PathLike) else [
        os.fspath(p) for p in path
    ]
    if len(paths) == 1 and looks_like_store(location := store_location(paths[0])):
        return Trace(location)  # a path, file:// or a remote store's mirror (opened once)
    sources = resolve_inputs(paths)
    store = cache_path(paths)
    from traceatlas.engine.local import check_not_bootstrapping

    check_not_bootstrapping()  # a worker re-running an unguarded script: fail, never wait
    tempfiles.sweep_siblings(store.parent)  # debris of cache fills killed by SIGKILL
    with cache_lock(store):
        trace = _reuse(store, sources)
        if trace is None:
            remove_entry(store)
            ingest_sources(sources, store, engine=engine, progress=progress)
            trace = Trace(store)
    return trace


def _reuse(store: Path, sources: Sequence[Source]) -> Trace | None:
    """The cached trace when fresh and intact; None when it must be (re)built."""
    if not os.path.lexists(store):
        return None
    if traceatlas_manifest(store) is None:
        what = "is corrupt" if (store / MANIFEST).exists() else "is missing"
        _warn_rebuilt(store, f"its {MANIFEST} {what}")
        return None
    if not is_fresh(store, sources):
        return None  # a source changed, or another schema version: rebuilt silently
    try:
        return Trace(store)
    except StoreDamagedError as exc:
        if exc.part is not None:  # otherwise an older store without part records
            _warn_rebuilt(store, f"part {exc.part} {exc.problem}")
    except StoreError as exc:
        _warn_rebuilt(store, str(exc))
    return None


def _warn_rebuilt(store: Path, reason: str) -> None:
    warnings.warn(f"{store}: the cached store was damaged ({reason}); rebuilt from the "
                  "sources", DataQualityWarning, stacklevel=3)
