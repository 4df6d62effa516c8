"""CUDA graph launches (one call, many kernels), short-kernel storms and GPU-bound runs on
small traces built here; every expected value is worked out by hand from the builder
calls (ns relative to the trace start)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import traceatlas
from traceatlas import advisor
from traceatlas.advisor import gpu_bound
from traceatlas.advisor.base import Finding
from traceatlas.analysis import registry
from traceatlas.testing import TraceBuilder

BASE = 1_700_000_000_000_000_000
US = 1_000
MS = 1_000_000


def _open(b: TraceBuilder, tmp_path: Path) -> traceatlas.Trace:
    store = traceatlas.ingest(b.write(tmp_path / "rank-0.json"), tmp_path / "s")
    return traceatlas.open(store)


def _graph_trace() -> TraceBuilder:
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    # One graph launch: call [1 us, 51 us), kernels at 100, 103, 106 us (2 us each).
    b.graph_launch([("gA", 100 * US, 2 * US), ("gB", 103 * US, 2 * US),
                    ("gC", 106 * US, 2 * US)], 1 * US, 50 * US)
    b.launch("k1", 200 * US, 5 * US, 210 * US, 2 * US)       # 2 us < 5 us call
    b.launch("k2", 300 * US, 60 * US, 400 * US, 20 * US)     # 60 us call: long launch
    return b


def test_launch_counts_a_graph_launch_once(tmp_path: Path) -> None:
    result = registry.run("launch", _open(_graph_trace(), tmp_path), {})
    (summary,) = result.extra["summary"].to_dicts()
    # Calls: graph, k1, k2 = 3. Short (< 10 us) device rows: gA gB gC k1 = 4, 8 us.
    # Shorter than the call: graph 6 us < 50 us, k1 2 < 5, k2 20 < 60 = 3.
    # Long launch (> 50 us): k2 only (the graph call is 50 us, not charged 3 times).
    # Long delay (> 100 us): graph 100 - 51 = 49 us, k1 5 us, k2 40 us: none.
    assert summary == {
        "rank": 0, "launches": 3, "graph_launches": 1, "graph_kernels": 3,
        "short_kernels": 4, "short_kernels_gpu_ns": 8 * US, "shorter_than_launch": 3,
        "long_launches": 1, "long_launches_cpu_ns": 60 * US, "long_delays": 0,
        "long_delays_ns": 0}
    rows = {r["name"]: r for r in result.table.to_dicts()}
    assert {n: (r["graph"], r["launch_kernels"]) for n, r in rows.items()} == {
        "gA": (True, 3), "gB": (True, 3), "gC": (True, 3), "k1": (False, 1),
        "k2": (False, 1)}
    (graph,) = result.extra["graphs"].to_dicts()
    assert (graph["launch_name"], graph["kernels"], graph["streams"], graph["cpu_launch_ns"],
            graph["gpu_start_ns"] - BASE, graph["gpu_end_ns"] - BASE, graph["gpu_ns"],
            graph["busy_ns"], graph["launch_delay_ns"]) == (
        "cudaGraphLaunch", 3, 1, 50 * US, 100 * US, 108 * US, 6 * US, 6 * US, 49 * US)


def test_queue_counts_a_graph_launch_as_one_entry(tmp_path: Path) -> None:
    result = registry.run("queue", _open(_graph_trace(), tmp_path), {})
    (row,) = result.table.to_dicts()
    # Entries: graph [1, 108) us, k1 [200, 212), k2 [300, 420): never two at once.
    assert (row["launches"], row["max_queue_length"]) == (3, 1)
    # span 1 .. 420 us; queue non-empty 107 + 12 + 120 = 239 us.
    assert row["span_ns"] == 419 * US
    assert row["empty_ns"] == (419 - 239) * US


STEP = 10 * MS


def _storm(b: TraceBuilder, *, graphs: bool) -> None:
    """3 steps; per step 150 ``tiny_add`` (from aten::add) and 50 ``other_k`` (from
    aten::mul) launches: 20 us calls, 5 us kernels; with ``graphs``, also one graph launch
    per step of 10 x 50 us kernels."""
    for s in (1, 2, 3):
        t0 = s * STEP
        b.step(s, t0, t0 + STEP)
        for i in range(200):
            t = t0 + i * 25 * US
            name, op = ("tiny_add", "aten::add") if i < 150 else ("other_k", "aten::mul")
            b.cpu_op(op, t, t + 22 * US)
            b.launch(name, t + 1 * US, 20 * US, t + 22 * US, 5 * US)
        if graphs:
            g0 = t0 + 6 * MS
            b.graph_launch([(f"g{j}", g0 + 100 * US + j * 60 * US, 50 * US)
                            for j in range(10)], g0, 30 * US)


def _finding(findings: list[Finding], rule: str) -> Finding | None:
    return next((f for f in findings if f.rule == rule), None)


def test_short_kernel_storm_fields(tmp_path: Path) -> None:
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    _storm(b, graphs=False)
    found = _finding(advisor.advise(_open(b, tmp_path)), "short_kernels")
    assert found is not None
    # 600 short launches of 600; each leaves min(20 us, median 20 us) - 5 us = 15 us.
    assert found.cost_ns == 600 * 15 * US
    assert found.cause == "short_kernels" and found.ranks == [0]
    assert found.per_step == {"ms": 200 * 15 * US / MS, "count": 150.0}
    assert found.where == {"kernel": "tiny_add", "op": "aten::add"}
    assert "CUDA graph" in found.next_step


def test_graph_kernels_are_not_short_launches(tmp_path: Path) -> None:
    # 60 graph launches of 10 x 5 us kernels, 20 us calls: per call 50 us of device
    # work > 20 us, so no short launch although all 600 kernels are shorter than the call.
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    for g in range(60):
        t = g * 200 * US
        b.graph_launch([(f"k{j}", t + 30 * US + j * 6 * US, 5 * US) for j in range(10)],
                       t, 20 * US)
    findings = advisor.advise(_open(b, tmp_path))
    assert _finding(findings, "short_kernels") is None
    assert not any("CUDA graph" in f.next_step and "capture" in f.next_step
                   for f in findings)


def test_graphed_rank_not_advised_to_capture(tmp_path: Path) -> None:
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    _storm(b, graphs=True)
    found = _finding(advisor.advise(_open(b, tmp_path)), "short_kernels")
    assert found is not None
    assert "capture" not in found.next_step
    assert "3 graph launches, 30 kernels" in found.next_step


def _gpu_bound_trace(kernel_us: int, *, flops: bool = True,
                     sync: bool = True) -> TraceBuilder:
    """2 steps of 1 ms. Per step: aten::mm (FLOPs 475e9) launching ``gemm`` at +30 us for
    ``kernel_us``, then aten::add launching ``bias`` (10 us) right after; the host then
    waits in cudaDeviceSynchronize."""
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    for s in (1, 2):
        t0 = s * MS
        b.step(s, t0, t0 + MS)
        b.cpu_op("aten::mm", t0 + 10 * US, t0 + 25 * US,
                 args={"flops": 475_000_000_000} if flops else None)
        b.launch("gemm", t0 + 12 * US, 8 * US, t0 + 30 * US, kernel_us * US)
        b.cpu_op("aten::add", t0 + 26 * US, t0 + 40 * US)
        b.launch("bias", t0 + 28 * US, 8 * US, t0 + (30 + kernel_us) * US, 10 * US)
        if sync:
            b.sync(t0 + 50 * US, 940 * US, t0 + 50 * US, 940 * US, kind="Context Sync")
    return b


def test_gpu_bound_top_finding(tmp_path: Path) -> None:
    findings = advisor.advise(_open(_gpu_bound_trace(950), tmp_path))
    top = findings[0]
    assert (top.rule, top.cause, top.ranks) == ("gpu_bound", "gpu_bound", [0])
    # busy per step: gemm 950 us + bias 10 us = 960 us of 1 ms (96%); two steps.
    assert top.cost_ns == 2 * 960 * US
    assert top.per_step == {"ms": 0.96}
    assert top.where == {"kernel": "gemm", "op": "aten::mm"}
    assert "96%" in top.statement
    # 2 x 475e9 FLOP over 2 x 950 us of gemm: 950e9 / 1.9e6 ns = 5e5 FLOP/ns = 500 TFLOP/s,
    # 500 / 989.4 = 51 % of the H100 SXM peak (the builder's deviceProperties).
    assert "achieved 500.0 TFLOP/s" in top.evidence
    assert "51% of the NVIDIA H100 80GB HBM3's ~989.4 TFLOP/s" in top.evidence
    # Host side: never high on a GPU-bound run.
    for f in findings[1:]:
        if f.rule in ("host_wait", "short_kernels") or (f.metric or "").endswith(
                ("offload_efficiency", "orchestration_efficiency")):
            assert f.severity == "info", f
    # The host sits in cudaDeviceSynchronize 940 of 1000 us: offload efficiency far
    # below 0.8, reported, but as the healthy state.
    (offload,) = [f for f in findings if f.metric == "device_offload_efficiency"]
    assert offload.severity == "info" and "GPU-bound" in offload.statement


def test_offload_finding_high_without_gpu_bound(tmp_path: Path) -> None:
    # Same host (mostly in cudaDeviceSynchronize) but a 400 us gemm: busy 41 %, not
    # GPU-bound; the offload efficiency finding (when below 0.8) stays high.
    findings = advisor.advise(_open(_gpu_bound_trace(400), tmp_path))
    assert _finding(findings, "gpu_bound") is None
    (offload,) = [f for f in findings if f.metric == "device_offload_efficiency"]
    assert offload.severity == "high" and "GPU-bound" not in offload.statement


def test_gpu_bound_without_flops_or_device_name(tmp_path: Path) -> None:
    b = _gpu_bound_trace(950, flops=False, sync=False)
    data = json.loads(b.to_json())
    del data["deviceProperties"]
    path = tmp_path / "rank-0.json"
    path.write_text(json.dumps(data))
    trace = traceatlas.open(traceatlas.ingest(path, tmp_path / "s"))
    top = advisor.advise(trace)[0]
    assert top.rule == "gpu_bound"
    assert "no FLOPs in the trace" in top.evidence
    assert "TFLOP/s" not in top.evidence.replace("for achieved TFLOP/s", "")


def test_peak_table() -> None:
    assert gpu_bound.peak_tflops("NVIDIA H100 80GB HBM3") == pytest.approx(989.4)
    assert gpu_bound.peak_tflops("AMD Instinct MI300X") == pytest.approx(1307.4)
    assert gpu_bound.peak_tflops("Some Future GPU") is None
    assert gpu_bound.peak_tflops(None) is None


def _f(rule: str, *, cause: str = "", metric: str | None = None) -> Finding:
    return Finding(rule=rule, statement="", cost_ns=1, evidence="", next_step="",
                   command="", metric=metric, severity="high", cause=cause)


def test_cap_host_side_only_when_gpu_bound() -> None:
    host = [_f("host_wait", cause="launch_bound"), _f("short_kernels"),
            _f("efficiency", metric="host_offload_efficiency")]
    other = [_f("load_imbalance"), _f("exposed_comm")]
    gpu_bound.cap_host_side(host + other)
    assert [f.severity for f in host + other] == ["high"] * 5   # no gpu_bound: unchanged
    findings = [*host, *other, _f("gpu_bound")]
    gpu_bound.cap_host_side(findings)
    assert [f.severity for f in findings] == ["info", "info", "info", "high", "high",
                                              "high"]
