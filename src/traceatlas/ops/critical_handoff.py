"""The main thread handing the backward pass to PyTorch's autograd thread, and back.

``loss.backward()`` on the main thread (M) wakes the autograd engine's device thread (A),
which runs every ``autograd::engine::evaluate_function: ...``, while M waits untraced;
when A is done, M resumes. Without these edges A's first work of a step hangs off the
region's start (an "(untraced)" cpu stretch hiding the forward pass and data loading),
and M's resume is a plain chain gap.

Threads: the pairs (rank, M, A) of PyTorch's ``fwdbwd`` flows (forward op on M -> its
backward on A, other thread); without flows, A is a thread whose top-level events are
``autograd::engine::evaluate_function*`` and M the thread of the rank's step annotations.

Edges (kind ``handoff``, bound ``cpu``, owner none: "(untraced)" on the path):

- *wake*: a top-level event start ``v`` on A whose previous point on A is older than M's
  latest point at or before ``v`` (M did something since A last worked) is released by
  that point of M: ``u -> v``, ``v`` a blocking point. Within a backward pass M records
  nothing, so only A's first work of each pass qualifies.
- *resume*: when M has no point from that ``u`` until A's last point before its next wake
  (M waited the whole pass), M's next point is released by A's latest point before it.

Times in ns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from traceatlas.ops.critical_graph import NOT_HOST, Builder, name_matches

if TYPE_CHECKING:
    import polars as pl

I64 = npt.NDArray[np.int64]
AUTOGRAD_RE = r"^autograd::engine::evaluate_function"


def thread_pairs(b: Builder, flows: pl.DataFrame) -> pl.DataFrame:
    """(rank, m_track, a_track) per rank: from ``fwdbwd`` flows (rank, name,
    src_track_id, dst_track_id), else by names (see the module docstring)."""
    import polars as pl

    schema = {"rank": pl.Int64, "m_track": pl.Int64, "a_track": pl.Int64}
    got = pl.DataFrame(schema=schema)
    if flows.height:
        got = (flows.filter((pl.col("name").cast(pl.String) == "fwdbwd")
                            & pl.col("src_track_id").is_not_null()
                            & pl.col("dst_track_id").is_not_null()
                            & (pl.col("src_track_id") != pl.col("dst_track_id")))
               .group_by("rank", "src_track_id", "dst_track_id").len()
               .sort("len", "rank", "src_track_id", "dst_track_id", descending=True)
               .unique("rank", keep="first")
               .select(pl.col("rank").cast(pl.Int64),
                       pl.col("src_track_id").cast(pl.Int64).alias("m_track"),
                       pl.col("dst_track_id").cast(pl.Int64).alias("a_track")))
    ev = b.events
    auto = (ev.filter((pl.col("depth") == 0) & name_matches(ev["name"], AUTOGRAD_RE))
            .group_by("rank", "track_id").len()
            .sort("len", "rank", "track_id", descending=True).unique("rank", keep="first")
            .select(pl.col("rank").cast(pl.Int64), pl.col("track_id").cast(pl.Int64)
                    .alias("a_track")))
    main = (ev.filter(pl.col("category") == "step").group_by("rank", "track_id").len()
            .sort("len", "rank", "track_id", descending=True).unique("rank", keep="first")
            .select(pl.col("rank").cast(pl.Int64), pl.col("track_id").cast(pl.Int64)
                    .alias("m_track")))
    by_name = (auto.join(main, on="rank").filter(pl.col("m_track") != pl.col("a_track"))
               .filter(~pl.col("rank").is_in(got["rank"].implode()))
               .select("rank", "m_track", "a_track"))
    return pl.concat([got, by_name]).sort("rank")


def handoff_edges(b: Builder, flows: pl.DataFrame) -> int:
    """Wake and resume edges (after ``host_chains``); returns how many were added."""
    import polars as pl

    if b.host is None or b.events.height == 0:
        return 0
    pairs = thread_pairs(b, flows)
    if pairs.height == 0:
        return 0
    ids, rank, track, t = b.host
    host = b.events.filter(~pl.col("category").is_in(NOT_HOST) & (pl.col("depth") == 0))
    top_rank = host["rank"].to_numpy().astype(np.int64)
    top_track = host["track_id"].to_numpy().astype(np.int64)
    top_node = b.start_node[host["eid"].to_numpy()]
    base = int(ids[0]) if len(ids) else 0
    src: list[I64] = []
    dst: list[I64] = []
    for r, m_tr, a_tr in pairs.iter_rows():
        on_m = np.flatnonzero((rank == r) & (track == m_tr))
        on_a = np.flatnonzero((rank == r) & (track == a_tr))
        if not len(on_m) or not len(on_a):
            continue
        t_m, t_a = t[on_m], t[on_a]
        # wake candidates: A's top-level starts, as positions in A's chain
        v_node = top_node[(top_rank == r) & (top_track == a_tr)]
        v_pos = np.searchsorted(on_a, v_node - base)
        u_pos = np.searchsorted(t_m, t_a[v_pos], side="right") - 1
        t_prev = np.where(v_pos > 0, t_a[np.maximum(v_pos - 1, 0)], np.iinfo(np.int64).min)
        wake = (u_pos >= 0) & (t_m[np.maximum(u_pos, 0)] > t_prev)
        v_pos, u_pos = v_pos[wake], u_pos[wake]
        if not len(v_pos):
            continue
        src.append(ids[on_m[u_pos]])
        dst.append(ids[on_a[v_pos]])
        # resume: M's next point after u, when none lies before the pass's last A point
        run_last = np.append(v_pos[1:] - 1, len(on_a) - 1)
        nxt = u_pos + 1
        ok = nxt < len(on_m)
        nxt, run_last = nxt[ok], run_last[ok]
        ok = t_m[nxt] >= t_a[run_last]
        nxt = nxt[ok]
        a_pos = np.searchsorted(t_a, t_m[nxt], side="right") - 1
        src.append(ids[on_a[a_pos]])
        dst.append(ids[on_m[nxt]])
    if not src:
        return 0
    s, d = np.concatenate(src), np.concatenate(dst)
    b.edges.add(s, d, 0, "handoff", "cpu", -1)
    b.blocking.append(d)
    return len(s)
