"""Start-up hook of ``traceatlas record``: this file is copied as ``sitecustomize.py`` into
a private directory that ``record`` prepends to ``PYTHONPATH``, so every Python process of
the recorded program loads it at start-up. Standalone on purpose (the program may run in
an environment without traceatlas): standard library only, torch imported when the
program imports it. Importing this module under any other name does nothing.

What it does, when ``TRACEATLAS_RECORD`` (JSON, written by ``record``) is set:

- removes its own directory from ``sys.path`` and imports the ``sitecustomize`` that Python
  would have imported without ``record`` (the next one on ``sys.path``), if there is one;
- when the program has imported ``torch`` (in the main thread of a process that is not a
  launcher such as ``torchrun``, nor a multiprocessing helper), starts
  ``torch.profiler.profile`` with ``schedule(wait, warmup, active=steps, repeat=1)`` and
  advances it after every ``step()`` of the first optimizer that steps (a global optimizer
  step post hook);
- when no optimizer has stepped ``fallback_s`` seconds after torch was imported, advances
  the schedule every ``fallback_s`` seconds of wall-clock time instead (in the main thread,
  through a Python-level signal handler: the profiler must be driven from the thread that
  started it); optimizer steps are then ignored;
- writes ``rank-<r>.json.gz`` into the output directory (rank from the launcher's
  environment: ``RANK``, ``OMPI_COMM_WORLD_RANK``, ``PMI_RANK``, ``PMIX_RANK``,
  ``SLURM_PROCID``, ``LOCAL_RANK``; 0 without one) when the active steps are done, or at
  exit (``atexit``: normal end, ``sys.exit``, an uncaught exception, Ctrl-C) and on
  SIGTERM with the steps captured so far. One process per rank records (the first one to
  claim ``.rank-<r>.claim``).
"""

from __future__ import annotations

import _thread
import atexit
import contextlib
import importlib
import importlib.util
import json
import os
import shutil
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType, ModuleType
from typing import Any, cast

ENV = "TRACEATLAS_RECORD"
"""Environment variable holding the JSON configuration written by ``record``."""

RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID",
             "LOCAL_RANK")
"""Where launchers put the rank, in the order they are read (global ranks first)."""

LAUNCHERS = ("torch.distributed.run", "torch.distributed.launch")
"""Modules run with ``python -m`` that start the ranks: never recorded themselves."""

_OPTIONS_WITH_VALUE = ("-W", "-X")

TICK_SIGNAL: int = int(getattr(signal, "SIGRTMIN", signal.SIGUSR2 - 7)) + 7
"""Signal number whose Python handler advances the wall-clock schedule in the main thread;
raised with ``_thread.interrupt_main`` (no signal is sent to the process)."""


def say(message: str) -> None:
    """One line on stderr, prefixed ``traceatlas record:``."""
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"traceatlas record: {message}\n")
        sys.stderr.flush()


def rank_from_env(env: dict[str, str] | os._Environ[str]) -> tuple[int, str | None]:
    """(rank, variable it came from); (0, None) when no launcher variable holds one."""
    for var in RANK_VARS:
        value = env.get(var, "").strip()
        if value.isdigit():
            return int(value), var
    return 0, None


def is_launcher_or_helper(argv: Sequence[str]) -> bool:
    """True for a process that must not record: ``torchrun`` (or ``python -m
    torch.distributed.run``/``launch``), and multiprocessing spawn/forkserver children.
    ``argv`` is ``sys.orig_argv`` (the interpreter's own command line)."""
    if "--multiprocessing-fork" in argv:
        return True
    args = list(argv[1:])
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-m":
            return i + 1 < len(args) and args[i + 1] in LAUNCHERS
        if arg.startswith("-m") and len(arg) > 2:
            return arg[2:] in LAUNCHERS
        if arg == "-c":
            return i + 1 < len(args) and "from multiprocessing" in args[i + 1]
        if arg in _OPTIONS_WITH_VALUE:
            i += 2
            continue
        if arg == "-" or not arg.startswith("-"):
            return os.path.basename(arg) == "torchrun"
        i += 1
    return False


class Recorder:
    """The profiler of one process and what drives its schedule (see the module text)."""

    def __init__(self, config: dict[str, Any], rank: int) -> None:
        self.out = str(config["dir"])
        self.steps = int(config["steps"])
        self.wait = int(config["wait"])
        self.warmup = int(config["warmup"])
        self.fallback_s = float(config["fallback_s"])
        self.config = config
        self.rank = rank
        self.prof: Any = None
        self.mode: str | None = None  # "optimizer" or "wall", decided once
        self.driver: int | None = None  # id() of the optimizer that drives the schedule
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.busy = False
        self.marked = False
        self.done = False
        self.saved: str | None = None
        self.hook_handle: Any = None

    @property
    def total(self) -> int:
        """Schedule steps until the trace is written: wait + warmup + active."""
        return self.wait + self.warmup + self.steps

    def start(self) -> None:
        """Start the profiler (main thread) and what advances it."""
        profiler: Any = importlib.import_module("torch.profiler")
        optimizer: Any = importlib.import_module("torch.optim.optimizer")
        self.prof = profiler.profile(
            schedule=profiler.schedule(wait=self.wait, warmup=self.warmup,
                                       active=self.steps, repeat=1),
            on_trace_ready=self._save,
            record_shapes=bool(self.config.get("shapes")),
            profile_memory=bool(self.config.get("memory")),
            with_stack=bool(self.config.get("with_stack")),
        )
        signal.signal(TICK_SIGNAL, self._tick)
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, self._sigterm)
        self.prof.start()
        self._mark_rank()
        self.hook_handle = optimizer.register_optimizer_step_post_hook(self._on_optimizer_step)
        atexit.register(self.flush)
        threading.Thread(target=self._clock, name="traceatlas-record", daemon=True).start()

    # -- what advances the schedule ------------------------------------------------------

    def _on_optimizer_step(self, optimizer: object, args: object, kwargs: object) -> None:
        with self.lock:
            if self.mode is None:
                self.mode = "optimizer"
                self.driver = id(optimizer)
        if self.mode == "optimizer" and id(optimizer) == self.driver:
            self._advance()

    def _clock(self) -> None:
        """Timer thread: switch to wall-clock steps when no optimizer stepped in time."""
        if self.stop.wait(self.fallback_s):
            return
        with self.lock:
            if self.mode is not None:
                return
            self.mode = "wall"
        say(f"rank {self.rank}: no optimizer step in {self.fallback_s:g} s; each step is "
            f"now {self.fallback_s:g} s of wall-clock time")
        while not self.done:
            _thread.interrupt_main(cast(signal.Signals, TICK_SIGNAL))
            if self.stop.wait(self.fallback_s):
                return

    def _tick(self, signum: int, frame: FrameType | None) -> None:
        if self.mode == "wall":
            self._advance()

    def _advance(self) -> None:
        if self.done or self.busy:
            return
        self.busy = True
        try:
            self.prof.step()
            self._mark_rank()
            if self.prof.step_num >= self.total:
                self._finish()
        finally:
            self.busy = False

    def _mark_rank(self) -> None:
        """Once the trace has started, name the rank in ``distributedInfo`` when torch
        did not (no process group), so a reader need not guess it from the file name."""
        if self.marked or self.prof.step_num < self.wait + self.warmup:
            return
        self.marked = True
        dist: Any = importlib.import_module("torch.distributed")
        if dist.is_available() and dist.is_initialized():
            return  # torch wrote distributedInfo when the trace started
        world = os.environ.get("WORLD_SIZE", "1")
        info = {"rank": self.rank, "world_size": int(world) if world.isdigit() else 1}
        self.prof.add_metadata_json("distributedInfo", json.dumps(info))

    # -- the end -------------------------------------------------------------------------

    def _finish(self) -> None:
        """Stop the profiler (writes the trace when it is recording) and the drivers."""
        if self.done:
            return
        self.done = True
        self.stop.set()
        if self.hook_handle is not None:
            self.hook_handle.remove()
        self.prof.stop()

    def flush(self) -> None:
        """At exit: write what was captured; say so when nothing was."""
        if self.done:
            return
        step = int(self.prof.step_num)
        try:
            self._finish()
        except Exception as exc:  # the program is ending: report, never raise
            say(f"rank {self.rank}: could not write the trace ({type(exc).__name__}: {exc})")
            return
        if self.saved is None:
            phase = "wait" if step < self.wait else "warmup"
            say(f"rank {self.rank}: the program ended in step {step} ({phase}), before the "
                f"{self.steps} recorded step(s) began: nothing recorded (lower --wait/--warmup, "
                "or --fallback-s for a program without an optimizer)")

    def _sigterm(self, signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        self.flush()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    def _save(self, prof: Any) -> None:
        """``on_trace_ready``: export beside the target, then rename into place."""
        name = f"rank-{self.rank}.json.gz"
        staging = os.path.join(self.out, f".tmp-rank-{self.rank}-{os.getpid()}")
        os.makedirs(staging, exist_ok=True)
        try:
            tmp = os.path.join(staging, name)
            prof.export_chrome_trace(tmp)
            target = os.path.join(self.out, name)
            os.replace(tmp, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        first = self.wait + self.warmup
        last = min(int(prof.step_num), self.total) - (1 if prof.step_num >= self.total else 0)
        self.saved = target
        say(f"rank {self.rank}: wrote {target} (ProfilerStep#{first}..#{last})")


def _claim(out: str, rank: int) -> bool:
    """True for the first process of this rank (creates ``.rank-<r>.claim``)."""
    try:
        fd = os.open(os.path.join(out, f".rank-{rank}.claim"),
                     os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(f"{os.getpid()}\n")
    return True


def activate(config: dict[str, Any]) -> Recorder | None:
    """Called once torch is imported: start recording in this process when it should."""
    if is_launcher_or_helper(getattr(sys, "orig_argv", sys.argv)):
        return None
    rank, _ = rank_from_env(os.environ)
    wanted = config.get("ranks")
    if wanted is not None and rank not in wanted:
        return None
    if threading.current_thread() is not threading.main_thread():
        say(f"rank {rank}: torch was first imported outside the main thread; not recorded")
        return None
    if not _claim(str(config["dir"]), rank):
        return None  # another process of this rank records it
    recorder = Recorder(config, rank)
    recorder.start()
    return recorder


class TorchFinder:
    """A one-shot ``sys.meta_path`` entry: when ``torch`` is imported, run
    :func:`activate` right after its module has executed."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config

    def find_spec(self, name: str, path: object = None, target: object = None) -> Any:
        if name != "torch":
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        loader: Any = spec.loader
        original = loader.exec_module
        config = self.config

        def exec_module(module: ModuleType) -> None:
            original(module)
            try:
                activate(config)
            except Exception as exc:  # never break the program being recorded
                say(f"could not start the profiler ({type(exc).__name__}: {exc})")

        loader.exec_module = exec_module
        return spec


def chain_sitecustomize(here: str) -> ModuleType | None:
    """Remove ``here`` from ``sys.path`` and import the ``sitecustomize`` Python would
    have imported without it (None when there is none). Its errors propagate, as they
    would without ``record`` (``site`` prints them and goes on)."""
    mine = sys.modules.pop("sitecustomize", None)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        return importlib.import_module("sitecustomize")
    except ModuleNotFoundError as exc:
        if exc.name != "sitecustomize":
            raise
        if mine is not None:
            sys.modules["sitecustomize"] = mine
        return None


def install() -> None:
    """Run as ``sitecustomize``: watch for torch, then chain to the original hook."""
    try:
        config = json.loads(os.environ.get(ENV, ""))
    except ValueError:
        config = None
    if isinstance(config, dict):
        sys.meta_path.insert(0, TorchFinder(config))
    chain_sitecustomize(os.path.dirname(os.path.abspath(__file__)))


if __name__ == "sitecustomize":
    install()
