"""Atomic store writes: build in a temporary sibling directory, then rename into place.

``-o`` never deletes what traceatlas did not write. The target may be missing, an empty
directory, or a traceatlas store (its manifest says so) holding only the files its
manifest lists; anything else is refused with an ``InputError`` before any work starts,
and checked again just before the swap.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from traceatlas import signals, tempfiles
from traceatlas.errors import InputError
from traceatlas.model.schema import conform
from traceatlas.store.layout import part_path
from traceatlas.store.manifest import traceatlas_manifest
from traceatlas.store.parts import foreign_entries, remember_part, take_records

COMPRESSION = "zstd"
COMPRESSION_LEVEL = 1
NO_DICTIONARY = frozenset({"args", "value"})
SHOWN_FOREIGN = 3
"""Foreign files named in the refusal message."""
TIME_SORTED: dict[str, str] = {"intervals": "start_ns", "instants": "ts_ns", "counters": "ts_ns"}
"""Tables written sorted by this time column (then ``track_id``; a stable sort, so ties keep
the reader's order), so each row group covers a narrow time range and a window query skips
the others from the Parquet min/max statistics."""
TIME_ROW_GROUP_ROWS = 65_536
"""Rows per row group of the time-sorted tables. Pruning works per row group: with ~1 M-row
groups a 2 ms window still decoded whole groups (37.6 ms median on one rank of a 100 M-interval
store); 64 K rows cut that to 3.2 ms while keeping groups large enough for zstd and per-group
metadata to cost little."""
DELTA_COLUMNS = frozenset({"start_ns", "end_ns", "dur_ns", "ts_ns", "correlation", "external_id"})
"""Nearly unique int64 columns of the time-sorted tables: written with DELTA_BINARY_PACKED and
no dictionary. A dictionary of unique values only costs time, and per 64 K-row group it grew
the intervals part by a third; sorted times delta-encode well (measured on a 1.45 M-interval
Kineto part: 27.1 MB with 1 M-row groups before, 24.7 MB now)."""


@contextmanager
def atomic_directory(target: Path) -> Iterator[Path]:
    """Yield a temporary directory that replaces ``target`` only if the block succeeds.

    The temporary directory is ``.<name>.tmp-<pid>-<host>-<random>`` beside ``target``;
    debris of dead processes there is swept first (``traceatlas.tempfiles``). On any
    exception (signals included) the temporary directory is removed and ``target`` is
    untouched. The swap runs under an exclusive ``flock`` on the parent directory, so
    concurrent writers of one output never interleave their renames.
    """
    shown = target
    from traceatlas.store.remote import refuse_remote_output

    refuse_remote_output(target)  # s3://, gs://: stores are written locally, then uploaded
    target = Path(os.path.abspath(target))
    if target.is_symlink():
        target = target.resolve()
    check_output_dir(target, shown)
    target.parent.mkdir(parents=True, exist_ok=True)
    tempfiles.sweep_siblings(target.parent, target.name)
    tmp = tempfiles.sibling(target, "tmp")
    tmp.mkdir()
    old = None
    try:
        yield tmp
        with signals.deferred(), _locked(target.parent):
            check_output_dir(target, shown)
            if target.exists():
                old = tempfiles.sibling(target, "old")
                os.rename(target, old)
            os.rename(tmp, target)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        with signals.deferred():
            take_records(tmp)  # the records kept for its parts (store/parts.py) go too
            shutil.rmtree(tmp, ignore_errors=True)
            if old is not None and not target.exists():
                os.rename(old, target)  # put the previous store back
        raise


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``directory`` itself (no lock file left behind)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def check_output_dir(target: Path, shown: str | Path | None = None) -> None:
    """Raise ``InputError`` unless ``target`` may be replaced by a new store: missing, an
    empty directory, or a traceatlas store holding only files its manifest lists.
    ``shown`` is the path as the user gave it (for the message)."""
    shown = target if shown is None else shown
    if not os.path.lexists(target):
        return
    if not target.is_dir():
        raise InputError(shown, "is not a traceatlas store; choose another -o")
    if not any(target.iterdir()):
        return
    manifest = traceatlas_manifest(target)
    if manifest is None:
        raise InputError(shown, "is not a traceatlas store; choose another -o")
    foreign = foreign_entries(target, manifest)
    if foreign:
        listed = ", ".join(foreign[:SHOWN_FOREIGN])
        more = f" and {len(foreign) - SHOWN_FOREIGN} more" if len(foreign) > SHOWN_FOREIGN else ""
        raise InputError(shown, f"contains files traceatlas did not write ({listed}{more}); "
                         "move them or choose another -o")


def write_part(store: Path, table_name: str, rank: int, table: pa.Table) -> int:
    """Write one rank's part of a table (adding the rank column); returns the row count.
    The part's manifest record is made here, from the table in memory and the footer
    written, and kept for ``record_parts`` (``store/parts.py``)."""
    if "rank" in table.column_names:
        table = table.drop_columns(["rank"])
    table = table.add_column(0, "rank", pa.repeat(pa.scalar(rank, pa.int32()), table.num_rows))
    table = conform(table_name, table)
    time_column = TIME_SORTED.get(table_name)
    if time_column is not None:
        table = time_sorted(table, time_column)
    delta = DELTA_COLUMNS.intersection(table.column_names) if time_column else frozenset()
    path = part_path(store, table_name, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    if table.num_rows:
        footer = _write_parquet(table, path, time_column, delta)
    else:  # the same bytes for every rank: encoded once per process
        data, footer = _empty_part(table_name, table, time_column, delta)
        with open(path, "wb") as fh:
            fh.write(data)
    remember_part(store, path.relative_to(store).as_posix(), table, footer)
    return int(table.num_rows)


def _write_parquet(table: pa.Table, where: Path | pa.NativeFile, time_column: str | None,
                   delta: frozenset[str]) -> pq.FileMetaData:
    """Write ``table`` as a part's Parquet file to ``where``; returns its footer."""
    footer: list[pq.FileMetaData] = []
    pq.write_table(
        table,
        where,
        metadata_collector=footer,
        compression=COMPRESSION,
        compression_level=COMPRESSION_LEVEL,
        # Free-form JSON text is nearly unique per row: a dictionary only costs time.
        use_dictionary=[c for c in table.column_names if c not in NO_DICTIONARY | delta],
        column_encoding=dict.fromkeys(sorted(delta), "DELTA_BINARY_PACKED") or None,
        row_group_size=TIME_ROW_GROUP_ROWS if time_column is not None else None,
    )
    return footer[0]


_EMPTY: dict[tuple[str, str], tuple[bytes, pq.FileMetaData]] = {}
_EMPTY_LOCK = threading.Lock()


def _empty_part(table_name: str, table: pa.Table, time_column: str | None,
                delta: frozenset[str]) -> tuple[bytes, pq.FileMetaData]:
    """(bytes, footer) of the Parquet file of the empty ``table``, made once per process
    and schema: a store holds one per table and rank (most of them on a trace of many
    MPI ranks), and each cost ~1 ms to encode."""
    key = (table_name, table.schema.to_string(show_schema_metadata=True))
    with _EMPTY_LOCK:
        made = _EMPTY.get(key)
    if made is None:
        sink = pa.BufferOutputStream()
        footer = _write_parquet(table, sink, time_column, delta)
        made = (sink.getvalue().to_pybytes(), footer)
        with _EMPTY_LOCK:
            _EMPTY[key] = made
    return made


def time_sorted(table: pa.Table, time_column: str) -> pa.Table:
    """``table`` in (``time_column``, ``track_id``) order, stable (nulls last); returned as
    is when already in that order (no copy)."""
    if table.num_rows < 2 or _is_time_sorted(table, time_column):
        return table
    # Arrow's sort_indices is stable; nulls go last (its default).
    order = pc.sort_indices(table, sort_keys=[(time_column, "ascending"),
                                              ("track_id", "ascending")])
    return table.take(order)


def _is_time_sorted(table: pa.Table, time_column: str) -> bool:
    """True when the rows are already in (``time_column``, ``track_id``) order (no nulls)."""
    times, tracks = table.column(time_column), table.column("track_id")
    if times.null_count or tracks.null_count:
        return False
    t = times.to_numpy()
    k = tracks.to_numpy()
    # Compared, not subtracted: a difference of far-apart int64 times can overflow.
    return bool(np.all((t[1:] > t[:-1]) | ((t[1:] == t[:-1]) & (k[1:] >= k[:-1]))))
