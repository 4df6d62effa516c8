"""Bad input: the CLI exits 2 with one ``error: <path>: <problem>`` line on stderr, the
Python API raises the matching InputError subclass, and nothing is left behind (no
store, no ``.<name>.tmp-*`` sibling)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import traceatlas
from traceatlas.engine import LocalEngine

SMALL_KINETO = {
    "schemaVersion": 1,
    "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
    "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 10, "tid": 10,
         "ts": 1000, "dur": 50, "args": {"External id": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 10,
         "ts": 1010, "dur": 5, "args": {"correlation": 7, "External id": 1}},
        {"ph": "X", "cat": "kernel", "name": "sgemm_kernel", "pid": 0, "tid": 7,
         "ts": 1020, "dur": 30,
         "args": {"correlation": 7, "External id": 1, "device": 0, "stream": 7}},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 7, "pid": 10, "tid": 10, "ts": 1010},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 7, "pid": 0, "tid": 7, "ts": 1020,
         "bp": "e"},
    ],
}


def _valid_bytes() -> bytes:
    return json.dumps(SMALL_KINETO, indent=1).encode()


def _truncated_json(tmp: Path) -> Path:
    data = _valid_bytes()
    path = tmp / "inputs" / "rank-0.json"
    path.write_bytes(data[: len(data) // 2])
    return path


def _truncated_gzip(tmp: Path) -> Path:
    data = gzip.compress(_valid_bytes())
    assert data[:2] == b"\x1f\x8b"
    path = tmp / "inputs" / "rank-0.json.gz"
    path.write_bytes(data[: len(data) // 2])
    return path


def _et_like(tmp: Path) -> Path:
    path = tmp / "inputs" / "nodes.json"
    path.write_text('{"nodes": []}')
    return path


def _plain_text(tmp: Path) -> Path:
    path = tmp / "inputs" / "hello.json"
    path.write_text("hello\n")
    return path


def _empty_dir(tmp: Path) -> Path:
    path = tmp / "inputs" / "empty"
    path.mkdir()
    return path


def _missing(tmp: Path) -> Path:
    return tmp / "inputs" / "does-not-exist.json"


# (id, input builder, exception class, words one of which the message must contain)
CASES: list[tuple[str, Callable[[Path], Path], type[traceatlas.InputError], tuple[str, ...]]] = [
    ("truncated-json", _truncated_json, traceatlas.CorruptTraceError, ("truncated",)),
    ("truncated-gzip", _truncated_gzip, traceatlas.CorruptTraceError, ("truncated",)),
    ("not-a-trace-nodes", _et_like, traceatlas.UnsupportedFormatError,
     ("traceEvents", "not a recognised trace format")),
    ("not-a-trace-text", _plain_text, traceatlas.UnsupportedFormatError,
     ("not a recognised trace format",)),
    ("empty-directory", _empty_dir, traceatlas.InputNotFoundError, ("no trace files",)),
    ("missing-path", _missing, traceatlas.InputNotFoundError, ("no such file",)),
]
IDS = [c[0] for c in CASES]


def _prepare(tmp_path: Path, build: Callable[[Path], Path]) -> tuple[Path, Path]:
    (tmp_path / "inputs").mkdir()
    (tmp_path / "work").mkdir()
    return build(tmp_path), tmp_path / "work" / "out"


def _assert_nothing_left(out: Path) -> None:
    assert not out.exists()
    # No store and no temporary siblings such as ".out.tmp-1234abcd".
    assert sorted(p.name for p in out.parent.iterdir()) == []


@pytest.mark.parametrize(("case", "build", "error", "words"), CASES, ids=IDS)
def test_cli_bad_input_exits_2(
    tmp_path: Path,
    case: str,
    build: Callable[[Path], Path],
    error: type[traceatlas.InputError],
    words: tuple[str, ...],
) -> None:
    path, out = _prepare(tmp_path, build)
    proc = subprocess.run(
        [sys.executable, "-m", "traceatlas.cli.main", "ingest", str(path), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith("error: "), line
    assert str(path) in line, line
    assert any(w.lower() in line.lower() for w in words), line
    assert "Traceback" not in proc.stderr
    _assert_nothing_left(out)


@pytest.mark.parametrize(("case", "build", "error", "words"), CASES, ids=IDS)
def test_api_bad_input_raises(
    tmp_path: Path,
    case: str,
    build: Callable[[Path], Path],
    error: type[traceatlas.InputError],
    words: tuple[str, ...],
) -> None:
    path, out = _prepare(tmp_path, build)
    with pytest.raises(error) as info:
        traceatlas.ingest(path, out, engine=LocalEngine(max_workers=1))
    exc = info.value
    assert isinstance(exc, traceatlas.InputError)
    message = str(exc)
    assert message.startswith(f"{path}: "), message
    assert "\n" not in message, message
    assert any(w.lower() in message.lower() for w in words), message
    _assert_nothing_left(out)


def test_valid_input_for_comparison(tmp_path: Path) -> None:
    """The untruncated input ingests, so the failures above come from the damage."""
    (tmp_path / "inputs").mkdir()
    path = tmp_path / "inputs" / "rank-0.json"
    path.write_bytes(_valid_bytes())
    gz = tmp_path / "inputs" / "rank-0.json.gz"
    gz.write_bytes(gzip.compress(_valid_bytes()))
    for src, name in ((path, "a"), (gz, "b")):
        store = traceatlas.ingest(src, tmp_path / name, engine=LocalEngine(max_workers=1))
        summary = traceatlas.summarize(traceatlas.Trace(store))
        assert summary["intervals"] == 3
        assert summary["ranks"] == [0]
