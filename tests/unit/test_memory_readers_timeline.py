"""PyTorch ``export_memory_timeline`` files -> one counter track per category
(``io/memory_timeline.py``). Expected curves are written out by hand."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from traceatlas.cli.main import app
from traceatlas.errors import CorruptTraceError
from traceatlas.io.memory_timeline import CATEGORIES, MemoryTimelineReader
from traceatlas.io.registry import detect
from traceatlas.io.sources import Source
from traceatlas.testing.builder import TraceBuilder

T = 1_700_000_000_000_000_000  # epoch ns, as PyTorch writes them


def _series(path: Path) -> dict[str, list[tuple[int, float]]]:
    tables = MemoryTimelineReader().read(Source(str(path)))[0].tables
    names = {r["track_id"]: r["name"] for r in tables["tracks"].to_pylist()}
    out: dict[str, list[tuple[int, float]]] = {}
    for row in tables["counters"].to_pylist():
        assert row["name"] == names[row["track_id"]] + " (bytes)"
        out.setdefault(names[row["track_id"]], []).append((row["ts_ns"], row["value"]))
    return out


def test_raw_events_become_curves_like_hta(tmp_path: Path) -> None:
    # Two pre-existing parameters (t = -1), then: an activation created, a temporary
    # created and destroyed at the same time, the activation destroyed.
    raw = [[-1, 1, 100, 0], [-1, 1, 50, 0], [T + 10, 2, 1000, 4],
           [T + 20, 2, 8, 3], [T + 20, 4, -8, 3], [T + 30, 4, -1000, 4]]
    path = tmp_path / "memory.raw.json.gz"
    path.write_bytes(gzip.compress(json.dumps(raw).encode()))
    assert isinstance(detect(Source(str(path))), MemoryTimelineReader)
    got = _series(path)
    assert sorted(got) == sorted(f"memory timeline: {c}" for c in CATEGORIES)
    # Samples: the t=-1 step placed at the smallest positive time, then one per time.
    times = [T + 10, T + 10, T + 20, T + 30]
    assert got["memory timeline: Parameter"] == list(zip(times, [150, 150, 150, 150],
                                                         strict=True))
    assert got["memory timeline: Activation"] == list(zip(times, [0, 1000, 1000, 0],
                                                          strict=True))
    assert got["memory timeline: Temporary"] == list(zip(times, [0, 0, 0, 0], strict=True))
    assert got["memory timeline: Gradient"] == list(zip(times, [0, 0, 0, 0], strict=True))


def test_curves_layout(tmp_path: Path) -> None:
    sizes = [[float(i + 10 * j) for i in range(8)] for j in range(3)]
    path = tmp_path / "memory.json"
    path.write_text(json.dumps([[T, T + 5, T + 9], sizes]))
    assert isinstance(detect(Source(str(path))), MemoryTimelineReader)
    got = _series(path)
    assert got["memory timeline: Optimizer state"] == [(T, 1.0), (T + 5, 11.0),
                                                        (T + 9, 21.0)]
    assert got["memory timeline: Unknown"] == [(T, 7.0), (T + 5, 17.0), (T + 9, 27.0)]


@pytest.mark.parametrize("text", [
    "[[1, 2, 3]]", "[1, 2, 3, 4]", "[[1, 9, 3, 0]]", "[[1, 1, 3, 8]]", '[["a", 1, 2, 3]]',
    "[[12, 34], [[1,2,3,4,5,6,7,8], [1,2,3,4,5,6,7,8]]]", "[]", "{}",
])
def test_sniff_rejects_other_json(text: str, tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text(text)
    assert not MemoryTimelineReader().sniff(path.read_bytes(), Source(str(path)))


def test_a_chrome_trace_still_goes_to_kineto(tmp_path: Path) -> None:
    b = TraceBuilder(rank=0)
    b.cpu_op("aten::mm", 0, 1000)
    path = b.write(tmp_path / "t.json")
    assert detect(Source(str(path))).name == "kineto"
    path.write_text(json.dumps(json.loads(path.read_text())["traceEvents"]))  # array form
    assert detect(Source(str(path))).name == "kineto"


@pytest.mark.parametrize(("text", "problem"), [
    (f"[[{T}, 1, 10, 0], [{T}, 1, 10]]", "not a PyTorch memory timeline"),
    (f"[[{T}, 1, 10, 0], [{T}, 1, 10, 0]", "truncated JSON"),
    (f"[[{T}, {T + 1}], [[1,2,3,4,5,6,7,8]]]", "2 times and 1 size rows"),
])
def test_bad_file_is_one_line_exit_2_no_store(text: str, problem: str, tmp_path: Path
                                              ) -> None:
    path = tmp_path / "rank3.memory.json"
    path.write_text(text)
    with pytest.raises(CorruptTraceError, match=problem):
        MemoryTimelineReader().read(Source(str(path)))
    out = tmp_path / "store"
    result = CliRunner().invoke(app, ["ingest", str(path), "-o", str(out)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and problem in lines[0], result.output
    assert not out.exists()


def test_rank_from_file_name(tmp_path: Path) -> None:
    path = tmp_path / "rank3.memory.raw.json"
    path.write_text(json.dumps([[T, 1, 10, 0]]))
    got = MemoryTimelineReader().read(Source(str(path)))[0]
    assert got.rank == 3 and got.rank_source == "file name"
