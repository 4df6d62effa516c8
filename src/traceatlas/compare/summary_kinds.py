"""The entities of one kind of the baseline summary, on numpy columns, in two steps.

``kind_cells`` (per rank batch, on a worker): input per interval of the kind, its
raw-name code, rank position, iteration position, ``start_ns`` and ``end_ns``; output
per raw name its key (``normalize``) and row count, and per (key, rank, iteration) the
union ns and the count of its intervals (small tables). ``assemble`` (the client) adds
up every batch's tables into the entities' ``[rank][iteration]`` matrices. Unions as in
``traceatlas.ops.unions.union_ns`` (touching intervals merge; a union, never a sum): one
sort by (group, start) (``numpy.lexsort``), then the merged segments of every group at
once (a running maximum of the ends, made group-local by shifting each group's values
above the previous group's), summed per group. When the shifted values would not fit in
int64, the groups go through ``union_ns`` (Polars) instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import polars as pl

I64 = npt.NDArray[np.int64]
SAFE = 2 ** 61
"""Bound on the shifted values of the fast union path (int64 holds 2**63 - 1)."""


@dataclass(frozen=True)
class Rows:
    """Intervals of one kind: ``code`` indexes ``names`` (the raw name, or the category);
    ``r`` / ``i``: positions in the summary's ranks / iteration labels (-1: none)."""

    names: Sequence[str]
    code: I64
    r: I64
    i: I64
    start: I64
    end: I64


def codes(series: pl.Series) -> tuple[I64, list[str]]:
    """(per row, a dense code; the distinct strings by code) of a String or Categorical
    series without nulls."""
    import polars as pl

    cat = series if series.dtype == pl.Categorical else series.cast(pl.Categorical)
    phys = cat.to_physical()
    if phys.len() == 0:
        return np.zeros(0, dtype=np.int64), []
    distinct = cat.unique()
    ids = distinct.to_physical().to_numpy().astype(np.int64)
    lut = np.full(int(ids.max()) + 1, -1, dtype=np.int64)
    lut[ids] = np.arange(len(ids), dtype=np.int64)
    return lut[phys.to_numpy().astype(np.int64)], [str(s) for s in distinct.cast(pl.String)]


def positions(values: npt.NDArray[Any], labels: Sequence[int]) -> I64:
    """Position of each value in the ascending ``labels``; -1 for a value not in them."""
    ordered = np.asarray(labels, dtype=np.int64)
    vals = np.asarray(values, dtype=np.int64)
    if len(ordered) == 0:
        return np.full(len(vals), -1, dtype=np.int64)
    pos = np.minimum(np.searchsorted(ordered, vals), len(ordered) - 1)
    return np.where(ordered[pos] == vals, pos, -1).astype(np.int64)


def kind_cells(rows: Rows, key_of: Callable[[str], str], ranks: Sequence[int],
               labels: Sequence[int]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """One kind's share of a rank batch (the map step). ``rows.r`` / ``rows.i``: positions
    in ``ranks`` / ``labels`` (the batch's own; every row has both). Returns (``names``:
    key, name, n = rows per raw name used; ``cells``: key, rank, it, ``ns`` = union ns
    and ``count`` = rows, per (key, rank, iteration) that has rows)."""
    import polars as pl

    n_codes = len(rows.names)
    per_code = np.bincount(rows.code, minlength=n_codes)
    used = np.flatnonzero(per_code)
    key_by_code = {int(c): key_of(rows.names[int(c)]) for c in used}
    keys = sorted(set(key_by_code.values()))
    names = pl.DataFrame({"key": [key_by_code[int(c)] for c in used],
                          "name": [rows.names[int(c)] for c in used],
                          "n": per_code[used].astype(np.int64)},
                         schema={"key": pl.String, "name": pl.String, "n": pl.Int64})
    k_index = {k: j for j, k in enumerate(keys)}
    to_key = np.full(n_codes, -1, dtype=np.int64)
    for c, key in key_by_code.items():
        to_key[c] = k_index[key]
    n_ranks, n_its = len(ranks), len(labels)
    gid = (to_key[rows.code] * n_ranks + rows.r) * n_its + rows.i
    ns, count = union_by_group(gid, rows.start, rows.end, len(keys) * n_ranks * n_its)
    cell = np.flatnonzero(count)
    k_of, rest = np.divmod(cell, max(1, n_ranks * n_its))
    r, i = np.divmod(rest, max(1, n_its))
    cells = pl.DataFrame({"key": [keys[int(j)] for j in k_of],
                          "rank": np.asarray(ranks, dtype=np.int64)[r],
                          "it": np.asarray(labels, dtype=np.int64)[i],
                          "ns": ns[cell], "count": count[cell]},
                         schema={"key": pl.String, "rank": pl.Int64, "it": pl.Int64,
                                 "ns": pl.Int64, "count": pl.Int64})
    return names, cells


def assemble(names: pl.DataFrame, cells: pl.DataFrame, ranks: Sequence[int],
             labels: Sequence[int], present: npt.NDArray[np.bool_], *,
             raw_names: bool) -> list[dict[str, Any]]:
    """A kind's entities from every batch's ``kind_cells`` (the merge step; the whole
    run is one batch): ``{key, names, n_names, ns, count, _total}`` sorted by key;
    ``ns`` / ``count`` are ``[rank][iteration]`` lists over ``ranks`` x ``labels``
    (cells of an iteration not in ``labels`` are left out), -1 where ``present`` is
    false; ``names``: up to ``MAX_NAMES`` raw names, most rows first (ties by name),
    empty when the only raw name is the key itself or ``raw_names`` is false."""
    from traceatlas.compare.summary import MAX_NAMES

    per_name: dict[tuple[str, str], int] = {}
    for key, name, n in names.iter_rows():
        per_name[(key, name)] = per_name.get((key, name), 0) + int(n)
    keys = sorted({key for key, _ in per_name})
    if not keys:
        return []
    k_index = {k: j for j, k in enumerate(keys)}
    n_ranks, n_its = present.shape
    ns = np.zeros((len(keys), n_ranks, n_its), dtype=np.int64)
    count = np.zeros((len(keys), n_ranks, n_its), dtype=np.int64)
    if cells.height:
        k = np.array([k_index[key] for key in cells["key"].to_list()], dtype=np.int64)
        r = positions(cells["rank"].to_numpy(), ranks)
        i = positions(cells["it"].to_numpy(), labels)
        ok = (r >= 0) & (i >= 0)
        at = (k[ok], r[ok], i[ok])
        np.add.at(ns, at, cells["ns"].to_numpy().astype(np.int64)[ok])
        np.add.at(count, at, cells["count"].to_numpy().astype(np.int64)[ok])
    ns[:, ~present] = -1
    count[:, ~present] = -1
    listed: dict[str, list[tuple[int, str]]] = {key: [] for key in keys}
    for (key, name), n in per_name.items():
        listed[key].append((-n, name))
    items = []
    for j, key in enumerate(keys):
        shown: list[str] = []
        n_names = 0
        if raw_names:
            seen = sorted(listed[key])
            shown = [name for _, name in seen[:MAX_NAMES]]
            n_names = len(seen)
            if shown == [key]:
                shown = []  # the raw name is the key itself
        m = ns[j]
        items.append({"key": key, "names": shown, "n_names": n_names, "ns": m.tolist(),
                      "count": count[j].tolist(), "_total": int(m[m > 0].sum())})
    return items


def union_by_group(gid: I64, start: I64, end: I64, size: int) -> tuple[I64, I64]:
    """(union ns, interval count) per group id in ``range(size)`` (0 where none)."""
    ns = np.zeros(size, dtype=np.int64)
    count = np.bincount(gid, minlength=size).astype(np.int64)
    n = len(gid)
    if n == 0:
        return ns, count
    order = np.lexsort((start, gid))
    g, s, e = gid[order], start[order], end[order]
    first = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    lo = np.minimum.reduceat(e, first)
    span = np.maximum.reduceat(e, first) - lo + 1
    reach = int(e.max()) - int(s.min())
    if float(span.astype(np.float64).sum()) + reach >= SAFE or reach >= SAFE:
        return _union_polars(g, s, e, ns), count
    off = np.cumsum(span) - span  # each group's values lie above every earlier group's
    shift = np.repeat(off - lo, np.diff(np.r_[first, n]))
    reached = np.maximum.accumulate(e + shift)  # furthest end so far, group-local
    opens = np.empty(n, dtype=bool)
    opens[0] = True
    opens[1:] = (s[1:] + shift[1:]) > reached[:-1]
    opens[first] = True
    seg = np.flatnonzero(opens)
    seg_ns = np.maximum.reduceat(e, seg) - s[seg]
    seg_g = g[seg]
    g_first = np.flatnonzero(np.r_[True, seg_g[1:] != seg_g[:-1]])
    ns[seg_g[g_first]] = np.add.reduceat(seg_ns, g_first)
    return ns, count


def _union_polars(g: I64, s: I64, e: I64, ns: I64) -> I64:
    """``union_by_group``'s union through ``traceatlas.ops.unions.union_ns``."""
    import polars as pl

    from traceatlas.ops.unions import union_ns

    frame = pl.DataFrame({"g": g, "start_ns": s, "end_ns": e})
    table = union_ns(frame.lazy(), ["g"], "ns").collect()
    ns[table["g"].to_numpy()] = table["ns"].to_numpy()
    return ns
