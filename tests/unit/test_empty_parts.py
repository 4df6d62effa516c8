"""Empty parts (``store.writer._empty_part``): encoded once per process and table, then the
same bytes for every rank. Each is byte for byte what Parquet writes for that rank's empty
table when nothing is cached, reads back with 0 rows and the canonical schema, and a
non-empty part of the same table is still encoded from its rows."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from traceatlas.model.schema import TABLES, empty_table
from traceatlas.store import writer


@pytest.mark.parametrize("name", sorted(TABLES))
def test_an_empty_part_is_what_parquet_writes_for_it(tmp_path: Path, name: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    empty = empty_table(name).drop_columns(["rank"])
    writer.write_part(tmp_path / "a", name, 0, empty)  # fills the cache
    writer.write_part(tmp_path / "a", name, 7, empty)  # from the cache
    monkeypatch.setattr(writer, "_EMPTY", {})
    writer.write_part(tmp_path / "b", name, 7, empty)  # encoded afresh
    cached = (tmp_path / "a" / name / "rank=7" / "part-0.parquet").read_bytes()
    fresh = (tmp_path / "b" / name / "rank=7" / "part-0.parquet").read_bytes()
    assert cached == fresh
    back = pq.read_table(tmp_path / "a" / name / "rank=7" / "part-0.parquet")
    assert back.num_rows == 0
    assert back.schema.equals(TABLES[name].arrow_schema, check_metadata=False)


def test_a_part_with_rows_is_not_taken_from_the_cache(tmp_path: Path) -> None:
    tracks = {"track_id": pa.array([3], pa.int32()), "kind": ["cpu"],
              "device": pa.array([-1], pa.int32()), "stream": pa.array([-1], pa.int64())}
    writer.write_part(tmp_path, "tracks", 1, empty_table("tracks").drop_columns(["rank"]))
    writer.write_part(tmp_path, "tracks", 2, pa.table(tracks))
    back = pq.read_table(tmp_path / "tracks" / "rank=2" / "part-0.parquet")
    assert back.select(["rank", "track_id", "kind"]).to_pylist() == [
        {"rank": 2, "track_id": 3, "kind": "cpu"}]
