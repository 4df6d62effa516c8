"""Synchronisations on the real H100 runs (``h100-planted/``): the ``sync`` run has 8 user
synchronisations per step (4 ``.item()`` and 4 ``.to("cpu")``, PLANTED.md) beside DDP's
own; the counts are checked against a plain JSON parse of the Kineto files."""

from __future__ import annotations

import gzip
import json
import statistics
from bisect import bisect_right
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas import analysis
from traceatlas.cli.main import app

pytestmark = pytest.mark.realtrace

PLANTED = "h100-planted"


def _events(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as fh:
        events: list[dict[str, Any]] = json.load(fh)["traceEvents"]
    return [e for e in events if e.get("ph") == "X"]


def _plain_counts(path: Path) -> dict[int, dict[str, int]]:
    """Per ProfilerStep number: ``aten::item`` events, blocking ``aten::_to_copy`` events
    that enclose a device-to-host copy launch (same thread), and ``cudaEventSynchronize``
    calls; each event placed in the step whose window holds its start."""
    events = _events(path)
    d2h = {e["args"]["correlation"] for e in events
           if e.get("cat") == "gpu_memcpy" and "DtoH" in e["name"]}
    launches = sorted((float(e["ts"]), e["tid"]) for e in events
                      if e.get("cat") == "cuda_runtime"
                      and e.get("args", {}).get("correlation") in d2h)
    steps = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"]),
                    int(e["name"].split("#")[1]))
                   for e in events if e["name"].startswith("ProfilerStep#"))
    starts = [s for s, _, _ in steps]
    out: dict[int, dict[str, int]] = {n: {"item": 0, "to_cpu": 0, "event_sync": 0}
                                      for _, _, n in steps}

    def step_of(ts: float) -> int | None:
        i = bisect_right(starts, ts) - 1
        return steps[i][2] if i >= 0 and ts < steps[i][1] else None

    for e in events:
        ts, end = float(e["ts"]), float(e["ts"]) + float(e["dur"])
        step = step_of(ts)
        if step is None:
            continue
        if e["name"] == "aten::item":
            out[step]["item"] += 1
        elif e["name"] == "aten::_to_copy" and not _non_blocking(e) and any(
                ts <= t <= end and tid == e["tid"] for t, tid in launches):
            out[step]["to_cpu"] += 1
        elif e["name"] == "cudaEventSynchronize":
            out[step]["event_sync"] += 1
    return out


def _non_blocking(event: dict[str, Any]) -> bool:
    """``non_blocking=True`` in ``_to_copy(self, dtype, layout, device, pin_memory,
    non_blocking, memory_format)`` (record_shapes' Concrete Inputs): no host sync."""
    inputs = event.get("args", {}).get("Concrete Inputs") or []
    return len(inputs) > 5 and inputs[5] == "True"


@pytest.fixture(scope="module")
def sync_run(traces_dir: Path) -> Path:
    return traces_dir / PLANTED / "sync"


def test_user_syncs_per_step_match_a_plain_count(sync_run: Path) -> None:
    result = analysis.run("syncs", traceatlas.open(sync_run))
    per_step = result.extra["per_step"]
    for rank in (0, 1):
        plain = _plain_counts(sync_run / f"rank-{rank}.json.gz")
        mine = per_step.filter(pl.col("rank") == rank)
        user = dict(mine.filter(pl.col("source") == "user").select("step", "count").rows())
        framework = dict(mine.filter(pl.col("source") == "framework")
                         .select("step", "count").rows())
        assert user == {s: c["item"] + c["to_cpu"] for s, c in plain.items()}
        assert statistics.median(user.values()) == 8  # PLANTED.md: 8 per step
        # DDP's own cudaEventSynchronize calls in its forward, told apart
        assert framework == {s: c["event_sync"] for s, c in plain.items()}
        assert min(framework.values()) > 0


def test_advisor_names_the_syncs(sync_run: Path) -> None:
    out = CliRunner().invoke(app, ["analyze", "advisor", str(sync_run), "--format", "json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)
    top3 = [r for r in rows if r["rank"] <= 3]
    [finding] = [r for r in top3 if r["cause"] == "host_sync"]
    plain = [statistics.median(c["item"] + c["to_cpu"] for c in
                               _plain_counts(sync_run / f"rank-{r}.json.gz").values())
             for r in (0, 1)]
    assert plain == [8, 8]
    assert finding["per_step"]["count"] == 8
    assert finding["ranks"] == [0, 1]
    ops = finding["where"]["op"].split(", ")
    assert {"aten::item", "aten::_to_copy"} <= set(ops)
    assert "framework syncs" in finding["evidence"]  # DDP's own, counted apart


def test_healthy_run_has_no_user_sync_finding(traces_dir: Path) -> None:
    run = traces_dir / PLANTED / "healthy"
    rows = analysis.run("advisor", traceatlas.open(run), {"top": "0"}).table
    assert rows.filter(pl.col("cause").is_in(["host_sync", "pageable_copy"])).height == 0
    syncs = analysis.run("syncs", traceatlas.open(run))
    in_steps = syncs.table.filter(pl.col("step") >= 0)
    assert set(in_steps["source"]) == {"framework", "collective"}
