"""Resolve user input (a file, a directory, an archive, or a list of them) to source files."""

from __future__ import annotations

import gzip
import hashlib
import lzma
import os
import tarfile
import warnings
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO

from traceatlas.errors import (
    CorruptTraceError,
    DataQualityWarning,
    InputNotFoundError,
    UnsupportedFormatError,
)

TRACE_SUFFIXES: tuple[str, ...] = (".json", ".json.gz")
"""File names an archive is searched for (text formats that can be read from a member)."""

FILE_SUFFIXES: tuple[str, ...] = (
    *TRACE_SUFFIXES, ".sqlite", ".nsys-rep", ".otf2", ".prv", ".prv.gz"
)
"""File names a directory is searched for: one per trace or rank (an OTF2 anchor, a
``.prv`` with its ``.pcf``/``.row`` beside it, an Nsight Systems export or report)."""

ARCHIVE_SUFFIXES: tuple[str, ...] = (
    ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz"
)

_FINGERPRINT_BYTES = 1 << 16

_READ_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError, tarfile.TarError)
"""What reading a damaged file, archive or compressed stream raises (a truncated
``.tar.gz`` raises EOFError from inside tarfile)."""


@dataclass(frozen=True)
class Source:
    """One trace file: a path on disk, or a member of a tar archive."""

    path: str
    member: str | None = None

    @property
    def display(self) -> str:
        """Name used in messages: ``path`` or ``archive:member``."""
        return f"{self.path}:{self.member}" if self.member else self.path

    @property
    def file_name(self) -> str:
        """Base name of the file (of the member for archives)."""
        return os.path.basename(self.member or self.path)

    def read_bytes(self) -> bytes:
        """The decompressed bytes of the file."""
        try:
            with self._open() as fh:
                raw = fh.read()
        except _READ_ERRORS as exc:
            raise CorruptTraceError(self.display, f"cannot read file ({_reason(exc)})") from exc
        if raw[:2] == b"\x1f\x8b":
            try:
                return gzip.decompress(raw)
            except _READ_ERRORS as exc:
                raise CorruptTraceError(
                    self.display, f"truncated or corrupt gzip data ({exc})"
                ) from exc
        return raw

    def head(self, size: int = 4096) -> bytes:
        """The first ``size`` decompressed bytes (enough to sniff the format)."""
        try:
            with self._open() as raw:
                start = raw.read(size)
        except _READ_ERRORS as exc:
            raise CorruptTraceError(self.display, f"cannot read file ({_reason(exc)})") from exc
        if start[:2] != b"\x1f\x8b":
            return start
        try:
            with self._open() as raw, gzip.open(raw) as unzipped:
                return unzipped.read(size)
        except _READ_ERRORS as exc:
            raise CorruptTraceError(
                self.display, f"truncated or corrupt gzip data ({exc})"
            ) from exc

    @contextmanager
    def _open(self) -> Iterator[IO[bytes]]:
        """The raw (possibly compressed) byte stream of the file or archive member."""
        if self.member is None:
            with open(self.path, "rb") as fh:
                yield fh
            return
        with tarfile.open(self.path) as tar:
            handle = tar.extractfile(self.member)
            if handle is None:
                raise CorruptTraceError(self.display, "archive member is not a file")
            yield handle

    def identity(self) -> dict[str, object]:
        """Size, mtime and a sampled hash of the file on disk, to detect changes."""
        st = os.stat(self.path)
        digest = hashlib.blake2b(digest_size=16)
        with open(self.path, "rb") as fh:
            digest.update(fh.read(_FINGERPRINT_BYTES))
            if st.st_size > _FINGERPRINT_BYTES:
                fh.seek(max(st.st_size - _FINGERPRINT_BYTES, _FINGERPRINT_BYTES))
                digest.update(fh.read(_FINGERPRINT_BYTES))
        return {
            "path": os.path.abspath(self.path),
            "member": self.member,
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "sampled_blake2b": digest.hexdigest(),
            "companions": _companions_fingerprint(self.path),
        }


def companion_files(path: str) -> list[str]:
    """Files that belong to the trace ``path`` names: an OTF2 anchor's definitions and
    event files, a ``.prv``'s ``.pcf`` and ``.row``. Empty for single-file formats."""
    if path.endswith(".otf2"):
        stem = path[: -len(".otf2")]
        found = [stem + ".def"] if os.path.isfile(stem + ".def") else []
        if os.path.isdir(stem):
            for root, _dirs, names in os.walk(stem):
                found.extend(os.path.join(root, n) for n in sorted(names))
        return found
    for suffix in (".prv", ".prv.gz"):
        if path.endswith(suffix):
            stem = path[: -len(suffix)]
            return [stem + ext for ext in (".pcf", ".row") if os.path.isfile(stem + ext)]
    return []


def _companions_fingerprint(path: str) -> str | None:
    files = companion_files(path)
    if not files:
        return None
    digest = hashlib.blake2b(digest_size=16)
    for f in files:
        st = os.stat(f)
        digest.update(f"{os.path.relpath(f, os.path.dirname(path))}:{st.st_size}:"
                      f"{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _is_trace_name(name: str) -> bool:
    return name.endswith(TRACE_SUFFIXES)


def _is_archive(path: str) -> bool:
    return path.endswith(ARCHIVE_SUFFIXES)


def _reason(exc: BaseException) -> str:
    """The error's text, or its class name when it has none."""
    return str(exc) or type(exc).__name__


def _archive_members(path: str) -> list[Source]:
    try:
        with tarfile.open(path) as tar:
            names = sorted(m.name for m in tar.getmembers() if m.isfile())
    except _READ_ERRORS as exc:
        raise CorruptTraceError(
            path, f"cannot read tar archive, truncated or corrupt ({_reason(exc)})"
        ) from exc
    members = [Source(path, n) for n in names if _is_trace_name(n)]
    if not members:
        raise InputNotFoundError(path, "archive holds no trace files (*.json, *.json.gz)")
    return members


def _directory_files(path: str) -> list[Source]:
    try:
        names = sorted(os.listdir(path))
    except OSError as exc:
        raise CorruptTraceError(path, f"cannot list directory ({exc.strerror or exc})") from exc
    files = [os.path.join(path, n) for n in names if os.path.isfile(os.path.join(path, n))]
    from traceatlas.io import not_traces  # lazy: it imports the reader registry

    # package.json, a config beside the rank files: skipped with one warning naming them
    found, skipped = not_traces.split([Source(f) for f in files if f.endswith(FILE_SUFFIXES)])
    for archive in (f for f in files if _is_archive(f)):
        found.extend(_archive_members(archive))
    from traceatlas.io.memory_timeline import directory_timelines  # lazy: it imports Source

    found.extend(directory_timelines(path, files, found))  # *.raw.gz sniffed by content
    if not found and skipped:
        raise InputNotFoundError(path, "directory holds no trace; it holds "
                                 + not_traces.describe(skipped))
    if not found:
        wanted = ", ".join(f"*{s}" for s in FILE_SUFFIXES)
        raise InputNotFoundError(path, f"directory holds no trace files ({wanted})")
    if skipped:
        warnings.warn(f"{path}: skipped {not_traces.describe(skipped)}", DataQualityWarning,
                      stacklevel=3)
    return found


def resolve_inputs(inputs: Iterable[str | os.PathLike[str]]) -> list[Source]:
    """Expand files, directories and tar archives into an ordered list of sources."""
    sources: list[Source] = []
    for item in inputs:
        path = os.fspath(item)
        if not os.path.exists(path):
            raise InputNotFoundError(path, "no such file or directory")
        if os.path.isdir(path):
            sources.extend(_directory_files(path))
        elif not os.path.isfile(path):
            raise UnsupportedFormatError(
                path, "not a regular file or directory (a device, FIFO or socket)"
            )
        elif _is_archive(path):
            sources.extend(_archive_members(path))
        else:
            sources.append(Source(path))
    if not sources:
        raise InputNotFoundError("<input>", "no input paths given")
    # The same file named twice (e.g. a directory and a file in it) is one source.
    unique = {(os.path.abspath(s.path), s.member): s for s in reversed(sources)}
    return [s for s in sources if unique[(os.path.abspath(s.path), s.member)] is s]

