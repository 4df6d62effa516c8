"""The vectorised critical-path solver (``ops/critical_solve.py``) against the plain
per-node loops it replaced, kept here verbatim as the reference: on random small graphs
(Hypothesis) and on random traces run end to end, binding edges, path, length and
what-if lengths must be identical."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import traceatlas
from traceatlas import analysis
from traceatlas.ops import critical_solve as solve
from traceatlas.ops.critical_graph import KINDS, PRIORITY, B, Graph, K
from traceatlas.testing.builder import TraceBuilder

I64 = Any


# --- the reference: the solver as first written (one Python step per node) -----------
def ref_binding(g: Graph) -> I64:
    e = g.edges
    score = g.t_ns[e["src"]] + e["wmin"]
    prio = np.vectorize(lambda k: PRIORITY.get(int(k), 0), otypes=[np.int64])(
        np.arange(len(K)))[e["kind"]] if len(e["kind"]) else np.empty(0, np.int64)
    order = np.lexsort((g.t_ns[e["src"]], prio, score, e["dst"]))
    dst = e["dst"][order]
    last = np.ones(len(order), bool)
    last[:-1] = dst[1:] != dst[:-1]
    out = np.full(len(g.t_ns), -1, np.int64)
    out[dst[last]] = order[last]
    return out


def ref_path_edges(g: Graph, bind: I64) -> I64:
    n = len(g.t_ns)
    if n <= 1:
        return np.empty(0, np.int64)
    is_end = np.zeros(n, bool)
    is_end[g.edges["dst"][g.edges["kind"] == K["duration"]]] = True
    is_end[g.edges["dst"][(g.edges["kind"] == K["collective"])
                          & (g.edges["bound"] == B["gpu_comm"])]] = True
    cand = np.lexsort((np.arange(n), is_end, g.t_ns))
    v = int(cand[-1])
    src_l = g.edges["src"].tolist()
    bind_l = bind.tolist()
    out: list[int] = []
    while v != 0:
        e = bind_l[v]
        if e < 0:
            break
        out.append(e)
        v = src_l[e]
    return np.asarray(out[::-1], np.int64)


def ref_forward(g: Graph, w: I64) -> int:
    n = len(g.t_ns)
    if n <= 1:
        return 0
    e = g.edges
    order = np.lexsort((np.arange(n), g.t_ns))
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n)
    by_dst = np.argsort(pos[e["dst"]], kind="stable")
    dst_pos = pos[e["dst"]][by_dst]
    ptr = np.searchsorted(dst_pos, np.arange(n + 1))
    src_l = e["src"][by_dst].tolist()
    w_l = w[by_dst].tolist()
    ptr_l = ptr.tolist()
    t = [0] * n
    order_l = order.tolist()
    for p in range(n):
        lo, hi = ptr_l[p], ptr_l[p + 1]
        if lo == hi:
            continue
        best = t[src_l[lo]] + w_l[lo]
        for k in range(lo + 1, hi):
            x = t[src_l[k]] + w_l[k]
            if x > best:
                best = x
        t[order_l[p]] = best
    return max(t)


# --- random graphs ----------------------------------------------------------------------
@st.composite
def graphs(draw: st.DrawFn) -> tuple[Graph, I64]:
    """A graph as ``Builder.finish`` leaves it: node 0 the source at time 0, node times
    non-decreasing in clumps (chains of consecutive ids, as host threads and streams are
    allocated), edges forward in (time, id) order, every other node reachable; and a
    random edge mask for a what-if."""
    n = draw(st.integers(2, 40))
    steps = draw(st.lists(st.integers(0, 5), min_size=n - 1, max_size=n - 1))
    # several "tracks": ids in blocks, each block's times increasing from its own start
    n_blocks = draw(st.integers(1, min(4, n - 1)))
    cuts = sorted(draw(st.lists(st.integers(1, n - 1), min_size=n_blocks - 1,
                                max_size=n_blocks - 1, unique=True))) if n > 2 else []
    t = np.zeros(n, np.int64)
    bounds = [1, *cuts, n]
    for b0, b1 in itertools.pairwise(bounds):
        if b0 >= b1:
            continue
        start = draw(st.integers(0, 6))
        t[b0:b1] = start + np.cumsum(steps[b0 - 1:b1 - 1])
    src: list[int] = []
    dst: list[int] = []

    def before(a: int, b: int) -> bool:
        return bool(t[a] < t[b] or (t[a] == t[b] and a < b))

    # chain edges inside blocks, mostly
    for b0, b1 in itertools.pairwise(bounds):
        for v in range(b0 + 1, b1):
            if draw(st.integers(0, 9)) < 8:
                src.append(v - 1)
                dst.append(v)
    extra = draw(st.lists(st.tuples(st.integers(1, n - 1), st.integers(1, n - 1)),
                          max_size=2 * n))
    for a, b in extra:
        if a != b and before(a, b):
            src.append(a)
            dst.append(b)
    has_in = np.zeros(n, bool)
    has_in[dst] = True
    for v in range(1, n):
        if not has_in[v]:
            src.append(0)
            dst.append(v)
    m = len(src)
    s_a, d_a = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    gap = t[d_a] - t[s_a]
    wmin = np.asarray([draw(st.integers(0, int(g))) for g in gap], np.int64)
    kind = np.asarray(draw(st.lists(st.integers(0, len(KINDS) - 1), min_size=m,
                                    max_size=m)), np.int64)
    kind[s_a == 0] = K["source"]
    bound = np.asarray(draw(st.lists(st.integers(0, len(B) - 1), min_size=m, max_size=m)),
                       np.int64)
    owner = np.full(m, -1, np.int64)
    edges = {"src": s_a, "dst": d_a, "wmin": wmin, "kind": kind, "bound": bound,
             "owner": owner}
    g = Graph(0, int(t.max()), t, np.zeros(n, np.int64), np.zeros(n, np.int64), edges,
              pl.DataFrame())
    mask = np.asarray(draw(st.lists(st.booleans(), min_size=m, max_size=m)), bool)
    return g, mask


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(), st.sampled_from([1.0, 2.0, 3.0, 0.5]))
def test_solver_equals_the_per_node_reference(case: tuple[Graph, I64], factor: float
                                              ) -> None:
    g, mask = case
    bind = solve.binding(g)
    assert bind.tolist() == ref_binding(g).tolist()
    assert solve.path_edges(g, bind).tolist() == ref_path_edges(g, bind).tolist()
    w = solve.weights(g, bind, None, 1.0)
    assert solve.forward(g, w) == ref_forward(g, w)
    ws = solve.weights(g, bind, mask, factor)
    assert solve.forward(g, ws) == ref_forward(g, ws)
    # unconstrained weights too (wmin everywhere): still a longest path
    assert solve.forward(g, g.edges["wmin"]) == ref_forward(g, g.edges["wmin"])


# --- random traces, end to end ----------------------------------------------------------
@st.composite
def launch_traces(draw: st.DrawFn) -> list[tuple[str, int, int, int, int, int]]:
    """Launch calls on one thread (no overlap) with kernels on two streams, never before
    their call; kernels on a stream do not overlap."""
    n = draw(st.integers(1, 8))
    out = []
    host = 0
    stream_free = {7: 0, 9: 0}
    for i in range(n):
        host += draw(st.integers(0, 3_000))
        dur = draw(st.integers(100, 2_000))
        stream = draw(st.sampled_from([7, 9]))
        k0 = max(host + draw(st.integers(0, 4_000)), stream_free[stream])
        k_dur = draw(st.integers(100, 8_000))
        stream_free[stream] = k0 + k_dur
        out.append((f"k{i % 3}", host, dur, k0, k_dur, stream))
        host += dur
    return out


@pytest.mark.parametrize("speedup", ["^k1$:2", "cudaLaunchKernel:3"])
@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(launches=launch_traces(), sync_at=st.integers(0, 20_000))
def test_analysis_equals_reference_on_random_traces(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, speedup: str,
        launches: list[tuple[str, int, int, int, int, int]], sync_at: int) -> None:
    b = TraceBuilder(rank=0, profiler_markers=False)
    host_end = 0
    for name, start, dur, k0, k_dur, stream in launches:
        b.launch(name, start, dur, k0, k_dur, stream=stream)
        host_end = start + dur
    last_k = max(k0 + k_dur for _, _, _, k0, k_dur, _ in launches)
    s0 = host_end + sync_at % 1_000
    b.sync(s0, max(last_k - s0, 0) + 100, s0, 50, kind="Context Sync")
    doc = json.loads(b.to_json())
    path = tmp_path / f"r{abs(hash((tuple(launches), sync_at, speedup)))}.json"
    path.write_text(json.dumps(doc))
    trace = traceatlas.open(path)
    new = analysis.run("critical_path", trace, {"speedup": speedup})
    monkeypatch.setattr(solve, "binding", ref_binding)
    monkeypatch.setattr(solve, "path_edges", ref_path_edges)
    monkeypatch.setattr(solve, "forward", ref_forward)
    old = analysis.run("critical_path", trace, {"speedup": speedup})
    monkeypatch.undo()
    assert new.table.equals(old.table)
    assert new.extra["whatif"].equals(old.extra["whatif"])
    assert new.extra["by_bound"].equals(old.extra["by_bound"])
