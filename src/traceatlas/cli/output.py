"""Terminal output helpers: errors, warnings, progress, tables. Only the CLI prints.

Everything printed here is data, shown literally: the consoles never read Rich markup or
emoji codes in a string (``[bold]``, ``[/]``, ``:x:`` print as typed) and every string
passes through ``traceatlas.literal.literal`` (control characters and ANSI escape
sequences are shown as ``\\x1b``-style escapes). Styled prefixes (``error``, ``warning``,
``note``) are built as ``rich.text.Text``, never as markup. JSON and CSV are written as is.
"""

from __future__ import annotations

import json
import math
import re
import secrets
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console, JustifyMethod, OverflowMethod
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.style import Style
from rich.table import Table
from rich.text import Text

from traceatlas.cli import tables
from traceatlas.literal import literal

if TYPE_CHECKING:
    import polars as pl



class LiteralConsole(Console):
    """A Console for data: strings are never markup or emoji codes, and characters that
    would act on the terminal are escaped (``literal``). Highlighting is off."""

    def __init__(self, *, stderr: bool = False, **kwargs: Any) -> None:
        super().__init__(stderr=stderr, markup=False, emoji=False, highlight=False,
                         soft_wrap=True, **kwargs)

    def render_str(
        self,
        text: str,
        *,
        style: str | Style = "",
        justify: JustifyMethod | None = None,
        overflow: OverflowMethod | None = None,
        emoji: bool | None = None,
        markup: bool | None = None,
        highlight: bool | None = None,
        highlighter: Callable[[str | Text], Text] | None = None,
    ) -> Text:
        """Every string this console prints, tables included, as literal text."""
        return super().render_str(literal(text), style=style, justify=justify,
                                  overflow=overflow, emoji=False, markup=False,
                                  highlight=False, highlighter=None)


stdout = LiteralConsole()
stderr = LiteralConsole(stderr=True)


def _line(label: str, style: str, message: str) -> Text:
    return Text.assemble((label, style), ": ", literal(message))


def error(message: str) -> None:
    """``error: <message>`` on stderr (``message`` shown literally)."""
    stderr.print(_line("error", "red", message))


def note(message: str) -> None:
    """``note: <message>`` on stderr (``message`` shown literally)."""
    stderr.print(_line("note", "dim", message))


def say(message: str) -> None:
    """A plain line on stderr (e.g. ``wrote <path>``), shown literally."""
    stderr.print(Text(literal(message)))


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    stderr.print(_line(f"warning ({category.__name__})", "yellow", str(message)))


def install_warning_printer() -> None:
    """Print warnings as one readable line each on stderr."""
    warnings.showwarning = _show_warning


@contextmanager
def progress(label: str) -> Iterator[Callable[[int, int], None] | None]:
    """A progress callback drawing a bar on stderr, or None when stderr is not a terminal.
    ``label`` is shown literally."""
    if not sys.stderr.isatty():
        yield None
        return
    with Progress(
        TextColumn("{task.description}", markup=False), BarColumn(),
        TextColumn("{task.completed}/{task.total}", markup=False),
        TimeElapsedColumn(), console=stderr, transient=True,
    ) as bar:
        task = bar.add_task(literal(label), total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


TABLE_ROWS = 200
"""Rows a terminal table shows at most; machine formats print every row."""


def print_frame(frame: pl.DataFrame, fmt: str, *, human: bool = False,
                wide: bool = False) -> None:
    """Print a frame as a table, CSV, or a JSON array of row objects.

    ``human``: durations humanised, floats rounded and kernel names shortened in the
    table format (``humanize``, ``cli.tables``). The table fits the terminal (cells on at
    most two lines, long text shortened in the middle, columns that do not fit left out
    with a note) unless ``wide``: every column and every name whole. CSV and JSON keep
    full precision (JSON: ``json_rows``)."""
    if fmt == "csv":
        sys.stdout.write(frame.write_csv())
    elif fmt == "json":
        sys.stdout.write(json_rows(frame) + "\n")
    else:
        if frame.height > TABLE_ROWS:
            note(f"showing {TABLE_ROWS:,} of {frame.height:,} rows "
                 "(--format csv or json prints them all)")
            frame = frame.head(TABLE_ROWS)
        if human:
            frame = humanize(frame, names=not wide)
        header = [literal(c) for c in frame.columns]
        floats = {i for i, t in enumerate(frame.dtypes) if t.is_float()}
        rows = [[_text(frame.columns[i], v, human=human and i in floats, wide=wide)
                 for i, v in enumerate(row)] for row in frame.iter_rows()]
        right = [t.is_numeric() for t in frame.dtypes]
        table, dropped, size = tables.table(header, rows, None if wide else stdout.width,
                                            right)
        # --wide: as wide as the table needs (the terminal wraps, `less -S` scrolls)
        (LiteralConsole(width=size) if wide else stdout).print(table, crop=not wide)
        if dropped:
            note(f"{len(dropped)} column(s) not shown at this width: {', '.join(dropped)} "
                 "(--wide prints every column, --format csv or json every value)")


def _text(column: str, value: object, *, human: bool, wide: bool) -> str:
    """One table cell as literal text: rounded when ``human`` and a float, long text
    shortened in the middle unless ``wide``."""
    if value is None:
        return ""
    if human and isinstance(value, float):
        return tables.format_float(column, value)
    text = literal(str(value))
    return text if wide else tables.shorten_middle(text)


def json_rows(frame: pl.DataFrame) -> str:
    """A JSON array of row objects (Polars' ``write_json``), except for DuckDB's wide
    numbers, which Polars writes as strings: integers (HUGEINT, e.g. ``sum`` of BIGINT, and
    DECIMAL of scale 0, both Decimal(38, 0) in Polars; Int128) are JSON numbers when they
    fit in a signed 64-bit integer, strings beyond (JSON readers lose integers past 64
    bits); DECIMAL values with a fraction are JSON numbers written with their own exact
    digits (``1.10`` stays ``1.10``, never a binary float's ``1.1000000000000001``)."""
    import polars as pl

    wide = [c for c, t in frame.schema.items()
            if t in (pl.Int128, pl.UInt128) or (isinstance(t, pl.Decimal) and t.scale == 0)]
    decimals = [c for c, t in frame.schema.items()
                if isinstance(t, pl.Decimal) and c not in wide]
    if not wide and not decimals:
        return frame.write_json()
    token = secrets.token_hex(8)  # marks numbers to unquote; absent from the data
    frame = frame.with_columns(pl.col(c).cast(pl.String) for c in (*wide, *decimals))
    rows = list(frame.iter_rows(named=True))
    for row in rows:
        for c in wide:
            v = row[c]
            if v is not None and INT64_MIN <= int(v) <= INT64_MAX:
                row[c] = f"{token}{v}{token}"
        for c in decimals:
            if row[c] is not None:
                row[c] = f"{token}{row[c]}{token}"
        for c, v in row.items():
            if isinstance(v, float) and not math.isfinite(v):
                row[c] = None  # as write_json: no NaN/Infinity in JSON
    text = json.dumps(rows, separators=(",", ":"), default=str, allow_nan=False)
    return re.sub(f'"{token}(-?[0-9.]+){token}"', r"\1", text)


INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1


def _cell(value: str) -> Text:
    """A table cell or header: literal text (no markup, control characters escaped)."""
    return Text(literal(value))


def print_kv(title: str, rows: list[tuple[str, Any]]) -> None:
    """A two-column table."""
    table = Table(title=_cell(title), show_header=False)
    table.add_column("key", style="bold")
    table.add_column("value", overflow="fold")
    for key, value in rows:
        table.add_row(_cell(key), _cell(str(value)))
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


def humanize(frame: pl.DataFrame, *, names: bool = True) -> pl.DataFrame:
    """Integer duration columns (``*_ns`` but not timestamps) as human durations and
    ``name``/``kernel`` columns as display names, for
    terminal tables only; timestamps stay integer epoch ns. Float ``*_ns`` durations are
    rounded to int ns first. ``names``: False keeps names whole (``--wide``)."""
    import polars as pl

    from traceatlas.names import display_name  # the demangler's library: not at start-up

    cols = [c for c, t in frame.schema.items()
            if c.endswith("_ns") and not is_timestamp(c) and (t.is_integer() or t.is_float())]
    # Kernel names demangled and their templates shortened (names.py); JSON/CSV keep them.
    shown = [c for c, t in frame.schema.items()
             if names and c in ("name", "kernel") and t in (pl.String, pl.Categorical)]
    return frame.with_columns(
        *(pl.col(c).round(0).cast(pl.Int64, strict=False)
          .map_elements(humanize_ns, return_dtype=pl.String) for c in cols),
        *(pl.col(c).cast(pl.String).map_elements(display_name, return_dtype=pl.String)
          for c in shown),
    )


def print_rows(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """A plain table of strings."""
    table = Table()
    for name in header:
        table.add_column(_cell(name), overflow="fold")
    for row in rows:
        table.add_row(*map(_cell, row))
    stdout.print(table)
