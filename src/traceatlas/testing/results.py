"""Comparing two analysis ``Result``s in tests: the same tables row for row (no
tolerance), the same extra tables and the same notes."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from traceatlas.analysis.base import Result


def assert_same_result(got: Result, want: Result) -> None:
    """Fail unless ``got`` and ``want`` have equal main tables in the same row order,
    the same extra tables (each equal) and the same notes."""
    from polars.testing import assert_frame_equal

    assert_frame_equal(got.table, want.table)
    assert sorted(got.extra) == sorted(want.extra)
    for key, frame in want.extra.items():
        assert_frame_equal(got.extra[key], frame)
    assert got.notes == want.notes
