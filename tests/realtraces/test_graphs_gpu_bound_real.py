"""CUDA graphs, GPU-bound runs and short-kernel storms on real traces: graph launch counts
and kernels per launch against a plain JSON parse (kernels sharing a ``*GraphLaunch``
call's correlation id), and the advisor's must-shows of issue 22 on the H100 planted runs
and the public vLLM / SGLang decode traces."""

from __future__ import annotations

import gzip
import json
import re
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import traceatlas
from traceatlas import advisor
from traceatlas.advisor.base import Finding
from traceatlas.analysis import registry

pytestmark = pytest.mark.realtrace

GRAPHED = {
    "compiled": "h100-planted/compiled/rank-0.json.gz",
    "vllm": "tracelens/traces/inference/vllm_decode_full/graph_execution.json.gz",
    "sglang": "tracelens/traces/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz",
}
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def _events(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as f:
        events: list[dict[str, Any]] = json.load(f)["traceEvents"]
    return events


def _graph_counts(path: Path) -> dict[int, int]:
    """Graph launch correlation -> device activities with that correlation (plain)."""
    events = [e for e in _events(path) if e.get("ph") == "X"]
    graphs = {e["args"]["correlation"] for e in events
              if e.get("cat") in ("cuda_runtime", "cuda_driver")
              and "GraphLaunch" in e["name"]}
    per = Counter(e["args"].get("correlation") for e in events if e.get("cat") in DEVICE_CATS)
    return {c: per[c] for c in graphs}


def _open(traces_dir: Path, rel: str, tmp: pytest.TempPathFactory) -> traceatlas.Trace:
    src = traces_dir / rel
    source = src.parent if rel.startswith("h100-planted/") else src
    return traceatlas.open(traceatlas.ingest(source, tmp.mktemp("s") / "store"))


@pytest.fixture(scope="module", params=sorted(GRAPHED))
def graphed(request: pytest.FixtureRequest, traces_dir: Path,
            tmp_path_factory: pytest.TempPathFactory
            ) -> tuple[str, Path, traceatlas.Trace]:
    name = str(request.param)
    return name, traces_dir / GRAPHED[name], _open(traces_dir, GRAPHED[name],
                                                   tmp_path_factory)


def test_graph_launches_counted_once(graphed: tuple[str, Path, traceatlas.Trace]) -> None:
    name, path, trace = graphed
    expected = _graph_counts(path)
    assert expected, name
    result = registry.run("launch", trace, {})
    (summary,) = result.extra["summary"].to_dicts()
    assert summary["graph_launches"] == len(expected)
    assert summary["graph_kernels"] == sum(expected.values())
    graphs = result.extra["graphs"]
    assert dict(zip(graphs["correlation"].to_list(), graphs["kernels"].to_list(),
                    strict=True)) == expected
    # Every graph's device time is at most its activities' span (union <= sum, span).
    for row in graphs.to_dicts():
        assert row["busy_ns"] <= row["gpu_ns"]
        assert row["busy_ns"] <= row["gpu_end_ns"] - row["gpu_start_ns"]


def _capture_advice(f: Finding) -> bool:
    text = f.next_step.lower()
    return "capture" in text and "graph" in text


def test_graphed_runs_no_launch_advice(graphed: tuple[str, Path, traceatlas.Trace]) -> None:
    name, _, trace = graphed
    findings = advisor.advise(trace)
    for f in findings:
        if f.rule == "short_kernels" or f.cause in ("short_kernels", "launch_bound"):
            assert f.severity == "info", (name, f.statement)
        assert not _capture_advice(f), (name, f.rule, f.next_step)
    if name == "compiled":
        # 95-96 % of each step busy on the device (torch.compile + CUDA graphs).
        assert findings[0].cause == "gpu_bound", findings[0].statement
        for f in findings:
            if (f.metric or "").endswith("offload_efficiency"):
                assert f.severity == "info"


def _short_elementwise_per_step(path: Path, kernel: str) -> tuple[float, str]:
    """Median over ProfilerSteps of launches of ``kernel`` shorter than their runtime
    call, and the most frequent cpu_op (same External id) launching them: plain parse."""
    events = [e for e in _events(path) if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    calls = {e["args"]["correlation"]: e for e in events
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e["args"]}
    ops = {e["args"]["External id"]: e["name"] for e in events
           if e.get("cat") == "cpu_op" and "External id" in e["args"]}
    per_step: Counter[int] = Counter()
    by_op: Counter[str | None] = Counter()
    for k in events:
        if k.get("cat") != "kernel" or k["name"] != kernel:
            continue
        call = calls.get(k["args"]["correlation"])
        if call is None or not k["dur"] < call["dur"]:
            continue
        by_op[ops.get(k["args"].get("External id"))] += 1
        for i, (lo, hi) in enumerate(steps):
            if lo <= k["ts"] < hi:
                per_step[i] += 1
    counts = [per_step[i] for i in range(len(steps))]
    return statistics.median(counts), by_op.most_common(1)[0][0]


def test_launch_storm_names_the_elementwise_kernels(
        traces_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    rel = "h100-planted/launch/rank-0.json.gz"
    findings = advisor.advise(_open(traces_dir, rel, tmp_path_factory))
    top3 = findings[:3]
    assert any(f.cause in ("short_kernels", "launch_bound") for f in top3), [
        f.cause for f in top3]
    storm = next(f for f in findings if f.rule == "short_kernels")
    kernel = storm.where["kernel"]
    assert "elementwise" in kernel
    match = re.search(r"rank (\d+) launches", storm.statement)
    assert match is not None and int(match.group(1)) in storm.ranks
    path = traces_dir / "h100-planted" / "launch" / f"rank-{match.group(1)}.json.gz"
    count, op = _short_elementwise_per_step(path, kernel)
    assert storm.per_step is not None
    assert storm.per_step["count"] == count
    assert abs(count - 600) <= 30            # the planted 600 tiny ops per step
    assert storm.where["op"] == op
