"""Frames that own only their rows' data.

A Polars string column (Arrow string views) made by a filter, a gather or a join keeps
every data buffer of the column it came from: a 10-row table of kernel names cut from a
rank's 500 k intervals holds all their names. ``DataFrame.estimated_size`` does not
show it (it counts the views' bytes) and ``shrink_to_fit`` does not release it. A result
kept while other batches run (``analysis.partitioned``'s partials) must not hold its
batch's buffers, or peak memory grows with the number of batches.

``detached(frame)`` copies ``frame`` through Arrow IPC in memory: the writer keeps only
the bytes the views point at, and every Polars dtype (Enum, Categorical, nested) comes
back as it was. Its cost is one copy of the frame, nothing of the data it came from.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl


def detached(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame``'s rows in new buffers (equal to ``frame``, dtypes and order kept)."""
    import polars as pl

    buf = io.BytesIO()
    frame.write_ipc(buf, compression="uncompressed")
    buf.seek(0)
    return pl.read_ipc(buf)
