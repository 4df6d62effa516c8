"""Regexes on event names run once per distinct name, not once per row.

A rank of a 1 GB Kineto trace has millions of host calls but a few dozen distinct names;
``name`` is a Categorical column, so the names a regex keeps are found on the distinct
names and the rows are then kept by an ``is_in`` on the Categorical (a code lookup the
Parquet scan evaluates before it decodes the other columns). Same rows as
``pl.col("name").cast(pl.String).str.contains(pattern)`` (null names are never kept).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl


def distinct_names(frame: pl.LazyFrame, column: str = "name") -> list[str]:
    """The distinct non-null values of ``column`` (Categorical or String) of ``frame``."""
    import polars as pl

    uniq = frame.select(pl.col(column).unique()).collect().to_series()
    return [str(v) for v in uniq.cast(pl.String).drop_nulls().to_list()]


def names_matching(names: Sequence[str], pattern: str) -> list[str]:
    """The ``names`` that ``pattern`` (a Rust regex, as Polars' ``str.contains``) finds."""
    import polars as pl

    series = pl.Series(list(names), dtype=pl.String)
    return series.filter(series.str.contains(pattern)).to_list()
