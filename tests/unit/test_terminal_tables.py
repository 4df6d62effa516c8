"""Terminal tables: rounding by column meaning, names shortened in the middle, at most two
lines per cell, columns that do not fit named in a note, ``--wide`` whole; CSV/JSON keep
full precision. Expected values are written by hand from the inputs built here."""

from __future__ import annotations

import json

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceatlas.cli import output, tables


def test_floats_rounded_to_what_they_mean() -> None:
    assert tables.format_float("share_pct", 31.90245510394685) == "31.9"
    assert tables.format_float("mean_queue_length", 664.8258943770842) == "664.826"
    assert tables.format_float("value", 0.19556034851698878) == "0.196"
    assert tables.format_float("value", 22910447.0) == "22,910,447"


def test_shorten_middle_keeps_head_and_tail() -> None:
    name = "a" * 30 + "MIDDLE" + "z" * 30
    short = tables.shorten_middle(name, 21)
    assert short == "a" * 10 + "…" + "z" * 10 and len(short) == 21
    assert tables.shorten_middle("short", 21) == "short"


def test_header_breaks_after_the_most_even_underscore() -> None:
    assert tables.header_text("mean_queue_length") == "mean_queue_\nlength"
    assert tables.header_text("rank") == "rank"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet="ab _", min_size=1, max_size=30), min_size=1, max_size=5))
def test_two_line_width_gives_two_lines_at_most(cells: list[str]) -> None:
    from rich.console import Console
    from rich.text import Text

    console = Console(width=200)
    for cell in cells:
        w = tables.two_line_width(cell)
        lines = Text(cell).wrap(console, max(w, 1), overflow="fold")
        assert len(lines) <= 2, (cell, w)


def _printed(frame: pl.DataFrame, capsys: pytest.CaptureFixture[str], width: int = 80,
             **kw: bool) -> tuple[str, str]:
    console = output.LiteralConsole(width=width)
    old = output.stdout
    output.stdout = console
    try:
        output.print_frame(frame, "table", human=True, **kw)
    finally:
        output.stdout = old
    got = capsys.readouterr()
    return got.out, got.err


def test_table_fits_80_columns_with_cells_on_two_lines(
        capsys: pytest.CaptureFixture[str]) -> None:
    name = "void cutlass::Kernel2<" + "x" * 120 + ">(Params)"
    frame = pl.DataFrame({"rank": [0, 1], "name": [name, "short"],
                          "total_ns": [11_359_000, 956_548],
                          "share_pct": [56.345105652, 4.1],
                          **{f"extra_metric_{i}_ns": [1, 2] for i in range(12)}})
    out, err = _printed(frame, capsys)
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert "56.3" in out and "56.34" not in out and "11.359 ms" in out
    assert "…" in out and name not in out
    body = lines[3:]  # two header lines, the rule, then two rows
    assert len(body) <= 4  # two rows of at most two lines each
    assert "not shown at this width" in err and "extra_metric_11_ns" in err


def test_wide_prints_every_column_and_whole_names(capsys: pytest.CaptureFixture[str]) -> None:
    name = "k" * 150
    frame = pl.DataFrame({"rank": [0], "name": [name],
                          **{f"extra_metric_{i}_ns": [1] for i in range(12)}})
    out, err = _printed(frame, capsys, wide=True)
    assert name in out and "extra_metric_11_ns" in out and "not shown" not in err


def test_csv_and_json_keep_full_precision(capsys: pytest.CaptureFixture[str]) -> None:
    frame = pl.DataFrame({"share_pct": [31.90245510394685], "name": ["n" * 200]})
    output.print_frame(frame, "json", human=True)
    row = json.loads(capsys.readouterr().out)[0]
    assert row == {"share_pct": 31.90245510394685, "name": "n" * 200}
    output.print_frame(frame, "csv", human=True)
    assert "31.90245510394685" in capsys.readouterr().out
