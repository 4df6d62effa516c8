"""``ops.detach``: a frame cut from a bigger one keeps none of its buffers once detached,
and the map step of ``analysis.partitioned`` sends detached partials (peak memory of a
run in rank batches does not grow with the number of batches)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars import CompatLevel
from polars.testing import assert_frame_equal

import traceatlas
from traceatlas.analysis.partitioned import RankTask, run_task
from traceatlas.analysis.registry import get_analysis, parse_params
from traceatlas.ingest import ingest
from traceatlas.ops.detach import detached

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample_trace"
INLINE = 12
"""Arrow string views hold strings of at most 12 bytes inline, the rest in data buffers."""
SLACK = 256
"""Bytes a detached column may hold beyond twice its own strings: the IPC writer keeps a
buffer whole when little of it is unused, and a literal's string is stored once."""


def buffer_bytes(frame: pl.DataFrame) -> int:
    """Bytes of the data buffers behind ``frame``'s string columns (what the views keep
    alive), read from their Arrow string-view arrays."""
    total = 0
    for name in frame.columns:
        if frame[name].dtype == pl.String:
            array = frame[name].to_arrow(compat_level=CompatLevel.newest())
            total += sum(b.size for b in array.buffers()[2:] if b is not None)
    return total


def own_bytes(frame: pl.DataFrame) -> int:
    """Bytes of ``frame``'s own strings that do not fit inline (a second, plain count)."""
    return sum(len(v.encode()) for name in frame.columns if frame[name].dtype == pl.String
               for v in frame[name].to_list() if v is not None and len(v.encode()) > INLINE)


def test_a_filtered_frame_keeps_its_source_buffers_until_detached() -> None:
    names = [f"kernel_{i:06d}_" + "x" * 80 for i in range(50_000)]  # 94 bytes each
    big = pl.DataFrame({"name": names, "i": range(50_000)})
    small = big.filter(pl.col("i") % 10_000 == 7)  # 5 rows
    assert buffer_bytes(small) >= 50_000 * 94  # the premise: the filter kept them all
    out = detached(small)
    assert own_bytes(out) == 5 * 94
    assert buffer_bytes(out) <= 2 * own_bytes(out) + SLACK
    assert_frame_equal(out, small)


def test_dtypes_and_values_come_back_as_they_were() -> None:
    frame = pl.DataFrame({
        "enum": pl.Series(["a", None, "c"], dtype=pl.Enum(["a", "b", "c"])),
        "cat": pl.Series(["x", "y", None], dtype=pl.Categorical),
        "list": [[1], [], None],
        "struct": [{"a": 1, "b": "s"}, None, {"a": 3, "b": None}],
        "u8": pl.Series([1, 2, 255], dtype=pl.UInt8),
        "dt": pl.Series([0, None, 10**18], dtype=pl.Datetime("ns")),
    })
    out = detached(frame)
    assert out.schema == frame.schema
    assert_frame_equal(out, frame)
    empty = frame.clear()
    assert_frame_equal(detached(empty), empty)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(max_size=40)), max_size=30),
       st.integers(min_value=0, max_value=5))
def test_detached_equals_its_source(values: list[str | None], every: int) -> None:
    frame = pl.DataFrame({"s": values, "i": range(len(values))}, schema={
        "s": pl.String, "i": pl.Int64})
    cut = frame.filter(pl.col("i") % (every + 1) == 0)
    out = detached(cut)
    assert_frame_equal(out, cut)
    assert buffer_bytes(out) <= 2 * own_bytes(out) + SLACK


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ingest(SAMPLE, tmp_path_factory.mktemp("detach") / "sample.tastore")


def test_the_map_step_sends_partials_that_own_their_strings(sample_store: Path) -> None:
    # idle's causes table names what the host ran, cut from the rank's intervals: run
    # directly it keeps the buffers of every name read (the premise), as a partial it
    # holds only its own strings, and its tables are equal.
    analysis = get_analysis("idle")
    params = parse_params(analysis, {})
    whole = analysis.run(traceatlas.Trace(sample_store).select(ranks=[0]), params)
    causes = whole.extra["causes"]
    assert buffer_bytes(causes) > 4 * (2 * own_bytes(causes) + SLACK)
    task = RankTask(str(sample_store), (), (0,), "idle", tuple(sorted(params.items())))
    partial = run_task(task)
    assert partial is not None
    for name, frame in [("table", partial.table), *partial.extra.items()]:
        assert buffer_bytes(frame) <= 2 * own_bytes(frame) + SLACK, name
        assert_frame_equal(frame, whole.table if name == "table" else whole.extra[name])
    assert partial.notes == whole.notes
