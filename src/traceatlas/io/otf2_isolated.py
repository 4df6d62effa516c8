"""Run the OTF2 reader's C-library work in a child process, so a crash stays there.

The OTF2 C library ends the process (``abort()``, a segmentation fault) on some damaged
anchor, definitions or event files instead of returning an error, and whether it does can
depend on the memory it happens to read: opening an archive once in a fresh child (the
former probe) and then again here still took the test process down in CI. So the whole
read runs in a child: a fresh interpreter (``subprocess``, so it also works inside a
daemonic Dask worker, which may not start ``multiprocessing`` children) that gets the
function and its arguments pickled on stdin and sends back its result, its error and its
data-quality warnings, pickled, on a pipe of its own (not stdout: the libraries may
print); the result's Arrow tables travel as IPC files in an owner-tagged temporary
directory, memory-mapped here (no copy) before the directory is removed. A child that
ends without an answer becomes ``CorruptTraceError`` naming the archive. Cost: one
interpreter start and the reader's imports (~0.3-0.5 s) per archive, and the tables
written once to the temporary directory (disk or page cache the size of the tables).
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from traceatlas.errors import CorruptTraceError

T = TypeVar("T")
_CHILD = "import sys; from traceatlas.io.otf2_isolated import child_main; child_main()"


def isolated(display: str, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a child process: its return value or exception, its warnings
    (UserWarning and subclasses) issued again here; ``CorruptTraceError`` naming
    ``display`` when the child ends without answering. ``fn`` and ``args`` must pickle."""
    from traceatlas.tempfiles import temporary_directory

    with temporary_directory("otftables") as tables:  # removed once the tables are mapped
        return _run(display, tables, fn, args)


def _run(display: str, tables: str, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
    read_end, write_end = os.pipe()
    # the child imports what this process imports (the package, and the module of fn)
    paths = [str(Path(__file__).resolve().parents[2]), *(p for p in sys.path if p)]
    env = {**os.environ, "TRACEATLAS_ISOLATED_FD": str(write_end),
           "TRACEATLAS_ISOLATED_DIR": tables,
           "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}
    try:
        proc = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE,
                                pass_fds=(write_end,), env=env)
    finally:
        os.close(write_end)
    try:
        with os.fdopen(read_end, "rb") as answer:
            assert proc.stdin is not None
            try:
                proc.stdin.write(pickle.dumps((fn, args), protocol=pickle.HIGHEST_PROTOCOL))
                proc.stdin.close()
            except BrokenPipeError:  # the child is already gone: its exit code says why
                pass
            data = answer.read()
        code = proc.wait()
    except BaseException:  # interrupted here: the child goes too
        proc.kill()
        proc.wait()
        raise
    try:
        ok, payload, caught = pickle.loads(data)
    except Exception:  # nothing, or a cut answer: the child died
        how = (f"crashed ({signal.Signals(-code).name})" if code < 0
               else f"ended (exit code {code})")
        raise CorruptTraceError(display, f"the OTF2 library {how} reading the archive: "
                                "a damaged anchor, definitions or event file") from None
    finally:
        _MAPS.clear()  # the tables keep the map alive, not this module
    for message, category in caught:
        warnings.warn(message, category, stacklevel=3)
    if not ok:
        raise payload
    result: T = payload
    return result


def child_main() -> None:
    """The child's side: read (fn, args) from stdin, run, send (ok, result or
    exception, warnings) on the inherited descriptor ``TRACEATLAS_ISOLATED_FD``."""
    # Ctrl-C reaches the whole process group: the parent handles it (and kills this
    # child), so no second traceback comes from here
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    fd = int(os.environ.pop("TRACEATLAS_ISOLATED_FD"))
    fn, args = pickle.load(sys.stdin.buffer)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        try:
            out: tuple[bool, Any] = (True, fn(*args))
        except Exception as exc:  # travels to the parent, which raises it
            out = (False, exc)
    # the data-quality notes (UserWarning and below), not the libraries' deprecations
    caught = [(str(w.message), w.category) for w in got if issubclass(w.category, UserWarning)]
    import pyarrow as pa

    path = os.path.join(os.environ["TRACEATLAS_ISOLATED_DIR"], "tables.arrow")
    with os.fdopen(fd, "wb") as conn:
        with pa.OSFile(path, "wb") as sink:
            data = _dumps(out, caught, sink, path)
        conn.write(data)


def _dumps(out: tuple[bool, Any], caught: list[Any], sink: Any, path: str) -> bytes:
    import io

    buf = io.BytesIO()
    _TablePickler(buf, sink, path).dump((*out, caught))
    return buf.getvalue()


class _TablePickler(pickle.Pickler):
    """Arrow tables as IPC streams appended to one file in the parent's directory, mapped
    there without a copy: a table's own pickle carries the whole buffers of the arrays it
    slices (every rank's table is a slice of one read), and the pipe copies what it
    carries twice (10 M events: ~2.7 s of ~11); one file, not one per table (an archive
    of 64 ranks has ~450 tables)."""

    def __init__(self, conn: Any, sink: Any, path: str) -> None:
        super().__init__(conn, protocol=pickle.HIGHEST_PROTOCOL)
        self.sink, self.path = sink, path

    def reducer_override(self, obj: Any) -> Any:
        import pyarrow as pa

        if isinstance(obj, pa.Table):
            at = self.sink.tell()
            with pa.ipc.new_stream(self.sink, obj.schema) as out:
                out.write_table(obj)
            return _mapped_table, (self.path, at, self.sink.tell() - at)
        return NotImplemented


_MAPS: dict[str, Any] = {}
"""The result file's memory map while one answer is unpickled (``_run`` clears it)."""


def _mapped_table(path: str, at: int, size: int) -> Any:
    """The table of the IPC stream at ``at`` (``size`` bytes) of ``path``, on its memory
    map (it stays readable once the file is removed)."""
    import pyarrow as pa

    if path not in _MAPS:
        with pa.memory_map(path) as source:
            _MAPS[path] = source.read_buffer()
    return pa.ipc.open_stream(_MAPS[path].slice(at, size)).read_all()
