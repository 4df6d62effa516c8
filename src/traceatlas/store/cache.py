"""A cache of stores for raw trace paths, reused while the sources are unchanged."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

from traceatlas.io.sources import Source
from traceatlas.store.manifest import is_store, read_manifest

_IDENTITY_KEYS = ("path", "member", "size", "mtime_ns", "sampled_blake2b", "companions")


def cache_root() -> Path:
    """``$TRACEATLAS_CACHE_DIR``, else ``$XDG_CACHE_HOME/traceatlas``, else ``~/.cache``."""
    env = os.environ.get("TRACEATLAS_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "traceatlas"


def cache_path(inputs: Sequence[str]) -> Path:
    """Store location for a list of input paths (order matters: it can decide ranks)."""
    key = "\n".join(os.path.abspath(p) for p in inputs)
    return cache_root() / (hashlib.blake2b(key.encode(), digest_size=10).hexdigest() + ".tastore")


def is_fresh(store: Path, sources: Sequence[Source]) -> bool:
    """True when ``store`` was ingested from exactly these sources, unchanged since."""
    if not is_store(store):
        return False
    try:
        recorded = read_manifest(store)["sources"]
    except Exception:  # any unreadable or old store is simply rebuilt
        return False

    def ident(entry: dict[str, object]) -> tuple[object, ...]:
        return tuple(entry.get(k) for k in _IDENTITY_KEYS)

    # A source that holds several ranks appears once per rank in the manifest.
    current = sorted({ident(s.identity()) for s in sources}, key=repr)
    return sorted({ident(e) for e in recorded}, key=repr) == current
