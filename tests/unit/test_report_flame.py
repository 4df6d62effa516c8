"""The report's flame graph (``report/flame.py``): the icicle layout of hand-made trees
(fractions computed by hand), the SVG parsed back (the root spans the width, each child's
width is proportional to its time within 1 px, no child outside its parent), folding into
``other``, merged chains, escaping, and the rank chosen on a built two-rank trace."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import traceatlas
from traceatlas.report import flame
from traceatlas.report.results import Results
from traceatlas.testing.builder import TraceBuilder, write_multi_rank
from traceatlas.testing.flame import canonical_html, canonical_section

WIDTH = 1100


def _nodes(rows: list[tuple[int, int | None, str, str, int]]) -> pl.DataFrame:
    """(node_id, parent_id, name, category, inclusive ns) -> a tree table (depth from the
    parents, listed parents first)."""
    depth: dict[int, int] = {}
    for node, parent, *_ in rows:
        depth[node] = 0 if parent is None else depth[parent] + 1
    return pl.DataFrame(
        {"node_id": [r[0] for r in rows], "parent_id": [r[1] for r in rows],
         "depth": [depth[r[0]] for r in rows], "name": [r[2] for r in rows],
         "category": [r[3] for r in rows], "device_inclusive_ns": [r[4] for r in rows]},
        schema={"node_id": pl.Int64, "parent_id": pl.Int64, "depth": pl.Int32,
                "name": pl.String, "category": pl.String, "device_inclusive_ns": pl.Int64})


# root 1000 = A 600 + B 300 + 100 exclusive; A = A1 400 + A2 150 + 50; B = 3 + 2 + 295.
TREE = [(0, None, "[root]", "root", 1000), (1, 0, "A", "cpu_op", 600),
        (2, 0, "B", "annotation", 300), (3, 1, "A1", "kernel", 400),
        (4, 1, "A2", "python", 150), (5, 2, "tiny1", "cpu_op", 3), (6, 2, "tiny2", "cpu_op", 2),
        (7, 0, "zero", "cpu_op", 0)]


def _boxes(graph: flame.Flame) -> dict[str, flame.FlameBox]:
    return {b.name if b.node_id >= 0 else f"other@{b.parent_id}": b for b in graph.boxes}


def test_layout_by_hand() -> None:
    graph = flame.layout(_nodes(TREE), "device_inclusive_ns", "device")
    assert graph is not None and graph.root_ns == 1000
    boxes = _boxes(graph)
    # kept: >= 0.5% of 1000 = 5 ns; tiny1 (3) and tiny2 (2) fold into B's "other" (5);
    # "zero" has no time and is not drawn
    assert set(boxes) == {"[root]", "A", "B", "A1", "A2", "other@2"}
    expect = {"[root]": (0, 0.0, 1.0), "A": (1, 0.0, 0.6), "B": (1, 0.6, 0.3),
              "A1": (2, 0.0, 0.4), "A2": (2, 0.4, 0.15), "other@2": (2, 0.6, 0.005)}
    for name, (depth, x, w) in expect.items():
        assert (boxes[name].depth, boxes[name].x, boxes[name].w) == \
            (depth, pytest.approx(x), pytest.approx(w)), name
    assert boxes["other@2"].folded == 2 and graph.folded == 2


def _rects(svg_text: str) -> dict[int, tuple[float, float, int | None, int, int]]:
    """``data-node`` -> (x, width, parent, depth, ns); "other" boxes get negative keys."""
    root = ET.fromstring(svg_text)
    out: dict[int, tuple[float, float, int | None, int, int]] = {}
    others = 0
    for rect in root.iter():
        if not rect.tag.endswith("rect") or rect.get("data-node") is None:
            continue
        node = int(rect.get("data-node", "0"))
        if node < 0:
            others += 1
            node = -others
        parent = rect.get("data-parent")
        out[node] = (float(rect.get("x", "nan")), float(rect.get("width", "nan")),
                     None if parent is None else int(parent), int(rect.get("data-depth", "0")),
                     int(rect.get("data-ns", "0")))
    return out


def _check_svg(svg_text: str) -> None:
    rects = _rects(svg_text)
    roots = [r for r in rects.values() if r[2] is None]
    assert len(roots) == 1
    rx, rw, _, _, root_ns = roots[0]
    assert rx == 0 and rw == pytest.approx(WIDTH, abs=0.01)  # the root spans the width
    for x, w, parent, _, ns in rects.values():
        if parent is None:
            continue
        px, pw, _, _, pns = rects[parent]
        assert abs(w - WIDTH * ns / root_ns) <= 1.0  # proportional to its time
        assert abs(w / pw - ns / pns) * pw <= 1.0  # and to its parent's
        assert x >= px - 0.02 and x + w <= px + pw + 0.02  # inside its parent
    by_parent: dict[int | None, list[tuple[float, float]]] = {}
    for x, w, parent, _, _ in rects.values():
        by_parent.setdefault(parent, []).append((x, w))
    for kids in by_parent.values():  # siblings do not overlap
        kids.sort()
        for (x0, w0), (x1, _) in itertools.pairwise(kids):
            assert x0 + w0 <= x1 + 0.02  # .2f rounding of x and width


def test_svg_geometry_by_hand() -> None:
    graph = flame.layout(_nodes(TREE), "device_inclusive_ns", "device")
    assert graph is not None
    text = flame.graph_svg(graph, WIDTH)
    _check_svg(text)
    rects = _rects(text)
    assert (rects[2][0], rects[2][1]) == (pytest.approx(660), pytest.approx(330))  # B


@st.composite
def trees(draw: st.DrawFn) -> list[tuple[int, int | None, str, str, int]]:
    """Random trees; a node's time = its own exclusive time + its children's times."""
    n = draw(st.integers(1, 60))
    parents = [None] + [draw(st.integers(0, i - 1)) for i in range(1, n)]
    own = [draw(st.integers(0, 10_000)) for _ in range(n)]
    total = own[:]
    for i in range(n - 1, 0, -1):
        total[parents[i]] += total[i]  # type: ignore[index]
    cats = ["cpu_op", "python", "kernel", "annotation", "runtime", "mpi", "root"]
    return [(i, parents[i], f"n{i}", cats[i % len(cats)], total[i]) for i in range(n)]


@settings(max_examples=60, deadline=None)
@given(trees(), st.sampled_from([0.0, 0.005, 0.05]), st.booleans())
def test_svg_geometry_on_random_trees(rows: list[tuple[int, int | None, str, str, int]],
                                      share: float, merge: bool) -> None:
    graph = flame.layout(_nodes(rows), "device_inclusive_ns", "device", min_share=share,
                         merge_chains=merge)
    if rows[0][4] == 0:
        assert graph is None
        return
    assert graph is not None
    _check_svg(flame.graph_svg(graph, WIDTH))
    kept = {b.node_id for b in graph.boxes if b.node_id >= 0}
    if not merge:  # every node at or above the share (with time) has its own box
        assert kept == {r[0] for r in rows if r[4] > 0 and r[4] >= share * rows[0][4]}


def test_chain_of_single_children_shares_one_box() -> None:
    rows = [(0, None, "[root]", "root", 100), (1, 0, "P", "python", 100),
            (2, 1, "Q", "python", 100), (3, 2, "R", "cpu_op", 60), (4, 2, "S", "kernel", 40)]
    graph = flame.layout(_nodes(rows), "device_inclusive_ns", "device")
    assert graph is not None
    named = {b.node_id: b for b in graph.boxes}
    assert set(named) == {0, 1, 3, 4}
    assert named[1].chain == ["P", "Q"] and named[1].category == "python"
    assert (named[3].depth, named[3].parent_id, named[4].x) == (2, 1, pytest.approx(0.6))


def test_names_are_escaped_and_shortened() -> None:
    evil = "<script>alert('x')</script> & aten::" + "very_long_name" * 10
    rows = [(0, None, "[root]", "root", 100), (1, 0, evil, "cpu_op", 100)]
    graph = flame.layout(_nodes(rows), "device_inclusive_ns", "device", merge_chains=False)
    assert graph is not None
    text = flame.graph_svg(graph, WIDTH)
    assert "<script>" not in text and "&lt;script&gt;" in text
    root = ET.fromstring(text)  # parses: every name is escaped
    titles = [t.text or "" for t in root.iter() if t.tag.endswith("title")]
    assert any(evil in t for t in titles)  # the full name in the tooltip
    labels = [t.text or "" for t in root.iter()
              if t.tag.endswith("text") and t.get("class") == "flbl"]
    assert labels and all(len(lbl) <= WIDTH / flame.CHAR_W for lbl in labels)
    # 100 px: (100 - 6) // 6.4 = 14 characters
    assert flame.label_text(["aten::convolution_backward"], 100) == "convolution_b\u2026"
    assert flame.label_text(["aten::mm"], 100) == "aten::mm"
    assert flame.label_text(["a/b/model.py(12): forward"], 100) == "forward"
    assert flame.label_text(["a/b/model.py(12): forward"], 160) == "model.py(12): forward"
    assert flame.label_text(["x"], 10) == ""


def test_rank_with_most_device_time(tmp_path: Path) -> None:
    """Rank 1's kernels run 3,000 ns, rank 0's 1,000 ns: rank 1 is drawn, its device root
    is 3,000 ns."""
    builders = []
    for rank, dur in ((0, 1_000), (1, 3_000)):
        b = TraceBuilder(rank, 2)
        b.step(1, 0, 10_000)
        b.cpu_op("aten::mm", 100, 2_000)
        b.launch("gemm", 200, 100, 1_000, dur)
        builders.append(b)
    write_multi_rank(tmp_path / "run", builders)
    section = flame.build(Results(traceatlas.open(str(tmp_path / "run"))))
    assert section.rank == 1 and "most device time" in section.why
    device = section.graphs[0]
    assert (device.metric, device.root_ns) == ("device", 3_000)
    assert [g.metric for g in section.graphs] == ["device", "host"]
    kernel = [b for b in device.boxes if b.chain[-1] == "gemm"]
    assert kernel and kernel[0].value_ns == 3_000


# -- the rank chosen without the whole tree (``flame.busiest_rank``, ``flame.build``) ------

def _tree_choice(trace: traceatlas.Trace) -> tuple[int, int, int] | None:
    """The former rule on the tree of every rank: (rank, ranks with a root, device ns)."""
    table = Results(trace).get("tree", {"view": "top_down", "by": "rank"}).table
    roots = table.filter(pl.col("depth") == 0).sort("rank")
    if roots.height == 0:
        return None
    best = roots.sort(["device_inclusive_ns", "rank"], descending=[True, False]).row(
        0, named=True)
    ns = int(best["device_inclusive_ns"] or 0)
    return (int(best["rank"]) if ns > 0 else int(roots["rank"][0])), roots.height, ns


def assert_same_as_whole(trace: traceatlas.Trace) -> flame.FlameSection:
    """``build`` (one-rank tree) against ``build_whole`` (every rank): same boxes, values,
    why text and HTML up to node numbering."""
    new = flame.build(Results(trace))
    old = flame.build_whole(Results(trace))
    assert canonical_section(new) == canonical_section(old)
    assert canonical_html(flame.html(new, "")) == canonical_html(flame.html(old, ""))
    return new


def _ranks(tmp_path: Path, plans: dict[int, list[tuple[str, int]]],
           host_only_tid: bool = False) -> traceatlas.Trace:
    """One rank per plan entry: a step, an op, and per (kind, ns) a launch of that kind
    running ns on the device (no launch: the rank has host activity only)."""
    builders = []
    for rank, launches in plans.items():
        b = TraceBuilder(rank, max(plans) + 1)
        b.step(1, 0, 100_000)
        b.cpu_op("aten::mm", 100, 50_000)
        for i, (kind, ns) in enumerate(launches):
            name = {"kernel": f"gemm{i % 2}", "memcpy": "Memcpy HtoD (Pageable -> Device)",
                    "memset": "Memset (Device)"}[kind]
            b.launch(name, 200 + 1_000 * i, 100, 1_000 + 10_000 * i, ns,
                     kind=kind, nbytes=64 if kind != "kernel" else None)  # type: ignore[arg-type]
        builders.append(b)
    write_multi_rank(tmp_path / "run", builders)
    return traceatlas.open(str(tmp_path / "run"))


CASES = {
    # device ns per rank by hand: 0: 1,000 + 500 = 1,500; 1: 3,000; 2: 2,000 + 1,000 =
    # 3,000 (a tie with rank 1: the lower rank); 3: host only
    "tie": ({0: [("kernel", 1_000), ("memcpy", 500)], 1: [("kernel", 3_000)],
             2: [("kernel", 2_000), ("memset", 1_000)], 3: []}, (1, 4, 3_000)),
    "no device time": ({0: [], 1: [], 2: []}, (0, 3, 0)),
    "one rank": ({0: [("kernel", 700)]}, (0, 1, 700)),
    "last rank busiest": ({0: [("memset", 10)], 1: [], 2: [("kernel", 11)]}, (2, 3, 11)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_busiest_rank_is_the_tree_choice(tmp_path: Path, case: str) -> None:
    plans, expected = CASES[case]
    trace = _ranks(tmp_path, plans)
    assert flame.busiest_rank(trace) == expected  # by hand
    assert _tree_choice(trace) == expected  # the former rule on the whole tree
    section = assert_same_as_whole(trace)
    assert section.rank == expected[0]
    if expected[2] == 0:
        assert "no device time" in section.why
    elif expected[1] > 1:
        assert "most device time" in section.why


def test_ranks_not_from_zero_and_a_selection(tmp_path: Path) -> None:
    """Ranks 2 and 5 (5 busier), then a view keeping rank 2 only."""
    trace = _ranks(tmp_path, {2: [("kernel", 400)], 5: [("kernel", 900)]})
    assert flame.busiest_rank(trace) == _tree_choice(trace) == (5, 2, 900)
    assert_same_as_whole(trace)
    view = trace.select(ranks=[2])
    assert flame.busiest_rank(view) == _tree_choice(view) == (2, 1, 400)
    assert assert_same_as_whole(view).why == "rank 2"


def test_empty_tree_says_why(tmp_path: Path) -> None:
    """No interval in the view: the whole-trace path's reason."""
    from traceatlas.report.results import Unavailable

    trace = _ranks(tmp_path, {0: [("kernel", 5)]}).select(categories=["counter"])
    assert flame.busiest_rank(trace) is None
    with pytest.raises(Unavailable) as new:
        flame.build(Results(trace))
    with pytest.raises(Unavailable) as old:
        flame.build_whole(Results(trace))
    assert new.value.reason == old.value.reason
