"""Raw memory timelines (``*.raw.gz``, PyTorch ``export_memory_timeline``) in directories:
listed when their content is a timeline and the directory holds no other trace; other
``.raw.gz`` files are skipped as before; beside traces, timelines are left out with one
warning and the traces ingest as they did. Rank from the file name."""

from __future__ import annotations

import gzip
import json
import warnings
from pathlib import Path

import polars as pl
import pytest

import traceatlas
from traceatlas.errors import DataQualityWarning, InputNotFoundError
from traceatlas.io.memory_timeline import MemoryTimelineReader
from traceatlas.io.sources import Source, resolve_inputs
from traceatlas.testing.builder import TraceBuilder

T = 1_700_000_000_000_000_000
RAW = [[-1, 1, 100, 0], [T + 10, 2, 1000, 4], [T + 30, 4, -1000, 4]]


def _raw(path: Path, events: object = RAW) -> Path:
    path.write_bytes(gzip.compress(json.dumps(events).encode()))
    return path


def _names(sources: list[Source]) -> list[str]:
    return [s.file_name for s in sources]


def test_directory_of_timelines_is_read(tmp_path: Path) -> None:
    _raw(tmp_path / "rank2_memory.raw.gz")
    _raw(tmp_path / "other.raw.gz", [[1, 2, 3]])  # gzip JSON, not a timeline
    (tmp_path / "broken.raw.gz").write_bytes(b"\x1f\x8b\x08junk")  # unreadable gzip
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _names(resolve_inputs([tmp_path])) == ["rank2_memory.raw.gz"]
    trace = traceatlas.open(tmp_path)
    assert trace.ranks == [2]
    tracks = trace.tracks.filter(pl.col("kind") == "counter").select("name").collect()
    assert tracks.height == 8
    # Three samples (one per distinct time, HTA's rule); the pre-existing sample (t = -1)
    # is put at the smallest positive time, T+10. Activation: 0, +1000, -1000.
    act = (trace.counters.filter(pl.col("name").cast(pl.String)
                                 == "memory timeline: Activation (bytes)")
           .select("ts_ns", "value").collect().rows())
    assert sorted(act) == [(T + 10, 0.0), (T + 10, 1000.0), (T + 30, 0.0)]


def test_timeline_beside_traces_is_left_out_with_a_warning(tmp_path: Path) -> None:
    TraceBuilder(rank=0).write(tmp_path / "rank-0.json")
    _raw(tmp_path / "rank0_memory.raw.gz")  # same rank: would be a rank conflict
    with pytest.warns(DataQualityWarning, match=r"1 PyTorch memory timeline.*rank0_memory"):
        assert _names(resolve_inputs([tmp_path])) == ["rank-0.json"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataQualityWarning)
        trace = traceatlas.open(tmp_path)
    assert trace.ranks == [0]
    names = trace.tracks.select("name").collect()["name"].to_list()
    assert not [n for n in names if n and n.startswith("memory timeline")]


def test_other_raw_gz_beside_traces_changes_nothing(tmp_path: Path) -> None:
    TraceBuilder(rank=0).write(tmp_path / "rank-0.json")
    _raw(tmp_path / "data.raw.gz", {"not": "a timeline"})
    (tmp_path / "broken.raw.gz").write_bytes(b"\x1f\x8b\x08junk")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _names(resolve_inputs([tmp_path])) == ["rank-0.json"]


def test_directory_without_timelines_still_refused(tmp_path: Path) -> None:
    _raw(tmp_path / "data.raw.gz", [1, 2, 3])
    with pytest.raises(InputNotFoundError, match="no trace files"):
        resolve_inputs([tmp_path])


@pytest.mark.parametrize(("name", "rank"), [
    ("rank3.raw.gz", 3), ("rank-12_memory.raw.gz", 12), ("memory_timeline_rank-3.raw.gz", 3),
    ("step5.worker_7.raw.gz", 7), ("memory_timeline.raw.gz", None), ("myrank3.raw.gz", None),
    ("rank3x.raw.gz", 3), ("rank37.raw.gz", 37),
])
def test_rank_from_file_name(tmp_path: Path, name: str, rank: int | None) -> None:
    got = MemoryTimelineReader().read(Source(str(_raw(tmp_path / name))))[0]
    assert got.rank == rank
    assert got.rank_source == ("file name" if rank is not None else None)
