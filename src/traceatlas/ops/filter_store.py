"""Write the rows of a store that a ``Selection`` keeps as a new, smaller store.

The rules are those of ``traceatlas.ops.select`` (rows are kept whole, never clipped).
The new store holds every canonical table for each kept rank (empty parts included), and
a copy of the manifest with ``ranks``, ``sources`` and ``clock`` reduced to the kept
ranks, plus ``filtered_from`` (the source store path) and ``filter`` (the selection).
Messages stored under a rank that is not kept, whose other side is, move to the part of
their kept side (sender first). Written atomically: on error nothing is left at ``out``.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceatlas.errors import InputError
from traceatlas.model.schema import TABLES, empty_table
from traceatlas.ops.select import Selection
from traceatlas.store.layout import part_path
from traceatlas.store.manifest import write_manifest
from traceatlas.store.writer import atomic_directory, write_part

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa

    from traceatlas.model.trace import Trace


def filter_store(
    trace: Trace, selection: Selection, out: str | Path, *, spec: dict[str, Any] | None = None
) -> Path:
    """Write the rows of ``trace`` kept by ``selection`` to the store ``out``.

    ``spec`` (e.g. the command-line options as given) is recorded in the manifest next to
    the resolved selection. Returns the store path.
    """
    from traceatlas.store.remote import refuse_remote_output

    refuse_remote_output(out)  # before resolve() makes a relative path of an s3:// URL
    target = Path(out).resolve()
    source = trace.path.resolve()
    if target == source or source in target.parents:
        raise InputError(out, "is the input store or inside it; choose another --out")
    selection = selection.resolve(trace)
    ranks = _kept_ranks(trace, selection)
    with atomic_directory(target) as tmp:
        for table in TABLES:
            if table == "messages":
                _write_messages(trace, selection, tmp, ranks)
                continue
            for rank in ranks:
                frame = selection.apply(_scan_part(trace.path, table, rank), table)
                write_part(tmp, table, rank, _to_arrow(frame.collect(), table))
        write_manifest(tmp, _manifest(trace, selection, ranks, spec))
    return target


def _kept_ranks(trace: Trace, selection: Selection) -> list[int]:
    ranks = trace.ranks
    if selection.ranks is not None:
        ranks = [r for r in ranks if r in selection.ranks]
        if not ranks:
            raise InputError("--ranks", f"none of the ranks {list(selection.ranks)} is in "
                             f"the trace (ranks: {', '.join(map(str, trace.ranks))})")
    return ranks


def _scan_part(store: Path, table: str, rank: int) -> pl.LazyFrame:
    import polars as pl

    path = part_path(store, table, rank)
    if path.is_file():
        return pl.scan_parquet(path, hive_partitioning=False, glob=False)  # [ * ? literal
    return pl.from_arrow(empty_table(table)).lazy()  # type: ignore[union-attr]


def _to_arrow(frame: pl.DataFrame, table: str) -> pa.Table:
    """A collected frame as Arrow with the canonical string types (conform casts the rest)."""
    import pyarrow as pa

    arrow = frame.to_arrow()
    spec = TABLES[table].arrow_schema
    columns = []
    for name in arrow.column_names:
        col = arrow.column(name)
        want = spec.field(name).type if name in spec.names else None
        if pa.types.is_dictionary(col.type):  # polars writes dictionary<uint32, large_string>
            col = col.cast(pa.large_string())
        if want is not None and col.type != want:
            col = col.cast(want.value_type if pa.types.is_dictionary(want) else want)
        columns.append(col)
    return pa.table(columns, names=arrow.column_names)


def _write_messages(trace: Trace, selection: Selection, store: Path, ranks: list[int]) -> None:
    import polars as pl

    frame = selection.apply(trace.messages, "messages").collect()
    kept = list(ranks)
    frame = frame.with_columns(
        pl.when(pl.col("rank").is_in(kept)).then(pl.col("rank"))
        .when(pl.col("src_rank").is_in(kept)).then(pl.col("src_rank"))
        .otherwise(pl.col("dst_rank")).cast(pl.Int32).alias("rank")
    )
    for rank in ranks:
        part = frame.filter(pl.col("rank") == rank)
        write_part(store, "messages", rank, _to_arrow(part, "messages"))


def _manifest(
    trace: Trace, selection: Selection, ranks: list[int], spec: dict[str, Any] | None
) -> dict[str, Any]:
    manifest = copy.deepcopy(trace.manifest)
    kept = set(ranks)
    manifest["ranks"] = ranks
    manifest["sources"] = [s for s in manifest.get("sources", []) if s.get("rank") in kept]
    if isinstance(manifest.get("clock"), dict):
        manifest["clock"] = {k: v for k, v in manifest["clock"].items() if int(k) in kept}
    manifest["filtered_from"] = str(trace.path.resolve())
    manifest["filtered_utc"] = datetime.now(UTC).isoformat(timespec="seconds")
    manifest["filter"] = {"spec": spec or {}, "selection": selection.describe()}
    return manifest
