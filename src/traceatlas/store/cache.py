"""A cache of stores for raw trace paths, reused while the sources are unchanged.

Entries are ``<cache root>/<key>.tastore``; each is checked and filled under an exclusive
``flock`` on ``<key>.tastore.lock`` beside it (deleted when released), so that of two
processes opening the same raw trace the second waits, then finds the first one's store
fresh and reuses it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
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


def is_cached(store: Path) -> bool:
    """True when ``store`` is an entry of the cache (directly under ``cache_root()``)."""
    return Path(os.path.abspath(store)).parent == Path(os.path.abspath(cache_root()))


@contextmanager
def cache_lock(store: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``<store>.lock`` (waits for another holder).

    The holder deletes the lock file when done, so nothing stays in the cache; a waiter
    that then gets the lock of a deleted file sees that the path no longer names it and
    locks the new file instead (the usual lock-file protocol)."""
    store.parent.mkdir(parents=True, exist_ok=True)
    path = store.parent / (store.name + ".lock")
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = os.fstat(fd)
            try:
                current = os.stat(path)
            except FileNotFoundError:
                current = None
        except BaseException:
            os.close(fd)
            raise
        if current is not None and (current.st_dev, current.st_ino) == (
            held.st_dev, held.st_ino
        ):
            break
        os.close(fd)  # locked a file that its holder deleted meanwhile: try again
    try:
        yield
    finally:
        try:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        finally:
            os.close(fd)  # closing releases the lock


def remove_entry(store: Path) -> None:
    """Delete a cache entry, whatever it holds (the cache is traceatlas's own)."""
    if not is_cached(store):
        raise ValueError(f"{store} is not a cache entry")
    if store.is_dir() and not store.is_symlink():
        shutil.rmtree(store)
    elif os.path.lexists(store):
        store.unlink()


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
