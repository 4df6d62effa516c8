"""``info``'s summary from the part records' stats (``store/part_stats.py``): the same
summary as a scan of the rows, checked against a count of the Parquet parts in plain
Python (pyarrow rows, ``collections.Counter``); a store without stats, a view with a
selection and a record with damaged stats fall back to the scan; ``info`` reads no row,
so it does not import Polars."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import traceatlas
from traceatlas.ops.filter_store import filter_store
from traceatlas.ops.select import Selection
from traceatlas.store.layout import MANIFEST
from traceatlas.summary import recorded_tallies, scanned_tallies, summarize
from traceatlas.testing import TraceBuilder, write_multi_rank

pytestmark = pytest.mark.filterwarnings("ignore::traceatlas.DataQualityWarning")

BASE = 1_700_000_000_000_000_000
STEP = 1_000_000


@st.composite
def runs(draw: st.DrawFn) -> list[TraceBuilder]:
    """1-3 ranks; steps, annotations, ops, launches and syncs in drawn numbers (a rank
    may have no event at all)."""
    n_ranks = draw(st.integers(1, 3))
    builders = []
    for rank in range(n_ranks):
        b = TraceBuilder(rank, n_ranks, base_time_ns=BASE, profiler_markers=False)
        for n in range(draw(st.integers(0, 2))):
            s = (n + 1) * STEP + draw(st.integers(0, 5_000))
            if draw(st.booleans()):
                b.step(n, s, s + STEP - 50_000)
            if draw(st.booleans()):
                b.annotation("fwd", s + 1_000, s + 600_000)
            t = s + 10_000
            for _ in range(draw(st.integers(0, 3))):
                b.cpu_op("aten::mm", t, t + 40_000)
                if draw(st.booleans()):
                    b.launch("gemm", t + 2_000, 3_000, s + 100_000,
                             draw(st.integers(1_000, 20_000)),
                             stream=draw(st.sampled_from((7, 8))))
                t += 45_000
            if draw(st.booleans()):
                b.sync(t, 5_000, t + 1_000, 3_000)
        builders.append(b)
    return builders


def _store(root: Path, builders: list[TraceBuilder]) -> traceatlas.Trace:
    return traceatlas.open(traceatlas.ingest(write_multi_rank(root / "run", builders),
                                             root / "store"))


def _rows(store: Path, table: str, columns: list[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for part in sorted((store / table).rglob("*.parquet")):
        out.extend(pq.read_table(part, columns=columns).to_pylist())
    return out


def _by_hand(store: Path) -> dict[str, Any]:
    """What the summary must say, counted from the parts' rows in plain Python."""
    iv = _rows(store, "intervals", ["rank", "category", "start_ns", "end_ns"])
    tracks = _rows(store, "tracks", ["kind"])
    per = Counter((r["rank"], r["category"]) for r in iv)
    return {
        "intervals": len(iv),
        "by_category": dict(Counter(r["category"] for r in iv)),
        "per_rank": {rank: dict(Counter(c for (r, c) in per.elements() if r == rank))
                     for rank in {r for r, _ in per}},
        "start_ns": min((r["start_ns"] for r in iv), default=None),
        "end_ns": max((r["end_ns"] for r in iv), default=None),
        "tracks_by_kind": dict(Counter(t["kind"] for t in tracks)),
    }


def _check(trace: traceatlas.Trace) -> dict[str, Any]:
    assert recorded_tallies(trace) is not None  # the summary below comes from the records
    summary = summarize(trace)
    assert recorded_tallies(trace) == scanned_tallies(trace)
    hand = _by_hand(trace.path)
    assert summary["intervals"] == hand["intervals"]
    assert summary["by_category"] == hand["by_category"]
    assert {r["rank"]: r["by_category"] for r in summary["per_rank"]
            if r["by_category"]} == hand["per_rank"]
    assert all(r["intervals"] == sum(r["by_category"].values()) for r in summary["per_rank"])
    assert summary["start_ns"] == hand["start_ns"]
    assert summary["end_ns"] == hand["end_ns"]
    assert summary["tracks_by_kind"] == hand["tracks_by_kind"]
    return summary


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(builders=runs())
def test_recorded_summary_equals_the_scan_and_a_count_by_hand(
        tmp_path_factory: pytest.TempPathFactory, builders: list[TraceBuilder]) -> None:
    _check(_store(tmp_path_factory.mktemp("run"), builders))


def _hand_run() -> list[TraceBuilder]:
    """Rank 0: one step, one op launching one kernel; rank 1: two ops, no kernel."""
    a = TraceBuilder(0, 2, base_time_ns=BASE, profiler_markers=False)
    a.step(0, 1_000, 900_000)
    a.cpu_op("aten::mm", 10_000, 50_000)
    a.launch("gemm", 12_000, 3_000, 100_000, 20_000)
    b = TraceBuilder(1, 2, base_time_ns=BASE, profiler_markers=False)
    b.cpu_op("aten::mm", 5_000, 9_000)
    b.cpu_op("aten::add", 20_000, 1_200_000)
    return [a, b]


def test_hand_built_run(tmp_path: Path) -> None:
    summary = _check(_store(tmp_path, _hand_run()))
    # rank 1's add ends last (1,200,000 ns); rank 1's first op starts first (5,000 ns)
    assert summary["start_ns"] == BASE + 1_000  # rank 0's step starts at 1,000 ns
    assert summary["end_ns"] == BASE + 1_200_000
    assert summary["span_ns"] == 1_199_000


def _strip_stats(store: Path, *, damage: bool = False) -> None:
    path = store / MANIFEST
    manifest = json.loads(path.read_text())
    for rec in manifest["parts"]:
        if rec["path"].startswith("intervals/") and "stats" in rec:
            if damage:
                rec["stats"]["counts"] = [["0", "kernel", 1]]  # rank not an integer
            else:
                del rec["stats"]
            break
    path.write_text(json.dumps(manifest))


@pytest.mark.parametrize("damage", [False, True])
def test_a_part_without_valid_stats_means_a_scan(tmp_path: Path, damage: bool) -> None:
    trace = _store(tmp_path, _hand_run())
    expected = summarize(trace)
    _strip_stats(trace.path, damage=damage)
    again = traceatlas.open(trace.path)
    assert recorded_tallies(again) is None
    assert summarize(again) == expected


def test_a_selection_means_a_scan(tmp_path: Path) -> None:
    trace = _store(tmp_path, _hand_run())
    view = trace.select(ranks=[1])
    assert recorded_tallies(view) is None
    summary = summarize(view)
    assert summary["ranks"] == [1]
    assert summary["intervals"] == 2  # rank 1's two ops
    assert summary["start_ns"] == BASE + 5_000


def test_filtered_store_records_its_own_stats(tmp_path: Path) -> None:
    trace = _store(tmp_path, _hand_run())
    out = filter_store(trace, Selection(ranks=(0,)), tmp_path / "rank0.tastore")
    summary = _check(traceatlas.open(out))
    assert summary["intervals"] == 4  # rank 0: step, op, its launch call, the kernel


def test_info_on_a_store_reads_no_row(tmp_path: Path) -> None:
    store = _store(tmp_path, _hand_run()).path
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from traceatlas.cli.main import app\n"
        f"r = CliRunner().invoke(app, ['info', {str(store)!r}, '--format', 'json'])\n"
        "assert r.exit_code == 0, r.output\n"
        "print(r.output)\n"
        "print('polars' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    *body, loaded = done.stdout.strip().splitlines()
    assert loaded == "False"
    # rank 0: step, op, its launch call, the kernel; rank 1: two ops
    assert json.loads("\n".join(body))["intervals"] == 6
