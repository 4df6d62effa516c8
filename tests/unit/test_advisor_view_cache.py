"""The advisor runs an analysis on a step or rank view once: the critical path of the
typical step (``advisor/critical_path.step_path``) and the check of the command it
suggests (``traceatlas analyze critical_path ... --step N``, ``advisor/commands``) share
one run (``Context.on_view``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import traceatlas
from traceatlas.advisor.base import Context
from traceatlas.analysis import registry
from traceatlas.testing.builder import TraceBuilder


def _trace(tmp_path: Path) -> traceatlas.Trace:
    """Five steps of 28 us, each three 5 us launch calls and 1 us kernels: a CPU-bound
    loop whose critical path is the host (median step: 2)."""
    b = TraceBuilder(rank=0)
    for n in range(5):
        t = n * 30_000
        b.step(n, t, t + 28_000)
        for i in range(3):
            b.launch(f"k{i}", t + 1_000 + 10_000 * i, 5_000, t + 7_000 + 10_000 * i, 1_000)
    return traceatlas.open(b.write(tmp_path / "cpu.json"))


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    calls: list[tuple[str, Any]] = []
    real = registry.run

    def run(name: str, trace: traceatlas.Trace, *args: Any, **kwargs: Any) -> Any:
        calls.append((name, trace.selections))
        return real(name, trace, *args, **kwargs)

    monkeypatch.setattr(registry, "run", run)
    return calls


def test_step_path_and_its_command_share_one_run(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _trace(tmp_path)
    calls = _counting(monkeypatch)
    result = registry.run("advisor", trace, {})
    commands = [c for c in result.table["command"].to_list() if c and "critical_path" in c]
    assert any("--step 2" in c for c in commands), result.table["command"].to_list()
    step_runs = [s for n, s in calls if n == "critical_path" and s != trace.selections]
    assert len(step_runs) == 1, calls


def test_on_view_caches_per_view_and_params(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _trace(tmp_path)
    ctx = Context(trace)
    calls = _counting(monkeypatch)
    two = trace.select(step=2)
    first = ctx.on_view(two, "critical_path")
    assert ctx.on_view(trace.select(step=2), "critical_path") is first  # an equal view
    assert ctx.on_view(trace.select(step=3), "critical_path") is not first
    assert len(calls) == 2
    # the whole trace shares the result() cache both ways
    whole = ctx.on_view(trace, "kernels")
    assert ctx.result("kernels") is whole and ctx.cached("kernels")
    assert len(calls) == 3
    # a different parameter is a different run
    ctx.on_view(two, "critical_path", speedup="k0:2")
    assert len(calls) == 4
