"""Hypothesis: random kernel durations (ties, single calls, two-speed groups) on random
ranks; ``kernels by=name`` partitioned (1 and 2 ranks per task) equals the whole run, and
count, total, min, max, mean, std, p50 and p95 equal a plain exact computation on the
generated durations (``fractions.Fraction``, linear-interpolation percentiles)."""

from __future__ import annotations

import math
import tempfile
from collections import defaultdict
from fractions import Fraction
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

import traceatlas
from traceatlas.analysis import registry
from traceatlas.analysis.partitioned import run_partitioned
from traceatlas.engine import LocalEngine
from traceatlas.testing import TraceBuilder, write_multi_rank

BASE = 1_700_000_000_000_000_000

DURATION = st.one_of(st.sampled_from([1_000, 1_000, 3_000, 1_000_000, 3_000_000]),
                     st.integers(1, 10 ** 7))
CALL = st.tuples(st.integers(0, 3), st.sampled_from(["a", "b", "c"]), DURATION)


def _percentile(values: list[int], q: Fraction) -> int:
    """Linear interpolation between the order statistics (numpy's default), rounded half
    to even as the analysis rounds."""
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return round(s[lo] + (pos - lo) * (s[hi] - s[lo]))


def _std(values: list[int]) -> int:
    n = len(values)
    if n == 1:
        return 0
    mean = Fraction(sum(values), n)
    var = sum((Fraction(v) - mean) ** 2 for v in values) / (n - 1)
    return round(math.sqrt(var))


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(calls=st.lists(CALL, min_size=1, max_size=40), world=st.integers(2, 4),
       top=st.sampled_from([0, 0, 1, 2]))
def test_partitioned_equals_whole_and_exact_values(
        calls: list[tuple[int, str, int]], world: int, top: int) -> None:
    per_rank: dict[int, list[tuple[str, int]]] = {r: [] for r in range(world)}
    for rank, name, dur in calls:
        per_rank[rank % world].append((name, dur))
    per_rank[0].append(("a", 7))  # every rank file has a kernel: rank 0 at least one
    for r in range(1, world):
        per_rank[r].append(("c", 11 + r))
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
        params = registry.parse_params(analysis, {"by": "name", "top": str(top)})
        whole = analysis.run(trace, params)
        for per_task in (1, 2):
            got = run_partitioned(analysis, trace, params, LocalEngine(1),
                                  ranks_per_task=per_task)
            assert_frame_equal(got.table, whole.table)
            for key, frame in whole.extra.items():
                assert_frame_equal(got.extra[key], frame)
            assert got.notes == whole.notes
    durations: dict[str, list[int]] = defaultdict(list)
    for kernels in per_rank.values():
        for name, dur in kernels:
            durations[name].append(dur)
    busy = sum(sum(durations[n]) for n in durations)  # one stream, no overlap per rank
    totals = sorted(((-sum(d), n) for n, d in durations.items()))
    kept = [n for _, n in (totals[:top] if top else totals)]
    assert whole.table["name"].to_list() == kept
    for row in whole.table.to_dicts():
        d = durations[row["name"]]
        assert (row["count"], row["total_ns"], row["min_ns"], row["max_ns"]) == (
            len(d), sum(d), min(d), max(d))
        assert row["mean_ns"] == round(Fraction(sum(d), len(d)))
        assert row["std_ns"] == _std(d)
        assert row["p50_ns"] == _percentile(d, Fraction(1, 2))
        assert row["p95_ns"] == _percentile(d, Fraction(95, 100))
        assert math.isclose(row["share_pct"], sum(d) / busy * 100, rel_tol=1e-12)
