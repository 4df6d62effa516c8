"""``critical_path``: the longest dependency chain through a region, within and across
ranks, what bounds it, and what a speedup would gain (what-if).

Region: the selection (``--step N``: from the step's first start on the selected ranks
to the last end of the work starting after it, device work launched in the step
included; ``--window``), ``region=annotation:NAME[:I]`` (the I-th instance, 0-based, by
start over the ranks), else the whole trace. Intervals are clipped to it. The graph
(``ops/critical_graph.py``, ``critical_syncs.py``, ``critical_ranks.py``): host threads as
chains of their events' starts and ends, device streams, launches, synchronisations,
collectives (every participant leaves with the last arrival) and MPI messages.

Main table ``path``, one row per segment of the path in time order (consecutive pieces of
one event with one bound merged): ``rank``, ``track_id``, ``name``, ``category`` (the
event the time belongs to; ``(untraced)`` and null category for host time outside any
event), ``start_ns``, ``end_ns``, ``bound``, ``on_path_ns`` (= end - start; the segments
tile the region, their sum is its length), ``event_start_ns``, ``event_end_ns`` (the
event's own span inside the region, to find it again; null when none). Bounds: ``cpu``
(host time, runtime calls included), ``gpu_compute`` (kernels, copies, memsets),
``gpu_comm`` (NCCL/RCCL kernels; for a matched collective, from the last arrival to the
end), ``launch`` (launch call start to the activity start when the launch was the last
constraint), ``kernel_gap`` (previous activity end to the next start on a stream when the
stream was the last constraint), ``sync`` (from the awaited device work's end to the end
of the waiting call, or to the waiting stream's next activity), ``data_load`` (host time
inside a DataLoader range), ``wait`` (a participant's start to its collective's last
arrival: 0 on the path by construction), ``comm`` (MPI calls and message transfers).

Extra tables: ``by_bound`` (bound, ns, share), ``by_rank`` (rank, ns, share,
``arrivals_last``: collective instances on the path whose last arrival was this rank,
``arrivals_last_all``: the same over every matched instance in the region),
``dependencies`` (edge kind, edges: how many launches, syncs, collectives ... the graph
found), ``waits`` (rank, kind, instances, wait_ns: time ranks spent waiting beside the path
at its collectives for the last arrival, and in receives for a late sender), ``whatif``
(with ``speedup``: speedup, factor, edges_scaled, length_before_ns, length_after_ns,
gain_ns, gain_pct). Times in ns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from traceatlas.analysis import critical_split as split
from traceatlas.analysis.base import Param, Result
from traceatlas.errors import InputError

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace
    from traceatlas.ops.critical_graph import Graph

PATH_COLUMNS = ("rank", "track_id", "name", "category", "start_ns", "end_ns", "bound",
                "on_path_ns", "event_start_ns", "event_end_ns")


class CriticalPath:
    """Longest dependency path through a region, its bounds per rank, and what-if."""

    name = "critical_path"
    description = ("Critical path of a step, window, annotation or the trace, within and "
                   "across ranks: what bounds it (cpu, gpu, launch, sync, comm, wait) and "
                   "what a speedup would gain")
    params = (
        Param("speedup", str, "", "what-if: REGEX:FACTOR (event names), "
              "category:NAME:FACTOR or rank:R:FACTOR; FACTOR 2 = twice as fast"),
        Param("region", str, "", "annotation:NAME[:I] (I-th instance, 0-based); default: "
              "the selection (--step/--window) or the whole trace"),
    )
    requires: tuple[str, ...] = ()
    # In rank batches (``analysis/critical_split.py``): the passes, the map step, the merge.
    passes = ("bounds", "stubs")
    ranks_per_task = 64
    """Ranks per batch (at most ``partitioned.ROWS_PER_TASK`` stored rows, as for every
    analysis): each batch costs three passes and a graph, so batches are filled by rows."""
    whole_if_one_batch = True
    """One batch of every rank: the whole run (the same result, one pass)."""
    region = staticmethod(split.region)
    prepared_region = staticmethod(split.prepared_region)
    bounds = staticmethod(split.bounds)
    prepared_bounds = staticmethod(split.prepared_bounds)
    stubs = staticmethod(split.stubs)
    prepared_stubs = staticmethod(split.prepared_stubs)
    partial = staticmethod(split.partial)
    batch_params = staticmethod(split.batch_params)
    merge = staticmethod(split.merge)

    @staticmethod
    def passes_for(params: Mapping[str, Any]) -> tuple[str, ...]:
        """An annotation region: a first pass finds its instance over every batch."""
        return ("region", "bounds", "stubs") if params.get("region") else ("bounds",
                                                                            "stubs")

    @staticmethod
    def whole_after(params: Mapping[str, Any]) -> bool:
        """After the bounds pass: a region of at most ``ROWS_PER_TASK`` intervals over
        every rank (a step, a window) runs whole, as one batch would."""
        from traceatlas.analysis.partitioned import ROWS_PER_TASK

        rows = params.get("region_rows")
        return rows is not None and int(rows) <= ROWS_PER_TASK

    @staticmethod
    def partition_for(params: Mapping[str, Any]) -> str:
        """In rank batches, except the what-if (run whole)."""
        return "trace" if params.get("speedup") else "rank"

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """Build the graph of the region, find the path, apply the what-if."""
        import polars as pl

        from traceatlas.ops import critical_solve as solve

        speedup = solve.parse_speedup(params["speedup"]) if params["speedup"] else None
        r0, r1 = _region(trace, str(params["region"]))
        g, counts = build(trace, r0, r1)
        notes: list[str] = []
        if g.events.height == 0:
            notes.append("no intervals in the region")
        bind = solve.binding(g)
        path = solve.path_edges(g, bind)
        table = _path_table(g, path)
        end = int(g.t_ns.max()) if len(g.t_ns) else g.r0
        length = end - g.r0
        notes += notes_of(g.r0, end, table.height, g.dropped, counts.get("fallback", 0))
        extra = {"by_bound": _by_bound(table, length),
                 "by_rank": _by_rank(g, path, table, length),
                 "dependencies": pl.DataFrame(
                     {"kind": list(counts), "edges": list(counts.values())},
                     schema={"kind": pl.String, "edges": pl.Int64}),
                 "waits": _waits(g, path)}
        if speedup is not None:
            before = solve.forward(g, solve.weights(g, bind, None, 1.0))
            mask = solve.speedup_mask(g, speedup)
            after = solve.forward(g, solve.weights(g, bind, mask, speedup.factor))
            gain = before - after
            extra["whatif"] = pl.DataFrame({
                "speedup": [params["speedup"]], "factor": [speedup.factor],
                "edges_scaled": [int(mask.sum())], "length_before_ns": [before],
                "length_after_ns": [after], "gain_ns": [gain],
                "gain_pct": [100.0 * gain / before if before else 0.0]})
            if before != length:
                notes.append(f"forward pass length {before} ns differs from the region "
                             f"length {length} ns (dropped dependencies)")
        return Result(table, extra=extra, notes=notes)


def notes_of(lo: int, end: int, segments: int, dropped: int, fallback: int) -> list[str]:
    """The notes on the region, dropped dependencies and synchronize fallbacks."""
    notes = [f"region {lo}..{end} ns ({end - lo} ns); path of {segments} segments"]
    if dropped:
        notes.append(f"{dropped} dependencies ran backwards in time (clock skew or "
                     "mismatched records) and were ignored")
    if fallback:
        notes.append(f"{fallback} synchronize calls without a cuda_sync "
                     "record wait for the rank's latest-ending device work")
    return notes


def build(trace: Trace, r0: int | None, r1: int | None) -> tuple[Graph, dict[str, int]]:
    """The graph of the region and the number of edges per dependency kind."""
    import polars as pl

    from traceatlas.ops import critical_graph as cg
    from traceatlas.ops import critical_ranks as cr

    events, lo, hi = cg.region_events(trace.intervals, r0, r1)
    has_mpi = bool(events.height) and bool((events["category"] == "mpi").any())
    messages = trace.messages.collect() if has_mpi else pl.DataFrame()
    msgs = cr.message_points(events, messages) if has_mpi else cr.message_points(
        events, pl.DataFrame())
    return graph_of(events, lo, hi, msgs, _unselected(trace), _fwdbwd(trace))


def graph_of(events: pl.DataFrame, lo: int, hi: int, msgs: pl.DataFrame,
             whole: pl.LazyFrame | None, fwdbwd: pl.DataFrame
             ) -> tuple[Graph, dict[str, int]]:
    """The graph of the region's ``events`` (``region_events``), its messages
    (``message_points``), the host work records of the whole trace (``whole``, for their
    occurrences) and the ``fwdbwd`` flows; and the number of edges per dependency kind."""
    import polars as pl

    from traceatlas.ops import critical_graph as cg
    from traceatlas.ops import critical_ranks as cr
    from traceatlas.ops.critical_handoff import handoff_edges
    from traceatlas.ops.critical_host_coll import host_collectives
    from traceatlas.ops.critical_syncs import sync_edges

    b = cg.Builder(lo, events)
    cg.host_chains(b, cr.extra_points(msgs).with_columns(pl.all().cast(pl.Int64)))
    dev = cg.device_streams(b)
    dev = cg.launches(b, dev)
    counts = sync_edges(b, dev)
    matched, n_nccl = cr.nccl_collectives(b, dev)
    cg.add_durations(b, matched)
    n_mpi = cr.mpi_collectives(b)
    host = host_collectives(b, whole, lo, hi)
    n_handoff = handoff_edges(b, fwdbwd)
    n_msg = cr.message_edges(b, msgs)
    g = b.finish(lo, hi)
    k = g.edges["kind"]
    out = {"launch": int((k == cg.K["launch"]).sum()),
           "stream": int((k == cg.K["stream"]).sum()),
           **counts, "nccl_collectives": n_nccl, "mpi_collectives": n_mpi,
           **host, "handoffs": n_handoff, "messages": n_msg}
    return g, out


def _fwdbwd(trace: Trace) -> pl.DataFrame:
    """The ``fwdbwd`` flows (rank, name, src_track_id, dst_track_id); empty when the
    store has no flows table."""
    import polars as pl

    from traceatlas.errors import StoreError

    try:
        return (trace.flows.filter(pl.col("name").cast(pl.String) == "fwdbwd")
                .select("rank", "name", "src_track_id", "dst_track_id").collect())
    except (StoreError, pl.exceptions.PolarsError):
        return pl.DataFrame()


def _unselected(trace: Trace) -> pl.LazyFrame:
    """The intervals without step/window/name filters (rank selections kept): host
    collective occurrences are counted over the whole trace."""
    from traceatlas.ops.select import Selection

    view = type(trace).__new__(type(trace))
    view.path, view.manifest = trace.path, trace.manifest
    view.selections = tuple(Selection(ranks=s.ranks) for s in trace.selections
                            if s.ranks is not None)
    return view.intervals


def _region(trace: Trace, region: str) -> tuple[int | None, int | None]:
    """(r0, r1) from ``region`` or the trace's selections (None: open side)."""
    if region:
        name, i = parse_region(region)
        return region_instance(annotation_rows(trace, name), name, i)
    return selection_region(trace)


def parse_region(region: str) -> tuple[str, int]:
    """(NAME, I) of ``annotation:NAME[:I]``."""
    kind, _, rest = region.partition(":")
    if kind != "annotation" or not rest:
        raise InputError("--param region", f"expected annotation:NAME[:I], got "
                         f"{region[:60]!r}")
    name, _, idx = rest.rpartition(":")
    if not name or not idx.isdigit():
        name, idx = rest, "0"
    return name, int(idx)


def annotation_rows(trace: Trace, name: str) -> pl.DataFrame:
    """start_ns, end_ns of the intervals named ``name``, in scan order."""
    import polars as pl

    return (trace.intervals.filter(pl.col("name").cast(pl.String) == name)
            .select("start_ns", "end_ns").collect())


def region_instance(rows: pl.DataFrame, name: str, i: int) -> tuple[int, int]:
    """The ``i``-th of ``rows`` by start (ties: scan order)."""
    rows = rows.sort("start_ns", maintain_order=True)
    if i >= rows.height:
        raise InputError("--param region", f"annotation {name[:60]!r} has "
                         f"{rows.height} instance(s); instance {i} does not exist")
    return int(rows["start_ns"][i]), int(rows["end_ns"][i])


def selection_region(trace: Trace) -> tuple[int | None, int | None]:
    """(r0, r1) of the trace's step and window selections (None: open side)."""
    r0: int | None = None
    r1: int | None = None
    for sel in trace.selections:
        if sel.step_spans:
            r0 = min(s[1] for s in sel.step_spans)
        if sel.window is not None:
            w0, w1 = sel.window
            r0 = w0 if w0 is not None else r0
            r1 = w1 if w1 is not None else r1
    return r0, r1


def _path_table(g: Graph, path: np.ndarray[Any, Any]) -> pl.DataFrame:
    return path_rows(path_edges_frame(g, path, g.events["eid"] if g.events.height else None))


def path_edges_frame(g: Graph, edges: np.ndarray[Any, Any], owner_key: pl.Series | None
                     ) -> pl.DataFrame:
    """One row per edge of ``edges`` (in path order): ``own`` (``owner_key`` of the
    owning event, -1 for none), ``bound``, ``n_rank``/``n_track`` (the destination
    node's), ``start_ns``/``end_ns`` (the source and destination times) and the owning
    event's rank, track_id, name, category, start_ns, end_ns (``o_*``, null for none)."""
    import polars as pl

    from traceatlas.ops.critical_graph import BOUNDS

    e = g.edges
    src, dst = e["src"][edges], e["dst"][edges]
    own = e["owner"][edges].astype(np.int64)
    has = own >= 0
    o = pl.Series("o", np.maximum(own, 0))
    ev = g.events if g.events.height else pl.DataFrame(
        {c: [None] for c in ("rank", "track_id", "name", "category", "start_ns", "end_ns")},
        schema_overrides={"rank": pl.Int32, "track_id": pl.Int32, "name": pl.String,
                          "category": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64})
    owner = ev.select("rank", "track_id", "name", "category", "start_ns", "end_ns")[o]
    key = (owner_key[o].cast(pl.Int64).to_numpy() if owner_key is not None
           else np.zeros(len(own), np.int64))
    hs = pl.Series("has", has)
    return pl.DataFrame({
        "own": np.where(has, key, -1), "bound": pl.Series(list(BOUNDS))[
            pl.Series(e["bound"][edges].astype(np.int64))],
        "n_rank": g.rank[dst].astype(np.int32), "n_track": g.track[dst].astype(np.int32),
        "start_ns": g.t_ns[src], "end_ns": g.t_ns[dst],
    }).with_columns(
        o_rank=pl.when(hs).then(owner["rank"].cast(pl.Int32)),
        o_track=pl.when(hs).then(owner["track_id"].cast(pl.Int32)),
        o_name=pl.when(hs).then(owner["name"].cast(pl.String)),
        o_category=pl.when(hs).then(owner["category"].cast(pl.String)),
        o_start_ns=pl.when(hs).then(owner["start_ns"].cast(pl.Int64)),
        o_end_ns=pl.when(hs).then(owner["end_ns"].cast(pl.Int64)))


def path_rows(frame: pl.DataFrame) -> pl.DataFrame:
    """The ``path`` table from ``path_edges_frame`` rows in path order: consecutive
    pieces of one event with one bound merged, zero-length segments dropped."""
    import polars as pl

    own = frame["own"].to_numpy()
    bound = frame["bound"]
    new = np.ones(len(own), bool)
    if len(own) > 1:
        new[1:] = ((own[1:] != own[:-1]) | (bound[1:] != bound[:-1]).to_numpy()
                   | (own[1:] < 0))
    has = pl.col("own") >= 0
    out = (frame.with_columns(
        seg=pl.Series(np.cumsum(new) - 1),
        rank=pl.when(has).then(pl.col("o_rank")).otherwise(pl.col("n_rank")),
        track_id=pl.when(has).then(pl.col("o_track")).otherwise(pl.col("n_track")),
        name=pl.when(has).then(pl.col("o_name")).otherwise(pl.lit("(untraced)")),
        category=pl.when(has).then(pl.col("o_category")),
        event_start_ns=pl.when(has).then(pl.col("o_start_ns")),
        event_end_ns=pl.when(has).then(pl.col("o_end_ns")))
        .group_by("seg", maintain_order=True).agg(
        pl.col("rank", "track_id", "name", "category", "bound", "event_start_ns",
               "event_end_ns").first(),
        pl.col("start_ns").min(), pl.col("end_ns").max())
        .with_columns(on_path_ns=pl.col("end_ns") - pl.col("start_ns"))
        .filter(pl.col("on_path_ns") > 0))
    return out.select(PATH_COLUMNS)


def _waits(g: Graph, path: np.ndarray[Any, Any]) -> pl.DataFrame:
    """Per rank and kind, the time ranks spent waiting *beside* the path for the event
    on it (``waits_rows``)."""
    from traceatlas.ops.critical_graph import B, K

    e = g.edges
    pk, pb = e["kind"][path], e["bound"][path]
    insts = np.unique(e["dst"][path[(pk == K["collective"]) & (pb == B["wait"])]])
    on = np.zeros(len(g.t_ns), bool)
    on[insts] = True
    into = np.flatnonzero((e["kind"] == K["collective"]) & (e["bound"] == B["wait"])
                          & on[e["dst"]])
    c_rank = g.rank[e["src"][into]]
    c_wait = np.maximum(g.t_ns[e["dst"][into]] - g.t_ns[e["src"][into]], 0)
    msg = path[(pk == K["message"]) & (e["owner"][path] >= 0)]
    starts = g.events["start_ns"].to_numpy() if g.events.height else np.empty(0, np.int64)
    m_rank = g.rank[e["dst"][msg]]
    m_wait = np.maximum(g.t_ns[e["src"][msg]] - starts[e["owner"][msg]], 0)
    return waits_rows(c_rank, c_wait, m_rank, m_wait)


def waits_rows(c_rank: np.ndarray[Any, Any], c_wait: np.ndarray[Any, Any],
               m_rank: np.ndarray[Any, Any], m_wait: np.ndarray[Any, Any]) -> pl.DataFrame:
    """The ``waits`` table: at each collective instance on the path, every participant's
    last arrival minus its own arrival (``c_*``: rank, ns; the last arrival waits 0);
    for each message on the path, the send start minus the start of the receiving call,
    when positive (``m_*``: a late sender). Columns rank, kind (``collective``/
    ``message``), instances, wait_ns."""
    import polars as pl

    frame = pl.DataFrame({
        "rank": np.concatenate([c_rank, m_rank]).astype(np.int32),
        "kind": ["collective"] * len(c_rank) + ["message"] * len(m_rank),
        "wait_ns": np.concatenate([c_wait, m_wait]).astype(np.int64)},
        schema={"rank": pl.Int32, "kind": pl.String, "wait_ns": pl.Int64})
    return (frame.group_by("rank", "kind").agg(pl.len().cast(pl.Int64).alias("instances"),
                                               pl.col("wait_ns").sum())
            .sort("rank", "kind").select("rank", "kind", "instances", "wait_ns"))


def _by_bound(table: pl.DataFrame, length: int) -> pl.DataFrame:
    import polars as pl

    from traceatlas.ops.critical_graph import BOUNDS

    sums = table.group_by("bound").agg(pl.col("on_path_ns").sum().alias("ns"))
    base = pl.DataFrame({"bound": list(BOUNDS)})
    return (base.join(sums, on="bound", how="left", maintain_order="left")
            .with_columns(pl.col("ns").fill_null(0).cast(pl.Int64))
            .with_columns(share=pl.col("ns") / length if length else pl.lit(0.0))
            .sort("ns", descending=True, maintain_order=True))


def _by_rank(g: Graph, path: np.ndarray[Any, Any], table: pl.DataFrame,
             length: int) -> pl.DataFrame:
    from traceatlas.ops.critical_graph import B, K

    e = g.edges
    last = path[(e["kind"][path] == K["collective"]) & (e["bound"][path] == B["wait"])]
    inst = (g.track == -1) & (g.rank >= 0)
    ranks = sorted(int(r) for r in g.events["rank"].unique())
    return by_rank_rows(g.rank[e["src"][last]], g.rank[inst], ranks, table, length)


def by_rank_rows(last_ranks: np.ndarray[Any, Any], every_ranks: np.ndarray[Any, Any],
                 ranks: list[int], table: pl.DataFrame, length: int) -> pl.DataFrame:
    """The ``by_rank`` table: on-path ns and share per rank of ``ranks`` (those with
    intervals in the region), the ranks of the last arrivals of the instances on the path
    (``last_ranks``) and of every instance (``every_ranks``)."""
    import polars as pl

    arrivals = pl.DataFrame({"rank": last_ranks.astype(np.int32)}).group_by(
        "rank").agg(pl.len().cast(pl.Int64).alias("arrivals_last"))
    every = pl.DataFrame({"rank": every_ranks.astype(np.int32)}).group_by("rank").agg(
        pl.len().cast(pl.Int64).alias("arrivals_last_all"))
    frame = pl.DataFrame({"rank": ranks}, schema={"rank": pl.Int32})
    sums = table.group_by("rank").agg(pl.col("on_path_ns").sum().alias("ns"))
    return (frame.join(sums, on="rank", how="left").join(arrivals, on="rank", how="left")
            .join(every, on="rank", how="left")
            .with_columns(pl.col("ns").fill_null(0).cast(pl.Int64),
                          pl.col("arrivals_last", "arrivals_last_all").fill_null(0))
            .with_columns(share=pl.col("ns") / length if length else pl.lit(0.0))
            .select("rank", "ns", "share", "arrivals_last", "arrivals_last_all").sort("rank"))
