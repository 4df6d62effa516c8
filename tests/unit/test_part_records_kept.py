"""Part records made as the parts are written (``store.parts.remember_part``): the manifest
of an ingest holds the same records as reading every part back (rows from the footer, the
file's hash, stats counted in plain Python from its rows), and no part is read for them;
a part changed after it was written is read again; chunks with differing dictionaries are
counted; no record is kept for a store once its manifest is written or its write failed."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import traceatlas
from traceatlas.store import part_stats as part_stats_module
from traceatlas.store import parts
from traceatlas.store.layout import MANIFEST
from traceatlas.store.writer import write_part
from traceatlas.testing import TraceBuilder, write_multi_rank

pytestmark = pytest.mark.filterwarnings("ignore::traceatlas.DataQualityWarning")

BASE = 1_700_000_000_000_000_000
TRACK = pa.table({"track_id": pa.array([0], pa.int32()), "kind": ["cpu"],
                  "device": pa.array([-1], pa.int32()), "stream": pa.array([-1], pa.int64())})


def _run(root: Path, n_ranks: int) -> Path:
    builders = []
    for rank in range(n_ranks):
        b = TraceBuilder(rank, n_ranks, base_time_ns=BASE)
        for step in range(2):
            s = (step + 1) * 1_000_000
            b.step(step, s, s + 900_000)
            b.cpu_op("aten::mm", s + 10_000, s + 50_000)
            b.launch("gemm", s + 12_000, 3_000, s + 100_000, 20_000 + rank)
        builders.append(b)
    return write_multi_rank(root / "run", builders)


def _by_hand(path: Path, table: str) -> dict[str, Any]:
    """A part's record from its bytes and rows, in plain Python (hashlib, Counter)."""
    rows = pq.read_table(path).to_pylist()
    record: dict[str, Any] = {"rows": len(rows), "bytes": path.stat().st_size,
                              "blake2b": hashlib.blake2b(path.read_bytes(),
                                                         digest_size=16).hexdigest()}
    if table == "intervals":
        keys = Counter((r["rank"], r["category"], r["source_category"]) for r in rows)
        with_corr = Counter((r["rank"], r["category"], r["source_category"]) for r in rows
                            if r["correlation"] is not None)
        record["stats"] = {
            "counts": sorted([*k, n, with_corr[k]] for k, n in keys.items()),
            "start_ns_min": min((r["start_ns"] for r in rows), default=None),
            "end_ns_max": max((r["end_ns"] for r in rows), default=None)}
    elif table == "tracks":
        kinds = Counter((r["rank"], r["kind"]) for r in rows)
        record["stats"] = {"counts": sorted([*k, n] for k, n in kinds.items())}
    return record


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Calls that read a part for its record, appended as they happen."""
    seen: list[str] = []
    real_meta, real_stats = pq.read_metadata, part_stats_module.part_stats

    def meta(path: Any, *a: Any, **k: Any) -> Any:
        seen.append(f"footer {path}")
        return real_meta(path, *a, **k)

    def stats(path: Any, table: str) -> Any:
        seen.append(f"stats {path}")
        return real_stats(path, table)

    monkeypatch.setattr(pq, "read_metadata", meta)
    monkeypatch.setattr(parts, "part_stats", stats)
    return seen


@pytest.mark.parametrize("n_ranks", [1, 3])  # 3 sources: written by worker processes
def test_ingest_records_equal_a_reading_of_every_part(tmp_path: Path, n_ranks: int,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _reads(monkeypatch)
    store = traceatlas.ingest(_run(tmp_path, n_ranks), tmp_path / "store")
    records = json.loads((store / MANIFEST).read_text())["parts"]
    assert seen == []  # every record was made as its part was written
    assert len(records) == 7 * n_ranks
    for rec in records:
        path = store / rec["path"]
        expected = _by_hand(path, rec["path"].split("/", 1)[0])
        assert {k: rec.get(k) for k in expected} == expected, rec["path"]
        assert rec["mtime_ns"] == path.stat().st_mtime_ns
    assert parts.take_records(store) == {}  # nothing left kept for the store


def test_a_part_changed_after_its_write_is_read_again(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "s"
    iv = pa.table({"start_ns": [5, 1], "end_ns": [9, 4], "dur_ns": [4, 3],
                   "name": ["a", "b"], "category": ["kernel", "cpu_op"],
                   "track_id": pa.array([0, 0], pa.int32()),
                   "correlation": pa.array([7, None], pa.int64()),
                   "depth": pa.array([0, 0], pa.int32()), "step": pa.array([0, 0], pa.int32())})
    write_part(store, "intervals", 2, iv)
    write_part(store, "tracks", 2, TRACK)
    path = store / "intervals" / "rank=2" / "part-0.parquet"
    written = pq.read_table(path)
    pq.write_table(written.slice(0, 1), path)  # behind the writer's back
    seen = _reads(monkeypatch)
    by_path = {r["path"]: r for r in parts.record_parts(store)}
    assert [s.split()[0] for s in seen] == ["footer", "stats"]  # the changed part only
    rec = by_path["intervals/rank=2/part-0.parquet"]
    assert {k: rec[k] for k in ("rows", "bytes", "blake2b", "stats")} == _by_hand(
        path, "intervals")
    assert rec["stats"]["counts"] == [[2, "cpu_op", None, 1, 0]]  # the earlier row of the two


def test_chunks_with_differing_dictionaries_are_counted(tmp_path: Path) -> None:
    def chunk(cats: list[str], corr: list[int | None], start: list[int]) -> pa.Table:
        n = len(cats)
        return pa.table({"start_ns": start, "end_ns": [s + 10 for s in start],
                         "dur_ns": [10] * n, "name": pa.array(["k"] * n).dictionary_encode(),
                         "category": pa.array(cats).dictionary_encode(),
                         "track_id": pa.array([0] * n, pa.int32()),
                         "correlation": pa.array(corr, pa.int64()),
                         "depth": pa.array([0] * n, pa.int32()),
                         "step": pa.array([0] * n, pa.int32())})

    table = pa.concat_tables([chunk(["kernel", "cpu_op"], [1, None], [30, 40]),
                              chunk(["cpu_op", "memcpy"], [2, 3], [10, 20])])
    assert table["category"].num_chunks == 2
    write_part(tmp_path, "intervals", 0, table)
    rec = parts.record_parts(tmp_path)[0]
    # by hand: cpu_op 2 rows (1 with a correlation), kernel 1 (1), memcpy 1 (1)
    assert rec["stats"] == {"counts": [[0, "cpu_op", None, 2, 1], [0, "kernel", None, 1, 1],
                                       [0, "memcpy", None, 1, 1]],
                            "start_ns_min": 10, "end_ns_max": 50}


def test_a_failed_write_keeps_no_record(tmp_path: Path) -> None:
    from traceatlas.store.writer import atomic_directory

    with pytest.raises(RuntimeError), atomic_directory(tmp_path / "out") as tmp:
        write_part(tmp, "tracks", 0, TRACK)
        assert list(parts.take_records(tmp)) == ["tracks/rank=0/part-0.parquet"]
        write_part(tmp, "tracks", 0, TRACK)
        raise RuntimeError("a reader fails")
    assert parts.take_records(tmp) == {}
    assert not (tmp_path / "out").exists()


def test_kept_records_stay_with_their_store(tmp_path: Path) -> None:
    write_part(tmp_path / "a", "tracks", 0, TRACK)
    write_part(tmp_path / "ab", "tracks", 0, TRACK)  # a sibling whose name extends "a"
    mine = parts.take_records(tmp_path / "a")
    assert list(mine) == ["tracks/rank=0/part-0.parquet"]
    assert list(parts.take_records(tmp_path / "ab")) == ["tracks/rank=0/part-0.parquet"]
    assert parts.take_records(tmp_path / "a") == {}
