"""Solving the critical-path graph: binding predecessors, the path, the forward pass and
what-if speedups. Times in ns.

- Binding predecessor of a node: the incoming edge with the largest ``T(src) + wmin``
  (ties: ``critical_graph.PRIORITY``, then the later source). One vectorised sort.
- Path: from the region's last node (latest time; device ends first on ties) back along
  binding edges to the source node; the segments ``[T(src), T(dst)]`` tile the region.
- Forward pass: ``t(v) = max over edges (t(u) + w)`` in time order, ``w`` = the observed
  gap on the binding edge and ``wmin`` elsewhere, each divided by the speedup where the
  what-if applies. With no speedup it reproduces the observed times, so "before" equals
  the region length. A plain loop over nodes with at least one incoming edge, on Python
  lists (numba-free; measured in bench/bench_critical_path.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from traceatlas.errors import InputError
from traceatlas.ops.critical_graph import BOUNDS, PRIORITY, B, Graph, K

if TYPE_CHECKING:
    pass

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
    """Node -> index of its binding incoming edge (-1 for the source)."""
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


def path_edges(g: Graph, bind: I64) -> I64:
    """Edge indices of the critical path, in time order."""
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
    """Length (ns) of the longest path from the source with edge weights ``w``."""
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


def speedup_mask(g: Graph, sp: Speedup) -> npt.NDArray[np.bool_]:
    """Edges whose time the speedup divides: work edges owned by a matching event, and
    host chain segments inside a matching host event (any depth)."""
    import polars as pl

    e = g.edges
    ev = g.events
    if sp.what == "name":
        match = ev["name"].str.contains(sp.value).to_numpy()
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
