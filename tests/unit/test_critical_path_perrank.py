"""Host chains built one rank at a time give the graph of one sort over all ranks: the
oracle below is the all-ranks ``host_chains`` as it was before (one stable sort of every
host point of every rank); node ids, times, edges (in order), start/end/extra nodes and
the chain arrays must be identical, on random multi-rank frames with time ties,
zero-length events, interleaved rank rows and message points on ranks without events."""

from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from traceatlas.ops.critical_graph import (
    DATA_LOAD_RE,
    NOT_HOST,
    SYNC_CALL_RE,
    B,
    Builder,
    _ffill_extra,
    _order,
    _pack,
    _parents,
    host_chains,
    name_matches,
)


def _oracle_host_chains(b: Builder, extra: pl.DataFrame) -> None:
    """The former all-ranks version (every rank's points in one sort)."""
    ev = b.events
    host = ev.select("eid", "rank", "track_id", "depth", "start_ns", "end_ns").with_columns(
        dl=name_matches(ev["name"], DATA_LOAD_RE)).filter(~ev["category"].is_in(NOT_HOST))
    eid = host["eid"].to_numpy()
    start = host["start_ns"].to_numpy()
    end = host["end_ns"].to_numpy()
    dl = host["dl"].to_numpy()
    nx = extra.height
    m = len(eid)
    p_t = np.concatenate([start, end, extra["t_ns"].to_numpy()]).astype(np.int64)
    p_cls = np.concatenate([np.full(m, 2, np.int8), np.where(end > start, 1, 3).astype(
        np.int8), np.zeros(nx, np.int8)])
    depth = host["depth"].to_numpy().astype(np.int64)
    p_sub = np.concatenate([depth, -depth, np.zeros(nx, np.int64)])
    key3 = _pack(p_cls.astype(np.int64), p_sub)
    rank = host["rank"].to_numpy().astype(np.int64)
    track = host["track_id"].to_numpy().astype(np.int64)
    p_rank = np.concatenate([rank, rank, extra["rank"].to_numpy()]).astype(np.int64)
    p_track = np.concatenate([track, track, extra["track_id"].to_numpy()]).astype(np.int64)
    order = _order(_pack(p_rank, p_track), p_t, key3)
    t_sorted, r_sorted, tr_sorted = p_t[order], p_rank[order], p_track[order]
    ids = b.nodes(t_sorted, r_sorted, tr_sorted)
    b.host = (ids, r_sorted, tr_sorted, t_sorted)
    pos = np.empty(len(order), np.int64)
    pos[order] = np.arange(len(order))
    b.start_node[eid] = ids[pos[:m]]
    b.end_node[eid] = ids[pos[m:2 * m]]
    b.extra_node = ids[pos[2 * m:]]  # type: ignore[attr-defined]
    par_of = np.full(len(ev), -1, np.int64)
    par_of[eid] = _parents(host, eid)
    s_eid = np.concatenate([eid, eid, np.full(nx, -1, np.int64)])[order]
    s_cls = p_cls[order]
    owner = np.where(s_cls == 2, s_eid,
                     np.where(s_cls % 2 == 1, par_of[np.maximum(s_eid, 0)], -2))
    ends_open = ev["end_ns"].to_numpy()
    closed = (owner >= 0) & (ends_open[np.maximum(owner, 0)] <= t_sorted) & (s_cls != 0)
    owner[closed] = -1
    same = np.zeros(len(order), bool)
    same[1:] = (r_sorted[1:] == r_sorted[:-1]) & (tr_sorted[1:] == tr_sorted[:-1])
    owner = _ffill_extra(owner, same)
    p_dl = np.concatenate([np.where(dl, 1, 0), np.where(dl, -1, 0),
                           np.zeros(nx, np.int64)]).astype(np.int64)
    dl_cov = np.cumsum(p_dl[order]) > 0
    i = np.flatnonzero(same[1:])
    own = owner[i]
    own0 = np.maximum(own, 0)
    own_mpi = (own >= 0) & (ev["category"] == "mpi").to_numpy()[own0]
    ev_sync = (ev["category"].is_in(("runtime", "driver"))
               & name_matches(ev["name"], SYNC_CALL_RE)).to_numpy()
    own_sync = (own >= 0) & ev_sync[own0]
    bound = np.where(dl_cov[i], B["data_load"],
                     np.where(own_mpi, B["comm"],
                              np.where(own_sync, B["sync"], B["cpu"]))).astype(np.int64)
    b.edges.add(ids[i], ids[i + 1], t_sorted[i + 1] - t_sorted[i], "chain", bound, own)


NAMES = ["aten::mm", "cudaDeviceSynchronize", "DataLoader.__next__", "MPI_Recv", "k"]
CATS = ["cpu_op", "runtime", "user_annotation", "mpi", "kernel"]

event = st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(0, 2),
                  st.integers(0, 12), st.integers(0, 4), st.integers(0, 4))
point = st.tuples(st.integers(0, 5), st.integers(0, 2), st.integers(0, 16))


def _frame(rows: list[tuple[int, int, int, int, int, int]]) -> pl.DataFrame:
    return pl.DataFrame({
        "rank": [r[0] for r in rows], "track_id": [r[1] for r in rows],
        "depth": [r[2] for r in rows], "start_ns": [r[3] for r in rows],
        "end_ns": [r[3] + r[4] for r in rows],
        "name": pl.Series([NAMES[r[5]] for r in rows], dtype=pl.Categorical),
        "category": pl.Series([CATS[r[5]] for r in rows], dtype=pl.String),
    }, schema_overrides={"rank": pl.Int64, "track_id": pl.Int64, "depth": pl.Int64,
                         "start_ns": pl.Int64, "end_ns": pl.Int64}).with_row_index(
        "eid").with_columns(pl.col("eid").cast(pl.Int64))


def _graph(fn: object, ev: pl.DataFrame, extra: pl.DataFrame) -> dict[str, np.ndarray]:
    b = Builder(0, ev)
    fn(b, extra)  # type: ignore[operator]
    assert b.host is not None
    e = b.edges.arrays()
    out = {f"edge_{k}": v.astype(np.int64) for k, v in e.items()}
    out.update(t=np.concatenate(b.t), rank=np.concatenate(b.rank),
               track=np.concatenate(b.track), start=b.start_node, end=b.end_node,
               extra=b.extra_node,  # type: ignore[attr-defined]
               h_ids=b.host[0], h_rank=b.host[1], h_track=b.host[2], h_t=b.host[3])
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(event, min_size=1, max_size=40), st.lists(point, max_size=8))
def test_per_rank_chains_equal_one_sort_over_all_ranks(
        rows: list[tuple[int, int, int, int, int, int]],
        pts: list[tuple[int, int, int]]) -> None:
    ev = _frame(rows)
    extra = pl.DataFrame({"rank": [p[0] for p in pts], "track_id": [p[1] for p in pts],
                          "t_ns": [p[2] for p in pts], "key": list(range(len(pts)))},
                         schema={"rank": pl.Int64, "track_id": pl.Int64, "t_ns": pl.Int64,
                                 "key": pl.Int64})
    want = _graph(_oracle_host_chains, ev, extra)
    got = _graph(host_chains, ev, extra)
    assert want.keys() == got.keys()
    for k in want:
        assert np.array_equal(want[k], got[k]), k
