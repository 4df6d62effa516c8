"""Files in a directory that are not traces (issue 16): ``package.json`` or a config beside
the rank files is skipped with one DataQualityWarning naming it, and the ranks ingest; the
same file named explicitly is still an error (exit 2, one line); a directory of only such
files is an error naming them. What counts as "not a trace" is decided from the first
64 KiB (``io/not_traces.py``): damaged traces are kept, so their reader reports them."""

from __future__ import annotations

import gzip
import json
import sqlite3
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import traceatlas
from traceatlas.cli.main import app
from traceatlas.errors import DataQualityWarning, InputNotFoundError
from traceatlas.io.not_traces import HEAD_BYTES, why_not_a_trace
from traceatlas.io.sources import Source, resolve_inputs
from traceatlas.testing.builder import TraceBuilder

PACKAGE = {"name": "demo", "version": "1.0.0", "dependencies": {"left-pad": "^1.3.0"}}
CONFIG = {"lr": 0.01, "batch_size": 32, "steps": [1, 2, 3]}


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    for rank in (0, 1):
        b = TraceBuilder(rank=rank, world_size=2)
        b.step(1, 0, 1_000_000)
        b.launch("gemm", 10_000, 5_000, 20_000, 300_000)
        b.write(run / f"rank-{rank}.json")
    (run / "package.json").write_text(json.dumps(PACKAGE))
    (run / "config.json").write_text(json.dumps(CONFIG))
    return run


def _skip_warnings(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record
            if issubclass(w.category, DataQualityWarning) and "not traces" in str(w.message)]


def test_directory_skips_non_traces_with_one_warning(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        names = [s.file_name for s in resolve_inputs([run])]
    assert names == ["rank-0.json", "rank-1.json"]
    (message,) = _skip_warnings(record)
    assert "2 file(s)" in message and "package.json" in message and "config.json" in message
    assert "rank-0.json" not in message
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataQualityWarning)
        trace = traceatlas.open(run)
    assert trace.ranks == [0, 1]


def test_cli_ingest_of_the_directory(tmp_path: Path) -> None:
    run, out = _run_dir(tmp_path), tmp_path / "store"
    result = CliRunner().invoke(app, ["ingest", str(run), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.count("not traces") == 1
    assert "2 rank(s)" in result.output


def test_named_non_trace_still_fails(tmp_path: Path) -> None:
    run, out = _run_dir(tmp_path), tmp_path / "store"
    result = CliRunner().invoke(app, ["ingest", str(run / "package.json"), "-o", str(out)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "package.json" in lines[0]
    assert "Traceback" not in result.output and not out.exists()


def test_directory_of_only_non_traces_fails_naming_them(tmp_path: Path) -> None:
    (tmp_path / "package.json").write_text(json.dumps(PACKAGE))
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    with pytest.raises(InputNotFoundError, match=r"no trace.*config\.json.*package\.json"):
        resolve_inputs([tmp_path])
    result = CliRunner().invoke(app, ["ingest", str(tmp_path), "-o", str(tmp_path / "s")])
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert "no trace" in line and "package.json" in line and "config.json" in line


def test_damaged_rank_file_is_not_skipped(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    (run / "rank-2.json.gz").write_bytes(b"\x1f\x8b\x08\x00junk")  # corrupt gzip
    (run / "rank-3.json").write_text('{"schemaVersion": 1, "traceEvents": [{"ph": "X", ')
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        names = [s.file_name for s in resolve_inputs([run])]
    assert "rank-2.json.gz" in names and "rank-3.json" in names
    result = CliRunner().invoke(app, ["ingest", str(run), "-o", str(tmp_path / "s")])
    assert result.exit_code == 2 and "rank-" in result.output


def _why(tmp_path: Path, name: str, content: bytes) -> str | None:
    path = tmp_path / name
    path.write_bytes(content)
    return why_not_a_trace(Source(str(path)))


def test_json_heads(tmp_path: Path) -> None:
    event = {"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1}
    assert _why(tmp_path, "a.json", json.dumps([event]).encode()) is None  # Chrome array
    assert _why(tmp_path, "b.json", json.dumps({"traceEvents": []}).encode()) is None
    assert "not a trace event" in (_why(tmp_path, "c.json", b'[{"file": "x.json"}]') or "")
    assert "not a trace event" in (_why(tmp_path, "d.json", b"[1, 2, 3]") or "")
    assert _why(tmp_path, "e.json", b"[]") == "empty JSON array (no events)"
    assert _why(tmp_path, "f.json", b"  \n") == "empty file"
    # a raw memory timeline ([t, action, bytes, category] rows; its own reader) is a trace
    assert _why(tmp_path, "g.json", b"[[1700000000000000010, 1, 1000, 4]]") is None
    # gzip is read through
    gz = gzip.compress(json.dumps(CONFIG).encode())
    assert "without 'traceEvents'" in (_why(tmp_path, "h.json.gz", gz) or "")


def test_long_heads(tmp_path: Path) -> None:
    pad = "x" * HEAD_BYTES
    # Kineto metadata longer than 64 KiB before traceEvents: kept (first key is Kineto's)
    kineto = json.dumps({"schemaVersion": 1, "deviceProperties": [{"pad": pad}],
                         "traceEvents": []}).encode()
    assert _why(tmp_path, "k.json", kineto) is None
    # a large object with other keys and no events in its head: not a trace
    other = json.dumps({"schema": "1.0", "nodes": [{"pad": pad}], "traceEvents": []})
    assert "first 64 KiB" in (_why(tmp_path, "et.json", other.encode()) or "")


def test_sqlite_without_nsys_tables(tmp_path: Path) -> None:
    def db(name: str, tables: list[str]) -> Source:
        con = sqlite3.connect(tmp_path / name)
        for t in tables:
            con.execute(f"CREATE TABLE {t} (id INTEGER)")
        con.commit()
        con.close()
        return Source(str(tmp_path / name))

    assert "Nsight" in (why_not_a_trace(db("app.sqlite", ["users", "orders"])) or "")
    assert why_not_a_trace(db("prof.sqlite", ["StringIds", "TARGET_INFO_GPU"])) is None


_SCALARS = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
_KEYS = st.text("abcdefgh_", min_size=1, max_size=8)


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(_KEYS, st.recursive(
    _SCALARS, lambda c: st.lists(c, max_size=3) | st.dictionaries(_KEYS, c, max_size=3),
    max_leaves=8), max_size=6))
def test_any_small_object_is_a_trace_iff_it_has_trace_events(tmp_path_factory: pytest.
                                                              TempPathFactory,
                                                              obj: dict[str, object]) -> None:
    tmp = tmp_path_factory.mktemp("j")
    assert why_not_a_trace(_src(tmp, "x.json", obj)) is not None  # keys never traceEvents
    assert why_not_a_trace(_src(tmp, "y.json", {**obj, "traceEvents": []})) is None


def _src(tmp: Path, name: str, obj: object) -> Source:
    (tmp / name).write_text(json.dumps(obj))
    return Source(str(tmp / name))


def test_report_warns_once(tmp_path: Path) -> None:
    # ``report -o`` resolves its inputs twice (the overwrite check, then opening them)
    run = _run_dir(tmp_path)
    result = CliRunner().invoke(app, ["report", str(run), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    assert result.output.count("not traces") == 1
