"""Atomic store writes: build in a temporary sibling directory, then rename into place."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from traceatlas.errors import InputError
from traceatlas.model.schema import conform
from traceatlas.store.layout import part_path
from traceatlas.store.manifest import is_store

COMPRESSION = "zstd"
COMPRESSION_LEVEL = 1
NO_DICTIONARY = frozenset({"args", "value"})


@contextmanager
def atomic_directory(target: Path) -> Iterator[Path]:
    """Yield a temporary directory that replaces ``target`` only if the block succeeds.

    On any exception the temporary directory is removed and ``target`` is untouched.
    """
    target = target.resolve()
    _check_replaceable(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    old = None
    try:
        yield tmp
        _check_replaceable(target)
        if target.exists():
            old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
            os.rename(target, old)
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not target.exists():
            os.rename(old, target)  # put the previous store back
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _check_replaceable(target: Path) -> None:
    """Only a previous traceatlas store or an empty directory may be replaced."""
    if not target.exists():
        return
    if target.is_dir() and (is_store(target) or not any(target.iterdir())):
        return
    raise InputError(
        target, "exists and is not a traceatlas store; refusing to replace it (choose "
        "another --out or remove it)"
    )


def write_part(store: Path, table_name: str, rank: int, table: pa.Table) -> int:
    """Write one rank's part of a table (adding the rank column); returns the row count."""
    if "rank" in table.column_names:
        table = table.drop_columns(["rank"])
    table = table.add_column(0, "rank", pa.repeat(pa.scalar(rank, pa.int32()), table.num_rows))
    table = conform(table_name, table)
    path = part_path(store, table_name, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(
        table,
        path,
        compression=COMPRESSION,
        compression_level=COMPRESSION_LEVEL,
        # Free-form JSON text is nearly unique per row: a dictionary only costs time.
        use_dictionary=[c for c in table.column_names if c not in NO_DICTIONARY],
    )
    return int(table.num_rows)
