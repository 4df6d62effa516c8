"""Host time conservation in the calling-context tree on crossing intervals
(``ops.owned``): a hand-built Kineto trace where ``ProfilerStep#1`` starts inside the
Python frames of ``prof.step()`` and ends inside the next ones, with node times computed
by hand; and the parent/owner rules against a plain-loop reference on random intervals."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

import traceatlas
from traceatlas import analysis
from traceatlas.ops.owned import enclosing_parents, owned_ns
from traceatlas.testing.builder import TraceBuilder

MOD = "train.py(1): <module>"
STEP1 = "torch/profiler/profiler.py(811): step"
ENTER = "<built-in method _record_function_enter_new>"
STEP2 = "torch/profiler/profiler.py(811): step "  # a second frame name: a second node
EXIT = "<built-in method _record_function_exit>"
FWD = "model.py(5): forward"
STEP = "ProfilerStep#*"
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


def _py(b: TraceBuilder, name: str, start: int, end: int) -> dict[str, object]:
    return {"ph": "X", "cat": "python_function", "name": name, "pid": b.pid,
            "tid": b.main_tid, "ts": start / 1000, "dur": (end - start) / 1000, "args": {}}


def crossing_trace(tmp_path: Path) -> traceatlas.Trace:
    """One thread (ns): <module> [0,1M) > step frame [100k,200k) > enter [150k,200k);
    ProfilerStep#1 [180k,800k) starts inside `enter` and ends inside `exit`;
    forward [300k,600k) > aten::mm [350k,450k) > launch [360k,370k) (kernel 40k);
    step frame [700k,900k) > exit [750k,850k)."""
    b = TraceBuilder(rank=0)
    b.step(1, 180_000, 800_000)
    b.cpu_op("aten::mm", 350_000, 450_000)
    b.launch("gemm", 360_000, 10_000, 400_000, 40_000)
    doc = json.loads(b.to_json())
    doc["traceEvents"] += [_py(b, MOD, 0, 1_000_000), _py(b, STEP1, 100_000, 200_000),
                           _py(b, ENTER, 150_000, 200_000), _py(b, FWD, 300_000, 600_000),
                           _py(b, STEP2, 700_000, 900_000), _py(b, EXIT, 750_000, 850_000)]
    path = tmp_path / "crossing.json"
    path.write_text(json.dumps(doc))
    return traceatlas.open(path)


# Parent: the innermost interval CONTAINING the row (the step contains neither frame it
# crosses: it hangs under <module>; forward under the step; exit under its step frame).
# Owner of each instant: the open interval that started last:
#   [0,100k) module | [100k,150k) step frame | [150k,180k) enter | [180k,300k) Profiler-
#   Step | [300k,350k) forward | [350k,360k) mm | [360k,370k) launch | [370k,450k) mm |
#   [450k,600k) forward | [600k,700k) ProfilerStep | [700k,750k) step frame 2 |
#   [750k,850k) exit | [850k,900k) step frame 2 | [900k,1M) module
# -> path: (calls, host incl, host excl, device incl, device excl, kernels)
EXPECTED: dict[tuple[str, ...], tuple[int, int, int, int, int, int]] = {
    (): (0, 1_000_000, 0, 40_000, 0, 1),
    (MOD,): (1, 1_000_000, 200_000, 40_000, 0, 1),
    (MOD, STEP1): (1, 80_000, 50_000, 0, 0, 0),
    (MOD, STEP1, ENTER): (1, 30_000, 30_000, 0, 0, 0),
    (MOD, STEP): (1, 520_000, 220_000, 40_000, 0, 1),
    (MOD, STEP, FWD): (1, 300_000, 200_000, 40_000, 0, 1),
    (MOD, STEP, FWD, "aten::mm"): (1, 100_000, 90_000, 40_000, 0, 1),
    (MOD, STEP, FWD, "aten::mm", "cudaLaunchKernel"): (1, 10_000, 10_000, 40_000, 0, 1),
    (MOD, STEP, FWD, "aten::mm", "cudaLaunchKernel", "gemm"): (1, 0, 0, 40_000, 40_000, 1),
    (MOD, STEP2): (1, 200_000, 100_000, 0, 0, 0),
    (MOD, STEP2, EXIT): (1, 100_000, 100_000, 0, 0, 0),
}


def test_crossing_step_hand_computed(tmp_path: Path) -> None:
    table = analysis.run("tree", crossing_trace(tmp_path), {"by": "rank"}).table
    assert by_path(table) == EXPECTED
    # the root's host time is the thread's busy time [0, 1M), counted once
    assert table.row(0, named=True)["host_inclusive_ns"] == 1_000_000


def _reference(key: list[int], start: list[int], end: list[int]
               ) -> tuple[list[int], list[int]]:
    """Plain loops: order = (key, start, -end, input position); parent = latest-ordered
    earlier row containing the row (a zero-length row at a row's end is not inside it,
    one after a zero-length row at the same instant is); owner of each elementary
    segment = the latest-ordered row open over it."""
    n = len(start)
    order = sorted(range(n), key=lambda i: (key[i], start[i], -end[i], i))
    pos = {row: p for p, row in enumerate(order)}
    parent = [-1] * n
    for i in range(n):
        for j in order[:pos[i]][::-1]:
            inside = start[j] <= start[i] and end[i] <= end[j]
            if key[j] == key[i] and inside and (start[i] < end[j] or start[j] == end[j]):
                parent[i] = j
                break
    owned = [0] * n
    for k in set(key):
        rows = [i for i in range(n) if key[i] == k]
        cuts = sorted({t for i in rows for t in (start[i], end[i])})
        for a, b in itertools.pairwise(cuts):
            active = [i for i in rows if start[i] <= a < end[i]]
            if active:
                owned[max(active, key=pos.__getitem__)] += b - a
    return parent, owned


ROW = st.tuples(st.integers(0, 2), st.integers(0, 40), st.integers(0, 15))


@settings(max_examples=300, deadline=None)
@given(st.lists(ROW, min_size=1, max_size=30))
def test_parents_and_owned_equal_plain_loops(rows: list[tuple[int, int, int]]) -> None:
    key = np.array([r[0] for r in rows], dtype=np.int64)
    start = np.array([r[1] for r in rows], dtype=np.int64)
    end = start + np.array([r[2] for r in rows], dtype=np.int64)
    parent, owned = _reference(key.tolist(), start.tolist(), end.tolist())
    assert enclosing_parents(key, start, end).tolist() == parent
    got = owned_ns(key, start, end)
    assert got.tolist() == owned
    for k in np.unique(key):  # conservation: owned time = the key's union
        mine = key == k
        cover = {t for s, e in zip(start[mine].tolist(), end[mine].tolist(), strict=True)
                 for t in range(s, e)}
        assert int(got[mine].sum()) == len(cover)


@settings(max_examples=100, deadline=None)
@given(st.lists(ROW, min_size=1, max_size=30))
def test_nested_rows_owned_is_duration_minus_children(rows: list[tuple[int, int, int]]
                                                      ) -> None:
    """On properly nested rows (each clipped into the previous open one) the owned time is
    the usual exclusive time: duration minus the direct children's durations."""
    key = np.zeros(len(rows), dtype=np.int64)
    stack: list[tuple[int, int]] = []
    starts, ends = [], []
    for _, s0, d in sorted(rows, key=lambda r: r[1]):
        while stack and stack[-1][1] <= s0:
            stack.pop()
        e0 = min(s0 + d, stack[-1][1]) if stack else s0 + d
        starts.append(s0)
        ends.append(e0)
        if e0 > s0:
            stack.append((s0, e0))
    start, end = np.array(starts, np.int64), np.array(ends, np.int64)
    parent = enclosing_parents(key, start, end)
    child = np.zeros(len(start), np.int64)
    np.add.at(child, parent[parent >= 0], (end - start)[parent >= 0])
    assert owned_ns(key, start, end).tolist() == ((end - start) - child).tolist()
