"""Communication and transfers on the device side (issue 20): the efficiency model's loss
Active - Useful split into NCCL kernels and memory transfers, its label, and the report's
per-rank bars; one rank built by hand (ns after BASE)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import traceatlas
from traceatlas import analysis
from traceatlas.report import data as report_data
from traceatlas.report import overview, terminal
from traceatlas.report.results import Results
from traceatlas.testing import Collective, TraceBuilder

BASE = 1_700_000_000_000_000_000
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


@pytest.fixture
def trace(tmp_path: Path) -> traceatlas.Trace:
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    b.launch("void gemm()", 0, 1_000, 10_000, 100_000)                 # [10k, 110k)
    b.launch(NCCL, 2_000, 1_000, 100_000, 60_000, stream=20,           # [100k, 160k)
             collective=Collective(group_ranks=(0,)))
    b.launch("Memcpy HtoD", 3_000, 1_000, 150_000, 50_000, stream=30,  # [150k, 200k)
             kind="memcpy", nbytes=4096)
    b.launch("Memset", 4_000, 1_000, 300_000, 10_000, stream=30,       # [300k, 310k)
             kind="memset", nbytes=64)
    return traceatlas.open(traceatlas.ingest(b.write(tmp_path / "rank-0.json"),
                                             tmp_path / "s"))


# Useful = |gemm| = 100k; |kernels or NCCL| = [10k, 160k) = 150k; Active = [10k, 200k) +
# [300k, 310k) = 200k. Loss 100k = NCCL not under gemm 50k + copies/sets under no kernel
# 50k ([160k, 200k) and [300k, 310k)).


def test_per_rank_split(trace: traceatlas.Trace) -> None:
    result = analysis.run("efficiency", trace)
    device = result.extra["per_rank"].filter(pl.col("side") == "device").row(0, named=True)
    assert (device["useful_ns"], device["active_ns"]) == (100_000, 200_000)
    assert (device["comm_ns"], device["comm_kernel_ns"], device["transfer_ns"]) == (
        100_000, 50_000, 50_000)
    host = result.extra["per_rank"].filter(pl.col("side") == "host")
    assert host["transfer_ns"].to_list() == [None] * host.height
    labels = dict(zip(result.table["metric"], result.table["label"], strict=True))
    assert labels["device_communication_efficiency"] == "communication and transfers efficiency"
    assert labels["device_runtime_ns"] is None  # raw inputs have no label
    values = dict(zip(result.table["metric"], result.table["value"], strict=True))
    assert values["device_communication_efficiency"] == pytest.approx(100_000 / 200_000)


def test_nccl_useful_leaves_only_transfers(trace: traceatlas.Trace) -> None:
    result = analysis.run("efficiency", trace, {"nccl_useful": "true"})
    device = result.extra["per_rank"].filter(pl.col("side") == "device").row(0, named=True)
    assert (device["useful_ns"], device["comm_kernel_ns"], device["transfer_ns"]) == (
        150_000, 0, 50_000)
    labels = dict(zip(result.table["metric"], result.table["label"], strict=True))
    assert labels["device_communication_efficiency"] == "transfers efficiency"


def test_report_bars_and_labels(trace: traceatlas.Trace) -> None:
    run = report_data.build_run("r", Results(trace, "r"))
    [bar] = run.rank_bars
    assert (bar.useful_ns, bar.comm_ns, bar.transfer_ns) == (100_000, 50_000, 50_000)
    node = next(n for n in run.efficiency if n.metric == "device_communication_efficiency")
    assert node.label == "communication and transfers efficiency" and node.description
    text = terminal.to_text(report_data.ReportData("0", [run]))
    assert "communication and transfers efficiency" in text


def test_overview_fallback_splits_too(trace: traceatlas.Trace) -> None:
    act = overview.activity(trace)
    [times] = overview.rank_times(trace, act, (BASE, BASE + 400_000))
    assert (times.useful_ns, times.comm_ns, times.transfer_ns, times.idle_ns) == (
        100_000, 50_000, 50_000, 200_000)
