"""Polars aggregation of pyramid rows across levels: counters always, interval bins when
the packed numpy keys of ``pyramid_bins.level_bins`` would not fit in 62 bits.

Rows enter at their track's finest level (``lvl``); each coarser level is the level below
with ``bin // 4``, summed again. Output rows are sorted by (id, bin, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from traceatlas.view.pyramid_bins import Columns

if TYPE_CHECKING:
    import polars as pl


def level_tables(rows: pl.DataFrame, top: int, counters: bool) -> list[pl.DataFrame]:
    """Per level 0..top: the rows of the tracks whose finest level is <= L, aggregated at L
    (coarser levels from the level below: bin // 4)."""
    import polars as pl

    if counters:
        keys = ["id", "bin", "series"]
        agg = [pl.col("min").min(), pl.col("max").max(), pl.col("sum").sum(),
               pl.col("count").sum()]
    else:
        keys = ["id", "bin", "cat", "name"]
        agg = [pl.col("busy").sum(), pl.col("count").sum()]
    out: list[pl.DataFrame] = []
    cur: pl.DataFrame | None = None
    for level in range(top + 1):
        new = rows.filter(pl.col("lvl") == level).drop("lvl")
        parts = [new] if cur is None else [new, cur.with_columns(pl.col("bin") // 4)]
        cur = pl.concat(parts).group_by(keys).agg(agg) if any(p.height for p in parts) \
            else new
        out.append(cur)
    return out


def _finish_bins(cur: pl.DataFrame) -> pl.DataFrame:
    import polars as pl

    return cur.sort(["id", "bin", "cat", "busy", "count", "name"],
                    descending=[False, False, False, True, True, False]).group_by(
        ["id", "bin", "cat"], maintain_order=True).agg(
        pl.col("busy").sum().alias("busy_ns"), pl.col("count").sum(), pl.col("name").first())


def polars_bins(rows: Columns, top: int) -> list[Columns]:
    """Per level, the interval bins (id, bin, cat, busy_ns, count, name) of one rank, with
    the dominant name (most busy ns, then most starts, then lowest index)."""
    import polars as pl

    frame = pl.DataFrame(rows)
    return [{c: t[c].to_numpy().astype(np.int64) for c in t.columns}
            for t in map(_finish_bins, level_tables(frame, top, counters=False))]


def counter_tables(rows: pl.DataFrame, top: int) -> list[pl.DataFrame]:
    """Per level, the counter bins (id, bin, series, min, mean, max, count)."""
    import polars as pl

    return [cur.sort(["id", "bin", "series"]).with_columns(mean=pl.col("sum") / pl.col("count"))
            for cur in level_tables(rows, top, counters=True)]
