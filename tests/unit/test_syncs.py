"""``syncs`` analysis and ``host_sync`` rule on small Kineto traces built here, with the
sync costs computed by hand (GPU idle from a sync's end to the next device activity)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import traceatlas
from traceatlas import analysis
from traceatlas.advisor import Context, host_sync
from traceatlas.analysis.syncs import idle_after, sync_intervals
from traceatlas.cli.main import app
from traceatlas.testing.builder import TraceBuilder

GLOO_TID = 9001


def _python(b: TraceBuilder, name: str, start: int, end: int) -> dict[str, object]:
    """A Kineto ``python_function`` event (as ``with_stack=True`` writes) on the main thread."""
    return {"ph": "X", "cat": "python_function", "name": name, "pid": b.pid, "tid": b.main_tid,
            "ts": start / 1000, "dur": (end - start) / 1000,
            "args": {"Python parent id": 0, "Python id": 1}}


def _write(b: TraceBuilder, path: Path, extra: list[dict[str, object]]) -> Path:
    doc = json.loads(b.to_json())
    doc["traceEvents"].extend(extra)
    path.write_text(json.dumps(doc))
    return path


def _mixed(tmp_path: Path) -> traceatlas.Trace:
    """Step 1 (0-1 ms) with three user syncs, one of DDP's and one inside gloo; step 2
    (1-2 ms) without syncs. Device activity (ns): [20k,120k] K1, [140k,142k] pinned D2H,
    [310k,400k] K2, [450k,460k] K3, [640k,650k] K4, [706k,708k] pageable D2H,
    [900k,950k] K5, [1.1M,1.2M] K6."""
    b = TraceBuilder(rank=0, world_size=1)
    b.step(1, 0, 1_000_000)
    b.step(2, 1_000_000, 2_000_000)
    b.launch("k1", 10_000, 5_000, 20_000, 100_000)
    # user: x.item() inside record_function("my_block"), called from train.py
    b.annotation("my_block", 125_000, 210_000)
    b.cpu_op("aten::item", 130_000, 200_000)
    b.cpu_op("aten::_local_scalar_dense", 131_000, 199_000)
    b.launch("Memcpy DtoH (Device -> Pinned)", 132_000, 3_000, 140_000, 2_000, kind="memcpy",
             nbytes=4)
    b.sync(136_000, 8_000, 140_000, 4_000)                      # ends 144k
    b.launch("k2", 300_000, 5_000, 310_000, 90_000)
    # framework: DDP's own event synchronisation directly under its forward
    b.annotation("DistributedDataParallel.forward", 400_000, 500_000)
    b.sync(410_000, 5_000, 410_000, 5_000, kind="Context Sync")  # ends 415k
    b.launch("k3", 420_000, 5_000, 450_000, 10_000)
    # collective: a stream sync inside gloo:all_reduce on another thread
    b.annotation("gloo:all_reduce", 600_000, 700_000, tid=GLOO_TID)
    b.sync(610_000, 10_000, 610_000, 10_000, tid=GLOO_TID)       # ends 620k
    b.launch("k4", 625_000, 5_000, 640_000, 10_000)
    # user: x.to("cpu") into pageable memory: the async copy and the stream sync of copy_
    b.cpu_op("aten::to", 700_000, 800_000)
    b.cpu_op("aten::_to_copy", 701_000, 799_000)
    b.cpu_op("aten::copy_", 702_000, 798_000)
    b.launch("Memcpy DtoH (Device -> Pageable)", 703_000, 2_000, 706_000, 2_000,
             kind="memcpy", nbytes=256)
    b.sync(706_000, 4_000, 706_000, 2_000)                      # ends 710k
    # user: torch.cuda.synchronize() at the top of the step
    b.sync(850_000, 10_000, 850_000, 10_000, kind="Context Sync")  # ends 860k
    b.launch("k5", 880_000, 5_000, 900_000, 50_000)
    b.launch("k6", 1_050_000, 5_000, 1_100_000, 100_000)
    extra = [_python(b, "train.py(42): train_step", 126_000, 205_000),
             _python(b, "<built-in method item of Tensor object at 0x7f>", 129_000, 201_000)]
    return traceatlas.open(_write(b, tmp_path / "mixed.json", extra))


# Hand-computed costs (ns). Sync ends by time: 144k (item), 415k (DDP), 620k (gloo),
# 710k (to cpu), 860k (cuda.synchronize). Next device start after each end: 310k, 450k,
# 640k, 900k, 900k. The last two share the gap before 900k: 710k-860k and 860k-900k.
ITEM, DDP, GLOO, TO_CPU, DEVICE_SYNC = 166_000, 35_000, 20_000, 150_000, 40_000


def test_sync_events_origin_and_cost(tmp_path: Path) -> None:
    table = analysis.run("syncs", _mixed(tmp_path)).table.sort("start_ns")
    rows = table.select("call", "source", "op", "annotation", "call_site", "pageable",
                        "idle_after_ns", "step").rows()
    assert rows == [
        ("cudaStreamSynchronize", "user", "aten::item", "my_block",
         "train.py(42): train_step", False, ITEM, 1),
        ("cudaDeviceSynchronize", "framework", None, None, None, False, DDP, 1),
        ("cudaStreamSynchronize", "collective", None, None, None, False, GLOO, 1),
        ("cudaStreamSynchronize", "user", "aten::_to_copy", None, None, True, TO_CPU, 1),
        ("cudaDeviceSynchronize", "user", None, None, None, False, DEVICE_SYNC, 1),
    ]
    # the pageable cudaMemcpyAsync is folded into the stream sync of the same copy_
    assert "cudaMemcpyAsync" not in table["call"].to_list()
    assert table.filter(pl.col("op") == "aten::_to_copy")["ops"].item() == (
        "aten::to > aten::_to_copy > aten::copy_")
    assert table.filter(pl.col("source") == "framework")["inside"].item() == (
        "DistributedDataParallel.forward")


def test_per_step_and_summary(tmp_path: Path) -> None:
    result = analysis.run("syncs", _mixed(tmp_path))
    user = result.extra["per_step"].filter(pl.col("source") == "user").sort("step")
    assert user.select("step", "count", "idle_ns").rows() == [
        (1, 3, ITEM + TO_CPU + DEVICE_SYNC), (2, 0, 0)]
    summary = result.extra["summary"].filter(pl.col("source") == "user").row(0, named=True)
    assert summary["syncs"] == 3 and summary["steps"] == 2
    assert summary["per_step_count"] == 1.5
    assert summary["per_step_idle_ns"] == (ITEM + TO_CPU + DEVICE_SYNC) / 2


def test_host_sync_finding(tmp_path: Path) -> None:
    ctx = Context(_mixed(tmp_path), "run.json")
    [finding] = host_sync.check(ctx)
    assert finding.cause == "host_sync"
    assert finding.cost_ns == ITEM + TO_CPU + DEVICE_SYNC  # DDP's and gloo's left out
    assert finding.ranks == [0]
    assert finding.per_step == {"count": 1.5, "ms": (ITEM + TO_CPU + DEVICE_SYNC) / 2 / 1e6}
    assert finding.where == {"op": "aten::_to_copy, aten::item, cudaDeviceSynchronize",
                             "annotation": "my_block",
                             "call_site": "train.py(42): train_step"}
    assert "not counted: 1 framework syncs" in finding.evidence
    assert "not counted: 1 collective syncs" in finding.evidence
    assert finding.command == "traceatlas analyze syncs run.json"


def test_only_framework_and_collective_syncs_give_no_finding(tmp_path: Path) -> None:
    b = TraceBuilder(rank=0)
    b.step(1, 0, 1_000_000)
    b.launch("k1", 0, 5_000, 10_000, 10_000)
    b.annotation("DistributedDataParallel.forward", 30_000, 100_000)
    b.sync(40_000, 5_000, 40_000, 5_000)
    b.annotation("nccl:all_reduce", 200_000, 300_000)
    b.sync(210_000, 5_000, 210_000, 5_000)
    b.launch("k2", 400_000, 5_000, 500_000, 10_000)
    t = traceatlas.open(b.write(tmp_path / "fw.json"))
    assert sorted(sync_intervals(t)["source"]) == ["collective", "framework"]
    assert host_sync.check(Context(t)) == []


def test_pageable_only_and_synchronous_copy(tmp_path: Path) -> None:
    """A pageable H2D cudaMemcpyAsync (no sync call after it) and a synchronous cudaMemcpy
    (nsys-style, no op around it): both are syncs; every sync a pageable copy ->
    cause pageable_copy."""
    b = TraceBuilder(rank=0)
    b.step(1, 0, 1_000_000)
    b.launch("Memcpy HtoD (Pageable -> Device)", 10_000, 30_000, 20_000, 15_000,
             kind="memcpy", nbytes=1 << 20)                       # call ends 40k
    b.launch("Memcpy HtoD (Pageable -> Device)", 100_000, 30_000, 110_000, 15_000,
             kind="memcpy", nbytes=1 << 20, runtime_name="cudaMemcpy")  # ends 130k
    b.launch("k", 200_000, 5_000, 260_000, 10_000)
    t = traceatlas.open(b.write(tmp_path / "pageable.json"))
    table = analysis.run("syncs", t).table.sort("start_ns")
    assert table.select("call", "kind", "pageable", "idle_after_ns").rows() == [
        ("cudaMemcpyAsync", "pageable_copy", True, 110_000 - 40_000),
        ("cudaMemcpy", "sync_copy", True, 260_000 - 130_000)]
    [finding] = host_sync.check(Context(t))
    assert finding.cause == "pageable_copy"
    assert finding.per_step == {"count": 2.0, "ms": (70_000 + 130_000) / 1e6}
    assert finding.where == {"op": "cudaMemcpy, cudaMemcpyAsync"}


def test_pinned_async_copy_is_not_a_sync(tmp_path: Path) -> None:
    b = TraceBuilder(rank=0)
    b.launch("Memcpy DtoH (Device -> Pinned)", 0, 3_000, 5_000, 2_000, kind="memcpy")
    b.launch("k", 10_000, 5_000, 50_000, 10_000)
    t = traceatlas.open(b.write(tmp_path / "pinned.json"))
    result = analysis.run("syncs", t)
    assert result.table.height == 0
    assert any("no synchronisation calls" in n for n in result.notes)
    assert host_sync.check(Context(t)) == []


def test_cli_analyze_syncs(tmp_path: Path) -> None:
    _mixed(tmp_path)
    out = CliRunner().invoke(app, ["analyze", "syncs", str(tmp_path / "mixed.json"),
                                   "--format", "json"])
    assert out.exit_code == 0, out.output
    assert "aten::_to_copy" in out.output and "idle_after_ns" in out.output


def _reference_costs(busy: list[tuple[int, int]], ends: list[int]) -> list[int]:
    """Per sync end, counted ns by ns: idle instants t >= end before the next busy start
    and before the next sync end (the sync's share of its idle gap); 0 when busy at end."""
    def busy_at(t: int) -> bool:
        return any(s <= t < e for s, e in busy)

    out = []
    later_ends = sorted(ends)
    for end in ends:
        starts = [s for s, _ in busy if s >= end]
        if busy_at(end) or not starts:
            out.append(0)
            continue
        stop = min(starts)
        following = [e for e in later_ends if e > end]
        if following:
            stop = min(stop, following[0])
        out.append(sum(1 for t in range(end, stop) if not busy_at(t)))
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 200), st.integers(1, 30)), min_size=1, max_size=8),
       st.lists(st.integers(0, 260), min_size=1, max_size=8, unique=True))
def test_idle_after_matches_a_plain_loop(segments: list[tuple[int, int]],
                                         ends: list[int]) -> None:
    from traceatlas.ops.unions import union_segments

    raw = pl.DataFrame({"rank": [0] * len(segments), "start_ns": [s for s, _ in segments],
                        "end_ns": [s + d for s, d in segments]})
    busy = union_segments(raw.lazy(), ["rank"]).collect()
    events = pl.DataFrame({"rank": [0] * len(ends), "end_ns": ends})
    got = idle_after(events, busy)["idle_after_ns"].to_list()
    assert got == _reference_costs([(s, s + d) for s, d in segments], ends)


@pytest.mark.parametrize("name", ["aten::item", "aten::nonzero"])
def test_op_named_without_annotation(tmp_path: Path, name: str) -> None:
    b = TraceBuilder(rank=0)
    b.cpu_op(name, 0, 50_000)
    b.sync(10_000, 20_000, 10_000, 20_000)
    b.launch("k", 60_000, 5_000, 70_000, 10_000)
    t = traceatlas.open(b.write(tmp_path / "op.json"))
    [row] = sync_intervals(t).select("op", "source", "annotation").rows()
    assert row == (name, "user", None)
