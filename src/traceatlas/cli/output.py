"""Terminal output helpers: errors, warnings, progress, tables. Only the CLI prints."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

if TYPE_CHECKING:
    import polars as pl

stdout = Console(soft_wrap=True)
stderr = Console(stderr=True, soft_wrap=True)


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    stderr.print(f"[yellow]warning[/yellow] ({category.__name__}): {message}", highlight=False)


def install_warning_printer() -> None:
    """Print warnings as one readable line each on stderr."""
    warnings.showwarning = _show_warning


@contextmanager
def progress(label: str) -> Iterator[Callable[[int, int], None] | None]:
    """A progress callback drawing a bar on stderr, or None when stderr is not a terminal."""
    if not sys.stderr.isatty():
        yield None
        return
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(), console=stderr, transient=True,
    ) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


TABLE_ROWS = 200
"""Rows a terminal table shows at most; machine formats print every row."""


def print_frame(frame: pl.DataFrame, fmt: str, *, human: bool = False) -> None:
    """Print a frame as a rich table, CSV, or a JSON array of row objects.

    ``human``: durations humanised in the table format (see ``humanize``)."""
    if fmt == "csv":
        sys.stdout.write(frame.write_csv())
    elif fmt == "json":
        sys.stdout.write(frame.write_json() + "\n")
    else:
        if frame.height > TABLE_ROWS:
            stderr.print(f"[dim]note[/dim]: showing {TABLE_ROWS:,} of {frame.height:,} rows "
                         "(--format csv or json prints them all)", highlight=False)
            frame = frame.head(TABLE_ROWS)
        if human:
            frame = humanize(frame)
        table = Table(show_lines=False)
        for name in frame.columns:
            table.add_column(name, overflow="fold")
        for row in frame.iter_rows():
            table.add_row(*("" if v is None else str(v) for v in row))
        stdout.print(table)


def print_kv(title: str, rows: list[tuple[str, Any]]) -> None:
    """A two-column table."""
    table = Table(title=title, show_header=False)
    table.add_column("key", style="bold")
    table.add_column("value", overflow="fold")
    for key, value in rows:
        table.add_row(key, str(value))
    stdout.print(table)


def humanize_ns(value: int | None) -> str:
    """``1234567`` -> ``1.235 ms`` (ns, us, ms or s, 3 decimals above ns)."""
    if value is None:
        return ""
    size = abs(value)
    for unit, scale in (("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)):
        if size >= scale:
            return f"{value / scale:,.3f} {unit}"
    return f"{value} ns"


def is_timestamp(column: str) -> bool:
    """``start_ns``, ``end_ns``, ``ts_ns``, ``send_start_ns``, ``last_enter_ns``...: points in
    time, not durations."""
    return column in ("start_ns", "end_ns", "ts_ns") or column.endswith(
        ("_start_ns", "_end_ns", "_ts_ns", "_enter_ns", "_exit_ns"))


def humanize(frame: pl.DataFrame) -> pl.DataFrame:
    """Integer duration columns (``*_ns`` but not timestamps) as human durations, for
    terminal tables only; timestamps stay integer epoch ns."""
    import polars as pl

    cols = [c for c, t in frame.schema.items()
            if c.endswith("_ns") and not is_timestamp(c) and t.is_integer()]
    return frame.with_columns(
        pl.col(c).map_elements(humanize_ns, return_dtype=pl.String) for c in cols
    )


def print_rows(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """A plain table of strings."""
    table = Table()
    for name in header:
        table.add_column(name, overflow="fold")
    for row in rows:
        table.add_row(*row)
    stdout.print(table)
