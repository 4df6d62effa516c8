"""The dependency graph of the critical path, on columns (one rank or many).

Nodes are time points (int64 ns on the common clock): on each host thread, the starts and
ends of its intervals (plus message points) form one *chain* in time order; on each device
stream every activity has a start node and an end node; virtual nodes are the region's
source (time ``r0``) and one node per collective instance (time of the last arrival).

An edge ``u -> v`` has ``wmin`` (ns), the least time ``v`` must follow ``u`` by:

- chain (host thread, consecutive points): the gap itself (untraced or exclusive CPU
  time), 0 when ``v`` is the end of a blocking call (a sync, an MPI receive or
  collective: its end is set by the cross edge that releases it);
- duration (device activity start -> end): its duration;
- stream order (previous activity end -> next start on a stream): 0;
- launch (runtime/driver call start -> device activity start, same correlation): 0;
- sync (device activity end -> end of the host call that waited for it; an event record's
  producer end -> the waiting stream's next activity start): 0;
- collective (each participant's start -> instance node -> each participant's end): 0;
- message (send point -> receive point): 0.

The *binding* predecessor of ``v`` is the one with the largest ``T(u) + wmin`` (the last
constraint to be met); the forward pass with the binding edge weighted by the observed
gap and the others by ``wmin`` reproduces every observed time. Edges that would run
backwards in time (clock skew, mis-matched records) are dropped and counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import polars as pl

I64 = npt.NDArray[np.int64]
BOUNDS: tuple[str, ...] = ("cpu", "gpu_compute", "gpu_comm", "launch", "kernel_gap", "sync",
                           "data_load", "wait", "comm")
"""Bound codes (index = code). ``comm``: MPI transfer and call time (host side)."""
B = {name: i for i, name in enumerate(BOUNDS)}
KINDS: tuple[str, ...] = ("source", "chain", "duration", "stream", "launch", "sync_stream",
                          "sync_context", "sync_event", "sync_copy", "stream_wait_event",
                          "collective", "message", "wakeup", "handoff")
"""Edge kinds (index = code); ``dependencies`` counts edges per kind. ``wakeup``: a host
collective's work releasing a thread of its rank that waited untraced
(``ops/critical_host_coll.py``). ``handoff``: the main thread handing the backward pass to
the autograd thread and back (``ops/critical_handoff.py``)."""
K = {name: i for i, name in enumerate(KINDS)}
PRIORITY = {K["duration"]: 10, K["collective"]: 9, K["chain"]: 8, K["stream"]: 7,
            K["sync_stream"]: 5, K["sync_context"]: 5, K["sync_event"]: 5, K["sync_copy"]: 5,
            K["stream_wait_event"]: 5, K["wakeup"]: 5, K["handoff"]: 5, K["message"]: 4,
            K["launch"]: 3,
            K["source"]: 0}
"""Tie-break between predecessors arriving at the same time (higher wins). A blocking
MPI collective's end is reached both by its own chain and by the instance node; for the
last arrival both tie, and the path goes through the instance (so it is counted)."""

DEVICE = ("kernel", "comm_kernel", "memcpy", "memset")
NOT_HOST = (*DEVICE, "sync", "gpu_annotation", "state")
"""Categories that are not host-thread work (``state``: Paraver states repeat the calls)."""
DATA_LOAD_RE = r"(?i)dataloader|data_load"
SYNC_CALL_RE = r"(?i)synchronize"
SYNC_COPY_RE = r"(?i)^(cuda|hip|cu)memcpy"
"""A copy call; synchronous unless its name has ``Async``."""


EDGE_COLUMNS = ("src", "dst", "wmin", "kind", "bound", "owner")
"""The edge columns ``Edges`` keeps as lists of blocks, in ``arrays()`` order."""


@dataclass
class Edges:
    """Growing edge lists (numpy arrays appended as blocks). Stored narrow (a 1 GB rank
    has tens of millions of edges): ``src``/``dst``/``owner`` int32 (node and event ids;
    int64 only past 2**31 - 1), ``wmin`` int64 ns, ``kind``/``bound`` int8 codes."""

    src: list[I64] = field(default_factory=list)
    dst: list[I64] = field(default_factory=list)
    wmin: list[I64] = field(default_factory=list)
    kind: list[I64] = field(default_factory=list)
    bound: list[I64] = field(default_factory=list)
    owner: list[I64] = field(default_factory=list)

    def add(self, src: I64, dst: I64, wmin: I64 | int, kind: str, bound: I64 | str,
            owner: I64 | int) -> None:
        n = len(src)
        self.src.append(_ids(src))
        self.dst.append(_ids(dst))
        self.wmin.append(np.broadcast_to(np.asarray(wmin, np.int64), n).copy())
        self.kind.append(np.full(n, K[kind], np.int8))
        code = np.full(n, B[bound], np.int8) if isinstance(bound, str) else bound
        self.bound.append(np.asarray(code, np.int8))
        self.owner.append(_ids(np.broadcast_to(np.asarray(owner, np.int64), n)))

    def arrays(self) -> dict[str, I64]:
        """The columns, concatenated (dtypes: see the class docstring)."""
        return {k: (np.concatenate(getattr(self, k)) if getattr(self, k)
                    else np.empty(0, np.int64)) for k in EDGE_COLUMNS}

    def take_arrays(self) -> dict[str, I64]:
        """``arrays()``, releasing each column's blocks once concatenated (the lists
        are left empty): one column's blocks and their concatenation live at once,
        not every column's."""
        out: dict[str, I64] = {}
        for k in EDGE_COLUMNS:
            blocks: list[I64] = getattr(self, k)
            out[k] = np.concatenate(blocks) if blocks else np.empty(0, np.int64)
            blocks.clear()
        return out


@dataclass
class Graph:
    """Nodes (``t_ns``, ``rank``, ``track_id``; node 0 is the source) and edges; ``events``
    is the region's intervals (clipped) with ``eid`` = row index, owners of edges."""

    r0: int
    r1: int
    t_ns: I64
    rank: I64
    track: I64
    edges: dict[str, I64]
    events: pl.DataFrame
    dropped: int = 0
    """Edges dropped because they ran backwards in time."""
    inst_last: dict[int, int] = field(default_factory=dict)
    """Collective instance node -> node id of its last arrival (start node)."""
    dropped_kind: I64 = field(default_factory=lambda: np.empty(0, np.int64))
    """Kind codes of the dropped edges."""
    dropped_dst: I64 = field(default_factory=lambda: np.empty(0, np.int64))
    """Destination nodes of the dropped edges (the rank a per-rank count charges)."""
    fallback_ranks: I64 = field(default_factory=lambda: np.empty(0, np.int64))
    """Rank of each synchronize call without a cuda_sync record."""
    extra_node: I64 = field(default_factory=lambda: np.empty(0, np.int64))
    """Node of each extra chain point (``host_chains``' ``extra`` rows, in order)."""
    phase_ends: tuple[int, ...] = ()
    """Node count after the host chains and after the device streams: host chain nodes
    are ``[1, phase_ends[0])``, device nodes ``[phase_ends[0], phase_ends[1])``, virtual
    instance nodes after (in creation order)."""


class Builder:
    """Node allocation and the edge lists while a graph is built."""

    def __init__(self, r0: int, events: pl.DataFrame) -> None:
        self.events = events
        n = events.height
        self.t: list[I64] = [np.array([r0], np.int64)]
        self.rank: list[I64] = [np.array([-1], np.int64)]
        self.track: list[I64] = [np.array([-1], np.int64)]
        self.count = 1
        self.edges = Edges()
        self.start_node = np.full(n, -1, np.int64)
        self.end_node = np.full(n, -1, np.int64)
        self.host: tuple[I64, I64, I64, I64] | None = None
        """Host chain points (node ids, rank, track_id, t_ns), in chain order."""
        self.blocking: list[I64] = []
        """Host nodes released by a cross edge (their chain edge in gets wmin 0)."""
        self.phase_ends: list[int] = []
        """``Graph.phase_ends`` (appended by ``host_chains`` and ``device_streams``)."""
        self.fallback_ranks: I64 = np.empty(0, np.int64)
        """Rank of each synchronize call without a cuda_sync record (``sync_edges``)."""
        self.extra_node: I64 = np.empty(0, np.int64)
        """Node of each extra chain point (``host_chains``)."""

    def nodes(self, t: I64, rank: I64, track: I64) -> I64:
        """Allocate nodes; returns their ids."""
        ids = np.arange(self.count, self.count + len(t), dtype=np.int64)
        self.t.append(np.asarray(t, np.int64))
        self.rank.append(np.asarray(rank, np.int64))
        self.track.append(np.asarray(track, np.int64))
        self.count += len(t)
        return ids

    def finish(self, r0: int, r1: int) -> Graph:
        """The graph: blocking chain edges zeroed, backward edges dropped, nodes left
        without a predecessor hung off the source (node 0)."""
        t = np.concatenate(self.t)
        self.t = [t]
        self.host = None
        e = self.edges.take_arrays()
        if self.blocking:
            blk = np.zeros(len(t), bool)
            blk[np.concatenate(self.blocking)] = True
            e["wmin"][(e["kind"] == K["chain"]) & blk[e["dst"]]] = 0
            del blk
        ts = t[e["src"]]
        td = t[e["dst"]]
        ok = (ts < td) | ((ts == td) & (e["src"] < e["dst"]))
        del ts, td
        dropped = len(ok) - int(np.count_nonzero(ok))
        dropped_kind = dropped_dst = np.empty(0, np.int64)
        if dropped:
            dropped_kind = e["kind"][~ok].astype(np.int64)
            dropped_dst = e["dst"][~ok].astype(np.int64)
            for k in list(e):
                e[k] = e[k][ok]
        del ok
        has_in = np.zeros(len(t), bool)
        has_in[0] = True
        has_in[e["dst"]] = True
        lone = np.flatnonzero(~has_in)
        is_dev = np.zeros(len(t), bool)
        dev_eid = self.events["eid"].to_numpy()[
            self.events["category"].is_in(DEVICE).to_numpy()]
        is_dev[self.start_node[dev_eid]] = True
        bound = np.where(is_dev[lone], B["kernel_gap"], B["cpu"]).astype(np.int64)
        src = Edges()
        src.add(np.zeros(len(lone), np.int64), lone, t[lone] - r0, "source", bound, -1)
        s = src.arrays()
        for k in list(e):  # one column at a time: the old one is released at once
            e[k] = np.concatenate([e[k], s[k]])
        rank = np.concatenate(self.rank)
        self.rank = [rank]
        track = np.concatenate(self.track)
        self.track = [track]
        return Graph(r0, r1, t, rank, track, e, self.events, dropped,
                     dropped_kind=dropped_kind, dropped_dst=dropped_dst,
                     fallback_ranks=self.fallback_ranks,
                     extra_node=self.extra_node,
                     phase_ends=tuple(self.phase_ends))


def name_matches(names: pl.Series, pattern: str) -> pl.Series:
    """``names.cast(pl.String).str.contains(pattern)`` (nulls stay null), the regex run
    once per distinct name of a Categorical column and mapped by code: no String copy of
    every name (a 1 GB rank has tens of millions)."""
    import polars as pl

    if names.dtype != pl.Categorical or names.null_count():
        return names.cast(pl.String).str.contains(pattern)
    codes = names.to_physical()
    uniq = names.unique()
    hit = uniq.cast(pl.String).str.contains(pattern).to_numpy()
    ucodes = uniq.to_physical().to_numpy()
    lut = np.zeros(int(ucodes.max()) + 1 if len(ucodes) else 1, bool)
    lut[ucodes] = hit
    return pl.Series(names.name, lut[codes.to_numpy()])


def _ids(a: npt.ArrayLike) -> I64:
    """Ids as int32 (a copy) when they fit, else int64 (values unchanged)."""
    x = np.asarray(a)
    if len(x) and (int(x.max()) > np.iinfo(np.int32).max
                   or int(x.min()) < np.iinfo(np.int32).min):
        return np.array(x, np.int64)
    return np.array(x, np.int32)


def region_events(trace_intervals: pl.LazyFrame, r0: int | None, r1: int | None
                  ) -> tuple[pl.DataFrame, int, int]:
    """The intervals of the region, clipped to it, with ``eid``; and (r0, r1).

    ``r0`` None: the first start; ``r1`` None: the last end of the intervals starting at
    or after ``r0``."""
    import polars as pl

    df = _with_sync_args(region_frame(trace_intervals, r0, r1))
    if df.height == 0:
        return df.with_row_index("eid").with_columns(pl.col("eid").cast(pl.Int64)), 0, 0
    lo = int(df["start_ns"].min()) if r0 is None else r0  # type: ignore[arg-type]
    last = df.filter(pl.col("start_ns") >= lo)["end_ns"].max()
    hi = (int(last) if last is not None else lo) if r1 is None else r1  # type: ignore[arg-type]
    df = (df.filter((pl.col("end_ns") >= lo) & (pl.col("start_ns") <= hi))
          .with_columns(pl.col("start_ns").clip(lo, hi), pl.col("end_ns").clip(lo, hi))
          .with_row_index("eid").with_columns(pl.col("eid").cast(pl.Int64)))
    return df, lo, hi


def region_frame(trace_intervals: pl.LazyFrame, r0: int | None, r1: int | None
                 ) -> pl.LazyFrame:
    """The intervals ``region_events`` starts from (not clipped): its columns, without
    Kineto's profiler span, ending at or after ``r0`` and starting at or before ``r1``."""
    import polars as pl

    frame = trace_intervals.select(
        "rank", "track_id", "start_ns", "end_ns", "name",
        pl.col("category").cast(pl.String), "depth", "correlation", "stream",
        pl.col("process_group").cast(pl.String),
        pl.col("collective").cast(pl.String),
        pl.col("source_category").cast(pl.String), "args")
    # Kineto's own profiler span (cat "Trace") is not work.
    frame = frame.filter(pl.col("source_category").fill_null("") != "Trace").drop(
        "source_category")
    if r0 is not None:
        frame = frame.filter(pl.col("end_ns") >= r0)
    if r1 is not None:
        frame = frame.filter(pl.col("start_ns") <= r1)
    return frame


def _with_sync_args(frame: pl.LazyFrame) -> pl.DataFrame:
    """``frame`` collected with ``args`` kept on ``sync`` rows only (null elsewhere).

    The args of every interval (JSON text, GBs for a 1 GB rank) are not read into
    memory: the frame is collected without them and the sync rows' args by a second
    scan with the same filters (scans keep row order); when the two do not line up
    (rank, start) the frame is read whole as before."""
    import polars as pl

    is_sync = pl.col("category") == "sync"
    df = frame.with_columns(pl.lit(None, pl.String).alias("args")).collect()
    mask = (df["category"] == "sync").fill_null(value=False)
    pos = mask.arg_true()
    if pos.len() == 0:  # no sync record: every args is null, no second scan
        return df
    sync = frame.filter(is_sync).select("rank", "start_ns", "args").collect()
    if pos.len() == sync.height and df["rank"].gather(pos).equals(sync["rank"]) and df[
            "start_ns"].gather(pos).equals(sync["start_ns"]):
        args = pl.repeat(None, df.height, dtype=pl.String, eager=True).alias(
            "args").scatter(pos, sync["args"])
        return df.with_columns(args)
    return frame.with_columns(pl.when(is_sync).then(pl.col("args")).alias("args")).collect()


def host_chains(b: Builder, extra: pl.DataFrame) -> None:
    """Chain nodes and edges of every host thread; ``extra`` points (rank, track_id, t_ns,
    key) are inserted (message ends); their node ids are written to ``extra_node``.

    Built one rank at a time, ranks ascending (rank is the leading key of the chain
    order, so node ids, edges and ``b.host`` are those of one sort over all ranks): only
    one rank's points are held at once (a 1 GB rank has tens of millions of points;
    every int64 array of them is hundreds of MB)."""
    import polars as pl

    ev = b.events
    host = ev.select("eid", "rank", "track_id", "depth", "start_ns", "end_ns").with_columns(
        dl=name_matches(ev["name"], DATA_LOAD_RE)).filter(~ev["category"].is_in(NOT_HOST))
    # per-event lookups shared by every rank (event-sized, not point-sized)
    ctx = _ChainCtx(
        par_of=np.full(len(ev), -1, np.int64),
        ends_open=ev["end_ns"].to_numpy(),
        ev_mpi=(ev["category"] == "mpi").to_numpy(),
        ev_sync=(ev["category"].is_in(("runtime", "driver"))
                 & name_matches(ev["name"], SYNC_CALL_RE)).to_numpy())
    xr = extra["rank"].to_numpy().astype(np.int64)
    ranks = np.union1d(np.unique(host["rank"].to_numpy()), np.unique(xr)).astype(np.int64)
    extra_node = np.full(extra.height, -1, np.int64)
    # the chain arrays of all ranks, filled rank by rank; each rank's slice is also the
    # node block given to ``b.nodes`` (views: the points are not held twice)
    n_pts = 2 * host.height + extra.height
    out = tuple(np.empty(n_pts, np.int64) for _ in range(4))
    at = 0
    for r in ranks.tolist():
        hr = host.filter(pl.col("rank") == r)
        xi = np.flatnonzero(xr == r)
        n = 2 * hr.height + len(xi)
        views = (out[0][at:at + n], out[1][at:at + n], out[2][at:at + n], out[3][at:at + n])
        extra_node[xi] = _rank_chains(b, hr, extra[xi], ctx, views)
        at += n
        del hr
    b.extra_node = extra_node
    b.host = (out[0][:at], out[1][:at], out[2][:at], out[3][:at])
    b.phase_ends.append(b.count)


@dataclass
class _ChainCtx:
    """Event-sized lookups (index = eid) shared by the ranks' chains: ``par_of`` the
    enclosing host event (-1; filled rank by rank), ``ends_open`` end_ns, whether the
    event is an MPI call / a synchronizing runtime call."""

    par_of: I64
    ends_open: I64
    ev_mpi: npt.NDArray[np.bool_]
    ev_sync: npt.NDArray[np.bool_]


def _rank_chains(b: Builder, host: pl.DataFrame, extra: pl.DataFrame, ctx: _ChainCtx,
                 out: tuple[I64, I64, I64, I64]) -> I64:
    """Chain nodes and edges of the host threads of one rank (``host``: its host events,
    ``extra``: its extra points); (node ids, rank, track_id, t_ns) in chain order are
    written to ``out``; returns the node ids of the extra points."""
    eid = host["eid"].to_numpy()
    start = host["start_ns"].to_numpy()
    end = host["end_ns"].to_numpy()
    dl = host["dl"].to_numpy()
    nx = extra.height
    m = len(eid)
    # Points: starts (cls 2, outer first), ends (cls 1, inner first), extra (cls 0).
    p_t = np.concatenate([start, end, extra["t_ns"].to_numpy()]).astype(np.int64)
    # a zero-length event's end follows its own start
    p_cls = np.concatenate([np.full(m, 2, np.int8), np.where(end > start, 1, 3).astype(
        np.int8), np.zeros(nx, np.int8)])
    del start, end
    depth = host["depth"].to_numpy().astype(np.int64)
    p_sub = np.concatenate([depth, -depth, np.zeros(nx, np.int64)])
    del depth
    key3 = _pack(p_cls.astype(np.int64), p_sub)
    del p_sub
    rank = host["rank"].to_numpy().astype(np.int64)
    track = host["track_id"].to_numpy().astype(np.int64)
    p_rank = np.concatenate([rank, rank, extra["rank"].to_numpy()]).astype(np.int64)
    p_track = np.concatenate([track, track, extra["track_id"].to_numpy()]).astype(np.int64)
    del rank, track
    # one lexsort on 3 keys: (rank, track) packed, time, (class, depth) packed; the
    # same order as lexsort((p_sub, p_cls, p_t, p_track, p_rank))
    key1 = _pack(p_rank, p_track)
    order = _order(key1, p_t, key3)
    del key1, key3
    ids, r_sorted, tr_sorted, t_sorted = out
    np.take(p_t, order, out=t_sorted)
    del p_t
    np.take(p_rank, order, out=r_sorted)
    del p_rank
    np.take(p_track, order, out=tr_sorted)
    del p_track
    ids[:] = b.nodes(t_sorted, r_sorted, tr_sorted)
    pos = np.empty(len(order), np.int64)
    pos[order] = np.arange(len(order))
    b.start_node[eid] = ids[pos[:m]]
    b.end_node[eid] = ids[pos[m:2 * m]]
    x_ids = ids[pos[2 * m:]]
    del pos
    # Owner of the segment after each point: the event started there, or after an end
    # the enclosing event (same track, depth - 1, latest start, still open).
    par_of = ctx.par_of
    par_of[eid] = _parents(host, eid)
    s_eid = np.concatenate([eid, eid, np.full(nx, -1, np.int64)])[order]
    s_cls = p_cls[order]
    del p_cls
    owner = np.where(s_cls == 2, s_eid,
                     np.where(s_cls % 2 == 1, par_of[np.maximum(s_eid, 0)], -2))
    del s_eid
    closed = (owner >= 0) & (ctx.ends_open[np.maximum(owner, 0)] <= t_sorted) & (s_cls != 0)
    del s_cls
    owner[closed] = -1
    del closed
    same = np.zeros(len(order), bool)
    same[1:] = (r_sorted[1:] == r_sorted[:-1]) & (tr_sorted[1:] == tr_sorted[:-1])
    owner = _ffill_extra(owner, same)
    p_dl = np.concatenate([np.where(dl, 1, 0), np.where(dl, -1, 0),
                           np.zeros(nx, np.int64)]).astype(np.int64)
    dl_cov = np.cumsum(p_dl[order]) > 0
    del p_dl, order
    i = np.flatnonzero(same[1:])
    del same
    src, dst = ids[i], ids[i + 1]
    gap = t_sorted[i + 1] - t_sorted[i]
    own = owner[i]
    del owner
    own0 = np.maximum(own, 0)
    own_mpi = (own >= 0) & ctx.ev_mpi[own0]
    own_sync = (own >= 0) & ctx.ev_sync[own0]
    del own0
    bound = np.where(dl_cov[i], B["data_load"],
                     np.where(own_mpi, B["comm"],
                              np.where(own_sync, B["sync"], B["cpu"]))).astype(np.int64)
    del dl_cov, own_mpi, own_sync, i
    b.edges.add(src, dst, gap, "chain", bound, own)
    return x_ids


def _order(k1: I64, k2: I64, k3: I64) -> I64:
    """Stable order by (k1, k2, k3): one stable argsort of a packed int64 key when the
    three ranges fit in 63 bits (a host chain: rank/track, time in the region, class and
    depth), else ``np.lexsort``."""
    if not len(k1):
        return np.empty(0, np.int64)
    spans = [int(k.max()) - int(k.min()) + 1 for k in (k1, k2, k3)]  # Python ints
    if sum(x.bit_length() for x in spans) <= 62:
        a, b_, c = k1 - k1.min(), k2 - k2.min(), k3 - k3.min()
        return np.argsort((a * spans[1] + b_) * spans[2] + c, kind="stable")
    return np.lexsort((k3, k2, k1))


def _pack(hi: I64, lo: I64) -> I64:
    """One int64 key ordering as (hi, lo) does (``lo`` shifted to start at 0); falls
    back to a rank of the pairs when the ranges do not fit in 62 bits."""
    if not len(hi):
        return hi
    lo0 = lo - lo.min()
    span_lo = int(lo0.max()) + 1
    hi0 = hi - hi.min()
    if (int(hi0.max()) + 1) * span_lo < (1 << 62):
        return np.asarray(hi0 * span_lo + lo0, np.int64)
    _, inv = np.unique(np.stack([hi, lo], axis=1), axis=0, return_inverse=True)
    return np.asarray(inv.ravel(), np.int64)


def _ffill_extra(owner: I64, same: npt.NDArray[np.bool_]) -> I64:
    """Extra points (-2) take the owner of the point before them on their chain."""
    out = owner.copy()
    idx = np.where(out != -2, np.arange(len(out)), -1)
    # a chain's first point that is extra: no owner
    idx = np.where(~same & (out == -2), np.arange(len(out)), idx)
    out = np.where(~same & (out == -2), -1, out)
    filled = np.maximum.accumulate(idx) if len(idx) else idx
    return out[np.maximum(filled, 0)] if len(out) else out


def _parents(host: pl.DataFrame, eid: I64) -> I64:
    """For each host event, the enclosing event (same rank/track, depth - 1, latest start
    at or before its start), -1 when none."""
    import polars as pl

    left = host.select("rank", "track_id", (pl.col("depth") - 1).alias("depth"), "start_ns",
                       "eid").with_row_index("i").sort("start_ns")
    right = host.select("rank", "track_id", "depth", "start_ns",
                        pl.col("eid").alias("parent")).sort("start_ns")
    got = (left.join_asof(right, on="start_ns", by=["rank", "track_id", "depth"],
                          strategy="backward", check_sortedness=False)
           .sort("i")["parent"].fill_null(-1).to_numpy())
    same = got == eid
    return np.where(same, -1, got).astype(np.int64)


def device_streams(b: Builder) -> pl.DataFrame:
    """Start/end nodes, duration and stream-order edges of device activities; returns
    the device frame (eid, rank, track_id, stream, start, end, correlation, ks, ke)."""
    import polars as pl

    ev = b.events
    # the columns used downstream (launches, sync_edges, nccl_collectives) only
    dev = (ev.select("eid", "rank", "track_id", "start_ns", "end_ns", "name", "category",
                     "correlation", "stream", "process_group")
           .filter(ev["category"].is_in(DEVICE))
           .sort("rank", "track_id", "start_ns", "end_ns"))
    n = dev.height
    eid = dev["eid"].to_numpy()
    t = np.empty(2 * n, np.int64)
    t[0::2] = dev["start_ns"].to_numpy()
    t[1::2] = dev["end_ns"].to_numpy()
    rank = np.repeat(dev["rank"].to_numpy().astype(np.int64), 2)
    track = np.repeat(dev["track_id"].to_numpy().astype(np.int64), 2)
    ids = b.nodes(t, rank, track)
    b.phase_ends.append(b.count)
    ks, ke = ids[0::2], ids[1::2]
    b.start_node[eid] = ks
    b.end_node[eid] = ke
    comm = (dev["category"] == "comm_kernel").to_numpy()
    b.dur_edges = (ks, ke, t[1::2] - t[0::2], eid, comm)  # type: ignore[attr-defined]
    same = np.zeros(n, bool)
    r, tr = rank[0::2], track[0::2]
    same[1:] = (r[1:] == r[:-1]) & (tr[1:] == tr[:-1])
    j = np.flatnonzero(same)
    b.edges.add(ke[j - 1], ks[j], 0, "stream", "kernel_gap", eid[j])
    return dev.with_columns(ks=pl.Series(ks), ke=pl.Series(ke))


def add_durations(b: Builder, skip: npt.NDArray[np.bool_]) -> None:
    """Duration edges of device activities, except those in a matched collective."""
    ks, ke, dur, eid, comm = b.dur_edges  # type: ignore[attr-defined]
    keep = ~skip[eid]
    bound = np.where(comm, B["gpu_comm"], B["gpu_compute"]).astype(np.int64)
    b.edges.add(ks[keep], ke[keep], dur[keep], "duration", bound[keep], eid[keep])


def launches(b: Builder, dev: pl.DataFrame) -> pl.DataFrame:
    """Launch edges (call start -> activity start, same rank and correlation); returns
    ``dev`` with ``launch_ns`` (the call's start, null when none)."""
    import polars as pl

    ev = b.events
    # only the four columns used are taken (not every column of every call)
    calls = (ev.select("rank", "correlation", "eid", "start_ns")
             .filter(ev["category"].is_in(("runtime", "driver"))
                     & ev["correlation"].is_not_null())
             .sort("rank", "correlation", "start_ns")
             .group_by("rank", "correlation", maintain_order=True).first()
             .select("rank", "correlation", pl.col("eid").alias("call"),
                     pl.col("start_ns").alias("launch_ns")))
    dev = dev.join(calls, on=["rank", "correlation"], how="left", maintain_order="left")
    got = dev.filter(pl.col("call").is_not_null())
    src = b.start_node[got["call"].to_numpy()]
    ok = src >= 0
    b.edges.add(src[ok], got["ks"].to_numpy()[ok], 0, "launch", "launch",
                got["eid"].to_numpy()[ok])
    return dev
