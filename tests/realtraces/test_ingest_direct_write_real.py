"""Ingest's direct write (issue 14): a single source's ranks written in place, parts in
parallel threads, gives byte-identical parts to the former path, kept here as the
oracle: every rank without a number staged as Arrow IPC, then moved into place by
``unstage``, and every part written one after the other.

Both stores come from the same input; each part's table and row groups are compared,
and its bytes (BLAKE2b, as the manifest records it), on every real nsys export, the
8-rank Kineto DLRM archive, one OTF2 archive and one Paraver trace. Not the Paraver
parts' bytes: two ingests of that trace by the same code (before this change too) can
order a string column's dictionary differently, so the zstd bytes differ while the
tables are equal.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from traceatlas.engine.local import LocalEngine
from traceatlas.ingest import ingest, partition
from traceatlas.store.parts import file_hash

pytestmark = pytest.mark.realtrace

INPUTS = [
    "nsys-ai/h100_2gpu_1s.sqlite",
    "nsys-ai/mfu_2gpu_after.sqlite",
    "nsys-ai/mfu_2gpu_before.sqlite",
    "pipit/cloverleaf-nsys/perlmutter-cloverleaf-cuda.sqlite",
    "pipit/saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
    "param-et_replay/dlrm_kineto.tar.gz",
    "pipit/ping-pong-otf2/traces.otf2",
    "profet-paraver/lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv",
]


def _parts(store: Path) -> dict[str, str]:
    """Part file (relative path) -> BLAKE2b of its bytes."""
    return {p.relative_to(store).as_posix(): file_hash(p)
            for p in sorted(store.rglob("*.parquet"))}


def _row_groups(path: Path) -> list[int]:
    """Rows of each row group of a Parquet file."""
    meta = pq.ParquetFile(path).metadata
    return [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]


def _ingest(src: Path, out: Path, engine: Any = None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ingest([str(src)], str(out), engine=engine)


@pytest.mark.parametrize("name", INPUTS)
def test_direct_write_equals_staged_serial_write(traces_dir: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 name: str) -> None:
    src = traces_dir / name
    if not src.exists():
        pytest.skip(f"{name} not in this checkout's traces")
    new = tmp_path / "new.tastore"
    _ingest(src, new)

    write = partition._write

    def serial(store: Path, results: Any, ranks: Any, places: Any, threads: int) -> None:
        write(store, results, ranks, places, 1)

    staged: list[bool] = []
    unstage = partition.unstage

    def counting_unstage(store: Path, result: Any, rank: int) -> None:
        staged.append(True)
        unstage(store, result, rank)

    monkeypatch.setattr(partition, "_places", lambda results: {})  # nothing placed
    monkeypatch.setattr(partition, "_write", serial)
    monkeypatch.setattr(partition, "unstage", counting_unstage)
    old = tmp_path / "old.tastore"
    _ingest(src, old, engine=LocalEngine(max_workers=1))  # inline: the patch applies
    monkeypatch.undo()

    got, want = _parts(new), _parts(old)
    assert sorted(got) == sorted(want)
    for rel in want:
        assert pq.read_table(new / rel).equals(pq.read_table(old / rel)), rel
        assert _row_groups(new / rel) == _row_groups(old / rel), rel
        if not name.endswith(".prv"):
            assert got[rel] == want[rel], rel  # the same bytes: encodings too
    if name.startswith("nsys-ai/"):  # no MPI ranks: numbered by ingest
        assert staged, "the oracle did not stage"


NSYS = [n for n in INPUTS if n.endswith(".sqlite")]


@pytest.mark.parametrize("name", NSYS)
def test_nsys_threads_give_the_serial_tables(traces_dir: Path, name: str) -> None:
    """Processes built on threads (and tables read in rowid pieces on parallel
    connections) give the tables of the serial read, rank by rank."""
    from traceatlas.io.nsys import read_export

    src = traces_dir / name
    if not src.exists():
        pytest.skip(f"{name} not in this checkout's traces")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        serial = read_export(str(src), name, threads=1)
        threaded = read_export(str(src), name, threads=3)
    assert len(serial) == len(threaded)
    if name.startswith("nsys-ai/"):
        assert len(serial) == 2  # two processes: built at the same time
    for one, other in zip(serial, threaded, strict=True):
        assert (one.rank, one.rank_source) == (other.rank, other.rank_source)
        assert sorted(one.tables) == sorted(other.tables)
        for table, rows in one.tables.items():
            assert rows.equals(other.tables[table]), table
