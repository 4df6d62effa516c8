"""Typed ``args`` read of the Kineto reader (``kineto_events.TYPED_ARGS``) against the
JSON read (``json_transform``) kept as its oracle, on traces built here: fields of every
kind, and fields the typed read cannot convert (it falls back to the JSON read)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from traceatlas.io import kineto_events
from traceatlas.io.kineto import KinetoReader
from traceatlas.io.sources import resolve_inputs

_GOOD = [
    {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.5, "dur": 2,
     "args": {"correlation": 41, "device": 0, "stream": 7, "grid": [1, 2, 3],
              "block": [32, 1, 1], "External id": "9"}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 5, "tid": 5,
     "ts": 9, "dur": 1.25, "args": {"correlation": 41, "External id": 9}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 5, "tid": 5, "ts": 8,
     "dur": 3, "args": {}},
    {"ph": "X", "cat": "cpu_op", "name": "no_args", "pid": 5, "tid": 5, "ts": 8.5,
     "dur": 0.5},
    {"ph": "X", "cat": "cpu_op", "name": "null_args", "pid": 5, "tid": 5, "ts": 8.6,
     "dur": 0.1, "args": None},
    {"ph": "M", "name": "thread_name", "pid": 5, "tid": 5, "args": {"name": "main"}},
    {"ph": "i", "name": "mark", "pid": 5, "tid": 5, "ts": 11, "s": "t",
     "args": {"correlation": 3}},
    {"ph": "C", "name": "mem", "pid": 5, "tid": 5, "ts": 11, "args": {"bytes": 1.5}},
    {"ph": "s", "cat": "ac2g", "name": "f", "id": 41, "pid": 5, "tid": 5, "ts": 9},
    {"ph": "f", "cat": "ac2g", "name": "f", "id": 41, "pid": 0, "tid": 7, "ts": 10.5,
     "bp": "e"},
]

_ODD_ARGS = [
    {"correlation": "abc"}, {"grid": "x"}, {"grid": [1, "a"]}, {"bytes": 2**70},
    {"name": {"nested": 1}}, 5, "text", [1, 2],
]


def _write(tmp_path: Path, events: list[dict[str, Any]]) -> Path:
    path = tmp_path / "rank-0.json"
    path.write_text(json.dumps({"traceEvents": events, "distributedInfo": {"rank": 0}}))
    return path


def _read(path: Path, typed: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[str]]:
    monkeypatch.setattr(kineto_events, "TYPED_ARGS", typed)
    (source,) = resolve_inputs([path])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (rank,) = KinetoReader().read(source)
    return rank, sorted(str(w.message) for w in caught)


def _assert_same(path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    old, old_warnings = _read(path, False, monkeypatch)
    new, new_warnings = _read(path, True, monkeypatch)
    assert new_warnings == old_warnings
    assert sorted(new.tables) == sorted(old.tables)
    for name, table in old.tables.items():
        assert new.tables[name].equals(table), name
    return new


def test_typed_read_needs_no_fallback_and_equals_json_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    resliced: list[str] = []
    real = kineto_events._reslice
    monkeypatch.setattr(kineto_events, "_reslice",
                        lambda path, display: resliced.append(path) or real(path, display))
    rank = _assert_same(_write(tmp_path, _GOOD), monkeypatch)
    assert resliced == []  # the typed read converted every field
    intervals = rank.tables["intervals"].to_pylist()
    by_name = {row["name"]: row for row in intervals}
    # by hand from _GOOD: correlation 41 on the kernel and on its launch
    assert by_name["k"]["correlation"] == 41
    assert by_name["cudaLaunchKernel"]["correlation"] == 41
    assert by_name["aten::mm"]["correlation"] is None
    assert len(intervals) == 5


@pytest.mark.parametrize("odd", _ODD_ARGS, ids=lambda a: json.dumps(a)[:24])
def test_unconvertible_args_fall_back_to_json_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, odd: Any
) -> None:
    events = [*_GOOD, {"ph": "X", "cat": "cpu_op", "name": "odd", "pid": 5, "tid": 5,
                       "ts": 12, "dur": 1, "args": odd}]
    rank = _assert_same(_write(tmp_path, events), monkeypatch)
    names = rank.tables["intervals"].column("name").to_pylist()
    assert "odd" in names  # kept: only its unconvertible field is left null
    assert len(names) == 6
