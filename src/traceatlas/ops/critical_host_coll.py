"""Host-side collectives in the critical-path graph (DDP over gloo, MPI/UCC process groups).

What is matched, and why:

- **Backend work records** (``gloo:*``, ``mpi:*``, ``ucc:*`` host ranges, e.g. Kineto's
  ``gloo:all_reduce`` user annotation) are the collectives: they span the blocking
  exchange. With DDP over gloo they run on gloo's ``pt_gloo_runloop`` threads, not on the
  thread that called ``c10d::allreduce_``. Across ranks, the k-th record of a (process
  group, name) on each rank is one instance (k counted over the whole trace, so a region
  that cuts a rank's earlier records does not shift it); the process group is ``""`` when
  the trace does not give it (Kineto writes none on gloo records).
- **``c10d::*`` ops are not collectives here**: they enqueue the work and return (about
  100 us on the real gloo traces while the exchange takes tens of ms); matching them as
  blocking calls would make every rank "leave with the last arrival" when none waited.
  They are the *enqueue* signal of the work (below).
- **The exchange inside a record**: the record holds its own child calls (gloo copies the
  bucket to the host, ``cudaStreamSynchronize``, then exchanges over TCP untraced, then
  copies back). A participant's arrival is the start, and its release the end, of its
  longest stretch of own time (time in the record outside any child): the untraced
  exchange; a record without children: its start and end. Edges: arrival -> instance node
  (at the last arrival; bound ``wait``) -> release (bound ``comm``, a blocking point), as
  for MPI collectives.
- **Wake-ups** (edge kind ``wakeup``, bound ``cpu``): the thread that waits for the work
  (DDP's autograd thread in ``Work.wait``, the main thread at the end of ``backward``)
  records nothing while it waits. An *idle* stretch of another thread of the rank
  (untraced, or the own time of a user annotation or of a ``*wait`` op) that contains a
  record's end and resumes at most ``WAKE_SLACK_NS`` after it is released by it: record
  end -> resume point (a blocking point). Likewise a record starting after an idle stretch
  of its thread at most ``WAKE_SLACK_NS`` after a ``c10d::*`` op of another thread of the
  rank ended is released by that op (the enqueue). Only ranks with backend work records
  get wake-ups, so NCCL traces are unchanged.

Times in ns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from traceatlas.ops.critical_graph import NOT_HOST, Builder, K, name_matches
from traceatlas.ops.critical_ranks import instances

if TYPE_CHECKING:
    import polars as pl

I64 = npt.NDArray[np.int64]
HOST_WORK_RE = r"^(gloo|mpi|ucc):"
"""Process-group backend work records that span a host collective's exchange."""
ENQUEUE_RE = r"^c10d::"
"""c10d dispatch ops: they enqueue a collective's work and return."""
IDLE_OP_RE = r"(?i)(::|\.)wait(_tensor)?$"
"""Ops that block until a collective's work completes (``c10d::wait``, ``Work.wait``)."""
WAKE_SLACK_NS = 2_000_000
"""A thread resuming at most this long after a record ends (or an enqueue) was woken by
it; longer: the stretch is left as host time."""


def host_work(events: pl.DataFrame) -> pl.DataFrame:
    """Backend work records among the region's host intervals (eid, rank, track_id,
    start_ns, end_ns, name, process_group)."""
    import polars as pl

    return events.filter(~pl.col("category").is_in(NOT_HOST)
                         & name_matches(events["name"], HOST_WORK_RE)).select(
        "eid", "rank", "track_id", "start_ns", "end_ns", pl.col("name").cast(pl.String),
        pl.col("process_group").fill_null(""))


def occurrences(work: pl.DataFrame, whole: pl.LazyFrame | None, lo: int,
                hi: int) -> pl.DataFrame:
    """``work`` with ``occ``: the record's index among its rank's records of the same
    (process group, name) in start order, over ``whole`` (the trace without region
    filters; None: over ``work``). Records are found in ``whole`` by rank, track and
    their span clipped to [lo, hi]."""
    import polars as pl

    key = ["rank", "process_group", "name"]
    if whole is None:
        return work.sort("rank", "start_ns").with_columns(
            occ=pl.int_range(pl.len()).over(key))
    every = (whole.filter(~pl.col("category").is_in(NOT_HOST)
                          & pl.col("name").cast(pl.String).str.contains(HOST_WORK_RE))
             .select("rank", "track_id", "start_ns", "end_ns",
                     pl.col("name").cast(pl.String),
                     pl.col("process_group").cast(pl.String).fill_null(""))
             .collect().sort("rank", "start_ns", "end_ns")
             .with_columns(occ=pl.int_range(pl.len()).over(key),
                           start_ns=pl.col("start_ns").clip(lo, hi),
                           end_ns=pl.col("end_ns").clip(lo, hi)))
    on = ["rank", "track_id", "start_ns", "end_ns", *key[1:]]
    every = every.with_columns(pl.col("rank").cast(work.schema["rank"]),
                               pl.col("track_id").cast(work.schema["track_id"]))
    got = work.join(every.unique(on, keep="first"), on=on, how="left")
    # a record the whole trace does not give back (should not happen): local order
    local = got.sort("rank", "start_ns").with_columns(
        loc=pl.int_range(pl.len()).over(key))
    return local.with_columns(pl.col("occ").fill_null(pl.col("loc") - 1_000_000_000)
                              ).drop("loc")


def host_collectives(b: Builder, whole: pl.LazyFrame | None, lo: int, hi: int
                     ) -> dict[str, int]:
    """Instance and wake-up edges of host collectives (after ``host_chains``); returns
    ``{"host_collectives": instances, "host_wakeups": edges}``."""
    import polars as pl

    work = host_work(b.events)
    if work.height == 0:
        return {"host_collectives": 0, "host_wakeups": 0}
    work = occurrences(work, whole, lo, hi)
    t = np.concatenate(b.t)
    e = b.edges.arrays()
    chain = np.flatnonzero(e["kind"] == K["chain"])
    c_src, c_dst, c_own = (e[k][chain].astype(np.int64) for k in ("src", "dst", "owner"))
    # the longest own stretch of each record: its exchange
    own = pl.DataFrame({"eid": c_own, "a": c_src, "b": c_dst,
                        "gap": t[c_dst] - t[c_src]}).filter(
        pl.col("eid").is_in(work["eid"].implode()))
    span = (own.sort("gap", "a", descending=[True, False]).group_by("eid").first()
            .select("eid", "a", "b"))
    f = work.join(span, on="eid", how="inner").sort("eid")
    f = f.with_columns(start_ns=pl.Series(t[f["a"].to_numpy()]))
    _, n = instances(b, f, ["process_group", "name", "occ"], "comm",
                     f["a"].to_numpy().astype(np.int64), f["b"].to_numpy().astype(np.int64),
                     blocking=True)
    wakes = _wakeups(b, work, t, c_src, c_dst, c_own)
    return {"host_collectives": n, "host_wakeups": wakes}


def _wakeups(b: Builder, work: pl.DataFrame, t: I64, c_src: I64, c_dst: I64,
             c_own: I64) -> int:
    """Record end -> resume of an idle stretch on another thread; enqueue (``c10d::*``
    op end) -> record start after an idle stretch (see the module docstring)."""
    import polars as pl

    ev = b.events
    ranks = work["rank"].cast(pl.Int64).unique().implode()
    idle_ev = ((ev["category"] == "annotation") | name_matches(ev["name"], IDLE_OP_RE)
               ).to_numpy()
    idle = (c_own < 0) | idle_ev[np.maximum(c_own, 0)]
    rank_of = np.concatenate(b.rank)
    track_of = np.concatenate(b.track)
    seg = pl.DataFrame({"p": c_src, "q": c_dst, "owner": c_own,
                        "rank": rank_of[c_dst], "track": track_of[c_dst],
                        "t_p": t[c_src], "t_q": t[c_dst]}).filter(
        pl.Series(idle) & (pl.col("t_q") > pl.col("t_p"))
        & pl.col("rank").is_in(ranks))
    ends = pl.DataFrame({"s": b.end_node[work["eid"].to_numpy()],
                         "rank": work["rank"].cast(pl.Int64),
                         "s_track": work["track_id"].cast(pl.Int64),
                         "t_s": work["end_ns"]})
    q_work = b.start_node[work["eid"].to_numpy()]
    enq_ev = ev.filter(name_matches(ev["name"], ENQUEUE_RE)
                       & ~pl.col("category").is_in(NOT_HOST)
                       & pl.col("rank").is_in(work["rank"].unique().implode()))
    enq = pl.DataFrame({"s": b.end_node[enq_ev["eid"].to_numpy()],
                        "rank": enq_ev["rank"].cast(pl.Int64),
                        "s_track": enq_ev["track_id"].cast(pl.Int64),
                        "t_s": enq_ev["end_ns"]})
    # a record opening its thread's chain: its idle stretch runs from the region start
    has_in = np.zeros(len(t), bool)
    has_in[c_dst] = True
    first = np.unique(q_work[~has_in[q_work]])  # = setdiff1d(q_work, c_dst), no sort of c_dst
    lead = pl.DataFrame({"p": np.full(len(first), -1, np.int64), "q": first,
                         "owner": np.full(len(first), -1, np.int64),
                         "rank": rank_of[first], "track": track_of[first],
                         "t_p": np.full(len(first), int(t[0]) - 1, np.int64),
                         "t_q": t[first]})
    into = pl.concat([seg.filter(pl.col("q").is_in(q_work)), lead])
    got = [_match(seg, ends), _match(into, enq)]
    m = pl.concat(got).unique(["q"], keep="first")
    if m.height == 0:
        return 0
    q = m["q"].to_numpy().astype(np.int64)
    b.edges.add(m["s"].to_numpy().astype(np.int64), q, 0, "wakeup", "cpu",
                m["owner"].to_numpy().astype(np.int64))
    b.blocking.append(q)
    return m.height


def _match(seg: pl.DataFrame, signals: pl.DataFrame) -> pl.DataFrame:
    """For each stretch [t_p, t_q], the latest signal at or before t_q on the rank; kept
    when it lies inside the stretch (after t_p), on another thread, within the slack."""
    import polars as pl

    cols = {"q": pl.Int64, "s": pl.Int64, "owner": pl.Int64}
    if seg.height == 0 or signals.height == 0:
        return pl.DataFrame(schema=cols)
    got = seg.sort("t_q").join_asof(signals.sort("t_s"), left_on="t_q", right_on="t_s",
                                    by="rank", strategy="backward", check_sortedness=False)
    ok = got.filter(pl.col("s").is_not_null() & (pl.col("t_s") > pl.col("t_p"))
                    & (pl.col("s_track") != pl.col("track"))
                    & (pl.col("t_q") - pl.col("t_s") <= WAKE_SLACK_NS))
    return ok.select(*[pl.col(c).cast(d) for c, d in cols.items()])
