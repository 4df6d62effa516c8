"""SIGINT, SIGTERM and SIGHUP unwind the running work, as Ctrl-C does.

The CLI installs :func:`install`: each of these signals raises :class:`Interrupted` in
the main thread, so every ``finally`` block runs (temporary directories and staging files
removed, worker processes ended). ``Interrupted`` derives from ``BaseException`` so that no
``except Exception`` swallows it; the CLI exits with ``128 + signal``. An exception raised
where Python cannot propagate it (inside a ``__del__`` or a callback) is lost, so the
signal is also recorded (:func:`received`) and the CLI checks it when the command ends.
Short critical sections (the rename pair that swaps a store into place, ending workers)
run under :func:`deferred`: a signal arriving inside is delivered when it ends.

Worker processes of ``engine/local.py`` call :func:`init_worker`: they ignore SIGINT and
SIGHUP (a terminal sends those to the whole process group; the parent decides), a
SIGTERM from the parent raises ``Interrupted`` inside a running job (its ``finally``
blocks run) or ends an idle worker at once, and on Linux the kernel sends them SIGKILL
when the parent dies, even by SIGKILL.

Both also shield DuckDB's import (:data:`SHIELDED_IMPORTS`): its extension is built
with nanobind, whose enum set-up calls ``abort()`` when a Python exception is raised
inside it, so a signal landing during ``import duckdb`` killed the process with SIGABRT
(or turned into an ``ImportError``). The package is initialised under :func:`deferred`;
a signal that arrived meanwhile is delivered once its code is done.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.abc
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from importlib.machinery import ModuleSpec
from multiprocessing import resource_tracker
from types import FrameType, ModuleType
from typing import TypeVar

R = TypeVar("R")
T = TypeVar("T")

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Signals the CLI turns into :class:`Interrupted`."""


class Interrupted(BaseException):
    """The process received ``signum``: unwinding, then exit ``128 + signum``."""

    def __init__(self, signum: int) -> None:
        self.signum = int(signum)
        super().__init__(signal.Signals(self.signum).name)

    @property
    def exit_code(self) -> int:
        """``128 + signum``, as a shell reports a process killed by the signal."""
        return 128 + self.signum

    def __reduce__(self) -> tuple[type[Interrupted], tuple[int]]:
        """Keep ``signum`` across a process boundary."""
        return (type(self), (self.signum,))


_received: int | None = None


def _raise(signum: int, frame: FrameType | None) -> None:
    global _received
    _received = signum
    raise Interrupted(signum)


def received() -> int | None:
    """The last signal :func:`install`'s handler saw in this process, or None."""
    return _received


def install() -> None:
    """Make SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted` (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return
    shield_imports()
    for sig in HANDLED:
        if signal.getsignal(sig) is not signal.SIG_IGN:  # e.g. nohup: keep ignoring SIGHUP
            signal.signal(sig, _raise)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP until the block ends, then deliver the first one
    to the handler that was in place (main thread; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = {sig: signal.getsignal(sig) for sig in HANDLED}
    held = [sig for sig, h in previous.items() if h not in (None, signal.SIG_IGN)]
    for sig in held:
        signal.signal(sig, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        for sig in held:
            signal.signal(sig, previous[sig])
        if pending:
            signal.raise_signal(pending[0])


# -- imports that must not be interrupted --------------------------------------------------

SHIELDED_IMPORTS = frozenset({"duckdb"})
"""Modules initialised with the handled signals held (see the module docstring). The
package only: its code imports the extension ``_duckdb``, whose set-up therefore runs
inside the held block, and a held signal is delivered when the package's own code ends.
The package is then dropped from ``sys.modules`` (an import that raised) and a later
import runs its Python again, while ``_duckdb`` stays loaded. The extension itself is
not listed: its set-up runs in its loader's ``create_module``, and a signal delivered at
the end of that would drop an initialised extension, which nanobind refuses to set up
twice (the same abort)."""


class _ShieldedLoader(importlib.abc.Loader):
    """Runs the wrapped loader's ``exec_module`` under :func:`deferred`."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        with deferred():
            self.loader.exec_module(module)


class _ShieldFinder(importlib.abc.MetaPathFinder):
    """Finds :data:`SHIELDED_IMPORTS` through the other finders and wraps their loader."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if fullname not in SHIELDED_IMPORTS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec: ModuleSpec | None = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _ShieldedLoader(spec.loader)
                return spec
        return None


def shield_imports() -> None:
    """Initialise :data:`SHIELDED_IMPORTS` with the handled signals held, from now on
    (idempotent)."""
    if not any(isinstance(finder, _ShieldFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _ShieldFinder())


# -- worker processes ----------------------------------------------------------------------


@contextlib.contextmanager
def spawning() -> Iterator[None]:
    """Block SIGINT, SIGTERM and SIGHUP in this thread while child processes are started:
    they inherit the blocked mask, so a Ctrl-C or hangup sent to the process group during
    their start-up (imports) neither prints a traceback nor kills them halfway;
    :func:`init_worker` unblocks them. The resource tracker is started first (it restores
    only SIGINT and SIGTERM when it has started), so it keeps SIGHUP blocked and outlives a
    hangup until its parent is done. The block is also :func:`deferred` (another thread
    may receive the signal and have it run in this one): signals that arrived meanwhile
    are delivered when the block ends."""
    with deferred():
        old = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
        try:
            resource_tracker.ensure_running()
            signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

_in_job = False


def _worker_term(signum: int, frame: FrameType | None) -> None:
    if _in_job:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Interrupted(signum)
    os._exit(128 + signum)


def init_worker(parent_pid: int) -> None:
    """Initializer of a pool worker (see the module docstring)."""
    shield_imports()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _worker_term)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            pr_set_pdeathsig = 1
            ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGKILL))
    if os.getppid() != parent_pid:  # the parent died before the line above took effect
        os._exit(128 + signal.SIGKILL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HANDLED)  # blocked by spawning()


def run_job(fn: Callable[[T], R], item: T) -> R:
    """Run ``fn(item)`` in a worker; a SIGTERM unwinds it, then the worker exits."""
    global _in_job
    _in_job = True
    try:
        return fn(item)
    except Interrupted as exc:
        os._exit(exc.exit_code)  # finally blocks inside fn have run
    finally:
        _in_job = False
