"""``LevelFiles.window`` on a narrow (int32) bin column: a window entirely beyond the
type's range holds none of its rows, even a row at the type's largest value."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from traceatlas.view.pyramid_query import LevelFiles

TOP = 2**31 - 1


def _files(bins: list[int]) -> LevelFiles:
    files = LevelFiles(Path("/nonexistent"), "bins", np.zeros((1, 1, 3), dtype=np.int64))
    column = np.array(bins, dtype=np.int32)
    rb = pa.record_batch({"bin": pa.array(column)})
    files.run = lambda level, track: (rb, column)  # type: ignore[method-assign]
    return files


def test_window_past_the_int32_range_is_empty() -> None:
    files = _files([0, 5, TOP])
    assert files.window(0, 0, TOP + 1, TOP + 9).num_rows == 0
    assert files.window(0, 0, -2**40, -1).num_rows == 0


def test_window_reaching_into_the_range_keeps_its_rows() -> None:
    files = _files([0, 5, TOP])
    assert files.window(0, 0, TOP, 2**40).column(0).to_pylist() == [TOP]
    assert files.window(0, 0, -2**40, 5).column(0).to_pylist() == [0, 5]
    assert files.window(0, 0, -2**40, 2**40).column(0).to_pylist() == [0, 5, TOP]
