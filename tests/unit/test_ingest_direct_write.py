"""A single source's partitions without a rank are numbered in the worker and written in
place (issue 14: no staging). The ranks are those ingest assigns (declared ranks kept,
the others take the next free rank in the reader's order), checked by hand here, and
the parts equal the staged path's (kept as the oracle by turning placement off)."""

from __future__ import annotations

import json
import sqlite3
import warnings
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from traceatlas.engine.local import LocalEngine
from traceatlas.errors import RankConflictError
from traceatlas.ingest import ingest, partition
from traceatlas.store.parts import file_hash
from traceatlas.testing import nsys as tn

S = 5_000_000_000


def _export(path: Path, mpi_ranks: dict[int, int]) -> Path:
    """Three processes (pids 100, 200, 300) with a kernel and a call each; ``mpi_ranks``:
    pid -> rank written to MPI_RANKS."""
    pids = (100, 200, 300)
    tn.write_export(
        path,
        kernels=[tn.Kernel(S + 1_000 * i + 100, S + 1_000 * i + 900, f"k{pid}",
                           correlation=i + 1, pid=pid) for i, pid in enumerate(pids)],
        calls=[tn.Call(S + 1_000 * i, S + 1_000 * i + 50, "cudaLaunchKernel_v7000",
                       correlation=i + 1, pid=pid) for i, pid in enumerate(pids)],
    )
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE MPI_RANKS (globalTid INTEGER, rank INTEGER)")
    con.executemany("INSERT INTO MPI_RANKS VALUES (?, ?)",
                    [(tn.gtid(pid, pid), rank) for pid, rank in mpi_ranks.items()])
    con.commit()
    con.close()
    return path


def _ingest(src: Path, out: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ingest([str(src)], str(out), engine=LocalEngine(max_workers=1))


def _kernel_of_rank(store: Path, rank: int) -> list[str]:
    table = pq.read_table(store / "intervals" / f"rank={rank}" / "part-0.parquet")
    names = table["name"].cast("string").to_pylist()
    return [n for n in names if n.startswith("k")]


def test_unranked_processes_take_the_free_ranks_in_place(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = _export(tmp_path / "three.sqlite", {200: 0})
    staged: list[int] = []
    unstage = partition.unstage
    monkeypatch.setattr(partition, "unstage",
                        lambda store, res, rank: (staged.append(rank),
                                                  unstage(store, res, rank)))
    new = tmp_path / "new.tastore"
    _ingest(src, new)
    assert staged == []  # nothing went through the staging area
    # pid 200 declares rank 0; the others follow in process order: 100 -> 1, 300 -> 2
    assert [_kernel_of_rank(new, r) for r in (0, 1, 2)] == [["k200"], ["k100"], ["k300"]]
    manifest = json.loads((new / "manifest.json").read_text())
    assert manifest["ranks"] == [0, 1, 2]
    assert [s["rank_source"] for s in manifest["sources"]] == [
        "MPI_RANKS", "assigned (next free rank)", "assigned (next free rank)"]

    monkeypatch.setattr(partition, "_places", lambda results: {})  # the staged path
    old = tmp_path / "old.tastore"
    _ingest(src, old)
    assert sorted(staged) == [1, 2]
    parts = sorted(p.relative_to(old) for p in old.rglob("*.parquet"))
    assert parts == sorted(p.relative_to(new) for p in new.rglob("*.parquet"))
    assert len(parts) == 3 * 7
    for rel in parts:
        assert file_hash(new / rel) == file_hash(old / rel), rel


def test_conflicting_ranks_are_still_refused(tmp_path: Path) -> None:
    src = _export(tmp_path / "clash.sqlite", {100: 0, 200: 0})
    out = tmp_path / "s.tastore"
    with pytest.raises(RankConflictError):
        _ingest(src, out)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["clash.sqlite"]  # no debris
