"""Temporary files and directories named after the process that owns them, and the sweep
of those a dead process left behind.

Every temporary name traceatlas creates carries an owner tag ``<pid>-<host>`` (``host``:
6 hex digits of a hash of the host name, so that a store on a shared file system is never
swept by another machine that cannot see the owner's processes):

- staging in ``$TMPDIR``: ``traceatlas-<kind>-<pid>-<host>-<random>`` (files or dirs);
- beside an output: ``.<name>.tmp-<pid>-<host>-<random>`` (being built) and
  ``.<name>.old-<pid>-<host>-<random>`` (the previous store, during the swap).

A process ended by SIGKILL cannot clean up; the next traceatlas process sweeps what it
left: only names of these patterns, only when the owner runs on this host and its pid is
not alive. An ``.old-`` directory whose target is missing is put back, not deleted (the
owner died between the two renames of a swap).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import socket
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

_HOST = hashlib.blake2b(socket.gethostname().encode(), digest_size=3).hexdigest()
_OWNER = r"(?P<pid>\d+)-(?P<host>[0-9a-f]{6})"
_STAGING = re.compile(rf"^traceatlas-[a-z]+-{_OWNER}-")
_SIBLING = re.compile(rf"^\.(?P<name>.+)\.(?P<kind>tmp|old)-{_OWNER}-[0-9a-f]+$")


def owner_tag() -> str:
    """``<pid>-<host>`` of the calling process."""
    return f"{os.getpid()}-{_HOST}"


def staging_prefix(kind: str) -> str:
    """Prefix for a ``tempfile`` name in ``$TMPDIR``: ``traceatlas-<kind>-<pid>-<host>-``."""
    if not re.fullmatch(r"[a-z]+", kind):
        raise ValueError(f"staging kind must be lowercase letters, not {kind!r}")
    return f"traceatlas-{kind}-{owner_tag()}-"


def mkstemp(kind: str, suffix: str = "") -> tuple[int, str]:
    """``tempfile.mkstemp`` in ``$TMPDIR`` with an owner-tagged name: (fd, path)."""
    return tempfile.mkstemp(suffix=suffix, prefix=staging_prefix(kind))


def temporary_directory(kind: str) -> tempfile.TemporaryDirectory[str]:
    """``tempfile.TemporaryDirectory`` in ``$TMPDIR`` with an owner-tagged name."""
    return tempfile.TemporaryDirectory(prefix=staging_prefix(kind))


def sibling(target: Path, kind: str) -> Path:
    """``<parent>/.<name>.<kind>-<pid>-<host>-<random>`` beside ``target`` (kind: tmp, old)."""
    return target.parent / f".{target.name}.{kind}-{owner_tag()}-{uuid.uuid4().hex[:8]}"


def write_text_atomic(target: Path, text: str) -> None:
    """Write ``text`` (UTF-8) beside ``target``, then rename it into place: no half-written
    file, and the temporary is removed whatever happens."""
    tmp = sibling(target, "tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def replaceable_file(out: Path, *, hint: str = "choose another -o") -> Path:
    """The file an atomic write to ``out`` may replace (symlinks followed, so a link is
    never swapped for a copy). A directory, device, FIFO or socket is refused: renaming a
    temporary file onto ``/dev/full`` would replace the device node itself."""
    from traceatlas.errors import InputError

    target = Path(os.path.realpath(out))
    if target.is_dir():
        raise InputError(out, f"is a directory; {hint}")
    if target.exists() and not target.is_file():
        raise InputError(out, "is not a regular file (a device, FIFO or socket); -o names a "
                         "file that traceatlas replaces")
    return target


def pid_alive(pid: int) -> bool:
    """True when a process ``pid`` exists on this host (also when owned by another user)."""
    if pid <= 0:
        return True  # not a real owner: never sweep
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """A process that has exited but is not reaped yet (Linux ``/proc``; else False).
    Its files are debris: a worker that died with its parent stays a zombie until init
    reaps it."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    state = stat[stat.rfind(b")") + 2:][:1]
    return state in (b"Z", b"X")


def _dead_owner(match: re.Match[str]) -> bool:
    return match["host"] == _HOST and not pid_alive(int(match["pid"]))


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def sweep_staging(directory: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove ``traceatlas-<kind>-<pid>-...`` entries of dead owners in ``directory``
    (default ``$TMPDIR``); returns what was removed."""
    root = Path(directory if directory is not None else tempfile.gettempdir())
    removed = []
    for entry in _entries(root):
        match = _STAGING.match(entry.name)
        if match and _dead_owner(match):
            _remove(entry)
            removed.append(entry)
    return removed


def sweep_siblings(directory: Path, name: str | None = None) -> list[Path]:
    """Clean ``.<name>.tmp-*`` / ``.<name>.old-*`` of dead owners in ``directory`` (every
    name when ``name`` is None): ``tmp`` is removed; ``old`` is renamed back onto a missing
    target, else removed. Returns the paths handled."""
    handled = []
    for entry in _entries(directory):
        match = _SIBLING.match(entry.name)
        if not match or (name is not None and match["name"] != name) or not _dead_owner(match):
            continue
        target = directory / match["name"]
        if match["kind"] == "old" and not os.path.lexists(target):
            with contextlib.suppress(OSError):
                os.rename(entry, target)
        else:
            _remove(entry)
        handled.append(entry)
    return handled


def _entries(directory: Path) -> Iterator[Path]:
    try:
        with os.scandir(directory) as it:
            names = [e.name for e in it]
    except OSError:
        return
    for n in names:
        yield directory / n
