"""``tree`` in rank batches (``partition = "rank"``: each batch builds its own CCT, the
merge rebuilds the one tree, ``analysis.tree_merge``) gives the tables of the former
whole-run ``tree`` (``testing.frozen_tree``, a verbatim copy from before the change):
same node ids, same order, same values, same notes. On multi-rank Kineto traces built
here (Hypothesis: names, starts and ends on a coarse grid, so ties on starts, ends and
names are common; steps, backward threads with and without ``fwdbwd`` flows, device
activity without its launch call on some ranks only), whole and one rank a batch."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

import traceatlas
from traceatlas.analysis import registry
from traceatlas.analysis.base import Result
from traceatlas.analysis.partitioned import is_partitioned, run_partitioned
from traceatlas.engine import LocalEngine
from traceatlas.ops.cct import NO_LAUNCH
from traceatlas.testing import TraceBuilder
from traceatlas.testing.frozen_tree import Tree as FrozenTree

BWD_TID = 9000
EVAL = "autograd::engine::evaluate_function: "
GRID = 1_000
PARAMS: list[dict[str, Any]] = [
    {"by": "rank"}, {},
    {"view": "bottom_up"}, {"view": "bottom_up", "of": "op", "by": "rank"},
    {"view": "bottom_up", "of": "op", "metric": "host_ns"},
    {"view": "hot_path"}, {"view": "hot_path", "by": "rank", "metric": "host_ns"},
    {"link_threads": False, "merge_steps": False},
    {"by": "rank", "link_threads": False, "merge_steps": False},
]


def _flow(pid: int, ph: str, tid: int, ts_ns: int, fid: int) -> dict[str, object]:
    out: dict[str, object] = {"ph": ph, "id": fid, "pid": pid, "tid": tid,
                              "ts": ts_ns / 1000, "cat": "fwdbwd", "name": "fwdbwd"}
    if ph == "f":
        out["bp"] = "e"
    return out


def _write(tmp: Path, ranks: list[dict[str, Any]]) -> traceatlas.Trace:
    """One Kineto file per rank from the drawn description, ingested into one store."""
    paths = []
    for rank, spec in enumerate(ranks):
        b = TraceBuilder(rank, len(ranks), profiler_markers=False)
        for n, start, dur in spec["steps"]:
            b.step(n, start * GRID, (start + dur) * GRID)
        for tid, cat, name, start, dur in spec["ops"]:
            t = BWD_TID if tid else None
            if cat == "cpu_op":
                b.cpu_op(name, start * GRID, (start + dur) * GRID, tid=t)
            else:
                b.annotation(name, start * GRID, (start + dur) * GRID, tid=t)
        for tid, kind, name, cpu, gpu, dur, call in spec["launches"]:
            b.launch(name, cpu * GRID, GRID // 2, gpu * GRID, dur * GRID, kind=kind,
                     tid=BWD_TID if tid else None, nbytes=64 if kind != "kernel" else None)
            b._launches[-1].host_call = call  # False: the device activity has no launch
        doc = json.loads(b.to_json())
        for i, (src, dst) in enumerate(spec["flows"]):
            doc["traceEvents"] += [_flow(b.pid, "s", b.main_tid, src * GRID, 100 + i),
                                   _flow(b.pid, "f", BWD_TID, dst * GRID, 100 + i)]
        path = tmp / "in" / f"rank-{rank}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc))
        paths.append(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return traceatlas.open(traceatlas.ingest(paths, tmp / "store", engine=LocalEngine(1)))


def _same(got: Result, want: Result, what: str) -> None:
    """Equal tables in the same row order (floats to 1e-12 relative), extras, notes."""
    assert_frame_equal(got.table, want.table, check_exact=False, rel_tol=1e-12,
                       abs_tol=0), what
    assert sorted(got.extra) == sorted(want.extra), what
    for key, frame in want.extra.items():
        assert_frame_equal(got.extra[key], frame), f"{what} extra {key}"
    assert got.notes == want.notes, what


def _check(trace: traceatlas.Trace, params: list[dict[str, Any]],
           ranks_per_task: int = 1) -> None:
    tree = registry.get_analysis("tree")
    for given_params in params:
        typed = registry.parse_params(tree, given_params)
        assert is_partitioned(tree, typed)
        try:
            want = FrozenTree().run(trace, typed)
        except (IndexError, ValueError) as err:  # hot_path of an empty tree: as before
            with pytest.raises(type(err)):
                tree.run(trace, typed)
            with pytest.raises(type(err)):
                run_partitioned(tree, trace, typed, LocalEngine(1),
                                ranks_per_task=ranks_per_task)
            continue
        _same(tree.run(trace, typed), want, f"whole {given_params}")
        got = run_partitioned(tree, trace, typed, LocalEngine(1),
                              ranks_per_task=ranks_per_task)
        _same(got, want, f"batched {given_params}")


def test_numbering_over_batches_by_hand(tmp_path: Path) -> None:
    """Rank 0 calls b > k2; rank 1 calls a > k1, and has a kernel without its launch
    call. The one tree numbers host levels first (depth 1 by label: a, b), then the
    no-launch node, then device leaves by (parent id, label): ids by hand below."""
    ranks = [{"steps": [], "ops": [(0, "cpu_op", "b", 0, 10)], "flows": [],
              "launches": [(0, "kernel", "k2", 1, 20, 5, True)]},
             {"steps": [], "ops": [(0, "cpu_op", "a", 0, 10)], "flows": [],
              "launches": [(0, "kernel", "k1", 1, 20, 5, True),
                           (0, "kernel", "k3", 2, 30, 5, False)]}]
    trace = _write(tmp_path, ranks)
    got = run_partitioned(registry.get_analysis("tree"), trace,
                          registry.parse_params(registry.get_analysis("tree"), {}),
                          LocalEngine(1), ranks_per_task=1)
    nodes = got.extra["nodes"]
    rows = {r["node_id"]: (r["name"], r["parent_id"]) for r in nodes.iter_rows(named=True)}
    launch = "cudaLaunchKernel"
    # depth 1: a (1), b (2); depth 2: a's launch (3), b's launch (4); NO_LAUNCH (5);
    # device: k1 under 3 (6), k2 under 4 (7), k3 under 5 (8)
    assert rows == {0: ("[root]", None), 1: ("a", 0), 2: ("b", 0), 3: (launch, 1),
                    4: (launch, 2), 5: (NO_LAUNCH, 0), 6: ("k1", 3), 7: ("k2", 4),
                    8: ("k3", 5)}
    assert got.table.filter(pl.col("node_id") == 0)["ranks"].item() == 2
    _check(trace, PARAMS)


NAMES = st.sampled_from(["a", "b", "c", "ProfilerStep#1"])
SPAN = st.integers(0, 20)
DUR = st.integers(1, 8)
OPS = st.tuples(st.integers(0, 1), st.sampled_from(["cpu_op", "user_annotation"]),
                st.one_of(NAMES, st.sampled_from([EVAL + "X", EVAL + "Y"])), SPAN, DUR)
LAUNCHES = st.tuples(st.integers(0, 1), st.sampled_from(["kernel", "memcpy"]),
                     st.sampled_from(["k1", "k2"]), SPAN, st.integers(0, 30), DUR,
                     st.booleans())
RANK = st.fixed_dictionaries({
    "steps": st.lists(st.tuples(st.integers(1, 3), SPAN, st.integers(5, 20)), max_size=2),
    "ops": st.lists(OPS, max_size=10),
    "launches": st.lists(LAUNCHES, max_size=5),
    "flows": st.lists(st.tuples(SPAN, SPAN), max_size=2)})


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ranks=st.lists(RANK, min_size=2, max_size=3))
def test_batched_equals_frozen_whole(tmp_path_factory: pytest.TempPathFactory,
                                     ranks: list[dict[str, Any]]) -> None:
    trace = _write(tmp_path_factory.mktemp("t"), ranks)
    _check(trace, PARAMS[:2] + PARAMS[2:][::2])


def test_two_processes_batches_of_two(tmp_path: Path) -> None:
    """Three ranks in batches of 2 on a pool of 2 processes (the store opened by each)."""
    ranks = [{"steps": [(r + 1, 0, 20)],
              "ops": [(0, "cpu_op", "c", 0, 10), (0, "cpu_op", "a" if r else "b", 1, 5),
                      (1, "cpu_op", EVAL + "X", 12, 3)],
              "launches": [(0, "kernel", "k1", 2, 20, 4, True),
                           (1, "memcpy", "k2", 13, 25, 2, r != 1)],
              "flows": [(1, 12)] if r == 2 else []} for r in range(3)]
    trace = _write(tmp_path, ranks)
    tree = registry.get_analysis("tree")
    for given_params in ({}, {"by": "rank"}, {"view": "hot_path"}):
        typed = registry.parse_params(tree, given_params)
        got = run_partitioned(tree, trace, typed, LocalEngine(2), ranks_per_task=2)
        _same(got, FrozenTree().run(trace, typed), str(given_params))
