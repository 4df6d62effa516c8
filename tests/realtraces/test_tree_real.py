"""``analyze tree`` on real traces: HTA's published backward-thread stack; on TraceLens
H100 / sglang and an h100-planted trace, the root equals a second computation (host: the
union of each thread's host intervals, summed over threads; device: the sum of device
activity durations) and every interval is in the tree."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import traceatlas
from traceatlas import analysis
from traceatlas.ops.cct import DEVICE_CATEGORIES, build_cct
from traceatlas.ops.owned import with_owned
from traceatlas.ops.unions import union_segments
from traceatlas.view.pyramid_bins import owned_pieces

pytestmark = [pytest.mark.realtrace,
              pytest.mark.filterwarnings("ignore::traceatlas.errors.DataQualityWarning")]

# ProfilerStep#N crosses Python frames here (starts inside one, ends inside a later one)
TRACES = ["tracelens/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz",
          "tracelens/traces/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz",
          "h100-planted/healthy/rank-0.json.gz"]
ALL = TRACES


def test_hta_backward_thread_stack(traces_dir: Path) -> None:
    trace = traceatlas.open(traces_dir / "hta/call_stack/backward_thread.json")
    table = analysis.run("tree", trace, {"merge_steps": "false"}).table
    kernel = table.filter(pl.col("name").str.contains("cutlass::Kernel")).row(0, named=True)
    parents = dict(zip(table["node_id"], table["parent_id"], strict=True))
    names = dict(zip(table["node_id"], table["name"], strict=True))
    stack, node = [], kernel["node_id"]
    while parents[node] is not None:
        stack.append(names[node])
        node = parents[node]
    # HTA tests/test_trace_call_graph.py: test_call_graph_using_kernel_node
    assert stack[::-1] == [
        "ProfilerStep#552", "## backward ##",
        "autograd::engine::evaluate_function: AddmmBackward0", "AddmmBackward0", "aten::mm",
        "cudaLaunchKernel",
        "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>"]
    assert kernel["depth"] == 7 and kernel["kernels"] == 1


@pytest.mark.parametrize("name", TRACES)
def test_root_equals_second_computation(traces_dir: Path, name: str) -> None:
    trace = traceatlas.open(traces_dir / name)
    cct = build_cct(trace, by_thread=True)
    root = cct.metrics.filter(pl.col("node_id") == 0)
    host_tracks = trace.tracks.filter(pl.col("kind").cast(pl.String) == "host_thread")
    cat = pl.col("category").cast(pl.String)
    host = (trace.intervals.join(host_tracks.select("rank", "track_id"),
                                 on=["rank", "track_id"], how="semi")
            .filter((cat != "state") & ~cat.is_in(DEVICE_CATEGORIES)))
    union = (union_segments(host.select("rank", "track_id", "start_ns", "end_ns"),
                            ["rank", "track_id"])
             .group_by("rank", "track_id")
             .agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("union_ns")).collect())
    device = trace.intervals.filter(cat.is_in(DEVICE_CATEGORIES))
    dev_total = device.select(pl.col("dur_ns").sum()).collect().item()
    assert root["device_inclusive_ns"].sum() == dev_total > 0
    # host time conserved per thread: each ns of a thread's busy time in exactly one node
    per_thread = (union.join(root.select("rank", "track_id", "host_inclusive_ns"),
                             on=["rank", "track_id"], how="left")
                  .with_columns(pl.col("host_inclusive_ns").fill_null(0)))
    assert per_thread.height >= 1
    assert (per_thread["host_inclusive_ns"] == per_thread["union_ns"]).all()
    # nothing lost: every host and device interval is one call of one node
    instances = (host.select(pl.len()).collect().item()
                 + device.select(pl.len()).collect().item())
    calls = cct.metrics.select(pl.col("calls").sum()).item()
    assert calls == instances
    group = ["node_id", "rank", "track_id"]
    kids = (cct.nodes.join(cct.metrics, on="node_id")
            .group_by("parent_id", "rank", "track_id")
            .agg(pl.col("host_inclusive_ns").sum().alias("h"))
            .rename({"parent_id": "node_id"}))
    check = cct.metrics.join(kids, on=group, how="left").with_columns(pl.col("h").fill_null(0))
    assert (check["host_inclusive_ns"] == check["host_exclusive_ns"] + check["h"]).all()


def test_owned_time_is_the_viewers_flattened_timeline(traces_dir: Path) -> None:
    """Per thread of bert-small (crossing ProfilerStep#N), each interval's owned time
    equals what the viewer's owner search (view.pyramid_bins.owned_pieces, an independent
    implementation) gives it, and no interval outlives its parent."""
    trace = traceatlas.open(traces_dir / TRACES[0])
    host_tracks = trace.tracks.filter(pl.col("kind").cast(pl.String) == "host_thread")
    cat = pl.col("category").cast(pl.String)
    host = (trace.intervals.join(host_tracks.select("rank", "track_id"),
                                 on=["rank", "track_id"], how="semi")
            .filter((cat != "state") & ~cat.is_in(DEVICE_CATEGORIES))
            .select("rank", "track_id", "start_ns", "end_ns").collect())
    got = with_owned(host).with_row_index("row")
    crossing = 0
    for part in got.partition_by("rank", "track_id"):
        part = part.sort("start_ns", pl.col("end_ns"), descending=[False, True],
                         maintain_order=True)
        start, end = part["start_ns"].to_numpy(), part["end_ns"].to_numpy()
        owner, a, b = owned_pieces(start, end)
        viewer = np.bincount(owner, weights=(b - a).astype(np.float64), minlength=len(start))
        assert (np.rint(viewer).astype(np.int64) == part["exclusive_ns"].to_numpy()).all()
        # starts inside the previous interval, ends after it
        crossing += int(((start[1:] < end[:-1]) & (end[:-1] < end[1:])).sum())
    parent = got["parent"].to_numpy()
    has = parent >= 0
    s, e = got["start_ns"].to_numpy(), got["end_ns"].to_numpy()
    assert (s[parent[has]] <= s[has]).all() and (e[has] <= e[parent[has]]).all()
    assert crossing > 0  # the trace does have crossing intervals


@pytest.mark.parametrize("name", ALL)
def test_device_total_and_nothing_lost(traces_dir: Path, name: str) -> None:
    trace = traceatlas.open(traces_dir / name)
    cct = build_cct(trace)
    cat = pl.col("category").cast(pl.String)
    device = trace.intervals.filter(cat.is_in(DEVICE_CATEGORIES))
    root = cct.metrics.filter(pl.col("node_id") == 0)
    assert root["device_inclusive_ns"].sum() == device.select(
        pl.col("dur_ns").sum()).collect().item() > 0
    assert root["kernels"].sum() == device.filter(
        cat.is_in(("kernel", "comm_kernel"))).select(pl.len()).collect().item()
    host_tracks = trace.tracks.filter(pl.col("kind").cast(pl.String) == "host_thread")
    host = (trace.intervals.join(host_tracks.select("rank", "track_id"),
                                 on=["rank", "track_id"], how="semi")
            .filter((cat != "state") & ~cat.is_in(DEVICE_CATEGORIES)))
    instances = (host.select(pl.len()).collect().item()
                 + device.select(pl.len()).collect().item())
    assert cct.metrics.select(pl.col("calls").sum()).item() == instances


def _raw_module_paths(path: Path) -> tuple[str, Counter[tuple[str, ...]]]:
    """From the raw JSON (stdlib json, no traceatlas): the CPU ProfilerStep's name, and
    per ``nn.Module`` event inside it, its chain of enclosing modules following the
    profiler's own ``Python parent id`` links (not times), as a multiset."""
    with gzip.open(path) as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    step = next(e for e in events if str(e["name"]).startswith("ProfilerStep#")
                and e.get("cat") == "user_annotation")
    lo, hi = step["ts"], step["ts"] + step["dur"]
    python = {e["args"]["Python id"]: e for e in events
              if e.get("cat") == "python_function" and "Python id" in e.get("args", {})}
    paths: Counter[tuple[str, ...]] = Counter()
    for e in python.values():
        if not e["name"].startswith("nn.Module: ") or not lo <= e["ts"] <= hi:
            continue
        chain, node, seen = [], e, set()
        while node is not None and id(node) not in seen:
            seen.add(id(node))
            if node["name"].startswith("nn.Module: "):
                chain.append(node["name"])
            node = python.get(node["args"].get("Python parent id"))
        paths[tuple(reversed(chain))] += 1
    return step["name"], paths


@pytest.mark.parametrize("name", [TRACES[0], "tracelens/traces/h100/"
                                  "facebook_timesformer-base-finetuned-k400__1016002.json.gz"])
def test_module_levels_nest_as_the_model(traces_dir: Path, name: str) -> None:
    """Under the step's node, the ``nn.Module`` contexts (module names along the path from
    the root, other frames skipped) with their calls equal the module nesting rebuilt from
    the raw JSON's Python parent ids."""
    step_name, expected = _raw_module_paths(traces_dir / name)
    table = analysis.run("tree", traceatlas.open(traces_dir / name),
                         {"merge_steps": "false"}).table
    names = dict(zip(table["node_id"].to_list(), table["name"].to_list(), strict=True))
    parents = dict(zip(table["node_id"].to_list(), table["parent_id"].to_list(), strict=True))
    got: Counter[tuple[str, ...]] = Counter()
    for node, calls in zip(table["node_id"].to_list(), table["calls"].to_list(), strict=True):
        if not names[node].startswith("nn.Module: "):
            continue
        path, up = [], node
        while up is not None:
            path.append(names[up])
            up = parents[up]
        if step_name in path:
            got[tuple(n for n in reversed(path) if n.startswith("nn.Module: "))] += calls
    assert sum(expected.values()) >= 80 and max(len(p) for p in expected) >= 4
    assert got == expected
