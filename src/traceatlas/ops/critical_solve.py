"""Solving the critical-path graph: binding predecessors, the path, the forward pass and
what-if speedups. Times in ns.

- Binding predecessor of a node: the incoming edge with the largest ``T(src) + wmin``
  (ties: ``critical_graph.PRIORITY``, then the later source). One vectorised sort.
- Path: from the region's last node (latest time; device ends first on ties) back along
  binding edges to the source node; the segments ``[T(src), T(dst)]`` tile the region.
- Forward pass: ``t(v) = max over edges (t(u) + w)`` in time order, ``w`` = the observed
  gap on the binding edge and ``wmin`` elsewhere, each divided by the speedup where the
  what-if applies. With no speedup it reproduces the observed times, so "before" equals
  the region length. Nodes with one incoming edge follow by cumulative sums along runs
  of consecutive ids (host chains, streams) and pointer jumping between runs; only
  *joins* (nodes with several incoming edges) are visited in a Python loop (measured in
  bench/bench_critical_path.py). The per-node loop it replaces is kept as the reference
  in tests/unit/test_critical_path_solver.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from traceatlas.errors import InputError
from traceatlas.ops.critical_graph import BOUNDS, KINDS, PRIORITY, B, Graph, K, name_matches

I64 = npt.NDArray[np.int64]
WORK_BOUNDS = (B["cpu"], B["gpu_compute"], B["gpu_comm"], B["data_load"], B["comm"])
"""Edges a speedup shortens: the time of the work itself (not launches, gaps, waits)."""


@dataclass(frozen=True)
class Speedup:
    """``what`` (``name``: regex on event names, ``category``, ``rank``), its ``value``,
    and ``factor`` (2 = twice as fast)."""

    what: str
    value: str
    factor: float


def parse_speedup(text: str) -> Speedup:
    """``REGEX:F``, ``category:NAME:F`` or ``rank:R:F``."""
    where = "--param speedup"
    head, sep, factor_text = text.rpartition(":")
    if not sep or not head:
        raise InputError(where, f"expected REGEX:FACTOR, category:NAME:FACTOR or "
                         f"rank:R:FACTOR, got {text[:60]!r}")
    try:
        factor = float(factor_text)
    except ValueError:
        raise InputError(where, f"the factor {factor_text[:20]!r} is not a number") from None
    if not (factor > 0 and np.isfinite(factor)):
        raise InputError(where, f"the factor must be a positive number, got {factor_text!r}")
    kind, _, rest = head.partition(":")
    if kind in ("category", "rank") and rest:
        if kind == "rank" and not rest.lstrip("-").isdigit():
            raise InputError(where, f"rank:R:FACTOR needs an integer rank, got {rest[:20]!r}")
        return Speedup(kind, rest, factor)
    try:
        re.compile(head)
    except re.error as exc:
        raise InputError(where, f"bad regular expression {head[:60]!r} ({exc})") from None
    return Speedup("name", head, factor)


def binding(g: Graph) -> I64:
    """Node -> index of its binding incoming edge (-1 for the source). A node with one
    incoming edge binds to it; the edges into join nodes (several incoming edges) are
    sorted once (score, priority, later source, then edge order)."""
    e = g.edges
    n = len(g.t_ns)
    out = np.full(n, -1, np.int64)
    dst_all = e["dst"]
    if not len(dst_all):
        return out
    indeg = np.bincount(dst_all, minlength=n)
    multi = indeg[dst_all] > 1
    single = np.flatnonzero(~multi)
    out[dst_all[single]] = single
    m = np.flatnonzero(multi)
    if not len(m):
        return out
    prio_of = np.zeros(len(KINDS), np.int64)
    for k, p in PRIORITY.items():
        prio_of[k] = p
    src = e["src"][m]
    ts = g.t_ns[src]
    score = ts + e["wmin"][m]
    order = np.lexsort((ts, prio_of[e["kind"][m]], score, dst_all[m]))
    dst = dst_all[m][order]
    last = np.ones(len(order), bool)
    last[:-1] = dst[1:] != dst[:-1]
    out[dst[last]] = m[order[last]]
    return out


def device_ends(g: Graph) -> npt.NDArray[np.bool_]:
    """Per node: the end of device work (a duration edge's or a matched collective's
    ``gpu_comm`` edge's destination), preferred as the path's last node on time ties."""
    e = g.edges
    out = np.zeros(len(g.t_ns), bool)
    out[e["dst"][e["kind"] == K["duration"]]] = True
    out[e["dst"][(e["kind"] == K["collective"]) & (e["bound"] == B["gpu_comm"])]] = True
    return out


def _run_heads(parent: I64) -> I64:
    """For each node, the first node of its run: the largest ``h <= v`` such that every
    node in ``(h, v]`` has ``parent == itself - 1`` (node ids are allocated along
    chains, so a host thread or a stream is mostly one run)."""
    n = len(parent)
    idx = np.arange(n, dtype=np.int64)
    consec = parent == idx - 1
    consec[0] = False
    return np.maximum.accumulate(np.where(consec, 0, idx))


def path_edges(g: Graph, bind: I64) -> I64:
    """Edge indices of the critical path, in time order. The walk back jumps over runs
    of consecutive nodes bound to their predecessor (one step per run, not per node)."""
    n = len(g.t_ns)
    if n <= 1:
        return np.empty(0, np.int64)
    e = g.edges
    is_end = device_ends(g)
    # the latest node; on ties an end of device work, then the highest id
    best = g.t_ns.max()
    top = np.flatnonzero(g.t_ns == best)
    ends = top[is_end[top]]
    v = int(ends[-1] if len(ends) else top[-1])
    parent = np.where(bind >= 0, e["src"][np.maximum(bind, 0)], -1)
    head = _run_heads(parent)
    del parent
    src_a = e["src"]
    # numpy scalars, not lists: a list of every node or edge of a 1 GB rank costs GBs,
    # and the walk visits only one node per run
    pieces: list[I64] = []
    while v != 0:
        h = int(head[v])
        if h < v:
            pieces.append(bind[h + 1:v + 1])
        if h == 0:
            break
        b = int(bind[h])
        if b < 0:
            break
        pieces.append(np.array([b], np.int64))
        v = int(src_a[b])
    if not pieces:
        return np.empty(0, np.int64)
    return np.concatenate(pieces[::-1])


def weights(g: Graph, bind: I64, scaled: npt.NDArray[np.bool_] | None,
            factor: float) -> I64:
    """Edge weights of the forward pass (see module docstring)."""
    e = g.edges
    w = e["wmin"].copy()
    b = bind[bind >= 0]
    w[b] = np.maximum(g.t_ns[e["dst"][b]] - g.t_ns[e["src"][b]], 0)
    if scaled is not None:
        w = np.where(scaled, np.rint(w / factor).astype(np.int64), w)
    return w


def forward(g: Graph, w: I64) -> int:
    """Length (ns) of the longest path from the source with edge weights ``w``.

    A node with one incoming edge is its predecessor's time plus the weight, so every
    node is ``T(root) + offset`` where ``root`` is its nearest ancestor with several
    incoming edges (a *join*: launches meet stream order, syncs, collectives) or none:
    runs of consecutive node ids by cumulative sums, the jumps between runs by pointer
    jumping. Only joins are visited in a loop, in time order."""
    n = len(g.t_ns)
    if n <= 1:
        return 0
    e = g.edges
    src_a, dst_a = e["src"], e["dst"]
    indeg = np.bincount(dst_a, minlength=n) if len(dst_a) else np.zeros(n, np.int64)
    one = indeg == 1
    parent = np.full(n, -1, np.int64)
    c = np.zeros(n, np.int64)
    k1 = np.flatnonzero(one[dst_a])
    parent[dst_a[k1]] = src_a[k1]
    c[dst_a[k1]] = w[k1]
    idx = np.arange(n, dtype=np.int64)
    head = _run_heads(parent)
    consec = head != idx
    cw = np.cumsum(np.where(consec, c, 0))
    off_run = cw - cw[head]
    # heads: roots (indegree != 1) anchor themselves; others hang off their parent's run
    anc = idx.copy()
    off_h = np.zeros(n, np.int64)
    hs = np.flatnonzero(~consec & one)
    anc[hs] = head[parent[hs]]
    off_h[hs] = off_run[parent[hs]] + c[hs]
    is_root = ~one
    todo = hs[~is_root[anc[hs]]]
    while len(todo):
        a = anc[todo]
        off_h[todo] = off_h[todo] + off_h[a]
        anc[todo] = anc[a]
        todo = todo[~is_root[anc[todo]]]
    root = anc[head]
    off = off_h[head] + off_run
    joins = np.flatnonzero(indeg > 1)
    t_root = np.zeros(n, np.int64)
    if len(joins):
        order = np.lexsort((joins, g.t_ns[joins]))
        joins = joins[order]
        rank_of = np.full(n, -1, np.int64)
        rank_of[joins] = np.arange(len(joins))
        kj = np.flatnonzero(indeg[dst_a] > 1)
        kj = kj[np.argsort(rank_of[dst_a[kj]], kind="stable")]
        ptr = np.searchsorted(rank_of[dst_a[kj]], np.arange(len(joins) + 1)).tolist()
        # times of joins by their rank in time order; slot len(joins): roots without
        # an incoming edge (time 0)
        r_of = rank_of[root[src_a[kj]]]
        r_l = np.where(r_of < 0, len(joins), r_of).tolist()
        c_l = (off[src_a[kj]] + w[kj]).tolist()
        t = [0] * (len(joins) + 1)
        for i in range(len(joins)):
            lo, hi = ptr[i], ptr[i + 1]
            best = t[r_l[lo]] + c_l[lo]
            for k in range(lo + 1, hi):
                x = t[r_l[k]] + c_l[k]
                if x > best:
                    best = x
            t[i] = best
        t_root[joins] = t[:-1]
    return int((t_root[root] + off).max())


def speedup_mask(g: Graph, sp: Speedup) -> npt.NDArray[np.bool_]:
    """Edges whose time the speedup divides: work edges owned by a matching event, and
    host chain segments inside a matching host event (any depth)."""
    import polars as pl

    e = g.edges
    ev = g.events
    if sp.what == "name":
        match = name_matches(ev["name"], sp.value).to_numpy()
    elif sp.what == "category":
        match = (ev["category"] == sp.value).to_numpy()
    else:
        match = (ev["rank"] == int(sp.value)).to_numpy()
    own = e["owner"]
    work = np.isin(e["bound"], WORK_BOUNDS) & (e["kind"] != K["source"])
    mask: npt.NDArray[np.bool_] = np.asarray(work & (own >= 0) & match[np.maximum(own, 0)],
                                             dtype=bool)
    if sp.what == "rank":
        return np.asarray(mask | (work & (g.rank[e["dst"]] == int(sp.value))), dtype=bool)
    # Chain segments inside a matching host event (an annotation, an enclosing op).
    chain = np.flatnonzero(work & (e["kind"] == K["chain"]) & ~mask)
    hits = ev.filter(pl.Series(match) & ~pl.col("category").is_in(
        ("kernel", "comm_kernel", "memcpy", "memset", "sync", "gpu_annotation")))
    if len(chain) and hits.height:
        from traceatlas.ops.unions import union_segments

        spans = union_segments(hits.lazy().select("rank", "track_id", "start_ns", "end_ns"),
                               ["rank", "track_id"]).collect()
        seg = pl.DataFrame({"i": chain, "rank": g.rank[e["src"][chain]].astype(np.int32),
                            "track_id": g.track[e["src"][chain]].astype(np.int32),
                            "s": g.t_ns[e["src"][chain]], "d": g.t_ns[e["dst"][chain]]})
        got = (seg.sort("s").join_asof(
            spans.with_columns(pl.col("rank").cast(pl.Int32), pl.col("track_id")
                               .cast(pl.Int32)).sort("start_ns"),
            left_on="s", right_on="start_ns", by=["rank", "track_id"], strategy="backward",
            check_sortedness=False)
            .filter(pl.col("end_ns") >= pl.col("d")))
        mask[got["i"].to_numpy()] = True
    return mask


def bound_names() -> tuple[str, ...]:
    """The bound vocabulary, in code order."""
    return BOUNDS
