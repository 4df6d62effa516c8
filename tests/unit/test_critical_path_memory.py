"""The memory-lean representation of the critical-path graph gives the same answers as
the plain one: regexes on Categorical names mapped by code equal ``str.contains`` on the
strings; narrow edge columns (int32 ids, int8 codes) hold the same values and give the
same binding edges and path as int64 copies of them (the solver does not depend on the
width)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

import traceatlas
from traceatlas.analysis.critical_path import build
from traceatlas.ops import critical_solve as solve
from traceatlas.ops.critical_graph import Edges, Graph, _ids, name_matches
from traceatlas.testing.builder import TraceBuilder

NAMES = ["aten::mm", "cudaDeviceSynchronize", "DataLoader.__next__", "nccl:all_reduce",
         "MPI_Isend", "", "c10d::allreduce_", "autograd::engine::evaluate_function: X"]
PATTERNS = [r"(?i)synchronize", r"(?i)dataloader|data_load", r"^c10d::", r"(?i)^MPI_I",
            r"aten::.*", r"^$", r"nomatch"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(NAMES), st.none()), max_size=40),
       st.sampled_from(PATTERNS))
def test_name_matches_equals_str_contains(names: list[str | None], pattern: str) -> None:
    cat = pl.Series("name", names, dtype=pl.Categorical)
    want = pl.Series("name", names, dtype=pl.String).str.contains(pattern)
    got = name_matches(cat, pattern)
    assert got.to_list() == want.to_list()
    assert name_matches(cat.cast(pl.String), pattern).to_list() == want.to_list()


def test_name_matches_on_a_slice_of_a_larger_column() -> None:
    """Codes of a filtered column index the same categories (no re-encoding)."""
    s = pl.Series("name", NAMES * 50, dtype=pl.Categorical)
    part = s.filter(pl.Series(np.arange(len(s)) % 3 == 1))
    want = part.cast(pl.String).str.contains(r"(?i)synchronize")
    assert name_matches(part, r"(?i)synchronize").to_list() == want.to_list()


def test_ids_narrow_when_they_fit() -> None:
    small = np.array([-1, 0, 2**31 - 1], np.int64)
    assert _ids(small).dtype == np.int32 and (_ids(small) == small).all()
    big = np.array([0, 2**31], np.int64)
    assert _ids(big).dtype == np.int64 and (_ids(big) == big).all()
    assert _ids(np.empty(0, np.int64)).dtype == np.int32


def test_edges_store_narrow_codes() -> None:
    e = Edges()
    e.add(np.array([0, 1]), np.array([1, 2]), np.array([5, 7]), "chain", "cpu", -1)
    a = e.take_arrays()
    assert a["src"].dtype == np.int32 and a["kind"].dtype == np.int8
    assert a["wmin"].dtype == np.int64 and a["wmin"].tolist() == [5, 7]
    assert a["owner"].tolist() == [-1, -1] and e.src == []


def _wide(g: Graph) -> Graph:
    edges = {k: v.astype(np.int64) for k, v in g.edges.items()}
    return Graph(g.r0, g.r1, g.t_ns, g.rank, g.track, edges, g.events, g.dropped)


def test_launch_loop_path_unchanged_by_width(tmp_path: Path) -> None:
    """A launch loop and a stream built here: narrow and int64 edges give the same
    binding edges, path and forward length."""
    b = TraceBuilder(rank=0, profiler_markers=False)
    for i in range(4):
        b.launch(f"k{i}", 1_000 + 10_000 * i, 5_000, 7_000 + 10_000 * i, 3_000 + 4_000 * i)
    path = tmp_path / "rank0.json"
    path.write_text(b.to_json())
    g, _ = build(traceatlas.open(path), None, None)
    assert g.edges["src"].dtype == np.int32 and g.edges["bound"].dtype == np.int8
    w = _wide(g)
    bind, bind_w = solve.binding(g), solve.binding(w)
    assert (bind == bind_w).all()
    assert (solve.path_edges(g, bind) == solve.path_edges(w, bind_w)).all()
    assert solve.forward(g, solve.weights(g, bind, None, 1.0)) == solve.forward(
        w, solve.weights(w, bind_w, None, 1.0)) == int(g.t_ns.max()) - g.r0
