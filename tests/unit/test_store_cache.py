"""Store cache: raw paths are ingested once and reused until a source changes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import traceatlas
from traceatlas.store.layout import MANIFEST
from traceatlas.testing import TraceBuilder


def _write_rank(path: Path, rank: int, n_ops: int) -> None:
    b = TraceBuilder(rank=rank, world_size=1, base_time_ns=1_700_000_000_000_000_000,
                     profiler_markers=False)
    for i in range(n_ops):
        b.cpu_op(f"aten::op{i}", i * 1_000, i * 1_000 + 500)
    b.write(path)


def test_open_reuses_the_cached_store_while_sources_are_unchanged(tmp_path: Path) -> None:
    src = tmp_path / "rank-0.json"
    _write_rank(src, 0, 3)
    first = traceatlas.open(src)
    created = json.loads((first.path / MANIFEST).read_text())["created_utc"]
    manifest_mtime = (first.path / MANIFEST).stat().st_mtime_ns

    second = traceatlas.open(src)
    assert second.path == first.path
    # Not re-ingested: the manifest file is the very same one.
    assert (second.path / MANIFEST).stat().st_mtime_ns == manifest_mtime
    assert json.loads((second.path / MANIFEST).read_text())["created_utc"] == created
    assert traceatlas.summarize(second)["intervals"] == 3


def test_open_reingests_when_a_source_changes(tmp_path: Path) -> None:
    src = tmp_path / "rank-0.json"
    _write_rank(src, 0, 3)
    assert traceatlas.summarize(traceatlas.open(src))["intervals"] == 3
    _write_rank(src, 0, 5)
    stat = src.stat()
    os.utime(src, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert traceatlas.summarize(traceatlas.open(src))["intervals"] == 5


def test_open_on_a_store_reads_it_directly(tmp_path: Path) -> None:
    src = tmp_path / "rank-0.json"
    _write_rank(src, 0, 2)
    store = traceatlas.ingest(src, tmp_path / "run.tastore")
    trace = traceatlas.open(store)
    assert trace.path == store
    assert trace.ranks == [0]
    assert sorted(p.name for p in store.iterdir()) == sorted(
        ["manifest.json", "tracks", "intervals", "instants", "counters", "messages", "flows",
         "metadata"]
    )
    assert (store / "intervals" / "rank=0" / "part-0.parquet").is_file()


def test_ingest_replaces_an_existing_store_atomically(tmp_path: Path) -> None:
    out = tmp_path / "run.tastore"
    a, b = tmp_path / "a" / "rank-0.json", tmp_path / "b" / "rank-0.json"
    a.parent.mkdir()
    b.parent.mkdir()
    _write_rank(a, 0, 2)
    _write_rank(b, 0, 4)
    traceatlas.ingest(a, out)
    traceatlas.ingest(b, out)
    assert traceatlas.summarize(traceatlas.Trace(out))["intervals"] == 4
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_failed_ingest_keeps_the_previous_store(tmp_path: Path) -> None:
    out = tmp_path / "run.tastore"
    good = tmp_path / "rank-0.json"
    _write_rank(good, 0, 2)
    traceatlas.ingest(good, out)
    bad = tmp_path / "bad" / "rank-0.json"
    bad.parent.mkdir()
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "a"')
    with pytest.raises(traceatlas.CorruptTraceError, match="truncated"):
        traceatlas.ingest(bad, out)
    assert traceatlas.summarize(traceatlas.Trace(out))["intervals"] == 2


def test_opening_a_store_of_another_schema_version_is_a_clear_error(tmp_path: Path) -> None:
    src = tmp_path / "rank-0.json"
    _write_rank(src, 0, 1)
    store = traceatlas.ingest(src, tmp_path / "run.tastore")
    manifest = json.loads((store / MANIFEST).read_text())
    manifest["schema_version"] = 999
    (store / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(traceatlas.StoreError, match="schema version 999"):
        traceatlas.Trace(store)


@pytest.mark.parametrize("kind", ["file", "dir with files"])
def test_ingest_refuses_to_replace_something_that_is_not_a_store(
    tmp_path: Path, kind: str
) -> None:
    src = tmp_path / "rank-0.json"
    _write_rank(src, 0, 1)
    out = tmp_path / "precious"
    if kind == "file":
        out.write_text("keep me")
    else:
        out.mkdir()
        (out / "notes.txt").write_text("keep me")
    with pytest.raises(traceatlas.InputError, match="not a traceatlas store"):
        traceatlas.ingest(src, out)
    kept = out if kind == "file" else out / "notes.txt"
    assert kept.read_text() == "keep me"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_ingest_into_its_own_input_directory_is_refused(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    _write_rank(runs / "rank-0.json", 0, 1)
    with pytest.raises(traceatlas.InputError, match="not a traceatlas store"):
        traceatlas.ingest(runs, runs)
    assert (runs / "rank-0.json").is_file()
