"""Issue 18 section 6: a damaged store or cache is detected, never read short.

The trace: one synthetic MPI Paraver file with 2 ranks and 2 iterations
(``testing.mpi``: 4 regions per rank and iteration plus MPI_Init and MPI_Finalize, so 10
intervals per rank, 20 in all; one file, so ingest runs inline and fast). Every damage
is done to the files by hand here; a damaged user store must fail with exit code 2
naming the part and the command that rebuilds it (and that command, run, must give 20
intervals again); a damaged cache entry must be rebuilt with a ``DataQualityWarning``
naming the part, and give 20 intervals.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas.cli.main import app
from traceatlas.engine.local import LocalEngine
from traceatlas.errors import DataQualityWarning, StoreDamagedError, StoreError
from traceatlas.store.cache import cache_path
from traceatlas.store.parts import find_damage, rebuild_command
from traceatlas.testing import Collective, TraceBuilder
from traceatlas.testing.mpi import write_mpi_trace

runner = CliRunner()
PART = "intervals/rank=0/part-0.parquet"
TOTAL = 20
"""Intervals of the trace: 2 ranks x (4 x 2 iterations + 2)."""


def _write(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    trace = write_mpi_trace(directory / "run.prv", ranks=2, iterations=2)
    assert trace.counts["intervals"] == TOTAL
    return [Path(trace.path)]


def _count(trace: traceatlas.Trace) -> int:
    return int(traceatlas.summarize(trace)["intervals"])


def _manifest(store: Path) -> dict[str, object]:
    return dict(json.loads((store / "manifest.json").read_text()))


# -- damages, done by hand ---------------------------------------------------------------


def _missing(store: Path) -> None:
    (store / PART).unlink()


def _truncated(store: Path) -> None:
    path = store / PART
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _other_schema(store: Path) -> None:
    """Another table's part in place of the intervals part (what a wrong copy does)."""
    shutil.copyfile(store / "tracks" / "rank=0" / "part-0.parquet", store / PART)


def _extra_part(store: Path) -> None:
    """A second file in rank 0's directory: every reader would count rank 0 twice."""
    shutil.copyfile(store / PART, store / "intervals" / "rank=0" / "part-1.parquet")


def _extra_rank(store: Path) -> None:
    (store / "intervals" / "rank=7").mkdir()
    shutil.copyfile(store / PART, store / "intervals" / "rank=7" / "part-0.parquet")


DAMAGES: dict[str, tuple[Callable[[Path], None], str, str]] = {
    # name: (damage, part named, problem named)
    "missing": (_missing, PART, "is missing"),
    "truncated": (_truncated, PART, "bytes, the manifest says"),
    "other schema": (_other_schema, PART, "bytes, the manifest says"),
    "extra part": (_extra_part, "intervals/rank=0/part-1.parquet", "not listed"),
    "extra rank": (_extra_rank, "intervals/rank=7/part-0.parquet", "not listed"),
}


# -- what the manifest records -----------------------------------------------------------


def test_the_manifest_records_every_part(tmp_path: Path) -> None:
    store = traceatlas.ingest(_write(tmp_path / "src"), tmp_path / "st")
    parts = {p["path"]: p for p in _manifest(store)["parts"]}  # type: ignore[attr-defined]
    on_disk = {p.relative_to(store).as_posix() for p in store.rglob("*") if p.is_file()}
    assert set(parts) == on_disk - {"manifest.json"}
    assert len(parts) == 7 * 2  # every canonical table for each rank
    for rel, rec in parts.items():
        data = (store / rel).read_bytes()
        assert rec["bytes"] == len(data)
        assert rec["blake2b"] == hashlib.blake2b(data, digest_size=16).hexdigest()
    assert parts["intervals/rank=0/part-0.parquet"]["rows"] == TOTAL // 2
    assert parts["intervals/rank=1/part-0.parquet"]["rows"] == TOTAL // 2


def test_parts_are_recorded_after_clock_alignment_rewrote_them(tmp_path: Path) -> None:
    """Rank 1's clock runs 3.25 ms ahead; alignment shifts (rewrites) its parts, and the
    manifest must describe the rewritten files."""
    skew = 3_250_123
    base = 1_700_000_000_000_000_000
    paths = []
    for rank in (0, 1):
        b = TraceBuilder(rank, 2, base_time_ns=base + skew * rank, profiler_markers=False)
        coll = Collective("allreduce", 1024, 1024, group_ranks=(0, 1), pg_name="0")
        for k, end in enumerate((1_000_000, 2_500_000, 4_000_000)):
            start = end - 300_000 - 40_000 * rank
            b.launch("ncclDevKernel_AllReduce_Sum_f32_RING_LL", start - 20_000, 5_000,
                     start, end + 100 * k - start, collective=coll)
        paths.append(b.write(tmp_path / f"rank-{rank}.json"))
    store = traceatlas.ingest(paths, tmp_path / "st", engine=LocalEngine(max_workers=1))
    manifest = _manifest(store)
    assert abs(manifest["clock"]["1"]["offset_ns"] + skew) < 1_000  # type: ignore[index]
    for rec in manifest["parts"]:  # type: ignore[attr-defined]
        data = (store / rec["path"]).read_bytes()
        assert rec["blake2b"] == hashlib.blake2b(data, digest_size=16).hexdigest(), rec
        assert rec["rows"] == pq.read_metadata(store / rec["path"]).num_rows
    assert find_damage(store, manifest, deep=True) is None


def test_filter_records_the_parts_it_wrote(tmp_path: Path) -> None:
    store = traceatlas.ingest(_write(tmp_path / "src"), tmp_path / "st")
    out = tmp_path / "kept"
    assert runner.invoke(app, ["filter", str(store), "-o", str(out), "--ranks", "1"]
                         ).exit_code == 0
    parts = {p["path"]: p for p in _manifest(out)["parts"]}  # type: ignore[attr-defined]
    assert set(parts) == {p.relative_to(out).as_posix() for p in out.rglob("*")
                          if p.is_file()} - {"manifest.json"}
    assert all(rel.split("/")[1] == "rank=1" for rel in parts)
    assert parts["intervals/rank=1/part-0.parquet"]["rows"] == TOTAL // 2
    assert find_damage(out, _manifest(out), deep=True) is None


# -- a damaged user store: exit 2, the part and the command named -------------------------


@pytest.mark.parametrize("damage", ["missing", "truncated", "other schema"])
def test_a_damaged_user_store_is_refused_with_the_rebuild_command(
    tmp_path: Path, damage: str
) -> None:
    do, part, problem = DAMAGES[damage]
    store = traceatlas.ingest(_write(tmp_path / "my src"), tmp_path / "st")
    do(store)
    with pytest.raises(StoreDamagedError) as info:
        traceatlas.open(store)
    assert info.value.part == part
    assert problem in str(info.value)
    result = runner.invoke(app, ["info", str(store)])
    assert result.exit_code == 2, result.output
    line = " ".join(result.output.split())
    assert part in line and "Traceback" not in result.output
    command = line.split("rebuild it: ", 1)[1]
    words = shlex.split(command)  # the command is shell-quoted: "my src" stays one word
    assert words[:2] == ["traceatlas", "ingest"] and words[-2:] == ["-o", str(store)]
    rebuilt = runner.invoke(app, words[1:])  # pasted as is: -o replaces the damaged store
    assert rebuilt.exit_code == 0, rebuilt.output
    assert _count(traceatlas.Trace(store)) == TOTAL


@pytest.mark.parametrize("damage", ["extra part", "extra rank"])
def test_a_file_added_to_a_user_store_is_named_and_never_deleted(
    tmp_path: Path, damage: str
) -> None:
    do, part, problem = DAMAGES[damage]
    store = traceatlas.ingest(_write(tmp_path / "src"), tmp_path / "st")
    do(store)
    result = runner.invoke(app, ["info", str(store)])
    assert result.exit_code == 2, result.output
    line = " ".join(result.output.split())
    assert part in line and problem in line and "move it out of the store" in line
    # Rebuilding over it is refused too: the added file is not traceatlas's to delete.
    again = runner.invoke(app, ["ingest", str(tmp_path / "src" / "run.prv"), "-o",
                                str(store)])
    assert again.exit_code == 2 and part in again.output
    (store / part).rename(tmp_path / "moved.parquet")  # the repair the message gives
    assert _count(traceatlas.Trace(store)) == TOTAL


def test_a_part_with_the_wrong_schema_is_found_even_at_the_recorded_size(
    tmp_path: Path
) -> None:
    """Same size and rows as recorded (the manifest is edited to match, as a same-size
    replacement would): only the footer schema check can tell."""
    store = traceatlas.ingest(_write(tmp_path / "src"), tmp_path / "st")
    wrong = pa.table({"rank": pa.array([0] * (TOTAL // 2), pa.int32()),
                      "x": ["a"] * (TOTAL // 2)})
    pq.write_table(wrong, store / PART)
    manifest = _manifest(store)
    for rec in manifest["parts"]:  # type: ignore[attr-defined]
        if rec["path"] == PART:
            rec["bytes"] = (store / PART).stat().st_size
    (store / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(StoreDamagedError, match="does not have the intervals table's schema"):
        traceatlas.Trace(store)


def test_other_row_count_at_the_recorded_size_is_found(tmp_path: Path) -> None:
    store = traceatlas.ingest(_write(tmp_path / "src"), tmp_path / "st")
    manifest = _manifest(store)
    for rec in manifest["parts"]:  # type: ignore[attr-defined]
        if rec["path"] == PART:
            rec["rows"] = 11
            rec["mtime_ns"] = 0  # as after a copy: the footer is read
    (store / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(StoreDamagedError, match="has 10 rows, the manifest says 11"):
        traceatlas.Trace(store)


def test_the_deep_check_finds_a_flipped_byte_the_cheap_one_cannot(tmp_path: Path) -> None:
    store = traceatlas.ingest(_write(tmp_path / "src"), tmp_path / "st")
    path = store / PART
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[8] ^= 0xFF  # inside the first data page (the footer is at the end)
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, same mtime
    manifest = _manifest(store)
    assert find_damage(store, manifest) is None  # documented: the cheap check trusts it
    damage = find_damage(store, manifest, deep=True)
    assert damage is not None and damage.part == PART and "hash differs" in damage.problem


def test_a_corrupt_manifest_in_a_user_store_is_exit_2(tmp_path: Path) -> None:
    store = traceatlas.ingest(_write(tmp_path / "src"), tmp_path / "st")
    (store / "manifest.json").write_text('{"schema_version": 1, "produc')
    result = runner.invoke(app, ["info", str(store)])
    assert result.exit_code == 2, result.output
    assert "corrupt manifest" in result.output and "manifest.json" in result.output


def test_a_store_without_part_records_says_write_it_again(tmp_path: Path) -> None:
    store = traceatlas.ingest(_write(tmp_path / "src"), tmp_path / "st")
    manifest = _manifest(store)
    del manifest["parts"]
    (store / "manifest.json").write_text(json.dumps(manifest))
    older = r"written by an older traceatlas \(no part records\); ingest again: traceatlas ingest"
    with pytest.raises(StoreError, match=older):
        traceatlas.Trace(store)


def test_rebuild_command_of_a_filtered_store_repeats_the_filter() -> None:
    manifest = {"filtered_from": "/data/run 1 (a).tastore",
                "filter": {"spec": {"category": ["kernel", "memcpy"], "ranks": "0-3",
                                    "window": "1s:2s"}}}
    words = shlex.split(rebuild_command("out $(x).tastore", manifest))
    assert words == ["traceatlas", "filter", "/data/run 1 (a).tastore", "-o",
                     "out $(x).tastore", "--category", "kernel", "--category", "memcpy",
                     "--ranks", "0-3", "--window", "1s:2s"]


def test_rebuild_command_of_an_ingested_store() -> None:
    manifest = {"sources": [{"path": "/t/a;b.json", "rank": 0},
                            {"path": "/t/arch.tar.gz", "member": "r1.json", "rank": 1},
                            {"path": "/t/arch.tar.gz", "member": "r2.json", "rank": 2}],
                "clock_alignment": "start"}
    words = shlex.split(rebuild_command("st", manifest))
    assert words == ["traceatlas", "ingest", "/t/a;b.json", "/t/arch.tar.gz", "-o", "st",
                     "--align", "start"]


# -- a damaged cache entry: rebuilt, with a warning --------------------------------------


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_cache_entry_is_rebuilt_with_a_warning(tmp_path: Path, damage: str) -> None:
    do, part, _problem = DAMAGES[damage]
    paths = _write(tmp_path / "src")
    first = traceatlas.open(paths)
    assert first.path == cache_path([str(p) for p in paths])
    do(first.path)
    with pytest.warns(DataQualityWarning, match="damaged") as caught:
        trace = traceatlas.open(paths)
    assert any(part in str(w.message) for w in caught)
    assert _count(trace) == TOTAL
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataQualityWarning)
        assert _count(traceatlas.open(paths)) == TOTAL  # rebuilt once, then reused quietly


@pytest.mark.parametrize("manifest", ["", "{", '{"name": "app"}'])
def test_a_corrupt_cached_manifest_is_rebuilt_with_a_warning(
    tmp_path: Path, manifest: str
) -> None:
    paths = _write(tmp_path / "src")
    store = traceatlas.open(paths).path
    (store / "manifest.json").write_text(manifest)
    with pytest.warns(DataQualityWarning, match="manifest.json is corrupt"):
        assert _count(traceatlas.open(paths)) == TOTAL


def test_a_cached_store_of_an_older_traceatlas_is_rebuilt_quietly(tmp_path: Path) -> None:
    paths = _write(tmp_path / "src")
    store = traceatlas.open(paths).path
    manifest = _manifest(store)
    del manifest["parts"]
    (store / "manifest.json").write_text(json.dumps(manifest))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataQualityWarning)
        trace = traceatlas.open(paths)
    assert _count(trace) == TOTAL and "parts" in trace.manifest


def test_reproduction_deleted_cached_part_is_not_read_short(tmp_path: Path) -> None:
    """Issue: deleting one cached part made `info` report half the intervals, silently."""
    paths = _write(tmp_path / "src")
    (traceatlas.open(paths).path / "intervals" / "rank=1" / "part-0.parquet").unlink()
    result = runner.invoke(app, ["info", "-f", "json", *map(str, paths)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.strip().splitlines()[-1])["intervals"] == TOTAL
    assert "rank=1/part-0.parquet" in result.output  # the warning names the part


def test_reproduction_truncated_cached_part_does_not_break_every_later_command(
    tmp_path: Path
) -> None:
    paths = _write(tmp_path / "src")
    _truncated(traceatlas.open(paths).path)
    first = runner.invoke(app, ["report", *map(str, paths)])
    assert first.exit_code == 0, first.output
    assert "Traceback" not in first.output
    later = runner.invoke(app, ["info", "-f", "json", *map(str, paths)])
    assert later.exit_code == 0, later.output
    assert json.loads(later.stdout.strip().splitlines()[-1])["intervals"] == TOTAL
