"""Row counts a part record carries, so that ``info`` and requirement checks need no scan.

At the end of a write, :func:`part_stats` reads a few columns of an ``intervals`` or
``tracks`` part and returns what goes into its manifest record under ``"stats"``:

- intervals: ``"counts"``, a list of ``[rank, category, rows]`` (one per pair present),
  and ``"start_ns_min"`` / ``"end_ns_max"`` (ns; null for an empty part);
- tracks: ``"counts"``, a list of ``[rank, kind, rows]``.

The stats are as current as the part: opening a store checks every part against its
record (size and mtime, hash when the mtime changed, ``store.parts``), so a record's stats
describe the bytes on disk. :func:`table_stats` gathers them for a whole table and returns
None when any part lacks them (a store written before they existed): the caller scans.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeGuard

STATS_KEY = "stats"
COUNTED = {"intervals": "category", "tracks": "kind"}
"""The tables whose parts carry stats, and the column counted (with ``rank``)."""


def part_stats(path: Path, table: str) -> dict[str, Any] | None:
    """The stats of the part at ``path`` of ``table`` (module docstring), or None for a
    table whose parts carry none."""
    key = COUNTED.get(table)
    if key is None:
        return None
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    columns = ["rank", key, *(("start_ns", "end_ns") if table == "intervals" else ())]
    data = pq.read_table(path, columns=columns, read_dictionary=[key])
    groups = data.group_by(["rank", key]).aggregate([([], "count_all")])
    counts = sorted(
        [int(r), str(k), int(n)]
        for r, k, n in zip(groups["rank"].to_pylist(), groups[key].to_pylist(),
                           groups["count_all"].to_pylist(), strict=True)
    )
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


def rows_with(records: Iterable[Mapping[str, Any]], table: str,
              values: Iterable[str]) -> int | None:
    """Rows of the part ``records`` (of ``table``) whose counted column takes one of
    ``values``; None when a record with rows has no valid stats."""
    wanted = set(values)
    total = 0
    for rec in records:
        stats = rec.get(STATS_KEY)
        if not _valid(stats, table):
            if rec.get("rows") == 0:
                continue
            return None
        total += sum(n for _rank, value, n in stats["counts"] if value in wanted)
    return total


def count_rows(stats: Iterable[Mapping[str, Any]]) -> dict[tuple[int, str], int]:
    """Rows per (rank, counted value) summed over the parts' ``stats``."""
    total: dict[tuple[int, str], int] = {}
    for s in stats:
        for rank, value, n in s["counts"]:
            total[rank, value] = total.get((rank, value), 0) + n
    return total


def _valid(stats: object, table: str) -> TypeGuard[Mapping[str, Any]]:
    if not isinstance(stats, Mapping) or not isinstance(stats.get("counts"), list):
        return False
    for row in stats["counts"]:
        if not (isinstance(row, list) and len(row) == 3 and _int(row[0])
                and isinstance(row[1], str) and _int(row[2]) and row[2] >= 0):
            return False
    if table == "intervals":
        return all(k in stats and (stats[k] is None or _int(stats[k]))
                   for k in ("start_ns_min", "end_ns_max"))
    return True


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
