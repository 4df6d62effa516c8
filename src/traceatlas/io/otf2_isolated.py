"""Run the OTF2 reader's C-library work in a child process, so a crash stays there.

The OTF2 C library ends the process (``abort()``, a segmentation fault) on some damaged
anchor, definitions or event files instead of returning an error, and whether it does can
depend on the memory it happens to read: opening an archive once in a fresh child (the
former probe) and then again here still took the test process down in CI. So the whole
read runs in a child (``spawn``: a fresh interpreter, no inherited threads or locks): its
result (the ranks' Arrow tables), its error or its warnings come back through a pipe, and
a child ended by a signal becomes ``CorruptTraceError`` naming the archive. Cost: one
interpreter start and the reader's imports (~0.3-0.5 s) per archive, and the tables are
copied once through the pipe.
"""

from __future__ import annotations

import multiprocessing
import signal
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from traceatlas.errors import CorruptTraceError

T = TypeVar("T")


def isolated(display: str, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a spawned child process: its return value or exception, its
    warnings issued again here; ``CorruptTraceError`` naming ``display`` when a signal
    ends the child before it answers. ``fn`` and ``args`` must pickle."""
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(there, fn, args), name="traceatlas-otf2")
    proc.start()
    there.close()
    try:
        try:
            ok, payload, caught = here.recv()
        except EOFError:  # the child ended without answering
            proc.join()
            code = proc.exitcode
            how = (f"crashed ({signal.Signals(-code).name})" if code is not None and code < 0
                   else f"ended (exit code {code})")
            raise CorruptTraceError(display, f"the OTF2 library {how} reading the archive: "
                                    "a damaged anchor, definitions or event file") from None
    finally:
        here.close()
        if proc.is_alive():
            proc.join(timeout=5)
        if proc.is_alive():  # interrupted here while the child still reads
            proc.kill()
            proc.join()
    for message, category in caught:
        warnings.warn(message, category, stacklevel=3)
    if not ok:
        raise payload
    result: T = payload
    return result


def _child(conn: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """The child's side: run ``fn``, send (ok, result or exception, warnings)."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        try:
            out: tuple[bool, Any] = (True, fn(*args))
        except Exception as exc:  # travels to the parent, which raises it
            out = (False, exc)
    # the data-quality notes (UserWarning and below), not the libraries' deprecations
    caught = [(str(w.message), w.category) for w in got if issubclass(w.category, UserWarning)]
    conn.send((*out, caught))
    conn.close()
