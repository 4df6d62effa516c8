"""``message_histogram``: how many point-to-point messages fall in each size range.

Main table, one row per bin: ``bin`` (0-based), ``bin_lo_bytes`` and ``bin_hi_bytes``
(the bin's edges, bytes, float), ``count`` (messages). Bins are half-open ``[lo, hi)``
except the last, which includes its upper edge (numpy's ``histogram`` convention).

``scale=linear`` (default, as Pipit): ``bins`` equal-width bins from the smallest to the
largest size (numpy's default range, so one size only gives ``[size - 0.5, size + 0.5]``).
``scale=log``: ``bins`` geometrically spaced edges from max(smallest, 1) to the largest
size; zero-byte messages go to the first bin (noted). Messages of unknown size are left
out (noted).

Same as Pipit (``Trace.message_histogram(bins=20)``, hpcgroup/pipit ``pipit/trace.py``:
``np.histogram`` of the ``msg_length`` of ``MpiSend``/``MpiIsend`` events) for the
linear scale and the default of 20 bins; Pipit counts sends only, here every row of the
``messages`` table counts (a receive whose send was not recorded too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.base import MAX_BINS, Param, Result

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

DEFAULT_BINS = 20
"""Pipit's default number of bins."""


class MessageHistogram:
    """Histogram of message sizes (linear or log bins)."""

    name = "message_histogram"
    description = "Histogram of point-to-point message sizes (bytes)"
    params = (
        Param("bins", int, DEFAULT_BINS, "number of bins (Pipit's default: 20)", minimum=1,
              maximum=MAX_BINS),
        Param("scale", str, "linear", "linear (as Pipit) or log bin edges",
              ("linear", "log")),
    )
    requires = ("messages",)

    partition = "message"
    """Each message counted by the batch whose part stores it (``analysis.partitioned``):
    batches send their distinct sizes with counts (``partial``), the merge bins them."""

    def partial(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """A batch's share: ``size_counts`` of its messages."""
        return Result(size_counts(trace.messages).collect())

    def merge(self, partials: Sequence[Result], params: Mapping[str, Any]) -> Result:
        """The batches' size counts added up per size, then binned as ``run`` bins."""
        import polars as pl

        sizes = (pl.concat([p.table for p in partials], how="vertical")
                 .group_by("bytes").agg(pl.col("count").sum()))
        return histogram(sizes, params)

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """One row per bin: edges in bytes and the message count."""
        return histogram(size_counts(trace.messages).collect(), params)


def size_counts(messages: pl.LazyFrame) -> pl.LazyFrame:
    """``bytes`` (null: unknown size) and ``count`` of messages of that size."""
    import polars as pl

    return messages.group_by("bytes").agg(count=pl.len().cast(pl.Int64))


def histogram(sizes: pl.DataFrame, params: Mapping[str, Any]) -> Result:
    """The result from the distinct sizes and their counts (``size_counts``): numpy's
    histogram of the sizes weighted by their counts, the same bins and integer counts as
    of the sizes repeated (the range and each size's bin depend on the values only)."""
    import numpy as np
    import polars as pl

    from traceatlas.errors import InputError

    bins = int(params["bins"])
    if bins < 1:
        raise InputError("--param bins", f"must be at least 1, got {bins}")
    notes = []
    known = sizes.filter(pl.col("bytes").is_not_null()).sort("bytes")
    unknown = int(sizes.filter(pl.col("bytes").is_null())["count"].sum())
    if unknown:
        notes.append(f"{unknown} message(s) of unknown size left out")
    values = known["bytes"].to_numpy().astype(np.float64)
    weights = known["count"].to_numpy().astype(np.int64)
    if not len(values):
        edges = np.zeros(0)
        counts = np.zeros(0, dtype=np.int64)
    elif params["scale"] == "log" and values.max() > max(values.min(), 1.0):
        lo = max(float(values.min()), 1.0)
        zeros = int(weights[values < lo].sum())
        if zeros:
            notes.append(f"{zeros} message(s) smaller than 1 byte counted in the first bin")
        edges = np.geomspace(lo, float(values.max()), bins + 1)
        counts, _ = np.histogram(np.maximum(values, lo), bins=edges, weights=weights)
    else:
        counts, edges = np.histogram(values, bins=bins, weights=weights)
    n = len(counts)
    table = pl.DataFrame({
        "bin": pl.Series(np.arange(n), dtype=pl.Int64),
        "bin_lo_bytes": pl.Series(edges[:n], dtype=pl.Float64),
        "bin_hi_bytes": pl.Series(edges[1:n + 1], dtype=pl.Float64),
        "count": pl.Series(counts, dtype=pl.Int64),
    })
    return Result(table, notes=notes)
