"""A damaged pyramid cache (a level file truncated, a file missing, a JSON file cut) is
detected when opened and rebuilt: the answers equal those of the intact pyramid. A build
interrupted by Ctrl-C leaves nothing in the cache; two first builds at once build once."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from test_view_pyramid import BASE, Interval, nested_host_rows, stream_rows, write_store

from traceatlas.model.trace import Trace
from traceatlas.view import pyramid as pyramid_module
from traceatlas.view.pyramid import ensure_pyramid, pyramid_dir


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


def _garble_json(path: Path) -> None:
    text = path.read_text("utf-8")
    path.write_text("{" + text[1:], encoding="utf-8")  # same size, no longer JSON


@pytest.mark.parametrize("damage", [
    ("bins-1.arrow", _truncate), ("bins-0.arrow", os.unlink), ("counters-0.arrow", _truncate),
    ("loc.npy", _truncate), ("tracks.json", _cut_json), ("names.json", _cut_json),
    ("tracks.json", _garble_json), ("names.json", _garble_json),
])
def test_damaged_cache_is_rebuilt(tmp_path: Path, damage: tuple[str, object]) -> None:
    trace = _trace(tmp_path)
    want = _answers(trace)
    directory = ensure_pyramid(trace).directory
    name, hurt = damage
    hurt(directory / name)  # type: ignore[operator]
    assert _answers(Trace(trace.path)) == want
    assert ensure_pyramid(Trace(trace.path)).directory == directory


def _two_ranks(tmp_path: Path) -> Trace:
    tracks = [(0, 0, "host_thread"), (0, 1, "gpu_stream"), (1, 0, "host_thread")]
    rows: list[Interval] = (nested_host_rows(0, 0, 0) + stream_rows(0, 1, 50)
                            + nested_host_rows(1, 0, 123))
    return write_store(tmp_path / "s.tastore", tracks, rows)


def test_interrupted_build_leaves_nothing_then_builds(tmp_path: Path) -> None:
    trace = _two_ranks(tmp_path)
    lod = pyramid_dir(trace.path).parent

    def stop(done: int, total: int) -> None:
        raise KeyboardInterrupt  # Ctrl-C after the first rank

    with pytest.raises(KeyboardInterrupt):
        ensure_pyramid(trace, progress=stop)
    assert not lod.exists() or list(lod.iterdir()) == []  # no temporary, no lock file
    assert ensure_pyramid(Trace(trace.path)).tracks  # and the next view builds it


def test_concurrent_first_builds_build_once(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _two_ranks(tmp_path)
    calls: list[int] = []
    real = pyramid_module.build

    def slow_build(*args: Any, **kwargs: Any) -> None:
        calls.append(1)
        time.sleep(0.3)  # the other thread reaches the lock meanwhile
        real(*args, **kwargs)

    monkeypatch.setattr(pyramid_module, "build", slow_build)
    with ThreadPoolExecutor(2) as pool:
        opened = list(pool.map(lambda _: ensure_pyramid(Trace(trace.path)), range(2)))
    assert len(calls) == 1
    assert opened[0].directory == opened[1].directory
    assert [e.name for e in opened[0].directory.parent.iterdir()] == [opened[0].directory.name]
