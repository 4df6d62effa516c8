"""``Pyramid.rows`` over ranks of very different density: one sparse rank does not coarsen
the others (the level answered is the one most rows are stored at; a coarser rank's
fraction is spread over the finer bins), against a per-rank reference built from each
rank's ``tiles()``; the block-wise sparse path gives the same answer with tiny blocks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_view_pyramid import BASE, Interval, write_store
from test_view_pyramid_dense import _loop_rows, _same, _sparse_rows

from traceatlas.model.trace import Trace
from traceatlas.view import pyramid_rows
from traceatlas.view.pyramid import Pyramid, ensure_pyramid

SPAN = 1_200_000
"""ns covered by the busy ranks."""


def _kernels(rank: int, n: int, offset: int) -> list[Interval]:
    """``n`` kernels of 600 ns spread evenly over ``SPAN`` on stream 4 of ``rank``."""
    gap = SPAN // n
    return [(rank, 4, offset + k * gap, offset + k * gap + 600, f"k{k % 3}", "kernel")
            for k in range(n)]


def _two_busy_one_sparse(path: Path) -> Trace:
    """Ranks 0 and 1: 1,200 kernels each; rank 2: two kernels (a much coarser row)."""
    tracks = [(r, 4, "gpu_stream") for r in range(3)]
    rows = _kernels(0, 1200, 0) + _kernels(1, 1200, 100)
    rows += [(2, 4, 0, 500, "lone", "kernel"), (2, 4, 900_000, 900_400, "lone", "kernel")]
    return write_store(path, tracks, rows)


_STORE: dict[str, Trace] = {}


def _mixed(factory: pytest.TempPathFactory) -> Pyramid:
    """Eight ranks from 2 to 1,800 kernels (finest levels 0 to 5) plus host threads on
    the odd ranks (rank 7 has no device row)."""
    if "t" not in _STORE:
        tracks: list[tuple[int, int, str]] = []
        rows: list[Interval] = []
        for r, n in enumerate([1800, 2, 700, 40, 1200, 9, 300]):
            tracks.append((r, 4, "gpu_stream"))
            rows += _kernels(r, n, 13 * r)
        for r in range(1, 8, 2):
            tracks.append((r, 0, "host_thread"))
            rows += [(r, 0, k * 5000, k * 5000 + 3000 + 100 * r, "op", "cpu_op")
                     for k in range(20 * r + 2)]
        _STORE["t"] = write_store(factory.mktemp("rows") / "s.tastore", tracks, rows)
    return ensure_pyramid(_STORE["t"])


def test_one_sparse_rank_does_not_coarsen_the_busy_ranks(tmp_path: Path) -> None:
    p = ensure_pyramid(_two_busy_one_sparse(tmp_path / "s.tastore"))
    fins = {t.rank: t.finest_level for t in p.tracks if t.kind == "rank_device"}
    assert fins[0] == fins[1] == 0 and fins[2] == 5  # the premise
    args = (0, BASE, BASE + SPAN, "rank_device")
    pair = p.rows(*args, [0, 1], 2)
    three = p.rows(*args, [0, 1, 2], 3)
    assert three[0]["level"] == 0 and three[0]["bin"] == pair[0]["bin"]
    assert len(three[0]["bin"]) > 1000
    _same(three[:2], pair)  # ranks 0 and 1 are unchanged by rank 2 beside them
    _same(three, _loop_rows(p, *args, [0, 1, 2], 3))
    # rank 2 by hand: both its kernels (500 + 400 ns) lie in bin 0 of its level (level 5:
    # 1,048,576 ns), so every level-0 bin that bin covers shows 900 / its width
    width2 = 1024 * 4 ** fins[2]
    covered = min(width2 // 1024, len(three[2]["bin"]))
    assert three[2]["mean"][:covered] == pytest.approx([900 / width2] * covered)
    _same(_sparse_rows(p, *args, [0, 1, 2], 1), _loop_rows(p, *args, [0, 1, 2], 1))


def test_level_answered_is_the_median_finest_level(tmp_path_factory: pytest.TempPathFactory
                                                  ) -> None:
    p = _mixed(tmp_path_factory)
    fins = {t.rank: t.finest_level for t in p.tracks if t.kind == "rank_device"}
    assert len(set(fins.values())) >= 3  # the premise: very different densities
    ranks = sorted(fins)
    ordered = sorted(fins.values())
    median = ordered[(len(ordered) - 1) // 2]
    got = p.rows(0, BASE, BASE + SPAN, "rank_device", [*ranks, 7], 2)
    assert got[0]["level"] == median < max(ordered)
    assert p.rows(p.top, BASE, BASE + SPAN, "rank_device", ranks, 2)[0]["level"] == p.top


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_rows_equal_the_per_rank_tiles_reference(tmp_path_factory: pytest.TempPathFactory,
                                                  data: st.DataObject) -> None:
    p = _mixed(tmp_path_factory)
    level = data.draw(st.integers(0, p.top))
    kind = data.draw(st.sampled_from(["rank_device", "rank_host"]))
    ranks = sorted(set(data.draw(st.lists(st.integers(0, 9), min_size=1, max_size=10))))
    start = BASE + data.draw(st.integers(-5000, SPAN))
    end = start + data.draw(st.integers(0, SPAN))
    groups = data.draw(st.integers(1, 5))
    args: tuple[Any, ...] = (level, start, end, kind, ranks, groups)
    want = _loop_rows(p, *args)
    _same(p.rows(*args), want)  # dense or sparse, whichever the pyramid picks
    _same(_sparse_rows(p, *args), want)


@pytest.mark.parametrize("block", [1, 3, 7, 50])
def test_tiny_blocks_give_the_same_rows(tmp_path_factory: pytest.TempPathFactory,
                                        monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    p = _mixed(tmp_path_factory)
    args = (0, BASE + 3000, BASE + 400_000, "rank_device", list(range(8)), 3)
    whole = _sparse_rows(p, *args)
    assert len(whole[0]["bin"]) > 10
    calls: list[int] = []
    real = pyramid_rows.fractions

    def counted(*a: Any) -> Any:
        calls.append(len(a[2]))
        return real(*a)

    monkeypatch.setattr(pyramid_rows, "fractions", counted)
    monkeypatch.setattr(pyramid_rows, "BLOCK_CELLS", block * len(whole[0]["bin"]))
    _same(_sparse_rows(p, *args), whole)
    assert max(calls) == min(block, 8) and sum(calls) == 8  # blocks of `block` ranks
    _same(whole, _loop_rows(p, *args))
