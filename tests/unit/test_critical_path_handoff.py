"""``critical_path``: the main -> autograd thread hand-off at ``backward`` and back.

Built trace (times in ns from the trace start; the builder writes them exactly):

- main thread (M): ``ProfilerStep#1`` [0, 1000]; the DataLoader range [10, 300]
  (data_load); ``aten::linear`` [310, 480]; ``aten::ones_like`` [500, 510]; then nothing
  until ``Optimizer.step`` [820, 900].
- autograd thread (A, tid 77): ``evaluate_function: AddmmBackward0`` [530, 700],
  ``evaluate_function: AccumulateGrad`` [705, 800] holding a launch [780, 790] of kernel
  ``k`` [800, 1200].

Region [0, 1200] (the kernel's end). By construction A's first work waits for M's last
point before it (ones_like's end, 510), so the path runs back through the forward pass
and data loading: step own time [0, 10] cpu, DataLoader [10, 300] data_load, step [300,
310] cpu, linear [310, 480] cpu, step [480, 500] cpu, ones_like [500, 510] cpu, hand-off
[510, 530] cpu (untraced), AddmmBackward0 [530, 700] cpu, A untraced [700, 705] cpu,
AccumulateGrad [705, 780] cpu, launch of k [780, 800], k [800, 1200] gpu_compute. M's
resume (Optimizer.step at 820) waits for A's last point before it (800): hand-back edge.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

import traceatlas
from traceatlas import analysis
from traceatlas.testing.builder import TraceBuilder

A_TID = 77
DL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
ADDMM = "autograd::engine::evaluate_function: AddmmBackward0"
ACC = "autograd::engine::evaluate_function: AccumulateGrad"


def _build(tmp_path: Path, *, step: bool, flows: bool, kernel: bool = True
           ) -> traceatlas.Trace:
    b = TraceBuilder(rank=0, profiler_markers=False)
    if step:
        b.step(1, 0, 1000)
    b.annotation(DL, 10, 300)
    b.cpu_op("aten::linear", 310, 480)
    b.cpu_op("aten::ones_like", 500, 510)
    b.cpu_op(ADDMM, 530, 700, tid=A_TID)
    b.cpu_op(ACC, 705, 800, tid=A_TID)
    if kernel:
        b.launch("k", 780, 10, 800, 400, tid=A_TID)
    b.cpu_op("Optimizer.step", 820, 900)
    doc = json.loads(b.to_json())
    if flows:  # PyTorch's fwdbwd flow: forward op (M) -> its backward (A)
        doc["traceEvents"] += [
            {"ph": "s", "id": 9001, "pid": b.pid, "tid": b.main_tid, "ts": 0.31,
             "cat": "fwdbwd", "name": "fwdbwd"},
            {"ph": "f", "id": 9001, "pid": b.pid, "tid": A_TID, "ts": 0.53,
             "cat": "fwdbwd", "name": "fwdbwd", "bp": "e"}]
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(doc))
    return traceatlas.open(path)


EXPECTED_HEAD = [  # (name, start, end, bound) relative to the trace start
    (DL, 10, 300, "data_load"), ("aten::linear", 310, 480, "cpu"),
    ("aten::ones_like", 500, 510, "cpu"), ("(untraced)", 510, 530, "cpu"),
    (ADDMM, 530, 700, "cpu"), ("(untraced)", 700, 705, "cpu"), (ACC, 705, 780, "cpu"),
    ("k", 780, 800, "launch"), ("k", 800, 1200, "gpu_compute")]


def _rows(res: analysis.Result, t0: int) -> list[tuple[str, int, int, str]]:
    return [(r["name"], r["start_ns"] - t0, r["end_ns"] - t0, r["bound"])
            for r in res.table.iter_rows(named=True)]


@pytest.mark.parametrize(("step", "flows"), [(True, False), (False, True), (True, True)])
def test_path_goes_back_through_forward_and_data_loading(tmp_path: Path, step: bool,
                                                         flows: bool) -> None:
    trace = _build(tmp_path, step=step, flows=flows)
    t0 = int(trace.intervals.select(pl.col("start_ns").min()).collect().item())
    res = analysis.run("critical_path", trace)
    rows = _rows(res, t0 - (0 if step else 10))
    if step:
        assert rows == [("ProfilerStep#1", 0, 10, "cpu"), EXPECTED_HEAD[0],
                        ("ProfilerStep#1", 300, 310, "cpu"), EXPECTED_HEAD[1],
                        ("ProfilerStep#1", 480, 500, "cpu"), *EXPECTED_HEAD[2:]]
    else:  # no step annotation: M's gaps are untraced, the region starts at 10
        assert rows == [EXPECTED_HEAD[0], ("(untraced)", 300, 310, "cpu"), EXPECTED_HEAD[1],
                        ("(untraced)", 480, 500, "cpu"), *EXPECTED_HEAD[2:]]
    assert res.table["on_path_ns"].sum() == (1200 if step else 1190)
    deps = dict(res.extra["dependencies"].iter_rows())
    assert deps["handoffs"] == 2  # the wake at 530 and the hand-back at 820
    by = dict(res.extra["by_bound"].select("bound", "ns").iter_rows())
    assert by["data_load"] == 290


def test_handback_releases_main_thread(tmp_path: Path) -> None:
    """Without the kernel the region is the step [0, 1000]: the path reaches
    Optimizer.step through A's last point (800) and the hand-back [800, 820] (not M's
    chain gap [510, 820]), then the step's own time [900, 1000]."""
    trace = _build(tmp_path, step=True, flows=False, kernel=False)
    t0 = int(trace.intervals.select(pl.col("start_ns").min()).collect().item())
    res = analysis.run("critical_path", trace)
    rows = _rows(res, t0)
    assert rows[-4:] == [(ACC, 705, 800, "cpu"), ("(untraced)", 800, 820, "cpu"),
                         ("Optimizer.step", 820, 900, "cpu"),
                         ("ProfilerStep#1", 900, 1000, "cpu")]
    assert ("(untraced)", 510, 530, "cpu") in rows
    assert res.table["on_path_ns"].sum() == 1000


def test_no_handoff_without_autograd_thread(tmp_path: Path) -> None:
    """One thread only: no hand-off edges, the path is M's chain."""
    b = TraceBuilder(rank=0, profiler_markers=False)
    b.step(1, 0, 100)
    b.cpu_op("aten::linear", 10, 50)
    path = tmp_path / "r.json"
    path.write_text(b.to_json())
    res = analysis.run("critical_path", traceatlas.open(path))
    assert dict(res.extra["dependencies"].iter_rows())["handoffs"] == 0
    assert res.table["on_path_ns"].sum() == 100
