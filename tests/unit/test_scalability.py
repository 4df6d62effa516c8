"""scalability across two MPI runs built here (Paraver, ms); values worked out by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

import traceatlas
from traceatlas.analysis.scalability import scalability
from traceatlas.testing.mpi import write_barrier_run

MS = 1_000_000


def _run(tmp_path: Path, name: str, t_ms: int, barrier_starts: list[int]) -> traceatlas.Trace:
    """``main`` [0, t] on each rank and MPI_Barrier [start_r, t]: U_r = start_r."""
    prv = write_barrier_run(tmp_path / f"{name}.prv", t_ms, barrier_starts)
    return traceatlas.open(traceatlas.ingest(prv, tmp_path / f"{name}.s"))


def test_strong_scaling_two_runs(tmp_path: Path) -> None:
    # Run A: 2 ranks, T = 100, U = 80, 90 -> sum 170, PE = 85/100 = 0.85.
    # Run B: 4 ranks, T = 60, U = 45, 40, 45, 50 -> sum 180, PE = 45/60 = 0.75.
    # Growth (180/170) / (4/2) = 0.529 -> strong scaling (weak would be ~1).
    # CompS(B) = 170/180; GE(B) = 0.75 * 170/180 = 170 / (4 * 60); speedup 100/60.
    a = _run(tmp_path, "a", 100, [80, 90])
    b = _run(tmp_path, "b", 60, [45, 40, 45, 50])
    result = scalability([("p4", b), ("p2", a)])
    rows = {r["run"]: r for r in result.table.to_dicts()}
    assert rows["p2"]["ranks"] == 2 and rows["p4"]["ranks"] == 4
    assert rows["p2"]["useful_ns"] == 170 * MS and rows["p4"]["useful_ns"] == 180 * MS
    assert rows["p4"]["scaling"] == "strong"
    assert rows["p4"]["scaling_ratio"] == pytest.approx((180 / 170) / 2, abs=1e-12)
    assert rows["p2"]["computational_scalability"] == pytest.approx(1.0, abs=1e-12)
    assert rows["p4"]["computational_scalability"] == pytest.approx(170 / 180, abs=1e-12)
    assert rows["p2"]["parallel_efficiency"] == pytest.approx(0.85, abs=1e-12)
    assert rows["p4"]["parallel_efficiency"] == pytest.approx(0.75, abs=1e-12)
    assert rows["p4"]["global_efficiency"] == pytest.approx(170 / 240, abs=1e-12)
    assert rows["p4"]["speedup"] == pytest.approx(100 / 60, abs=1e-12)
    assert rows["p4"]["instruction_scalability"] is None     # no counters
    assert "strong scaling detected" in result.notes[0]


def test_weak_scaling_detected(tmp_path: Path) -> None:
    # Run B doubles ranks and total useful time: (160/80)/(4/2) = 1.0 -> weak.
    # CompS = (80/160) * (4/2) = 1.0.
    a = _run(tmp_path, "a", 50, [40, 40])
    b = _run(tmp_path, "b", 50, [40, 40, 40, 40])
    rows = {r["run"]: r for r in scalability([("a", a), ("b", b)]).table.to_dicts()}
    assert rows["b"]["scaling"] == "weak"
    assert rows["b"]["computational_scalability"] == pytest.approx(1.0, abs=1e-12)
