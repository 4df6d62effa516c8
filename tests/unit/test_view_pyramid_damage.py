"""A damaged pyramid cache (a level file truncated, a file missing, a JSON file cut) is
detected when opened and rebuilt: the answers equal those of the intact pyramid."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_view_pyramid import BASE, Interval, nested_host_rows, stream_rows, write_store

from traceatlas.model.trace import Trace
from traceatlas.view.pyramid import ensure_pyramid


def _trace(tmp_path: Path) -> Trace:
    tracks = [(0, 0, "host_thread"), (0, 1, "gpu_stream")]
    rows: list[Interval] = nested_host_rows(0, 0, 0) + stream_rows(0, 1, 50)
    return write_store(tmp_path / "s.tastore", tracks, rows)


def _answers(trace: Trace) -> list[list[dict[str, object]]]:
    p = ensure_pyramid(trace)
    ids = list(range(len(p.tracks)))
    return [[t.table.to_pydict() for t in p.tiles(level, BASE, BASE + 10**6, ids)]
            for level in range(p.top + 1)]


def _truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def _cut_json(path: Path) -> None:
    path.write_text(path.read_text("utf-8")[:-3], encoding="utf-8")


@pytest.mark.parametrize("damage", [
    ("bins-1.arrow", _truncate), ("bins-0.arrow", os.unlink), ("counters-0.arrow", _truncate),
    ("loc.npy", _truncate), ("tracks.json", _cut_json), ("names.json", _cut_json),
])
def test_damaged_cache_is_rebuilt(tmp_path: Path, damage: tuple[str, object]) -> None:
    trace = _trace(tmp_path)
    want = _answers(trace)
    directory = ensure_pyramid(trace).directory
    name, hurt = damage
    hurt(directory / name)  # type: ignore[operator]
    assert _answers(Trace(trace.path)) == want
    assert ensure_pyramid(Trace(trace.path)).directory == directory
