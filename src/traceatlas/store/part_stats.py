"""Row counts a part record carries, so that ``info`` and requirement checks need no scan.

At the end of a write, :func:`part_stats` reads a few columns of an ``intervals`` or
``tracks`` part and returns what goes into its manifest record under ``"stats"``:

- ``"counts"``: one row per distinct key present, ``[rank, *keys, rows, *set]``, where
  ``keys`` are the table's ``COUNTED`` columns (intervals: ``category``,
  ``source_category``, the latter possibly null; tracks: ``kind``) and ``set`` gives, for
  each ``NOT_NULL`` column (intervals: ``correlation``), the rows where it is not null;
- intervals only: ``"start_ns_min"`` / ``"end_ns_max"`` (ns; null for an empty part).

The stats are as current as the part: opening a store checks every part against its
record (size and mtime, hash when the mtime changed, ``store.parts``), so a record's stats
describe the bytes on disk. A store written before parts had stats has none: the callers
(``summary.py``, ``analysis/requirements_meta.py``) then scan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

if TYPE_CHECKING:
    import pyarrow as pa

STATS_KEY = "stats"
COUNTED: dict[str, tuple[str, ...]] = {"intervals": ("category", "source_category"),
                                       "tracks": ("kind",)}
"""The tables whose parts carry stats, and the columns counted by (with ``rank``)."""
NOT_NULL: dict[str, tuple[str, ...]] = {"intervals": ("correlation",), "tracks": ()}
"""Columns whose non-null rows are counted too, per key."""
_NULLABLE = {"source_category"}


def part_stats(path: Path, table: str) -> dict[str, Any] | None:
    """The stats of the part at ``path`` of ``table`` (module docstring), or None for a
    table whose parts carry none."""
    keys = COUNTED.get(table)
    if keys is None:
        return None
    import pyarrow.parquet as pq

    span = ("start_ns", "end_ns") if table == "intervals" else ()
    data = pq.read_table(path, columns=["rank", *keys, *NOT_NULL[table], *span],
                         read_dictionary=list(keys))
    return stats_of(data, table)


def stats_of(data: pa.Table, table: str) -> dict[str, Any] | None:
    """The stats of ``data``, rows of ``table`` as a part holds them (at least the
    ``rank``, ``COUNTED``, ``NOT_NULL`` and, for intervals, time columns), or None for a
    table whose parts carry none. The writer calls this on the table it has just written;
    :func:`part_stats` on a part read back: the same values."""
    keys = COUNTED.get(table)
    if keys is None:
        return None
    import pyarrow.compute as pc

    set_columns = NOT_NULL[table]
    # chunks of one column may have differing dictionaries, which group_by refuses
    keyed = data.select(["rank", *keys, *set_columns]).unify_dictionaries()
    groups = keyed.group_by(["rank", *keys]).aggregate(
        [([], "count_all"), *((c, "count") for c in set_columns)])
    names = ["rank", *keys, "count_all", *(f"{c}_count" for c in set_columns)]
    columns = [groups[n].to_pylist() for n in names]
    counts = sorted(list(row) for row in zip(*columns, strict=True))
    stats: dict[str, Any] = {"counts": counts}
    if table == "intervals":
        stats["start_ns_min"] = pc.min(data["start_ns"]).as_py()
        stats["end_ns_max"] = pc.max(data["end_ns"]).as_py()
    return stats


def table_stats(records: object, table: str) -> list[Mapping[str, Any]] | None:
    """The stats of every part of ``table`` in the manifest's part ``records``; None when
    the records are unusable or a part of the table has no valid stats."""
    if table not in COUNTED or not isinstance(records, list):
        return None
    prefix = table + "/"
    out: list[Mapping[str, Any]] = []
    for rec in records:
        if not isinstance(rec, Mapping) or not str(rec.get("path", "")).startswith(prefix):
            continue
        stats = rec.get(STATS_KEY)
        if not _valid(stats, table):
            return None
        out.append(stats)
    return out


def count_rows(stats: Iterable[Mapping[str, Any]], table: str,
               by: str) -> dict[tuple[int, str], int]:
    """Rows per (rank, value of the counted column ``by``), summed over the parts'
    ``stats`` of ``table``."""
    at = 1 + COUNTED[table].index(by)
    rows_at = 1 + len(COUNTED[table])
    total: dict[tuple[int, str], int] = {}
    for s in stats:
        for row in s["counts"]:
            key = (row[0], row[at])
            total[key] = total.get(key, 0) + row[rows_at]
    return total


def rows_with(records: Iterable[Mapping[str, Any]], table: str,
              values: Mapping[str, Sequence[str]], not_null: Sequence[str]) -> int | None:
    """Rows of the part ``records`` (of ``table``) whose counted columns take one of the
    ``values`` (column -> allowed values) and whose ``not_null`` column is set; None
    when the stats cannot tell (a column not counted, more than one ``not_null`` column,
    a record with rows but without valid stats)."""
    keys = COUNTED.get(table, ())
    set_columns = NOT_NULL.get(table, ())
    if not set(values) <= set(keys) or len(not_null) > 1 or not set(not_null) <= set(
            set_columns):
        return None
    wanted = [(1 + keys.index(c), set(v)) for c, v in values.items()]
    at = 1 + len(keys) + (1 + set_columns.index(not_null[0]) if not_null else 0)
    total = 0
    for rec in records:
        stats = rec.get(STATS_KEY)
        if not _valid(stats, table):
            if rec.get("rows") == 0:
                continue
            return None
        total += sum(row[at] for row in stats["counts"]
                     if all(row[i] in allowed for i, allowed in wanted))
    return total


def _valid(stats: object, table: str) -> TypeGuard[Mapping[str, Any]]:
    if not isinstance(stats, Mapping) or not isinstance(stats.get("counts"), list):
        return False
    keys = COUNTED[table]
    width = 2 + len(keys) + len(NOT_NULL[table])
    for row in stats["counts"]:
        if not (isinstance(row, list) and len(row) == width and _int(row[0])):
            return False
        if not all(isinstance(v, str) or (v is None and k in _NULLABLE)
                   for k, v in zip(keys, row[1:], strict=False)):
            return False
        if not all(_int(n) and n >= 0 for n in row[1 + len(keys):]):
            return False
    if table == "intervals":
        return all(k in stats and (stats[k] is None or _int(stats[k]))
                   for k in ("start_ns_min", "end_ns_max"))
    return True


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
