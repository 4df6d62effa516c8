"""``ops.owned``'s fast path (duration minus children where no later row crosses) equals
painting every row, on random rows with many crossings, zero-length rows, several keys,
and on a staircase of crossings longer than ``MAX_CHAIN`` (the fall-back)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from traceatlas.ops import owned


def _both(key: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[list[int], list[int]]:
    order = owned.timeline_order(key, start, end)
    xs, xe = owned.timeline_axis(key[order], start[order], end[order])
    full = np.zeros(len(start), np.int64)
    full[order] = owned._paint_owned(xs, xe)
    return owned.owned_ns(key, start, end).tolist(), full.tolist()


ROW = st.tuples(st.integers(0, 2), st.integers(0, 300), st.integers(0, 80))


@settings(max_examples=200, deadline=None)
@given(st.lists(ROW, min_size=1, max_size=200))
def test_fast_path_equals_full_paint(rows: list[tuple[int, int, int]]) -> None:
    key = np.array([r[0] for r in rows], np.int64)
    start = np.array([r[1] for r in rows], np.int64)
    end = start + np.array([r[2] for r in rows], np.int64)
    fast, full = _both(key, start, end)
    assert fast == full


def test_long_crossing_chain_falls_back() -> None:
    # u = [0, 1000) crossed by j_k = [k + 1, 1001 + k), k < 3 * MAX_CHAIN: the chain of
    # crossing rows from u is longer than MAX_CHAIN, so every row is painted.
    m = 3 * owned.MAX_CHAIN
    start = np.concatenate(([0], np.arange(m) + 1)).astype(np.int64)
    end = np.concatenate(([1000], np.arange(m) + 1001)).astype(np.int64)
    key = np.zeros(m + 1, np.int64)
    fast, full = _both(key, start, end)
    assert fast == full
    # by hand: each row owns the ns until the next row starts; the last one all its 1000
    assert fast == [1] * m + [1000]
