"""``critical_path`` in rank batches: each batch builds the graph of its own ranks only,
so memory follows the batch, not the number of ranks. Results equal the whole run's.

Why it can be split: a node's binding predecessor depends only on the observed times of
its incoming edges (``ops/critical_solve.binding``), and the only edges between ranks are
collective instances and messages. A batch builds the graph of its ranks' region
intervals plus *stubs*: the few intervals of the other ranks that cross-rank edges start
from (communication kernels, blocking MPI collectives, host collective records with the
calls inside them), so every collective instance of the region is matched exactly as in
the whole graph and every node of the batch has the incoming edges (and times) it has
there. Three passes over the batches:

1. ``bounds``: each batch's first start and last ends; the region [lo, hi] and the ranks
   with intervals in it are fixed over every batch (``region_events``' rule).
2. ``stubs``: each batch's cross-rank intervals, its host collective records over the
   whole trace (their occurrence numbers), and for each message the host track of the
   side the batch holds (a message is kept when both sides are inside MPI calls).
3. ``partial``: the batch's graph; for every node of its ranks the binding edge. From
   each point another rank's walk can enter (an instance whose last arrival is the
   batch's, a message the batch sent, the batch's latest node) the walk back is followed
   through the batch's nodes until it leaves them (an instance of another rank, a
   message from another rank, the region's source); visited nodes are sent once each
   with their edge, so what travels is the walks, not the graph.

The merge picks the latest node over the batches (ties: ends of device work, then the
whole graph's highest node id: host chains before device nodes before instances, rank
order within them), follows the walks across batches, and builds the tables with the
whole run's functions. Edge counts and dropped edges are charged to the rank of the edge's
destination (an instance: its last arrival), so each is counted once. With
``region=annotation:NAME[:I]`` a first pass (``region``) finds the instance over every
batch. The what-if (``speedup``) runs whole: its forward pass would need a round over the
batches per collective. Times in ns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from traceatlas.analysis.base import Result
from traceatlas.errors import MissingDataError

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace
    from traceatlas.ops.critical_graph import Graph

EXIT_NONE, EXIT_INST, EXIT_MSG = 0, 1, 2
"""How a walk leaves a batch: the region's source, an instance node, a message."""
_EDGE_KIND = {"host_wakeups": "wakeup", "handoffs": "handoff"}
"""``dependencies`` rows named otherwise than the edge kind they count."""
_KEY_SHIFT = 32
"""An owner event's key across batches: rank << 32 | its row in the batch's events."""


def _ranks_of(trace: Trace) -> tuple[int, ...]:
    from traceatlas.ops.select import Selection

    for sel in reversed(trace.selections):
        if isinstance(sel, Selection) and sel.ranks is not None:
            return tuple(int(r) for r in sel.ranks)
    return tuple(int(r) for r in trace.ranks)


# ---- pass 1: the region ---------------------------------------------------------------

def region(trace: Trace, params: Mapping[str, Any]) -> Result:
    """``region=annotation:NAME[:I]``: the batch's intervals named NAME (start, end)."""
    from traceatlas.analysis.critical_path import annotation_rows, parse_region

    name, _ = parse_region(str(params["region"]))
    return Result(annotation_rows(trace, name), {}, [])


def prepared_region(partials: Sequence[Result], params: Mapping[str, Any]
                    ) -> dict[str, Any]:
    """The region's ``r0``/``r1``: the I-th instance over every batch (rank order)."""
    import polars as pl

    from traceatlas.analysis.critical_path import parse_region, region_instance

    name, i = parse_region(str(params["region"]))
    rows = pl.concat([p.table for p in partials]) if partials else pl.DataFrame(
        schema={"start_ns": pl.Int64, "end_ns": pl.Int64})
    r0, r1 = region_instance(rows, name, i)
    return {"r0": r0, "r1": r1}


def bounds(trace: Trace, params: Mapping[str, Any]) -> Result:
    """First start, last end, last end of the intervals starting at or after the
    region's start, and the ranks, of the batch's region intervals."""
    import polars as pl

    from traceatlas.analysis.critical_path import selection_region
    from traceatlas.ops.critical_graph import region_frame

    r0, r1 = (params["r0"], params["r1"]) if params.get("region") else \
        selection_region(trace)
    frame = region_frame(trace.intervals, r0, r1)
    after = pl.col("start_ns") >= (r0 if r0 is not None else pl.col("start_ns").min())
    row = frame.select(pl.col("start_ns").min().alias("first"),
                       pl.col("end_ns").max().alias("last"),
                       pl.col("end_ns").filter(after).max().alias("last_after"),
                       pl.len().alias("n"),
                       pl.col("rank").cast(pl.Int64).unique().implode().alias("ranks"),
                       ).collect()
    ranks = pl.DataFrame({"rank": row["ranks"][0]}, schema={"rank": pl.Int64})
    row = row.drop("ranks").with_columns(r0=pl.lit(r0, pl.Int64), r1=pl.lit(r1, pl.Int64))
    return Result(row, {"ranks": ranks}, [])


def prepared_bounds(partials: Sequence[Result], params: Mapping[str, Any]) -> dict[str, Any]:
    """``lo``, ``hi`` (the region), ``span`` (first and last clipped times: the message
    window of ``message_points``) and ``region_ranks``; ``lo`` None when no batch has
    an interval in the region."""
    rows = [p.table.row(0, named=True) for p in partials if p.table.height
            and p.table["n"][0]]
    if not rows:
        return {"lo": None, "region_rows": 0}
    r0, r1 = rows[0]["r0"], rows[0]["r1"]  # the selections' (the same in every batch)
    first = min(int(r["first"]) for r in rows)
    lo = first if r0 is None else r0
    if r1 is not None:
        hi = r1
    else:
        afters = [int(r["last_after"]) for r in rows if r["last_after"] is not None]
        hi = max(afters) if afters else lo
    last = max(int(r["last"]) for r in rows)
    ranks = sorted({int(x) for p in partials for x in p.extra["ranks"]["rank"]})
    return {"lo": lo, "hi": hi, "span": (min(max(first, lo), hi), min(max(last, lo), hi)),
            "region_ranks": tuple(ranks), "region_rows": sum(int(r["n"]) for r in rows)}


# ---- pass 2: what other batches need -----------------------------------------------

def stubs(trace: Trace, params: Mapping[str, Any]) -> Result:
    """The batch's cross-rank intervals (``cross``), host collective records over the
    whole trace (``records``) and message sides (``sides``)."""
    import polars as pl

    from traceatlas.analysis.critical_path import _unselected
    from traceatlas.ops import critical_ranks as cr
    from traceatlas.ops.critical_graph import NOT_HOST, name_matches, region_events
    from traceatlas.ops.critical_host_coll import HOST_WORK_RE
    from traceatlas.ops.replay import SYNC_COLLECTIVE

    if params.get("lo") is None:
        return Result(pl.DataFrame(), {}, [])
    events, _, _ = region_events(trace.intervals, params["lo"], params["hi"])
    name = events["name"]
    host = ~events["category"].is_in(NOT_HOST)
    work = host & name_matches(name, HOST_WORK_RE).fill_null(value=False)
    # the calls inside a record (its chain points): the latest record of the thread
    # starting at or before the call, still open at its start, shallower
    recs = events.filter(work).select("rank", "track_id", pl.col("depth").alias("r_depth"),
                                      pl.col("start_ns").alias("r_start"),
                                      pl.col("end_ns").alias("r_end")).sort("r_start")
    inside = (events.filter(host).select("eid", "rank", "track_id", "depth", "start_ns")
              .sort("start_ns")
              .join_asof(recs, left_on="start_ns", right_on="r_start",
                         by=["rank", "track_id"], strategy="backward",
                         check_sortedness=False)
              .filter((pl.col("depth") > pl.col("r_depth"))
                      & (pl.col("start_ns") <= pl.col("r_end")))["eid"])
    keep = ((events["category"] == "comm_kernel")
            | ((events["category"] == "mpi") & ~name_matches(name, r"(?i)^MPI_I")
               & (events["collective"].is_not_null() | name_matches(name, SYNC_COLLECTIVE)))
            | work | events["eid"].is_in(inside.implode()))
    cross = events.filter(keep.fill_null(value=False)).drop("eid")
    whole = _unselected(trace)
    records = (whole.filter(~pl.col("category").is_in(NOT_HOST)
                            & pl.col("name").cast(pl.String).str.contains(HOST_WORK_RE))
               .select("rank", "track_id", "start_ns", "end_ns",
                       pl.col("name").cast(pl.String), pl.col("category").cast(pl.String),
                       pl.col("process_group").cast(pl.String)).collect())
    sides = pl.DataFrame()
    if bool((events["category"] == "mpi").any()):
        span = params["span"]
        msgs = cr.message_rows(trace.messages.collect(), span[0], span[1],
                               list(params["region_ranks"])).with_row_index("m")
        send = cr.message_side(events, msgs, "src_rank", "send_start_ns", "send")
        recv = cr.message_side(events, msgs, "dst_rank", "recv_end_ns", "recv")
        sides = (msgs.join(send, on="m", how="left").join(recv, on="m", how="left")
                 .filter(pl.col("send_track").is_not_null()
                         | pl.col("recv_track").is_not_null())
                 .select(*cr.MESSAGE_KEY, pl.col("send_track").cast(pl.Int64),
                         pl.col("recv_track").cast(pl.Int64)))
    return Result(pl.DataFrame(), {"cross": cross, "records": records, "sides": sides}, [])


def prepared_stubs(partials: Sequence[Result], params: Mapping[str, Any]) -> dict[str, Any]:
    """``cross`` and ``records`` over every batch (rank order), and ``messages``: those
    both of whose sides lie inside MPI calls, with both tracks and a global index ``mi``."""
    import polars as pl

    from traceatlas.ops.critical_ranks import MESSAGE_KEY

    if params.get("lo") is None:
        return {}
    cross = [p.extra["cross"] for p in partials if "cross" in p.extra]
    records = [p.extra["records"] for p in partials if "records" in p.extra]
    sides = [p.extra["sides"] for p in partials if p.extra.get("sides") is not None
             and p.extra["sides"].height]
    msgs = pl.DataFrame()
    if sides:
        msgs = (pl.concat(sides).group_by(list(MESSAGE_KEY)).agg(
            pl.col("send_track").drop_nulls().first(), pl.col("recv_track").drop_nulls()
            .first())
            .drop_nulls(["send_track", "recv_track"]).sort(list(MESSAGE_KEY))
            .with_row_index("mi").with_columns(pl.col("mi").cast(pl.Int64)))
    return {"cross": pl.concat(cross, how="vertical_relaxed") if cross else None,
            "records": pl.concat(records, how="vertical_relaxed") if records else None,
            "messages": msgs}


# ---- pass 3: the batch's graph and its walks ----------------------------------------

def batch_params(params: Mapping[str, Any], batch: tuple[int, ...]) -> dict[str, Any]:
    """The map step's parameters for ``batch``: the messages with a side in it and the
    other ranks' cross-rank intervals (not every message and every rank's stubs)."""
    import polars as pl

    out = dict(params)
    ranks = list(batch)
    msgs = params.get("messages")
    if msgs is not None and msgs.height:
        out["messages"] = msgs.filter(pl.col("src_rank").is_in(ranks)
                                      | pl.col("dst_rank").is_in(ranks))
    cross = params.get("cross")
    if cross is not None and cross.height:
        out["cross"] = cross.filter(~pl.col("rank").cast(pl.Int64).is_in(ranks))
    return out


def partial(trace: Trace, params: Mapping[str, Any]) -> Result:
    """The batch's walks (``nodes``), entry points (``entries``), participants' waits at
    instances (``waits``), instances per last-arrival rank (``every``), edge counts
    (``counts``) and its latest node (``candidate``)."""
    import polars as pl

    from traceatlas.analysis.critical_path import _fwdbwd, graph_of
    from traceatlas.ops import critical_solve as solve
    from traceatlas.ops.critical_graph import region_events

    if params.get("lo") is None:
        raise MissingDataError("critical_path", "no intervals in the region")
    lo, hi = int(params["lo"]), int(params["hi"])
    ranks = _ranks_of(trace)
    params = batch_params(params, ranks)  # as the engine sent them (a direct call too)
    batch = np.array(ranks, np.int64)
    own, _, _ = region_events(trace.intervals, lo, hi)
    parts = [own.drop("eid")]
    cross = params.get("cross")
    if cross is not None and cross.height:
        parts.append(cross.select(parts[0].columns).cast(dict(parts[0].schema)))
    events = (pl.concat(parts, how="vertical").with_row_index("_o")
              .sort("rank", "_o").drop("_o").with_row_index("eid")
              .with_columns(pl.col("eid").cast(pl.Int64)))
    msgs, mi = _batch_messages(events, params.get("messages"))
    records = params.get("records")
    whole = records.lazy() if records is not None else None
    g, counts = graph_of(events, lo, hi, msgs, whole, _fwdbwd(trace))
    bind = solve.binding(g)
    return _walks(g, bind, batch, counts, msgs, mi, events)


def _batch_messages(events: pl.DataFrame, messages: pl.DataFrame | None
                    ) -> tuple[pl.DataFrame, np.ndarray[Any, Any]]:
    """The ``message_points`` rows of the batch's messages (``batch_params``: those with
    a side in it; the receive's call found in ``events``) and their global indices."""
    import polars as pl

    from traceatlas.ops import critical_ranks as cr

    if messages is None or messages.height == 0:
        return cr.message_points(events, pl.DataFrame()), np.empty(0, np.int64)
    m = messages.with_row_index("m")
    recv = cr.message_side(events, m, "dst_rank", "recv_end_ns", "recv")
    got = m.join(recv.select("m", "recv_eid"), on="m", how="left").sort("m")
    out = got.select("src_rank", "dst_rank", "send_start_ns", "recv_end_ns",
                     pl.col("send_track").cast(pl.Int64), pl.col("recv_track").cast(pl.Int64),
                     pl.col("recv_eid").cast(pl.Int64).fill_null(-1))
    return out, got["mi"].to_numpy().astype(np.int64)


def _walks(g: Graph, bind: np.ndarray[Any, Any], batch: np.ndarray[Any, Any],
           counts: dict[str, int], msgs: pl.DataFrame, mi: np.ndarray[Any, Any],
           events: pl.DataFrame) -> Result:
    import polars as pl

    from traceatlas.analysis.critical_path import path_edges_frame
    from traceatlas.ops.critical_graph import B, K
    from traceatlas.ops.critical_solve import _run_heads

    e = g.edges
    n = len(g.t_ns)
    owned = np.isin(g.rank, batch)
    owned[0] = False
    h_end, d_end = g.phase_ends
    is_inst = np.arange(n) >= d_end
    parent = np.where(bind >= 0, e["src"][np.maximum(bind, 0)], -1).astype(np.int64)
    local = np.where(owned[np.maximum(parent, 0)] & (parent > 0), parent, -1)
    # where a walk leaves: the source, an instance (ordinal), a message (global index)
    send_node = g.extra_node[:msgs.height] if msgs.height else np.empty(0, np.int64)
    msg_of = np.full(n, -1, np.int64)
    if len(send_node):
        msg_of[send_node] = mi
    # entries: owned instances, owned send points, the batch's latest node
    entries: list[tuple[int, int, int]] = []
    inst_ids = np.flatnonzero(is_inst & owned)
    entries += [(EXIT_INST, int(v - d_end), int(v)) for v in inst_ids]
    sends = np.flatnonzero(owned & (msg_of >= 0))
    entries += [(EXIT_MSG, int(msg_of[v]), int(v)) for v in sends]
    cand = _candidate(g, owned, h_end, d_end)
    starts = [v for _, _, v in entries]
    if cand is not None:
        starts.append(cand[-1])
    head = _run_heads(local)
    visited = np.zeros(n, bool)
    blocks: list[np.ndarray[Any, Any]] = []
    for v0 in sorted(set(starts), key=lambda v: -int(g.t_ns[v])):
        v = v0
        while v > 0 and owned[v] and not visited[v]:
            h = int(head[v])
            seen = np.flatnonzero(visited[h:v + 1])
            lo_ = h + int(seen[-1]) + 1 if len(seen) else h
            block = np.arange(lo_, v + 1)
            visited[block] = True
            blocks.append(block)
            if len(seen):
                break
            v = int(local[h]) if local[h] > 0 else -1
    nodes = np.unique(np.concatenate(blocks)) if blocks else np.empty(0, np.int64)
    key = pl.Series((events["rank"].cast(pl.Int64).to_numpy() << _KEY_SHIFT)
                    + events["eid"].to_numpy())
    frame = path_edges_frame(g, bind[nodes], key)
    p = parent[nodes]
    p0 = np.maximum(p, 0)
    exit_kind = np.where(local[nodes] > 0, -1, np.where(
        (p > 0) & is_inst[p0], EXIT_INST,
        np.where((p > 0) & (msg_of[p0] >= 0), EXIT_MSG, EXIT_NONE)))
    unexpected = int(((exit_kind == EXIT_NONE) & (p > 0)).sum())  # not the source
    exit_val = np.where(exit_kind == EXIT_INST, p - d_end,
                        np.where(exit_kind == EXIT_MSG, msg_of[p0], -1))
    b_e = bind[nodes]
    frame = frame.with_columns(
        node=pl.Series(nodes, dtype=pl.Int64), parent=pl.Series(local[nodes]),
        exit_kind=pl.Series(exit_kind.astype(np.int64)), exit_val=pl.Series(exit_val),
        kind=pl.Series(e["kind"][b_e].astype(np.int64)),
        s_rank=pl.Series(g.rank[e["src"][b_e]].astype(np.int64)),
        inst=pl.Series(np.where(is_inst[nodes], nodes - d_end, -1)))
    # participants' waits at every instance (edges from the batch's starts)
    into = np.flatnonzero((e["kind"] == K["collective"]) & (e["bound"] == B["wait"])
                          & owned[e["src"]])
    waits = pl.DataFrame({
        "inst": (e["dst"][into] - d_end).astype(np.int64),
        "rank": g.rank[e["src"][into]].astype(np.int64),
        "wait_ns": np.maximum(g.t_ns[e["dst"][into]] - g.t_ns[e["src"][into]], 0)})
    ent = pl.DataFrame({"kind": [x[0] for x in entries], "value": [x[1] for x in entries],
                        "node": [x[2] for x in entries]},
                       schema={"kind": pl.Int64, "value": pl.Int64, "node": pl.Int64})
    extra = {"nodes": frame, "entries": ent, "waits": waits,
             "every": pl.DataFrame({"rank": g.rank[inst_ids].astype(np.int64)}),
             "counts": _home_counts(g, owned, batch, counts, unexpected),
             "candidate": pl.DataFrame(
                 {"t": [cand[0]], "is_end": [cand[1]], "phase": [cand[2]],
                  "order": [cand[3]], "node": [cand[4]],
                  "end": [int(g.t_ns[owned].max())]} if cand is not None else
                 {"t": [], "is_end": [], "phase": [], "order": [], "node": [], "end": []},
                 schema={"t": pl.Int64, "is_end": pl.Boolean, "phase": pl.Int64,
                         "order": pl.Int64, "node": pl.Int64, "end": pl.Int64})}
    return Result(pl.DataFrame(), extra, [])


def _candidate(g: Graph, owned: np.ndarray[Any, Any], h_end: int, d_end: int
               ) -> tuple[int, bool, int, int, int] | None:
    """The batch's latest node, with the whole graph's tie rule as a sortable key:
    (time, is an end of device work, phase, order in the phase, node)."""
    from traceatlas.ops.critical_solve import device_ends

    if not owned.any():
        return None
    is_end = device_ends(g)
    ids = np.flatnonzero(owned)
    best = int(g.t_ns[ids].max())
    top = ids[g.t_ns[ids] == best]
    ends = top[is_end[top]]
    pool = ends if len(ends) else top

    def order(v: int) -> tuple[int, int]:
        phase = 1 if v < h_end else 2 if v < d_end else 3
        # within a phase: rank-major node order (instances: their creation order)
        return phase, (v - d_end if phase == 3 else (int(g.rank[v]) << 34) + v)

    v = max(pool.tolist(), key=order)
    ph, od = order(v)
    return best, bool(len(ends)), ph, od, v


def _home_counts(g: Graph, owned: np.ndarray[Any, Any], batch: np.ndarray[Any, Any],
                 counts: dict[str, int], unexpected: int) -> pl.DataFrame:
    """``counts`` of the whole graph's order with every edge count charged to its
    destination's rank (instances: counted in every batch alike)."""
    import polars as pl

    from traceatlas.ops.critical_graph import K

    e = g.edges
    mine = owned[e["dst"]]
    dmine = owned[g.dropped_dst] if len(g.dropped_dst) else np.zeros(0, bool)

    def edges(kind: str, *, pre_drop: bool) -> int:
        got = int(((e["kind"] == K[kind]) & mine).sum())
        if pre_drop and len(dmine):
            got += int(((g.dropped_kind == K[kind]) & dmine).sum())
        return got

    rows = []
    for name, value in counts.items():
        kind = _EDGE_KIND.get(name, name)
        if kind in K:  # an edge count: the whole run counts launch and stream after
            # the backward edges are dropped, the builders' counts before
            value, how = edges(kind, pre_drop=kind not in ("launch", "stream")), "sum"
        elif name == "fallback":
            value, how = int(np.isin(g.fallback_ranks, batch).sum()), "sum"
        elif name == "messages":
            how = "global"
        else:  # instance counts: every batch matches every instance
            how = "same"
        rows.append((name, int(value), how))
    rows.append(("__dropped", int(dmine.sum()), "sum"))
    rows.append(("__unexpected", unexpected, "sum"))
    return pl.DataFrame(rows, schema={"kind": pl.String, "edges": pl.Int64, "how": pl.String},
                        orient="row")


# ---- the merge ------------------------------------------------------------------------

def merge(partials: Sequence[Result], params: Mapping[str, Any]) -> Result:
    """The whole run's tables from the batches' walks (see the module docstring)."""
    import polars as pl

    from traceatlas.analysis.critical_path import (
        _by_bound,
        by_rank_rows,
        notes_of,
        path_rows,
        waits_rows,
    )
    from traceatlas.ops.critical_graph import K

    lo = int(params["lo"])
    cands = [(i, p.extra["candidate"].row(0, named=True)) for i, p in enumerate(partials)
             if p.extra["candidate"].height]
    end = max([lo, *(int(c["end"]) for _, c in cands)])
    path = _stitch(partials, cands)
    table = path_rows(path) if path.height else path_rows(_empty_nodes(partials))
    length = end - lo
    on_wait = path.filter((pl.col("kind") == K["collective"]) & (pl.col("bound") == "wait"))
    every = pl.concat([p.extra["every"] for p in partials])["rank"].to_numpy()
    by_rank = by_rank_rows(on_wait["s_rank"].to_numpy(), every,
                           list(params["region_ranks"]), table, length)
    waits = pl.concat([p.extra["waits"] for p in partials]).filter(
        pl.col("inst").is_in(on_wait["inst"].implode()))
    msg = path.filter((pl.col("kind") == K["message"]) & (pl.col("own") >= 0))
    waits_t = waits_rows(waits["rank"].to_numpy(), waits["wait_ns"].to_numpy(),
                         msg["n_rank"].to_numpy(), np.maximum(
                             (msg["start_ns"] - msg["o_start_ns"]).to_numpy(), 0))
    counts = _merged_counts(partials, params)
    dropped = counts.pop("__dropped")
    if counts.pop("__unexpected", 0):
        raise AssertionError("critical_path: a batch's walk left it by an edge that is "
                             "neither a collective nor a message")
    extra = {"by_bound": _by_bound(table, length), "by_rank": by_rank,
             "dependencies": pl.DataFrame(
                 {"kind": list(counts), "edges": list(counts.values())},
                 schema={"kind": pl.String, "edges": pl.Int64}),
             "waits": waits_t}
    notes = notes_of(lo, end, table.height, dropped, counts.get("fallback", 0))
    return Result(table, extra, notes)


def _empty_nodes(partials: Sequence[Result]) -> pl.DataFrame:
    return partials[0].extra["nodes"].head(0)


def _merged_counts(partials: Sequence[Result], params: Mapping[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in partials:
        for name, edges, how in p.extra["counts"].iter_rows():
            if how == "sum":
                out[name] = out.get(name, 0) + int(edges)
            elif how == "global":
                msgs = params.get("messages")
                out[name] = int(msgs.height) if msgs is not None else 0
            else:
                out.setdefault(name, int(edges))
    return out


def _stitch(partials: Sequence[Result], cands: list[tuple[int, dict[str, Any]]]
            ) -> pl.DataFrame:
    """The path's edge rows in time order: from the latest node back along the batches'
    walks (one step per run of consecutive nodes), across batches at instances and
    messages, to the region's source."""
    import polars as pl

    if not cands:
        return _empty_nodes(partials)
    frames = [p.extra["nodes"] for p in partials]
    node = [f["node"].to_numpy() for f in frames]
    parent = [f["parent"].to_numpy() for f in frames]
    ek = [f["exit_kind"].to_numpy() for f in frames]
    ev = [f["exit_val"].to_numpy() for f in frames]
    head = []
    for nd, pa in zip(node, parent, strict=True):
        idx = np.arange(len(nd))
        cont = np.zeros(len(nd), bool)
        if len(nd) > 1:
            cont[1:] = (nd[1:] == nd[:-1] + 1) & (pa[1:] == nd[:-1])
        head.append(np.maximum.accumulate(np.where(cont, 0, idx)) if len(nd) else idx)
    entries: dict[tuple[int, int], tuple[int, int]] = {}
    for i, p in enumerate(partials):
        for kind, value, nd in p.extra["entries"].iter_rows():
            entries[(int(kind), int(value))] = (i, int(nd))

    def row(i: int, v: int) -> int:
        r = int(np.searchsorted(node[i], v))
        if r >= len(node[i]) or node[i][r] != v:
            raise AssertionError("critical_path: a walk's node was not sent by its batch")
        return r

    b, c = max(cands, key=lambda ic: (ic[1]["t"], ic[1]["is_end"], ic[1]["phase"],
                                      ic[1]["order"]))
    r = row(b, int(c["node"]))
    pieces: list[tuple[int, int, int]] = []
    for _ in range(sum(len(x) for x in node) + 1):
        h = int(head[b][r])
        pieces.append((b, h, r))
        par = int(parent[b][h])
        if par >= 0:
            r = row(b, par)
            continue
        kind = int(ek[b][h])
        if kind == EXIT_NONE:
            break
        b, into = entries[(kind, int(ev[b][h]))]
        r = row(b, into)
    else:
        raise AssertionError("critical_path: the batches' walks form a cycle")
    return pl.concat([frames[i].slice(h, r - h + 1) for i, h, r in reversed(pieces)])
