"""Stores on remote storage (``s3://``, ``gs://``, any fsspec URL), read through a local
mirror: reading only.

Opening ``s3://bucket/run.tastore`` (:func:`open_mirror`) reads its ``manifest.json`` and
lists the store once (presence and size of every recorded part, no unrecorded data file:
the remote form of ``store/parts.find_damage``), then returns a local directory, the
*mirror*: ``<cache root>/remote/<key>/`` with ``key`` = BLAKE2b of (URL, BLAKE2b of the
manifest bytes), holding the manifest (verbatim) and ``.remote.json`` (the URL). Parts are
not copied on opening: :func:`ensure_parts` fetches the parts a reader asks for (one
table, some ranks) the first time, each under an ``flock`` on its own lock file, into an
owner-tagged temporary file that is renamed into place once its size and BLAKE2b match
the manifest record; its mtime is then set to the recorded one, so a part already in the
mirror is reused while size and mtime match. Every existing reader (Polars, DuckDB's
sandbox, pyarrow) then reads local files. ``store/layout.table_parts`` and
``layout.part_path`` call :func:`ensure_parts` for a mirror, ``model/trace.scan_parts``
with the ranks of the view only: a worker running a ``RankTask`` on the URL fetches its
batch's ranks' parts (plus the manifest), nothing else.

A new manifest (the store uploaded again) gives a new mirror; older mirrors stay until
the cache is cleared (``rm -r <cache root>/remote``, docs/cluster.md). Writing a store to
a URL is refused (:func:`refuse_remote_output`). Credentials: fsspec's own (s3fs: the
``AWS_*`` variables, ``~/.aws``, instance roles; ``AWS_ENDPOINT_URL`` for S3-compatible
servers; gcsfs: ``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's default credentials).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import threading
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traceatlas.errors import InputError, StoreDamagedError, StoreError

MARKER = ".remote.json"
"""The file in a mirror naming the store's URL and the manifest's hash."""
MIRRORS = "remote"
"""The mirrors' directory under the cache root."""
EXTRAS = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs"}
"""Schemes whose fsspec implementation is a separate package (``traceatlas[remote]``)."""
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://(.*)", re.DOTALL)
_MANGLED = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):/([^/].*)", re.DOTALL)
_LOCAL_SCHEMES = ("file", "local")
_CHUNK = 1 << 22
_FETCH_THREADS = 8
_HASH_BYTES = 16


# -- URLs ----------------------------------------------------------------------------------


def remote_url(store: str | os.PathLike[str]) -> str | None:
    """The URL when ``store`` names a remote store (a scheme other than ``file``/``local``),
    else None. ``pathlib`` turns ``s3://b/k`` into ``s3:/b/k`` (a CLI argument typed as a
    path): for a remote scheme (:data:`EXTRAS`, fsspec's) that form is read back as the
    URL unless a local path of that name exists (a double slash inside the key is not
    recovered)."""
    text = os.fspath(store)
    match = _SCHEME.fullmatch(text)
    if match is not None:
        scheme = match.group(1).lower()
        if scheme in _LOCAL_SCHEMES:
            return None
        return f"{scheme}://{match.group(2).rstrip('/')}"
    mangled = _MANGLED.fullmatch(text)
    if (mangled is not None and _known_scheme(mangled.group(1).lower())
            and not os.path.lexists(text)):
        return f"{mangled.group(1).lower()}://{mangled.group(2).rstrip('/')}"
    return None


def _known_scheme(scheme: str) -> bool:
    """A remote scheme: one of :data:`EXTRAS`, or one fsspec knows (when installed)."""
    if scheme in EXTRAS:
        return True
    if scheme in _LOCAL_SCHEMES:
        return False
    try:
        from fsspec.registry import known_implementations
    except ImportError:
        return False
    return scheme in known_implementations


def refuse_remote_output(out: str | os.PathLike[str]) -> None:
    """``InputError`` when ``out`` (a store to write) is a remote URL: stores are written
    to a local or shared directory, then uploaded."""
    url = remote_url(out)
    if url is not None:
        raise InputError(url, "writing a store to remote storage is not supported; write it "
                         "to a local or shared directory with -o, then upload that directory "
                         f"(e.g. `aws s3 sync DIR {url}`) and read it from the URL")


def _filesystem(url: str) -> tuple[Any, str]:
    """(fsspec filesystem, path inside it) for ``url``; ``StoreError`` naming the extra to
    install when fsspec or the scheme's package is missing."""
    scheme = url.partition("://")[0]
    package = EXTRAS.get(scheme, "fsspec")
    hint = (f"{url}: reading {scheme}:// stores needs fsspec and {package}: "
            "pip install 'traceatlas[remote]'")
    try:
        import fsspec
    except ImportError:
        raise StoreError(hint) from None
    try:
        fs, path = fsspec.core.url_to_fs(url)
    except ImportError:
        raise StoreError(hint) from None
    except ValueError as exc:  # an unknown protocol
        raise StoreError(f"{url}: {exc}") from None
    return fs, str(path).rstrip("/")


def _problem(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


# -- opening -------------------------------------------------------------------------------


@dataclass
class Mirror:
    """A remote store's local mirror: ``url``, ``directory``, the manifest's part
    records by relative path."""

    url: str
    directory: Path
    records: dict[str, dict[str, Any]]
    _fs: tuple[int, Any, str] | None = field(default=None, repr=False)

    def filesystem(self) -> tuple[Any, str]:
        """(fsspec filesystem, store path inside it), made once per process (a forked
        worker makes its own: fsspec's clients do not survive a fork)."""
        if self._fs is None or self._fs[0] != os.getpid():
            fs, root = _filesystem(self.url)
            self._fs = (os.getpid(), fs, root)
        return self._fs[1], self._fs[2]


_MIRRORS: dict[str, Mirror] = {}
_LOCK = threading.Lock()


def open_mirror(url: str) -> Path:
    """The local mirror of the remote store ``url`` (created if need be) after checking
    the remote store: ``StoreError`` when it is missing, unreadable or not a traceatlas
    store of this schema version; ``StoreDamagedError`` when a recorded part is missing or
    has another size, or an unrecorded data file lies in it."""
    from traceatlas.store.cache import cache_lock, cache_root
    from traceatlas.store.layout import MANIFEST

    fs, root = _filesystem(url)
    try:
        data = fs.cat_file(f"{root}/{MANIFEST}")
    except FileNotFoundError:
        raise StoreError(f"{url}: not a traceatlas store, or the bucket is missing (no "
                         f"{MANIFEST})") from None
    except Exception as exc:  # fsspec back ends raise their own (credentials, network)
        raise StoreError(f"{url}/{MANIFEST}: cannot be read ({_problem(exc)})") from None
    manifest = _parse_manifest(url, data)
    records = _records(url, manifest)
    _check_listing(url, fs, root, records)
    digest = hashlib.blake2b(data, digest_size=_HASH_BYTES).hexdigest()
    key = hashlib.blake2b(f"{url}\n{digest}".encode(), digest_size=10).hexdigest()
    directory = cache_root() / MIRRORS / key
    def complete() -> bool:
        return (directory / MARKER).is_file() and (directory / MANIFEST).is_file()

    if not complete():
        with cache_lock(directory):
            if not complete():
                _create(directory, data, {"url": url, "manifest_blake2b": digest})
    with _LOCK:
        _MIRRORS[os.path.abspath(directory)] = Mirror(url, directory, records,
                                                      (os.getpid(), fs, root))
    return directory


def _parse_manifest(url: str, data: bytes) -> dict[str, Any]:
    from traceatlas.store.layout import MANIFEST, SCHEMA_VERSION
    from traceatlas.store.manifest import is_traceatlas_manifest

    try:
        manifest = json.loads(data.decode("utf-8"))
    except ValueError as exc:
        raise StoreError(f"{url}/{MANIFEST}: corrupt manifest ({exc})") from None
    if not is_traceatlas_manifest(manifest):
        raise StoreError(f"{url}: not a traceatlas store ({MANIFEST} was not written by "
                         "traceatlas)")
    version = manifest.get("schema_version")
    if version != SCHEMA_VERSION:
        raise StoreError(f"{url}: store schema version {version}, this traceatlas reads "
                         f"{SCHEMA_VERSION}; ingest the sources again and upload the store")
    return dict(manifest)


def _records(url: str, manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The part records by path; ``StoreDamagedError`` when absent or malformed (a remote
    store is read by its records: each fetched part is checked against its hash)."""
    from traceatlas.store.parts import _valid_record

    records = manifest.get("parts")
    if records is None:
        raise StoreDamagedError(f"{url}: was written by an older traceatlas (no part "
                                "records); ingest again and upload the store",
                                problem="no part records")
    if not isinstance(records, list) or not all(
            _valid_record(r) and isinstance(r.get("blake2b"), str) for r in records):
        raise StoreDamagedError(f"{url}: has a corrupt manifest.json (bad part records)",
                                problem="bad part records")
    return {str(r["path"]): dict(r) for r in records}


def _damaged(url: str, rel: str, problem: str) -> StoreDamagedError:
    return StoreDamagedError(f"{url}: part {rel} {problem}; upload the store again",
                             part=rel, problem=problem)


def _check_listing(url: str, fs: Any, root: str,
                   records: dict[str, dict[str, Any]]) -> None:
    """One listing of the store: every record present with its size, no unrecorded data
    file (what ``parts.find_damage`` checks on a local store, the hashes excepted)."""
    from traceatlas.store.layout import MANIFEST
    from traceatlas.store.parts import _is_data

    with contextlib.suppress(Exception):
        fs.invalidate_cache(root)
    try:
        listing = fs.find(root, detail=True)
    except Exception as exc:
        raise StoreError(f"{url}: cannot be listed ({_problem(exc)})") from None
    prefix = root + "/"
    sizes = {}
    for name, info in listing.items():
        rel = str(name)[len(prefix):] if str(name).startswith(prefix) else str(name)
        sizes[rel] = int(info.get("size") or 0)
    for rel, rec in records.items():
        if rel not in sizes:
            raise _damaged(url, rel, "is missing")
        if sizes[rel] != rec["bytes"]:
            raise _damaged(url, rel, f"has {sizes[rel]:,} bytes, the manifest says "
                           f"{rec['bytes']:,}")
    extra = sorted(r for r in sizes if r not in records and r != MANIFEST and _is_data(r))
    if extra:
        raise StoreDamagedError(f"{url}: part {extra[0]} is not listed in the manifest (a "
                                "file added to the store?); remove it from the store",
                                part=extra[0], problem="is not listed in the manifest")


def _create(directory: Path, manifest: bytes, marker: dict[str, str]) -> None:
    """Write the mirror's manifest and marker into a temporary sibling, then rename it."""
    from traceatlas import tempfiles
    from traceatlas.store.layout import MANIFEST

    directory.parent.mkdir(parents=True, exist_ok=True)
    tempfiles.sweep_siblings(directory.parent, directory.name)
    tmp = tempfiles.sibling(directory, "tmp")
    try:
        tmp.mkdir()
        (tmp / MANIFEST).write_bytes(manifest)
        (tmp / MARKER).write_text(json.dumps(marker) + "\n", encoding="utf-8")
        if directory.exists():  # an earlier mirror without its marker or manifest
            shutil.rmtree(directory)
        os.rename(tmp, directory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- mirrors -------------------------------------------------------------------------------


def mirror_at(store: str | os.PathLike[str]) -> Mirror | None:
    """The mirror whose directory is ``store``, or None for any other directory (no I/O
    unless ``store`` lies under the mirrors' directory)."""
    from traceatlas.store.cache import cache_root

    key = os.path.abspath(store)
    found = _MIRRORS.get(key)
    if found is not None:
        return found
    home = os.path.abspath(cache_root() / MIRRORS)
    if os.path.dirname(key) != home:
        return None
    directory = Path(key)
    try:
        marker = json.loads((directory / MARKER).read_text(encoding="utf-8"))
        from traceatlas.store.layout import MANIFEST

        manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    url = str(marker["url"])
    mirror = Mirror(url, directory, _records(url, manifest))
    with _LOCK:
        _MIRRORS[key] = mirror
    return mirror


def is_mirror(store: str | os.PathLike[str]) -> bool:
    """True when ``store`` is a remote store's local mirror."""
    return mirror_at(store) is not None


def ensure_parts(store: str | os.PathLike[str], table: str,
                 ranks: Collection[int] | None = None) -> None:
    """Fetch into the mirror ``store`` the parts of ``table`` (of ``ranks`` only, when
    given) not there yet; nothing for a directory that is not a mirror."""
    mirror = mirror_at(store)
    if mirror is None:
        return
    wanted = [rec for rel, rec in mirror.records.items() if _wanted(rel, table, ranks)]
    missing = [rec for rec in wanted if not _present(mirror.directory / rec["path"], rec)]
    if not missing:
        return
    if len(missing) == 1:
        fetch_part(mirror, missing[0])
        return
    with ThreadPoolExecutor(max_workers=min(_FETCH_THREADS, len(missing))) as pool:
        list(pool.map(lambda rec: fetch_part(mirror, rec), missing))


def _wanted(rel: str, table: str, ranks: Collection[int] | None) -> bool:
    head, _, rest = rel.partition("/")
    if head != table:
        return False
    if ranks is None:
        return True
    rank_dir = rest.partition("/")[0]
    name, _, value = rank_dir.partition("=")
    try:
        return name == "rank" and int(value) in ranks
    except ValueError:
        return False


def _present(path: Path, rec: dict[str, Any]) -> bool:
    try:
        st = path.stat()
    except OSError:
        return False
    return bool(st.st_size == rec["bytes"] and st.st_mtime_ns == rec.get("mtime_ns", 0))


def fetch_part(mirror: Mirror, rec: dict[str, Any]) -> None:
    """Copy one part into the mirror under its lock: streamed into a temporary sibling,
    checked (size, BLAKE2b) against ``rec``, mtime set to the recorded one, renamed."""
    from traceatlas import tempfiles
    from traceatlas.store.cache import cache_lock

    rel = str(rec["path"])
    target = mirror.directory / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    with cache_lock(target):
        if _present(target, rec):
            return
        tempfiles.sweep_siblings(target.parent, target.name)
        tmp = tempfiles.sibling(target, "tmp")
        try:
            size, digest = _download(mirror, rel, tmp)
            if size != rec["bytes"]:
                raise _damaged(mirror.url, rel, f"has {size:,} bytes, the manifest says "
                               f"{rec['bytes']:,}")
            if digest != rec["blake2b"]:
                raise _damaged(mirror.url, rel,
                               "has other contents than the store wrote (hash differs)")
            mtime = int(rec.get("mtime_ns", 0))
            os.utime(tmp, ns=(mtime, mtime))
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)


def _download(mirror: Mirror, rel: str, tmp: Path) -> tuple[int, str]:
    """Stream the remote part ``rel`` into ``tmp``: (bytes, BLAKE2b hex)."""
    fs, root = mirror.filesystem()
    digest = hashlib.blake2b(digest_size=_HASH_BYTES)
    size = 0
    try:
        with fs.open(f"{root}/{rel}", "rb") as src, open(tmp, "wb") as dst:
            while chunk := src.read(_CHUNK):
                digest.update(chunk)
                dst.write(chunk)
                size += len(chunk)
    except FileNotFoundError:
        raise _damaged(mirror.url, rel, "is missing") from None
    except OSError as exc:
        if exc.filename is not None and os.fspath(exc.filename) == os.fspath(tmp):
            raise  # the local disk (full, read-only): the CLI names the file
        raise StoreError(f"{mirror.url}/{rel}: cannot be read ({_problem(exc)})") from None
    except Exception as exc:  # fsspec back ends raise their own (credentials, network)
        raise StoreError(f"{mirror.url}/{rel}: cannot be read ({_problem(exc)})") from None
    return size, digest.hexdigest()


def manifest_stamp(url: str) -> tuple[int, int]:
    """What changes when the remote manifest is replaced: (size, hash of its ETag or
    modification time), from one metadata request."""
    from traceatlas.store.layout import MANIFEST

    fs, root = _filesystem(url)
    with contextlib.suppress(Exception):  # a cached listing would hide a new upload
        fs.invalidate_cache(f"{root}/{MANIFEST}")
    try:
        info = fs.info(f"{root}/{MANIFEST}")
    except FileNotFoundError:
        raise StoreError(f"{url}: not a traceatlas store, or the bucket is missing (no "
                         f"{MANIFEST})") from None
    except Exception as exc:
        raise StoreError(f"{url}/{MANIFEST}: cannot be read ({_problem(exc)})") from None
    tag = str(info.get("ETag") or info.get("etag") or info.get("md5Hash")
              or info.get("LastModified") or info.get("mtime") or info.get("updated") or "")
    return int(info.get("size") or 0), int.from_bytes(
        hashlib.blake2b(tag.encode(), digest_size=8).digest(), "big")


def fetched_parts(store: str | os.PathLike[str]) -> list[str]:
    """The parts present in the mirror ``store`` (relative paths, sorted)."""
    mirror = mirror_at(store)
    if mirror is None:
        return []
    return sorted(rel for rel, rec in mirror.records.items()
                  if _present(mirror.directory / rel, rec))

