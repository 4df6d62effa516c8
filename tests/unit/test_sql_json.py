"""``sql --format json``: DuckDB HUGEINT/DECIMAL values as JSON numbers when they fit a
signed 64-bit integer (strings beyond); decimals with their own digits. The sums are
known from the rows written in the query itself."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from typer.testing import CliRunner

from traceatlas.cli import output
from traceatlas.cli.main import app
from traceatlas.testing import TraceBuilder


def test_sum_of_bigint_is_a_json_number(tmp_path: Path) -> None:
    trace = TraceBuilder().write(tmp_path / "t.json")
    query = ("select sum(x) s, sum(x) * 0 + 9223372036854775807 top, "
             "sum(x) * 0 + 9223372036854775808 past, sum(x) * 0 - 9223372036854775808 low, "
             "1.10 d from (values (4000000000::bigint), (4355840::bigint)) v(x)")
    done = CliRunner().invoke(app, ["sql", str(trace), query, "--format", "json"])
    assert done.exit_code == 0, done.output
    row = json.loads(done.stdout)[0]
    assert row["s"] == 4_004_355_840 and isinstance(row["s"], int)
    assert row["top"] == 2 ** 63 - 1 and row["low"] == -(2 ** 63)
    assert row["past"] == "9223372036854775808"  # beyond 64 bits: a string
    assert '"d":1.10' in done.stdout  # the decimal's own digits


def test_json_rows_matches_polars_without_wide_numbers() -> None:
    frame = pl.DataFrame({"a": [1, None], "b": ["x", "y"], "c": [0.5, 2.0]})
    assert output.json_rows(frame) == frame.write_json()


def test_json_rows_int128_and_nan() -> None:
    frame = pl.DataFrame({"i": pl.Series([5, 2 ** 70], dtype=pl.Int128),
                          "f": [float("nan"), 1.5], "s": ['"q"', "t"]})
    rows = json.loads(output.json_rows(frame))
    assert rows == [{"i": 5, "f": None, "s": '"q"'}, {"i": str(2 ** 70), "f": 1.5, "s": "t"}]
