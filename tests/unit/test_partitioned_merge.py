"""Merges of analyses that combine ranks (``profile by=name``, ``load_imbalance``) and of
message analyses (each message read from the one part that stores it): the message
histogram of distinct sizes with counts equals numpy's histogram of the repeated sizes
(Hypothesis), and a rank selection whose messages are stored on unselected ranks gives
the whole-run tables (expected = the same analysis run whole: a second code path)."""

from __future__ import annotations

import re
import warnings

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

import traceatlas
from traceatlas.analysis import registry
from traceatlas.analysis.message_histogram import histogram
from traceatlas.analysis.partitioned import run_partitioned
from traceatlas.engine import LocalEngine
from traceatlas.ingest import ingest
from traceatlas.testing.mpi import write_mpi_trace


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.one_of(st.none(), st.integers(0, 5000)), min_size=1, max_size=60),
       bins=st.integers(1, 12), scale=st.sampled_from(["linear", "log"]))
def test_histogram_of_size_counts_equals_numpy_on_raw_sizes(
        sizes: list[int | None], bins: int, scale: str) -> None:
    counted = (pl.DataFrame({"bytes": sizes}, schema={"bytes": pl.Int64})
               .group_by("bytes").agg(count=pl.len().cast(pl.Int64)))
    got = histogram(counted, {"bins": bins, "scale": scale})
    raw = np.array([s for s in sizes if s is not None], dtype=np.float64)
    if not len(raw):
        assert got.table.height == 0
        return
    if scale == "log" and raw.max() > max(raw.min(), 1.0):
        lo = max(raw.min(), 1.0)
        want, edges = np.histogram(np.maximum(raw, lo),
                                   bins=np.geomspace(lo, raw.max(), bins + 1))
    else:
        want, edges = np.histogram(raw, bins=bins)
    assert got.table["count"].to_list() == want.tolist()
    assert got.table["bin_lo_bytes"].to_list() == edges[:-1].tolist()
    unknown = sum(s is None for s in sizes)
    assert (f"{unknown} message(s) of unknown size left out" in got.notes) == (unknown > 0)


@pytest.fixture(scope="module")
def mpi64(tmp_path_factory: pytest.TempPathFactory) -> traceatlas.Trace:
    root = tmp_path_factory.mktemp("mpi64")
    made = write_mpi_trace(root / "mpi.prv", ranks=64, iterations=2, imbalance=0.4,
                           heavy_ranks=(5, 30))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store = ingest(made.path, root / "store", engine=LocalEngine(1))
    return traceatlas.Trace(store)


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort(frame.columns, nulls_last=True)


@pytest.mark.parametrize("name,params", [
    ("comm_matrix", {}), ("comm_by_rank", {}), ("message_histogram", {"bins": "9"}),
    ("comm_over_time", {"bins": "13", "by": "recv"}), ("mpi_wait", {}),
    ("profile", {"by": "name", "all_ranks": "true"}),
    ("load_imbalance", {"num_ranks": "4", "all_ranks": "true"}),
])
def test_rank_selection_messages_stored_outside_it(mpi64: traceatlas.Trace, name: str,
                                                   params: dict[str, str]) -> None:
    """Ranks 10-20 selected: messages with one side inside and stored (sender's part)
    outside are counted once, as in the whole run."""
    view = mpi64.select(ranks="10-20")
    msgs = view.messages.collect()
    outside = msgs.filter(~pl.col("rank").is_between(10, 20))
    assert outside.height > 0 and (outside["rank"] == outside["src_rank"]).all()
    analysis = registry.get_analysis(name)
    typed = registry.parse_params(analysis, params)
    whole = analysis.run(view, typed)
    parts = run_partitioned(analysis, view, typed, LocalEngine(1), ranks_per_task=7)
    assert_frame_equal(_sorted(parts.table), _sorted(whole.table))
    assert sorted(parts.extra) == sorted(whole.extra)
    for key, frame in whole.extra.items():
        assert_frame_equal(_sorted(parts.extra[key]), _sorted(frame))
    assert parts.notes == whole.notes
    if name == "comm_matrix":  # every selected message once: the whole count
        assert int(parts.table["count"].sum()) == msgs.height
    if name == "profile":  # all_ranks averages over the 11 selected ranks
        row = parts.table.row(0, named=True)
        per = view.select(name=f"^{re.escape(row['name'])}$").intervals.collect()
        assert abs(row["exclusive_mean_ns"] - row["exclusive_ns"] / 11) <= 0.5
        assert per["rank"].n_unique() == row["ranks"]


def test_mpi_wait_whole_trace_with_late_senders(mpi64: traceatlas.Trace) -> None:
    """Every rank, batches of 2: the waits (late senders behind the heavy ranks, found
    with the receivers' MPI calls read as peers of the senders' batches) equal the whole
    run's, per rank and per message."""
    analysis = registry.get_analysis("mpi_wait")
    whole = analysis.run(mpi64, {})
    parts = run_partitioned(analysis, mpi64, {}, LocalEngine(1), ranks_per_task=2)
    late = whole.extra["messages"].filter(pl.col("late_sender_ns") > 0)
    # not zeros equal to zeros, and a late sender whose receiver is in another batch
    assert late.filter(pl.col("src_rank") // 2 != pl.col("dst_rank") // 2).height > 0
    assert_frame_equal(parts.table, whole.table)
    assert_frame_equal(_sorted(parts.extra["messages"]), _sorted(whole.extra["messages"]))
    assert parts.notes == whole.notes
