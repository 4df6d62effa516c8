"""What every command shares: the ``app``, the common options (``--engine``, ``--format``),
the error guard (library errors -> one line, exit 2) and the output-path context. Command
modules import from here, never from ``cli.main``, so that the CLI imports only downward
(``main`` imports the command modules to register them)."""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

import traceatlas
from traceatlas.cli import output
from traceatlas.errors import InputError, QueryError, StoreError, TraceAtlasError

if TYPE_CHECKING:  # the engine package starts process pools: not imported at start-up
    from traceatlas.engine.base import Engine

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Performance traces of HPC and AI runs into answers.",
)

F = TypeVar("F", bound=Callable[..., Any])
EXIT_BAD_INPUT = 2

EngineOpt = Annotated[
    str,
    typer.Option("--engine", envvar="TRACEATLAS_ENGINE",
                 help="local (default), dask[:N] (LocalCluster of N workers), "
                 "tcp://scheduler:8786 or scheduler-file:PATH; default from "
                 "TRACEATLAS_ENGINE"),
]
FORMATS = ("table", "json", "csv")
FormatOpt = Annotated[str, typer.Option("--format", "-f", help="table | json | csv")]
WideOpt = Annotated[bool, typer.Option(
    "--wide", help="Table: every column and every name whole, wider than the terminal if "
    "need be (pipe into `less -S`); without it the table fits the terminal.")]


def _check_format(fmt: str, allowed: tuple[str, ...] = FORMATS) -> None:
    if fmt not in allowed:
        raise typer.BadParameter(f"{fmt!r} is not one of {', '.join(allowed)}",
                                 param_hint="--format")


def _guard(fn: F) -> F:
    """Turn library errors and OS errors (permission denied, disk full, missing
    directory) into one line on stderr and exit code 2; other traceatlas errors exit 1.
    Messages are printed literally (``output``)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        output.install_warning_printer()
        try:
            return fn(*args, **kwargs)
        except (InputError, StoreError, QueryError) as exc:
            output.error(str(exc))
            raise typer.Exit(EXIT_BAD_INPUT) from None
        except OSError as exc:
            output.error(os_problem(exc))
            raise typer.Exit(EXIT_BAD_INPUT) from None
        except TraceAtlasError as exc:
            output.error(str(exc))
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def os_problem(exc: OSError) -> str:
    """``<file>: <reason>`` (``a -> b: <reason>`` for a rename) for an OS error."""
    names = [n if isinstance(n, str) else os.fsdecode(n) if isinstance(n, bytes) else str(n)
             for n in (exc.filename, exc.filename2) if n is not None]
    reason = exc.strerror or str(exc) or type(exc).__name__
    return f"{' -> '.join(names)}: {reason}" if names else reason


@contextlib.contextmanager
def writing(path: Path, *, staged: bool = False) -> Iterator[None]:
    """Name the output ``path`` in an OSError raised inside that names no file (a failed
    ``write`` on a full disk reports only ``[Errno 28] No space left on device``) or names
    ``path``'s temporary sibling (``.<name>.tmp-*``, renamed into place at the end).
    ``staged``: the command also stages files in ``$TMPDIR``; an unnamed error says so."""
    try:
        yield
    except OSError as exc:
        if exc.errno is None:
            raise
        name = exc.filename
        if name is None:
            reason = exc.strerror or str(exc)
            if staged:
                reason += f" (or in the staging directory {tempfile.gettempdir()})"
            raise type(exc)(exc.errno, reason, str(path)) from exc
        if isinstance(name, str | bytes) and _is_sibling(os.fsdecode(name), path):
            raise type(exc)(exc.errno, exc.strerror, str(path)) from exc
        raise


def _is_sibling(name: str, path: Path) -> bool:
    """``name`` is ``path``'s temporary sibling ``.<path.name>.<suffix>``, or inside it."""
    target = os.path.abspath(path)
    parent, base = os.path.split(target)
    here = os.path.abspath(name)
    top = os.path.relpath(here, parent).split(os.sep)[0]
    return not top.startswith("..") and top.startswith(f".{base}.")


def _open(paths: list[Path], engine: str | Engine) -> traceatlas.Trace:
    with output.progress("ingest") as bar:
        return traceatlas.open([str(p) for p in paths], engine=engine, progress=bar)
