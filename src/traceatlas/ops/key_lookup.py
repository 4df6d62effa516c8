"""Look up a value by an integer key pair (e.g. ``rank, correlation``) with a sorted search.

A left join of N rows to M unique keys as a Polars hash join on two columns costs more
than sorting the M keys once and searching them (``numpy.searchsorted``): both key
columns are packed into one int64 (the first above bit ``LOW_BITS``) when they fit,
otherwise ``lookup`` returns None and the caller joins as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import polars as pl

LOW_BITS = 47
"""Bits of the second key; the first key gets the 16 above them (below the sign bit)."""


def _packed(high: pl.Series, low: pl.Series) -> np.ndarray | None:
    """``high << LOW_BITS | low`` as int64, or None when a value is out of range (nulls
    in ``low`` are packed as -1 and never match a key without nulls)."""
    if high.null_count() or high.len() == 0:
        return None if high.len() else np.zeros(0, np.int64)
    hmin, hmax = high.min(), high.max()
    lmin, lmax = low.min(), low.max()
    if not (isinstance(hmin, int) and isinstance(hmax, int) and hmin >= 0
            and hmax < 1 << (62 - LOW_BITS)):
        return None
    if lmin is not None and not (isinstance(lmin, int) and isinstance(lmax, int)
                                 and lmin >= 0 and lmax < 1 << LOW_BITS):
        return None
    h = high.to_numpy().astype(np.int64)
    lo = low.fill_null(-1).to_numpy().astype(np.int64)
    out: np.ndarray = (h << LOW_BITS) | np.where(lo < 0, (1 << LOW_BITS) - 1, lo)
    out[lo < 0] = -1
    return out


def lookup(keys_high: pl.Series, keys_low: pl.Series, values: pl.Series,
           high: pl.Series, low: pl.Series) -> pl.Series | None:
    """For each row (``high``, ``low``) the ``values`` entry of the key row with equal
    (``keys_high``, ``keys_low``) (keys unique, without nulls), null when none or when
    ``low`` is null: the column a left join would add. None when the keys do not pack
    into one int64 (the caller then joins)."""
    import polars as pl

    if keys_low.null_count() or values.null_count():
        return None
    k = _packed(keys_high, keys_low)
    q = _packed(high, low)
    if k is None or q is None:
        return None
    order = np.argsort(k, kind="stable")
    ks = k[order]
    if ks.size > 1 and bool((ks[1:] == ks[:-1]).any()):
        return None  # keys not unique: a join would repeat rows
    pos = np.searchsorted(ks, q)
    pos_c = np.minimum(pos, max(ks.size - 1, 0))
    hit = (pos < ks.size) & (q >= 0)
    if ks.size:
        hit &= ks[pos_c] == q
    else:
        hit[:] = False
    vals = values.to_numpy()
    picked = vals[order[pos_c]] if ks.size else np.zeros(q.size, vals.dtype)
    out = pl.Series(values.name, picked, dtype=values.dtype)
    return out if bool(hit.all()) else out.scatter(np.flatnonzero(~hit), None)
