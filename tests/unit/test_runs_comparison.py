"""Several runs (issue 20): the same rank count is a comparison, not a scaling study;
the across-runs table names every run in full and shows the change against run 1.
Values worked out by hand (Paraver runs built here, ms)."""

from __future__ import annotations

from pathlib import Path

import pytest

import traceatlas
from traceatlas.analysis.scalability import scalability
from traceatlas.report import compare, terminal
from traceatlas.report.data import EfficiencyNode, ReportData, RunReport
from traceatlas.testing.mpi import write_barrier_run

MS = 1_000_000


def _run(tmp_path: Path, name: str, t_ms: int, barrier_starts: list[int]) -> traceatlas.Trace:
    """``main`` [0, t] on each rank and MPI_Barrier [start_r, t]: U_r = start_r."""
    prv = write_barrier_run(tmp_path / f"{name}.prv", t_ms, barrier_starts)
    return traceatlas.open(traceatlas.ingest(prv, tmp_path / f"{name}.s"))


def test_same_rank_count_is_a_comparison(tmp_path: Path) -> None:
    # before: 2 ranks, T = 100, U = 80, 90 (sum 170); after: 2 ranks, T = 80, U = 70, 70
    # (sum 140). Work ratio (140/170)/(2/2) = 0.82 would have read as "weak scaling".
    before = _run(tmp_path, "before", 100, [80, 90])
    after = _run(tmp_path, "after", 80, [70, 70])
    result = scalability([("before", before), ("after", after)])
    rows = {r["run"]: r for r in result.table.to_dicts()}
    assert {r["scaling"] for r in rows.values()} == {"comparison"}
    assert {r["scaling_ratio"] for r in rows.values()} == {None}
    assert rows["after"]["speedup"] == pytest.approx(100 / 80, abs=1e-12)
    assert rows["after"]["computational_scalability"] == pytest.approx(170 / 140, abs=1e-12)
    assert "comparison, not a scaling study" in result.notes[0]
    assert "'before'" in result.notes[0]  # the reference is the first run given
    # the reference is the first run even when a later one is listed first
    flipped = {r["run"]: r for r in scalability([("after", after), ("before", before)])
               .table.to_dicts()}
    assert flipped["before"]["speedup"] == pytest.approx(80 / 100, abs=1e-12)


def _fake(name: str, span_ns: int, pe: float, lb: float) -> RunReport:
    run = RunReport(name, "/tmp/store", "nsys", [0, 1], 0, span_ns)
    run.efficiency = [
        EfficiencyNode("device", "device_parallel_efficiency", pe, None, 0,
                       "parallel efficiency"),
        EfficiencyNode("device", "device_load_balance", lb, "device_parallel_efficiency", 1,
                       "load balance"),
    ]
    return run


LONG_A = "/data/experiments/2026-11-24/optimisation-before-flash-attention/mfu_2gpu_before.sqlite"
LONG_B = "/data/experiments/2026-11-24/optimisation-after-flash-attention/mfu_2gpu_after.sqlite"


def test_comparison_rows_and_terminal_table() -> None:
    runs = [_fake(LONG_A, 300_000_000, 0.40, 0.90), _fake(LONG_B, 240_000_000, 0.50, 0.95)]
    data = ReportData("0", runs, scalability=[
        {"run": LONG_A, "scaling": "comparison", "speedup": 1.0},
        {"run": LONG_B, "scaling": "comparison", "speedup": 1.25}])
    data = compare.filled(data)
    assert data.runs_mode == "comparison"
    rows = {r.metric: r for r in data.comparison}
    assert rows["runtime_ns"].values == [300_000_000, 240_000_000]
    assert rows["runtime_ns"].changes == [None, pytest.approx(-0.2)]
    assert rows["device_parallel_efficiency"].changes == [None, pytest.approx(0.1)]
    assert compare.fmt_change(rows["runtime_ns"], -0.2) == "-20.0%"
    assert compare.fmt_change(rows["device_load_balance"], 0.05) == "+0.05"
    text = terminal.to_text(data, width=120)
    assert LONG_A in text and LONG_B in text  # 85-character names, not cut
    assert "change 2 vs 1" in text and "-20.0%" in text and "+0.10" in text
    assert "(coming: traceatlas diff)" in text
    assert "weak" not in text and "strong" not in text
    assert len(text.rstrip("\n").split("\n")) <= terminal.MAX_LINES


def test_different_rank_counts_are_not_a_comparison() -> None:
    a, b = _fake("a", 100, 0.5, 0.9), _fake("b", 60, 0.5, 0.9)
    b.ranks = [0, 1, 2, 3]
    assert compare.mode([a, b]) == "scaling"
    data = compare.filled(ReportData("0", [a, b], scalability=[
        {"run": "a", "scaling": "strong", "scaling_ratio": 0.5, "speedup": 1.0},
        {"run": "b", "scaling": "strong", "scaling_ratio": 0.5, "speedup": 100 / 60}]))
    assert data.runs_mode == "strong"
    assert compare.title(data).startswith("Scalability across 2 runs: strong scaling")
    speedup = next(r for r in data.comparison if r.metric == "speedup")
    assert speedup.values == [1.0, pytest.approx(100 / 60)]
