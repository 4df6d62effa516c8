"""``analyze tree`` (calling-context tree) on a small Kineto trace built here; every
expected number is computed by hand from the times below (ns)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

import traceatlas
from traceatlas import analysis
from traceatlas.errors import RankInferredWarning
from traceatlas.ops.cct import NO_LAUNCH, build_cct
from traceatlas.testing.builder import TraceBuilder
from traceatlas.testing.nsys import SYSTEM_NS, Call, Kernel, Range, write_export
from traceatlas.testing.otf2 import write_otf2

BWD_TID = 9000
STEP = "ProfilerStep#*"
PY = "train.py(10): step"
EVAL_MM = "autograd::engine::evaluate_function: AddmmBackward0"
EVAL_ACC = "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"
MEMCPY = "Memcpy DtoD (Device -> Device)"


def _event(b: TraceBuilder, cat: str, name: str, start: int, end: int,
           tid: int | None = None) -> dict[str, object]:
    return {"ph": "X", "cat": cat, "name": name, "pid": b.pid,
            "tid": b.main_tid if tid is None else tid, "ts": start / 1000,
            "dur": (end - start) / 1000, "args": {}}


def _flow(b: TraceBuilder, ph: str, tid: int, ts: int) -> dict[str, object]:
    out: dict[str, object] = {"ph": ph, "id": 77, "pid": b.pid, "tid": tid, "ts": ts / 1000,
                              "cat": "fwdbwd", "name": "fwdbwd"}
    if ph == "f":
        out["bp"] = "e"
    return out


def golden(tmp_path: Path, *, flow: bool = True) -> traceatlas.Trace:
    """Main thread: step [0,1M) > python frame [10k,600k) > fwd [20k,300k) >
    aten::linear x2 ([30k,100k), [150k,250k)) > aten::addmm ([40k,90k), [160k,240k)) >
    launches (gemm 40k and 60k device ns, a 5k memcpy); bwd_wait [320k,580k).
    Backward thread: evaluate AddmmBackward0 [350k,450k) > AddmmBackward0 [355k,440k) >
    aten::mm [360k,430k) > launch gemm_bwd (50k); evaluate AccumulateGrad [460k,500k) >
    launch acc (10k). A fwdbwd flow from the 2nd aten::addmm (160k) to AddmmBackward0."""
    b = TraceBuilder(rank=0)
    b.step(1, 0, 1_000_000)
    b.annotation("fwd", 20_000, 300_000)
    b.cpu_op("aten::linear", 30_000, 100_000)
    b.cpu_op("aten::addmm", 40_000, 90_000)
    b.launch("gemm", 50_000, 10_000, 100_000, 40_000)
    b.cpu_op("aten::linear", 150_000, 250_000)
    b.cpu_op("aten::addmm", 160_000, 240_000)
    b.launch("gemm", 170_000, 10_000, 200_000, 60_000)
    b.launch(MEMCPY, 190_000, 5_000, 270_000, 5_000, kind="memcpy", nbytes=64)
    b.annotation("bwd_wait", 320_000, 580_000)
    b.cpu_op(EVAL_MM, 350_000, 450_000, tid=BWD_TID)
    b.cpu_op("AddmmBackward0", 355_000, 440_000, tid=BWD_TID)
    b.cpu_op("aten::mm", 360_000, 430_000, tid=BWD_TID)
    b.launch("gemm_bwd", 370_000, 10_000, 400_000, 50_000, tid=BWD_TID)
    b.cpu_op(EVAL_ACC, 460_000, 500_000, tid=BWD_TID)
    b.launch("acc", 470_000, 5_000, 480_000, 10_000, tid=BWD_TID)
    doc = json.loads(b.to_json())
    doc["traceEvents"].append(_event(b, "python_function", PY, 10_000, 600_000))
    if flow:
        doc["traceEvents"] += [_flow(b, "s", b.main_tid, 160_000),
                               _flow(b, "f", BWD_TID, 355_000)]
    path = tmp_path / ("golden.json" if flow else "golden_noflow.json")
    path.write_text(json.dumps(doc))
    return traceatlas.open(path)


ADDMM = (STEP, PY, "fwd", "aten::linear", "aten::addmm")
WAIT = (STEP, PY, "bwd_wait")
# path -> (calls, host incl, host excl, device incl, device excl, kernels), by hand
EXPECTED: dict[tuple[str, ...], tuple[int, int, int, int, int, int]] = {
    (): (0, 1_140_000, 0, 165_000, 0, 4),
    (STEP,): (1, 1_140_000, 410_000, 165_000, 0, 4),
    (STEP, PY): (1, 730_000, 50_000, 165_000, 0, 4),
    (STEP, PY, "fwd"): (1, 380_000, 110_000, 155_000, 0, 3),
    ADDMM[:4]: (2, 270_000, 40_000, 155_000, 0, 3),
    ADDMM: (2, 230_000, 105_000, 155_000, 0, 3),
    (*ADDMM, "cudaLaunchKernel"): (2, 20_000, 20_000, 100_000, 0, 2),
    (*ADDMM, "cudaLaunchKernel", "gemm"): (2, 0, 0, 100_000, 100_000, 2),
    (*ADDMM, "cudaMemcpyAsync"): (1, 5_000, 5_000, 5_000, 0, 0),
    (*ADDMM, "cudaMemcpyAsync", MEMCPY): (1, 0, 0, 5_000, 5_000, 0),
    (*ADDMM, EVAL_MM): (1, 100_000, 15_000, 50_000, 0, 1),
    (*ADDMM, EVAL_MM, "AddmmBackward0"): (1, 85_000, 15_000, 50_000, 0, 1),
    (*ADDMM, EVAL_MM, "AddmmBackward0", "aten::mm"): (1, 70_000, 60_000, 50_000, 0, 1),
    (*ADDMM, EVAL_MM, "AddmmBackward0", "aten::mm", "cudaLaunchKernel"):
        (1, 10_000, 10_000, 50_000, 0, 1),
    (*ADDMM, EVAL_MM, "AddmmBackward0", "aten::mm", "cudaLaunchKernel", "gemm_bwd"):
        (1, 0, 0, 50_000, 50_000, 1),
    WAIT: (1, 300_000, 260_000, 10_000, 0, 1),
    (*WAIT, EVAL_ACC): (1, 40_000, 35_000, 10_000, 0, 1),
    (*WAIT, EVAL_ACC, "cudaLaunchKernel"): (1, 5_000, 5_000, 10_000, 0, 1),
    (*WAIT, EVAL_ACC, "cudaLaunchKernel", "acc"): (1, 0, 0, 10_000, 10_000, 1),
}
METRICS = ["calls", "host_inclusive_ns", "host_exclusive_ns", "device_inclusive_ns",
           "device_exclusive_ns", "kernels"]


def by_path(table: pl.DataFrame) -> dict[tuple[str, ...], tuple[int, ...]]:
    """Rows of a top_down table keyed by the path of names below the root."""
    names = dict(zip(table["node_id"].to_list(), table["name"].to_list(), strict=True))
    parents = dict(zip(table["node_id"].to_list(), table["parent_id"].to_list(), strict=True))
    out = {}
    for row in table.iter_rows(named=True):
        path: list[str] = []
        node = row["node_id"]
        while parents[node] is not None:
            path.append(names[node])
            node = parents[node]
        out[tuple(reversed(path))] = tuple(row[m] for m in METRICS)
    return out


def test_golden_tree_equals_hand_computed(tmp_path: Path) -> None:
    table = analysis.run("tree", golden(tmp_path), {"by": "rank"}).table
    assert by_path(table) == EXPECTED
    assert table["node_id"][0] == 0 and table["parent_id"][0] is None  # root first


def test_inclusive_is_exclusive_plus_children(tmp_path: Path) -> None:
    table = analysis.run("tree", golden(tmp_path), {"by": "rank"}).table
    kids = (table.group_by("parent_id")
            .agg(pl.col("host_inclusive_ns").sum().alias("h"),
                 pl.col("device_inclusive_ns").sum().alias("d"))
            .rename({"parent_id": "node_id"}))
    check = table.join(kids, on="node_id", how="left").with_columns(
        pl.col("h", "d").fill_null(0))
    assert (check["host_inclusive_ns"] == check["host_exclusive_ns"] + check["h"]).all()
    assert (check["device_inclusive_ns"] == check["device_exclusive_ns"] + check["d"]).all()


def test_without_flow_backward_goes_under_main_thread(tmp_path: Path) -> None:
    got = by_path(analysis.run("tree", golden(tmp_path, flow=False), {"by": "rank"}).table)
    # both backward top-level calls now sit under bwd_wait (innermost main-thread interval)
    assert got[(*WAIT, EVAL_MM)] == (1, 100_000, 15_000, 50_000, 0, 1)
    assert got[WAIT] == (1, 400_000, 260_000, 60_000, 0, 2)
    assert got[ADDMM] == (2, 130_000, 105_000, 105_000, 0, 2)
    assert (*ADDMM, EVAL_MM) not in got


def test_unlinked_threads_are_separate_tops(tmp_path: Path) -> None:
    got = by_path(analysis.run("tree", golden(tmp_path),
                               {"by": "rank", "link_threads": "false"}).table)
    assert got[(EVAL_MM,)] == (1, 100_000, 15_000, 50_000, 0, 1)
    assert got[(EVAL_ACC,)] == (1, 40_000, 35_000, 10_000, 0, 1)
    assert got[()][1] == 1_140_000  # the root is unchanged


def test_hot_path_follows_heaviest_child(tmp_path: Path) -> None:
    trace = golden(tmp_path)
    device = analysis.run("tree", trace, {"view": "hot_path"}).table
    assert device["name"].to_list() == ["[root]", *ADDMM, "cudaLaunchKernel", "gemm"]
    assert device["value_ns"].to_list() == [165_000] * 3 + [155_000] * 3 + [100_000] * 2
    assert device["share_of_root"][-1] == pytest.approx(100_000 / 165_000)
    host = analysis.run("tree", trace, {"view": "hot_path", "metric": "host_ns"}).table
    # ProfilerStep (1.14M) > python (730k) > fwd (380k vs bwd_wait 300k) > linear > addmm
    # > evaluate AddmmBackward0 (100k vs 20k, 5k) > AddmmBackward0 > aten::mm > launch
    assert host["name"].to_list() == ["[root]", *ADDMM, EVAL_MM, "AddmmBackward0",
                                      "aten::mm", "cudaLaunchKernel", "gemm_bwd"]


def test_bottom_up_callers_and_shares(tmp_path: Path) -> None:
    trace = golden(tmp_path)
    kernels = analysis.run("tree", trace, {"view": "bottom_up"}).table
    gemm = kernels.filter(pl.col("name") == "gemm").row(0, named=True)
    assert gemm["caller_path"] == " > ".join((*ADDMM, "cudaLaunchKernel"))
    assert (gemm["calls"], gemm["value_ns"], gemm["share"]) == (2, 100_000, 1.0)
    assert kernels["name"][0] == "gemm"  # heaviest target first
    ops = analysis.run("tree", trace, {"view": "bottom_up", "of": "op"}).table
    mm = ops.filter(pl.col("name") == "aten::addmm").row(0, named=True)
    assert mm["caller_path"] == " > ".join(ADDMM[:4])
    assert (mm["calls"], mm["value_ns"]) == (2, 155_000)


def test_merged_over_ranks_mean_max_rank(tmp_path: Path) -> None:
    paths = []
    for rank, dur in ((0, 30_000), (1, 90_000)):
        b = TraceBuilder(rank=rank, world_size=2)
        b.cpu_op("aten::mm", 0, 100_000)
        b.launch("gemm", 10_000, 5_000, 20_000, dur)
        paths.append(b.write(tmp_path / f"rank-{rank}.json"))
    table = analysis.run("tree", traceatlas.open(tmp_path)).table
    mm = table.filter(pl.col("name") == "aten::mm").row(0, named=True)
    assert (mm["ranks"], mm["calls"], mm["device_inclusive_ns"]) == (2, 2, 120_000)
    assert (mm["device_inclusive_mean_ns"], mm["device_inclusive_max_ns"],
            mm["device_inclusive_max_rank"]) == (60_000, 90_000, 1)
    assert mm["host_inclusive_max_rank"] == 0  # equal host times: the lowest rank


def test_nsys_nvtx_and_runtime_nesting(tmp_path: Path) -> None:
    t = SYSTEM_NS
    path = write_export(
        tmp_path / "r.sqlite",
        kernels=[Kernel(t + 3_000, t + 7_000, "k1", correlation=1),
                 Kernel(t + 8_000, t + 9_000, "k2", correlation=None)],
        calls=[Call(t + 1_200, t + 1_500, "cudaLaunchKernel_v7000", correlation=1)],
        ranges=[Range(t + 1_000, t + 2_000, "outer"), Range(t + 1_100, t + 1_800, "inner")])
    with pytest.warns(RankInferredWarning):
        trace = traceatlas.open(path)
    got = by_path(analysis.run("tree", trace, {"by": "rank"}).table)
    # outer 1000 ns: inner 700 ns; inner: the 300 ns launch of k1 (4000 ns on the device)
    assert got[("outer",)][1:] == (1_000, 300, 4_000, 0, 1)
    assert got[("outer", "inner")][1:] == (700, 400, 4_000, 0, 1)
    launch = [k for k in got if k and k[-1] == "k1"]
    assert launch[0][:2] == ("outer", "inner") and got[launch[0]][3:5] == (4_000, 4_000)
    assert got[(NO_LAUNCH,)][3] == 1_000 and got[(NO_LAUNCH, "k2")][3:5] == (1_000, 1_000)
    assert got[()][1] == 1_000 and got[()][3] == 5_000


def test_otf2_region_nesting(tmp_path: Path) -> None:
    archive = write_otf2(tmp_path / "t", {0: [("main", 0, 100), ("solve", 10, 60),
                                              ("MPI_Send", 20, 30), ("solve", 70, 90)]})
    cct = build_cct(traceatlas.open(archive))
    rows = cct.nodes.join(cct.metrics, on="node_id")
    solve = rows.filter(pl.col("name") == "solve").row(0, named=True)
    assert (solve["depth"], solve["calls"], solve["host_inclusive_ns"],
            solve["host_exclusive_ns"]) == (2, 2, 70, 60)
    main = rows.filter(pl.col("name") == "main").row(0, named=True)
    assert (main["host_inclusive_ns"], main["host_exclusive_ns"]) == (100, 30)
