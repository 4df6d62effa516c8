"""``kernels`` on (distinct duration, calls) pairs equals the former one-row-a-call code
(``traceatlas.testing.frozen_kernels``, the oracle) on Hypothesis-built traces with many
repeated durations (weights > 1): the whole run (``by=rank`` and ``by=name``) and the
partitioned ``by=name`` (1 and 2 ranks per task), and the two-mode split alone on random
weighted samples against the frozen split of the same calls one a row."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import traceatlas
from traceatlas.analysis import kernel_modes, registry
from traceatlas.analysis.partitioned import run_partitioned
from traceatlas.engine import LocalEngine
from traceatlas.testing import TraceBuilder, frozen_kernels, write_multi_rank

BASE = 1_700_000_000_000_000_000

# Few distinct values, many calls each: the weights of the merge are > 1.
VALUE = st.sampled_from([1_000, 1_200, 3_000, 7_777, 1_000_000, 3_000_000, 5])
RUN = st.tuples(st.integers(0, 3), st.sampled_from(["a", "b", "c"]), VALUE,
                st.integers(1, 12))


def _same_separation(got: list[float], want: list[float], one_value: list[bool]) -> None:
    """As ``frozen_kernels.assert_same`` for the separation of single groups."""
    for g, w, one in zip(got, want, one_value, strict=True):
        assert g == (0.0 if one else pytest.approx(w, rel=1e-12, abs=1e-12))


_same = frozen_kernels.assert_same


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(runs=st.lists(RUN, min_size=1, max_size=12), world=st.integers(2, 3),
       top=st.sampled_from([0, 0, 1]))
def test_weighted_equals_frozen_one_row_a_call(
        runs: list[tuple[int, str, int, int]], world: int, top: int) -> None:
    per_rank: dict[int, list[tuple[str, int]]] = {r: [] for r in range(world)}
    for rank, name, dur, times in runs:
        per_rank[rank % world].extend([(name, dur)] * times)
    for r in range(world):
        per_rank[r].append(("c", 11 + r))  # every rank file has a kernel
    builders = []
    for rank, kernels in per_rank.items():
        b = TraceBuilder(rank, world, base_time_ns=BASE, profiler_markers=False)
        t = 1_000
        for name, dur in kernels:
            b.launch(name, t, 50, t + 100, dur)
            t += dur + 1_000
        builders.append(b)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        trace = traceatlas.open(traceatlas.ingest(write_multi_rank(root / "run", builders),
                                                  root / "store"))
        analysis = registry.get_analysis("kernels")
        for by in ("rank", "name"):
            given_params: dict[str, Any] = {"by": by, "top": str(top)}
            params = registry.parse_params(analysis, given_params)
            oracle = frozen_kernels.Kernels().run(trace, params)
            _same(analysis.run(trace, params), oracle)
            if by == "name":
                for per_task in (1, 2):
                    _same(run_partitioned(analysis, trace, params, LocalEngine(1),
                                          ranks_per_task=per_task), oracle)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 10 ** 7) | VALUE, st.integers(1, 40)),
                min_size=1, max_size=6, unique_by=lambda p: p[0]))
def test_weighted_split_equals_frozen_split(pairs: list[tuple[int, int]]) -> None:
    pairs.sort()
    d = np.array([v for v, _ in pairs], np.int64)
    w = np.array([c for _, c in pairs], np.int64)
    if w.sum() < kernel_modes.MIN_SAMPLES:
        return
    got = kernel_modes._split(d, w, np.array([len(d)]), np.array([w.sum()]))
    want = frozen_kernels._split(np.repeat(d, w), np.array([w.sum()]))
    for column in kernel_modes.COLUMNS:
        if column != "separation":
            assert got[column].tolist() == want[column].tolist(), column
    _same_separation(got["separation"].tolist(), want["separation"].tolist(), [len(d) == 1])


def test_constant_group_split() -> None:
    """A kernel with one duration (20 calls): cut at the fraction bound (ceil(20 / 5) = 4
    calls), separation exactly 0, not bimodal."""
    rows = pl.LazyFrame({"name": ["k"], "dur_ns": [1_000], "n": [20]},
                        schema={"name": pl.String, "dur_ns": pl.Int64, "n": pl.Int64})
    busy = pl.LazyFrame({"busy_ns": [20_000]}, schema={"busy_ns": pl.Int64})
    row = kernel_modes.modes(rows, ["name"], busy).collect().row(0, named=True)
    assert (row["fast_count"], row["slow_count"], row["separation"], row["bimodal"]) == (
        4, 16, 0.0, False)
