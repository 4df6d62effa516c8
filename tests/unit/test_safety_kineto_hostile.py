"""Issue 18, section 9 (JSON and archives): a hostile or damaged Kineto file gives one
line naming the file and the problem and exit code 2, or, when the file is readable and
only some events are bad, success with a warning that counts what was dropped.

Before: JSON nested 1,500 deep and ``baseTimeNanoseconds`` past int64 ended in Python
tracebacks; a truncated ``.tar.gz`` printed "Aborted." and exited 1 without a name.
"""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from traceatlas.cli.main import app

GOOD = {"traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2},
    {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 4, "dur": 1},
]}


def _good_bytes() -> bytes:
    return json.dumps(GOOD, indent=1).encode()


def _tar_gz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _deep(depth: int) -> bytes:
    return (b'{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, '
            b'"dur": 1, "args": {"x": ' + b"[" * depth + b"]" * depth + b"}}]}")


# name -> (file name, bytes, words the error line must contain)
REFUSED: dict[str, tuple[str, Callable[[], bytes], str]] = {
    "nested_1500": ("deep.json", lambda: _deep(1500), "nested too deeply"),
    "nested_metadata": ("deepmeta.json", lambda: (
        b'{"traceEvents": [], "x": ' + b"[" * 1500 + b"]" * 1500 + b"}"),
        "nested too deeply"),
    "base_time_past_int64": ("base.json", lambda: json.dumps(
        {**GOOD, "baseTimeNanoseconds": 2**64}).encode(), "baseTimeNanoseconds"),
    "truncated_gz": ("t.json.gz", lambda: gzip.compress(_good_bytes())[:-12],
                     "truncated or corrupt gzip"),
    "truncated_json": ("t.json", lambda: _good_bytes()[:-9], "truncated JSON"),
    "not_utf8": ("latin.json", lambda: _good_bytes().replace(b'"a"', b'"caf\xe9"'),
                 "UTF-8"),
    "empty": ("empty.json", lambda: b"", "empty file"),
    "whitespace": ("blank.json", lambda: b"  \n\t ", "only whitespace"),
    "array_of_numbers": ("nums.json", lambda: b"[1, 2, 3]", "not event objects"),
    "number": ("num.json", lambda: b"42", "not a recognised trace format"),
    "events_not_a_list": ("obj.json", lambda: b'{"traceEvents": {"ph": "X"}}',
                          "'traceEvents' is an object, not a list"),
    "events_a_string": ("str.json", lambda: b'{"traceEvents": "x"}',
                        "'traceEvents' is a string"),
    "nan_literal": ("nan.json", lambda: _good_bytes().replace(b'"ts": 4', b'"ts": NaN'),
                    "invalid JSON"),
}


@pytest.fixture
def tmpdir_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private $TMPDIR, to check that nothing is left in it."""
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr("tempfile.tempdir", str(tmp))
    return tmp


def _refused(result: object, named: str, words: str) -> str:
    out = result.output  # type: ignore[attr-defined]
    assert result.exit_code == 2, out  # type: ignore[attr-defined]
    assert "Traceback" not in out and "Aborted" not in out
    (line,) = result.stderr.splitlines()  # type: ignore[attr-defined]
    assert line.startswith(f"error: {named}") and words in line, line
    return str(line)


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_with_one_line(case: str, tmp_path: Path, tmpdir_env: Path) -> None:
    name, make, words = REFUSED[case]
    path = tmp_path / name
    path.write_bytes(make())
    out = tmp_path / "out" / "store"
    result = CliRunner().invoke(app, ["ingest", str(path), "-o", str(out)])
    _refused(result, str(path), words)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    assert not any(tmpdir_env.iterdir())


@pytest.mark.parametrize("case", ["nested_1500", "base_time_past_int64", "truncated_gz",
                                  "events_not_a_list", "not_utf8"])
def test_info_on_a_raw_file_refused(case: str, tmp_path: Path, tmpdir_env: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """``info`` on the raw file (through the cache): the same line, nothing cached."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("TRACEATLAS_CACHE_DIR", str(cache))
    name, make, words = REFUSED[case]
    path = tmp_path / name
    path.write_bytes(make())
    result = CliRunner().invoke(app, ["info", str(path)])
    _refused(result, str(path), words)
    assert not cache.exists() or not any(cache.rglob("*"))
    assert not any(tmpdir_env.iterdir())


def test_truncated_tar_gz_names_the_archive(tmp_path: Path, tmpdir_env: Path) -> None:
    """The issue's case: "Aborted." and exit 1 before; EOFError escaped tarfile."""
    data = _tar_gz({"a.json": _good_bytes() * 50, "b.json": _good_bytes()})
    path = tmp_path / "runs.tar.gz"
    path.write_bytes(data[: len(data) * 2 // 3])
    result = CliRunner().invoke(app, ["ingest", str(path), "-o", str(tmp_path / "s")])
    line = _refused(result, str(path), "truncated or corrupt")
    assert "tar archive" in line
    assert not (tmp_path / "s").exists() and not any(tmpdir_env.iterdir())


def test_truncated_gz_member_of_a_tar(tmp_path: Path) -> None:
    member = gzip.compress(_good_bytes())[:-10]
    path = tmp_path / "runs.tar"
    path.write_bytes(_tar_gz({"rank-0.json.gz": member}))
    path = path.rename(tmp_path / "runs.tar.gz")
    result = CliRunner().invoke(app, ["ingest", str(path), "-o", str(tmp_path / "s")])
    _refused(result, f"{path}:rank-0.json.gz", "gzip")


def test_bad_events_are_dropped_with_a_count(tmp_path: Path, tmpdir_env: Path) -> None:
    """Readable file, some bad events: success, and every drop counted in a warning."""
    events = [*GOOD["traceEvents"],
              {"ph": "X", "name": "s", "pid": 1, "tid": 1, "ts": "soon", "dur": 1},
              {"ph": "X", "name": "n", "pid": 1, "tid": 1, "ts": None, "dur": 1},
              {"ph": "X", "name": "h", "pid": 1, "tid": 1, "ts": 1e300, "dur": 1},
              {"ph": "X", "name": "q", "pid": 1, "tid": 1, "ts": "7", "dur": "0.5"}]
    path = tmp_path / "rank-0.json"
    path.write_text(json.dumps({"traceEvents": events}))
    store = tmp_path / "s"
    result = CliRunner().invoke(app, ["ingest", str(path), "-o", str(store)])
    assert result.exit_code == 0, result.output
    assert f"{path}: traceEvents had 2 event(s) whose 'ts' or 'dur'" in result.stderr
    assert "had 1 event(s) without 'ts'" in result.stderr
    assert "3 intervals" in result.stderr
    info = CliRunner().invoke(app, ["info", str(store), "-f", "json"])
    assert json.loads(info.stdout)["intervals"] == 3
    assert not any(tmpdir_env.iterdir())


def test_subprocess_deep_nesting_one_line(tmp_path: Path) -> None:
    """The real console script: exit 2, one stderr line, no traceback."""
    path = tmp_path / "deep.json"
    path.write_bytes(_deep(1500))
    proc = subprocess.run(
        [sys.executable, "-m", "traceatlas.cli.main", "ingest", str(path), "-o",
         str(tmp_path / "s")], capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path),
             "TRACEATLAS_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"error: {path}: ") and "Traceback" not in proc.stderr


@pytest.mark.parametrize("rank", [2**31, 10**30])
def test_rank_past_int32_is_ignored_with_a_warning(rank: int, tmp_path: Path) -> None:
    """Before: an OverflowError/ArrowInvalid traceback (ranks are int32 in the store)."""
    path = tmp_path / f"rank-{rank}.json"
    path.write_text(json.dumps({**GOOD, "distributedInfo": {"rank": rank,
                                                             "world_size": rank}}))
    result = CliRunner().invoke(app, ["ingest", str(path), "-o", str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    assert f"distributedInfo.rank {rank} is past the largest rank" in result.stderr
    assert f"rank {rank} in the file name is past the largest rank" in result.stderr
    assert "2 intervals" in result.stderr


def test_a_device_is_refused_not_read_forever(tmp_path: Path) -> None:
    """``/dev/zero`` used to be read until memory ran out."""
    result = CliRunner().invoke(app, ["ingest", "/dev/zero", "-o", str(tmp_path / "s")])
    _refused(result, "/dev/zero", "not a regular file")


def test_damage_after_the_first_batches_is_one_line(tmp_path: Path) -> None:
    """Malformed text after the first record batches (64 Ki events): DuckDB's error then
    arrives through Arrow's stream as OSError; it must still be one exit-2 line."""
    events = ",".join(json.dumps({"ph": "X", "name": f"f{i}", "pid": 1, "tid": 1, "ts": i,
                                  "dur": 1}) for i in range(140_000))
    path = tmp_path / "late.json"
    path.write_bytes(b'{"traceEvents": [' + events.encode()
                     + b', {"ph": "X", "name": "caf\xe9", "pid": 1, "tid": 1, "ts": 1, '
                     b'"dur": 1}]}')
    result = CliRunner().invoke(app, ["ingest", str(path), "-o", str(tmp_path / "s")])
    _refused(result, str(path), "invalid UTF-8")
