"""Requirement checks answered from what the store already records, without reading rows:
the manifest's part records (rows per table and rank), the view's selections, and the
Parquet footers' per-row-group statistics (min / max / null count of a column). Exact or
undecided, never a guess: ``decide`` returns True or False only when these prove it, else
None and the caller scans (``analysis.requirements``).

A ``Clause`` asks: does the view have a row of ``table`` whose columns take one of the
given values (``values``: column -> allowed values) and whose ``not_null`` columns are
set? Decided, in this order:

1. False when the selected ranks' parts of ``table`` hold no row (manifest ``rows``;
   messages: every part, a rank selection keeps a message by either side), or when an
   intervals category selection leaves none of the wanted categories.
2. True when the table has rows, the clause names no column, and no selection filters
   the table's rows beyond its ranks (``row_filter``).
3. From the parts' stats (rows per rank, category and source category, and of those
   the rows with a correlation; tracks: per kind; ``store/part_stats.py``) when the
   clause names only counted columns: False when no selected part has a matching row
   (exact under any selection: the selected rows are a subset); True when one has and
   no selection filters rows beyond ranks and categories.
4. From the footers of the parts with rows (local file; a remote store's footer by a
   ranged read, the part itself is not fetched; see ``footer``), per row group: *absent*
   when a wanted value cannot occur (every wanted value outside [min, max], or the
   column all null); *present* when one condition holds for some row (a wanted value is
   the min or the max; a ``not_null`` column has fewer nulls than rows) and every other
   condition holds for every row (min = max = a wanted value and no null; no null).
   False when every row group is absent (exact under any selection: the selected rows
   are a subset); True when a row group is present and no selection filters rows beyond
   ranks and categories.
5. Otherwise None: the caller scans. That is the case for a selection by step, window,
   name or minimum duration when the wanted rows may exist (only a scan of the selected
   rows can tell), for ``messages`` under any selection, for a store without part
   records (written before they existed), and, when a part has no stats (written
   before they existed) or the clause names other columns, when the footer statistics
   leave a row group open (a wanted category strictly between the group's min and max:
   row groups of a time-sorted part mix categories, so e.g. ``kernel`` among
   ``annotation`` .. ``sync``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceatlas.store.part_stats import rows_with

if TYPE_CHECKING:
    import pyarrow.parquet as pq

    from traceatlas.model.trace import Trace
    from traceatlas.store.remote import Mirror

_PART = re.compile(r"^([a-z]+)/rank=(-?\d+)/[^/]+\.parquet$")


@dataclass(frozen=True)
class Clause:
    """Rows of ``table`` with ``column`` in ``values`` (each pair) and ``not_null``
    columns set."""

    table: str
    values: tuple[tuple[str, tuple[str, ...]], ...] = ()
    not_null: tuple[str, ...] = ()


def decide(trace: Trace, clause: Clause) -> bool | None:
    """True / False when metadata proves whether ``trace`` (a view) has a row matching
    ``clause``; None when only a scan can tell (module docstring)."""
    parts = _parts(trace, clause.table)
    if parts is None:
        return None
    values = dict(clause.values)
    if clause.table == "intervals":
        allowed = _allowed_categories(trace)
        if allowed is not None:
            values["category"] = tuple(c for c in values.get("category", allowed)
                                       if c in allowed)
    if any(not v for v in values.values()) or not any(int(p["rows"]) for p in parts):
        return False
    filtered = row_filter(trace, clause.table)
    if not values and not clause.not_null:
        return None if filtered else True
    counted = rows_with(parts, clause.table, values, clause.not_null)
    if counted == 0:
        return False
    if counted is not None and not filtered:
        return True
    found = False
    for rec in (p for p in parts if int(p["rows"])):
        meta = footer(trace, rec)
        if meta is None:
            return None
        for i in range(meta.num_row_groups):
            state = _group(meta.row_group(i), values, clause.not_null)
            if state is True and not filtered:
                return True
            found = found or state is not False
    return None if found else False


def row_filter(trace: Trace, table: str) -> bool:
    """True when a selection of ``trace`` may drop rows of ``table`` beyond its ranks'
    parts (intervals: a category selection is folded into the clause instead)."""
    for sel in trace.selections:
        if (sel.name_regex is not None or sel.min_dur_ns is not None
                or sel.window is not None or sel.step is not None):
            return True
        if sel.categories is not None and table != "intervals":
            return True
        if sel.ranks is not None and table == "messages":
            return True
    return False


def _allowed_categories(trace: Trace) -> frozenset[str] | None:
    allowed: frozenset[str] | None = None
    for sel in trace.selections:
        if sel.categories is not None:
            mine = frozenset(sel.categories)
            allowed = mine if allowed is None else allowed & mine
    return allowed


def _parts(trace: Trace, table: str) -> list[dict[str, Any]] | None:
    """The part records of ``table`` that the view reads (its ranks' parts; messages:
    all), or None when the manifest has no usable part records."""
    records = trace.manifest.get("parts")
    if not isinstance(records, list):
        return None
    ranks: set[int] | None = None
    if table != "messages":
        for sel in trace.selections:
            if sel.ranks is not None:
                ranks = set(sel.ranks) if ranks is None else ranks & set(sel.ranks)
    out = []
    for rec in records:
        if not isinstance(rec, dict) or not isinstance(rec.get("rows"), int):
            return None
        match = _PART.match(str(rec.get("path", "")))
        if match and match.group(1) == table and (ranks is None
                                                  or int(match.group(2)) in ranks):
            out.append(rec)
    return out


def _group(group: pq.RowGroupMetaData, values: Mapping[str, Sequence[str]],
           not_null: Sequence[str]) -> bool | None:
    """One row group: False when no row can match, True when one surely does, else
    None (module docstring, step 4)."""
    rows = int(group.num_rows)
    if rows == 0:
        return False
    names = {group.column(j).path_in_schema: j for j in range(group.num_columns)}
    some: list[bool] = []
    every: list[bool] = []
    for column, wanted in values.items():
        stats = _stats(group, names.get(column))
        if stats is None:
            return None
        nulls = int(stats.null_count) if stats.has_null_count else None
        if nulls == rows:
            return False
        if not stats.has_min_max:
            return None
        lo, hi = _text(stats.min), _text(stats.max)
        if lo is None or hi is None:
            return None
        if all(w < lo or w > hi for w in wanted):
            return False
        some.append(lo in wanted or hi in wanted)
        every.append(lo == hi and lo in wanted and nulls == 0)
    for column in not_null:
        stats = _stats(group, names.get(column))
        if stats is None or not stats.has_null_count:
            return None
        nulls = int(stats.null_count)
        if nulls >= rows:
            return False
        some.append(True)
        every.append(nulls == 0)
    for i, hit in enumerate(some):
        if hit and all(every[:i] + every[i + 1:]):
            return True
    return None


def _stats(group: pq.RowGroupMetaData, index: int | None) -> Any:
    if index is None:
        return None
    column = group.column(index)
    return column.statistics if column.is_stats_set else None


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def footer(trace: Trace, rec: Mapping[str, Any]) -> pq.FileMetaData | None:
    """The Parquet footer of the part ``rec`` (cached per part and content hash): read
    from the local file, or for a remote store's mirror from the part already fetched,
    else by ranged reads of the remote object (the footer only: the part is not fetched).
    None when it cannot be read (the caller scans, which reports the problem)."""
    from traceatlas.store.remote import mirror_at

    rel = str(rec["path"])
    mirror = mirror_at(trace.path)
    local = Path(trace.path) / rel
    if mirror is not None and not _fetched(local, rec):
        return _remote_footer(mirror, rel, str(rec.get("blake2b")))
    return _local_footer(str(local), str(rec.get("blake2b")), int(rec["bytes"]))


def _fetched(path: Path, rec: Mapping[str, Any]) -> bool:
    try:
        st = path.stat()
    except OSError:
        return False
    return bool(st.st_size == rec["bytes"] and st.st_mtime_ns == rec.get("mtime_ns", 0))


@functools.lru_cache(maxsize=4096)
def _local_footer(path: str, digest: str, size: int) -> pq.FileMetaData | None:
    import pyarrow.parquet as pq

    try:
        return pq.read_metadata(path)
    except (OSError, ValueError):
        return None


_REMOTE: dict[tuple[str, str, str], pq.FileMetaData] = {}
"""Remote footers read in this process, by (URL, part, hash)."""


def _remote_footer(mirror: Mirror, rel: str, digest: str) -> pq.FileMetaData | None:
    import pyarrow.parquet as pq

    key = (mirror.url, rel, digest)
    if key in _REMOTE:
        return _REMOTE[key]
    try:
        fs, root = mirror.filesystem()
        with fs.open(f"{root}/{rel}", "rb", block_size=1 << 16, cache_type="readahead") as f:
            meta: pq.FileMetaData = pq.read_metadata(f)
    except Exception:  # fsspec back ends raise their own: the scan reports it
        return None
    if len(_REMOTE) >= 4096:
        _REMOTE.clear()
    _REMOTE[key] = meta
    return meta
