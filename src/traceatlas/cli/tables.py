"""Tables for people in a terminal: values rounded to what they mean, long names shortened
in the middle, every cell on at most two lines, columns that cannot fit left out with a
note (``--wide`` prints every column and every name whole). CSV and JSON never come here:
they keep full precision and whole names.

Rounding (terminal only, by column name): ``*_pct`` / ``*percent*`` / ``share*`` one
decimal; float ``*_ns`` durations as human durations (``1.235 ms``, like the integer ones);
other floats three decimals below 1,000 and whole numbers with thousands separators from
1,000 up (efficiencies, ratios, queue lengths).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

CELL_MAX = 48
"""Characters a text cell shows at most (shortened in the middle) without ``--wide``."""
ELLIPSIS = "…"
GAP = 3
"""Columns between two table columns (``box.SIMPLE_HEAD``, no outer edge)."""


def shorten_middle(text: str, limit: int = CELL_MAX) -> str:
    """``text`` cut in the middle to ``limit`` characters (head and tail kept)."""
    if len(text) <= limit:
        return text
    keep = max(limit - 1, 2)
    head = (keep + 1) // 2
    return text[:head] + ELLIPSIS + text[len(text) - (keep - head):]


def is_percent(column: str) -> bool:
    """Percentages: one decimal (``share``/``share_of_root`` columns are fractions of 1 and
    get three)."""
    return column.endswith("_pct") or "percent" in column


def format_float(column: str, value: float) -> str:
    """A float cell, rounded to what the column means (module docstring)."""
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if is_percent(column):
        return f"{value:.1f}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3f}"


def header_text(name: str) -> str:
    """A column name on at most two lines, broken after an underscore (the most even
    break), never inside a word unless it has none."""
    if "_" not in name:
        return name
    cuts = [i + 1 for i, ch in enumerate(name[:-1]) if ch == "_"]
    best = min(cuts, key=lambda i: (max(i, len(name) - i), i))
    return name[:best] + "\n" + name[best:]


def two_line_width(text: str) -> int:
    """The narrowest column that shows ``text`` on at most two lines (word wrap at
    spaces; a text without spaces is folded in half)."""
    if "\n" in text:
        return max(map(cell_len, text.split("\n")))
    n = cell_len(text)
    spaces = [i for i, ch in enumerate(text) if ch == " "]
    if not spaces:  # a double-width character cannot be split: one cell more
        return math.ceil(n / 2) + (n != len(text))
    width = min(n, *(max(cell_len(text[:i]), cell_len(text[i + 1:])) for i in spaces))
    if "  " in text or text != text.strip():  # runs of blanks: rich's own wrap decides
        width = _wrapped_width(text, width, n)
    return width


def _wrapped_width(text: str, width: int, most: int) -> int:
    """The narrowest width from ``width`` up to ``most`` at which rich wraps ``text`` on
    at most two lines."""
    from rich.console import Console

    console = Console(width=max(most, 1))
    while width < most and len(Text(text).wrap(console, max(width, 1),
                                               overflow="fold")) > 2:
        width += 1
    return width


@dataclass(frozen=True)
class Layout:
    """Column widths chosen for the terminal; ``dropped``: columns left out."""

    widths: list[int]
    dropped: list[str]


def fit(header: Sequence[str], rows: Sequence[Sequence[str]], width: int,
        whole: Sequence[bool] = ()) -> Layout:
    """Widths giving every cell at most two lines within ``width`` columns: natural widths
    when they fit; else each column at least its two-line width (a header word is never
    broken; ``whole`` columns, numbers, are never broken at all), columns that cannot get
    it dropped from the right, and the spare space given to the columns that need the
    least of it to show on one line."""
    n = len(header)
    natural = [max([len(h)] + [cell_len(r[i]) for r in rows]) for i, h in enumerate(header)]
    heads = [max(map(len, header_text(h).split("\n"))) for h in header]
    minimum = [max([heads[i]] + [cell_len(r[i]) if i < len(whole) and whole[i]
                                 else two_line_width(r[i]) for r in rows])
               for i in range(n)]
    minimum = [min(m, w) for m, w in zip(minimum, natural, strict=True)]
    if sum(natural) + GAP * (n - 1) <= width:
        return Layout(natural, [])
    kept, used = 0, -GAP
    for m in minimum:
        if used + GAP + m > width and kept > 0:
            break
        used += GAP + m
        kept += 1
    widths = minimum[:kept]
    spare = width - used
    for i in sorted(range(kept), key=lambda i: (natural[i] - widths[i], i)):
        extra = max(min(spare, natural[i] - widths[i]), 0)
        widths[i] += extra
        spare -= extra
    return Layout(widths, list(header[kept:]))


def table(header: Sequence[str], rows: Sequence[Sequence[str]], width: int | None,
          right: Sequence[bool] = ()) -> tuple[Table, list[str], int]:
    """A rich table of cells (already literal text: ``traceatlas.literal``) fitted to
    ``width`` (None: natural widths, the ``--wide`` output) and the names of the columns
    left out, and the table's width. ``right``: per column, right-aligned (numbers),
    never broken."""
    if width is not None:
        header, rows, right = _ids_last(header, rows, right, width)
    if width is None:
        layout = Layout([max([len(h)] + [cell_len(r[i]) for r in rows])
                         for i, h in enumerate(header)], [])
    else:
        layout = fit(header, rows, width, right)
    shown = len(layout.widths)
    out = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    for i, name in enumerate(header[:shown]):
        out.add_column(Text(header_text(name) if width is not None and
                            len(name) > layout.widths[i] else name),
                       width=layout.widths[i], overflow="fold", no_wrap=width is None,
                       justify="right" if i < len(right) and right[i] else "left")
    for row in rows:
        out.add_row(*(Text(cell) for cell in row[:shown]))
    return out, layout.dropped, sum(layout.widths) + GAP * max(shown - 1, 0)


def _is_id(name: str) -> bool:
    """Bookkeeping columns (``node_id``, ``parent_id``, ``depth``, ``correlation``): the
    first to give way in a narrow terminal."""
    return name.endswith("_id") or name in ("depth", "correlation")


def _ids_last(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool],
              width: int) -> tuple[list[str], list[list[str]], list[bool]]:
    """When the natural widths do not fit ``width``, the id-like columns (but the first
    column) moved after the others, so the values are kept and the ids dropped first."""
    natural = sum(max([len(h)] + [cell_len(r[i]) for r in rows])
                  for i, h in enumerate(header))
    order = list(range(len(header)))
    if natural + GAP * (len(header) - 1) > width:
        order = ([i for i in order if i == 0 or not _is_id(header[i])]
                 + [i for i in order if i > 0 and _is_id(header[i])])
    flags = [bool(right[i]) if i < len(right) else False for i in order]
    return ([header[i] for i in order], [[r[i] for i in order] for r in rows], flags)
