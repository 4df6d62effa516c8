"""Ideal-network replay of MPI calls: the runtime the run would have with zero latency and
infinite bandwidth (``T^ideal`` of the POP model, computed without Dimemas).

Model (reference A.2, "Computing T^ideal without Dimemas"). Each rank's timeline inside
the window ``[w0, w1]`` is cut into *blocks* (its MPI calls, all threads of the rank
together, clipped to the window; nested or overlapping calls form one block, calls that
merely touch stay apart) and *bursts* (the time outside MPI). Each rank
has a logical clock that starts at 0 at ``w0`` and advances only by its bursts; inside a
block it stands still, except that the block may end later:

- a block that holds the end of a receive (``recv_end_ns`` of a ``messages`` row with
  this rank as ``dst_rank``) completes at ``max(own clock, sender's clock at the send)``;
  the sender's clock at the send is its clock at the start of the block holding
  ``send_start_ns`` (sends cost nothing), or its clock at ``send_start_ns`` when the
  send lies outside its MPI calls; a send before ``w0`` imposes nothing;
- a blocking collective (an MPI call whose ``collective`` column is set or whose name is
  an MPI collective, non-blocking ``MPI_I...`` forms excluded) completes at the maximum
  of the participants' clocks at their entries; instances are matched as in
  ``mpi_collectives`` (per rank, the calls of one (communicator, op) numbered by start).
  Rooted collectives (Bcast, Reduce, ...) are treated as synchronising all ranks.

``T^ideal`` = the largest final clock over the ranks (the window length when nothing
waits). With ``D`` the delay a rank has accumulated (clock minus bursts so far), a block
``i`` of rank ``p`` sets ``D_i = max(D_prev, dep - U_i)`` where ``U_i`` is the burst time
before it and ``dep`` its dependencies' clocks. The blocks are visited in the order of
their recorded end times, which is a valid dependency order when the recording is
causal (a receive ends after its send starts; a collective ends after its last
participant enters). Only blocks with dependencies are visited in Python (one loop
iteration per receive block or collective block; others inherit ``D`` by a vectorised
forward fill); everything else is NumPy/Polars. Cost, measured on the shared 2-core
machine: the 1,024-rank bench store (bench/bench_hpc.py: 6.0 M MPI calls, 2.0 M
messages, 1,954 Allreduce instances) replays in 25 s (4.0 M visited blocks, ~6 us each
including the set-up), after 2 s to load the calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import polars as pl

I64 = npt.NDArray[np.int64]
SYNC_COLLECTIVE = (r"(?i)^MPI_(Allreduce|Barrier|Bcast|Reduce\w*|Allgather\w*|Alltoall\w*|"
                   r"Gather\w*|Scatter\w*|Scan|Exscan|Neighbor_\w+)$")
"""Blocking MPI collective call names (the non-blocking ``MPI_I...`` forms do not wait)."""


@dataclass(frozen=True)
class Replay:
    """Result of ``ideal_replay``: times in ns."""

    ideal_runtime_ns: int
    """T^ideal: the largest final logical clock."""
    final_clock_ns: dict[int, int]
    """Rank -> final logical clock (bursts + ideal waits)."""
    bursts_ns: dict[int, int]
    """Rank -> time outside MPI inside the window."""
    blocks: int
    """MPI blocks replayed (after merging nested/overlapping calls)."""
    dependent_blocks: int
    """Blocks with a dependency (visited one by one)."""
    messages: int
    """Messages used as dependencies."""
    messages_unplaced: int
    """Messages whose receive end lies in no MPI block of the receiver (ignored)."""
    collective_instances: int
    """Collective instances used as dependencies."""
    messages_outside: int = 0
    """Messages not used because their receive ends outside the window, a side is not a
    replayed rank, or the send starts before the window (ignored)."""


def ideal_replay(mpi: pl.DataFrame, messages: pl.DataFrame, ranks: list[int],
                 window: tuple[int, int]) -> Replay:
    """Replay ``mpi`` calls (columns rank, start_ns, end_ns, name, collective,
    process_group) and ``messages`` (src_rank, dst_rank, send_start_ns, recv_end_ns) of
    ``ranks`` over an ideal network inside ``window`` = (w0, w1) ns."""
    import polars as pl

    w0, w1 = window
    blocks = _blocks(mpi, w0, w1)
    n = blocks.height
    rank = blocks["rank"].to_numpy().astype(np.int64)
    start = blocks["start_ns"].to_numpy().astype(np.int64)
    end = blocks["end_ns"].to_numpy().astype(np.int64)
    # U_i: burst time before block i (window start to block start, minus earlier blocks).
    first = np.ones(n, dtype=bool)
    first[1:] = rank[1:] != rank[:-1]
    in_mpi = end - start
    cum_mpi = np.cumsum(in_mpi) - in_mpi
    group_base = np.maximum.accumulate(np.where(first, cum_mpi, 0))
    before = start - w0 - (cum_mpi - group_base)
    prev = np.arange(n, dtype=np.int64) - 1
    prev[first] = -1

    # Receives: the block of the receiver holding recv_end; the sender's point.
    msgs = messages.filter(pl.col("recv_end_ns").is_between(w0, w1)
                           & pl.col("dst_rank").is_in(ranks) & pl.col("src_rank").is_in(ranks))
    outside = messages.height - msgs.height
    recv_block = _locate(rank, start, end, msgs["dst_rank"].to_numpy(),
                         msgs["recv_end_ns"].to_numpy(), inside_only=True)
    send_t = msgs["send_start_ns"].to_numpy().astype(np.int64)
    send_block = _locate(rank, start, end, msgs["src_rank"].to_numpy(), send_t,
                         inside_only=False)
    placed = recv_block >= 0
    unplaced = int((~placed).sum())
    after_w0 = send_t >= w0
    use = placed & after_w0
    outside += int((placed & ~after_w0).sum())
    recv_block, send_block, send_t = recv_block[use], send_block[use], send_t[use]
    # Sender clock = base + D[dep_of]: inside block k -> U_k + D[prev k]; after block k ->
    # U_k + (t - end_k) + D[k]; before any block of the sender -> t - w0.
    base = np.empty(len(send_t), dtype=np.int64)
    dep_of = np.full(len(send_t), -1, dtype=np.int64)
    has = send_block >= 0
    k = send_block[has]
    inside = send_t[has] < end[k]
    base[has] = np.where(inside, before[k], before[k] + send_t[has] - end[k])
    dep_of[has] = np.where(inside, prev[k], k)
    base[~has] = send_t[~has] - w0    # before the sender's first block: bursts only

    coll_id = blocks["inst"].to_numpy().astype(np.int64)
    n_inst = int(coll_id.max()) + 1 if n and coll_id.max() >= 0 else 0
    dependent = np.zeros(n, dtype=bool)
    dependent[recv_block] = True
    dependent[coll_id >= 0] = True

    # Forward fill: each block's D comes from the last dependent block at or before it on
    # its rank (index into the loop's D array; -1 = none yet, D = 0).
    idx = np.where(dependent, np.arange(n), -1)
    seg_start = np.flatnonzero(first)
    last_dep = _ffill_by_group(idx, seg_start)
    prev_dep = np.full(n, -1, dtype=np.int64)
    prev_dep[prev >= 0] = last_dep[prev[prev >= 0]]
    dep_of_m = np.where(dep_of >= 0, last_dep[np.maximum(dep_of, 0)], -1)

    order = np.flatnonzero(dependent)
    order = order[np.lexsort((start[order], end[order]))]
    msg_order = np.argsort(recv_block, kind="stable")
    recv_sorted = recv_block[msg_order]
    ptr_lo = np.searchsorted(recv_sorted, np.arange(n), side="left")
    ptr_hi = np.searchsorted(recv_sorted, np.arange(n), side="right")
    m_base = base[msg_order]
    m_dep = dep_of_m[msg_order]

    # The loop runs on Python lists (scalar access on NumPy arrays is slower).
    delay = [0] * (n + 1)              # delay[i + 1] = D after block i; delay[0] = 0
    before_l, prev_l = before.tolist(), prev_dep.tolist()
    lo_l, hi_l = ptr_lo.tolist(), ptr_hi.tolist()
    mb_l, md_l, coll_l = m_base.tolist(), m_dep.tolist(), coll_id.tolist()
    inst_value: dict[int, int] = {}
    members = [m.tolist() for m in _members(coll_id, n_inst)]
    for i in order.tolist():
        d_prev = delay[prev_l[i] + 1]
        u = before_l[i]
        dep = u + d_prev
        for m in range(lo_l[i], hi_l[i]):
            v = mb_l[m] + delay[md_l[m] + 1]
            if v > dep:
                dep = v
        c = coll_l[i]
        if c >= 0:
            value = inst_value.get(c)
            if value is None:
                value = max(before_l[j] + delay[prev_l[j] + 1] for j in members[c])
                inst_value[c] = value
            if value > dep:
                dep = value
        delay[i + 1] = max(d_prev, dep - u)
    delay_a = np.asarray(delay, dtype=np.int64)

    final: dict[int, int] = {}
    bursts: dict[int, int] = {}
    mpi_total = {int(r): int(v) for r, v in zip(*_sum_by(rank, in_mpi), strict=True)}
    last_of = {int(rank[j]): int(j) for j in np.append(seg_start[1:] - 1, n - 1)} if n else {}
    for r in ranks:
        b = (w1 - w0) - mpi_total.get(r, 0)
        bursts[r] = b
        j = last_of.get(r)
        final[r] = b + (int(delay_a[last_dep[j] + 1]) if j is not None else 0)
    return Replay(
        ideal_runtime_ns=max(final.values(), default=0), final_clock_ns=final,
        bursts_ns=bursts, blocks=n, dependent_blocks=len(order), messages=int(use.sum()),
        messages_unplaced=unplaced, collective_instances=n_inst, messages_outside=outside,
    )


def _blocks(mpi: pl.DataFrame, w0: int, w1: int) -> pl.DataFrame:
    """Per rank, its MPI calls clipped to [w0, w1], nested or overlapping calls merged
    into one block that keeps the outermost call's collective instance; columns rank,
    start_ns, end_ns, inst (collective instance id, -1 for none). Sorted by (rank,
    start). Calls that merely touch stay separate blocks."""
    import polars as pl

    names = mpi["name"].cast(pl.String).unique().to_frame("name").with_columns(
        blocking=~pl.col("name").str.contains(r"(?i)^MPI_I"),
        by_name=pl.col("name").str.contains(SYNC_COLLECTIVE),
        name_op=pl.col("name").str.replace(r"(?i)^MPI_", "").str.to_lowercase())
    calls = (
        mpi.lazy().with_columns(pl.col("name").cast(pl.String))
        .join(names.lazy(), on="name", how="left")
        .select("rank", pl.col("start_ns").alias("orig"),
                pl.col("start_ns").clip(w0, w1), pl.col("end_ns").clip(w0, w1),
                pl.when((pl.col("collective").is_not_null() & pl.col("blocking"))
                        | pl.col("by_name"))
                .then(pl.coalesce(pl.col("collective").cast(pl.String).str.to_lowercase(),
                                  pl.col("name_op"))).alias("op"),
                pl.col("process_group").cast(pl.String).fill_null("").alias("comm"))
        .sort("rank", "orig", "end_ns", descending=[False, False, True])
        .with_columns(occ=pl.when(pl.col("op").is_not_null()).then(
            pl.int_range(pl.len(), dtype=pl.Int64).over("rank", "comm", "op")))
        .filter(pl.col("end_ns") > pl.col("start_ns"))
        .sort("rank", "start_ns", "end_ns", descending=[False, False, True])
        .collect()
    )
    keys = (calls.filter(pl.col("op").is_not_null()).select("comm", "op", "occ")
            .unique(maintain_order=True).with_row_index("inst")
            .with_columns(pl.col("inst").cast(pl.Int64)))
    calls = calls.join(keys, on=["comm", "op", "occ"], how="left", maintain_order="left")
    rank = calls["rank"].to_numpy().astype(np.int64)
    start = calls["start_ns"].to_numpy().astype(np.int64)
    end = calls["end_ns"].to_numpy().astype(np.int64)
    inst = calls["inst"].fill_null(-1).to_numpy().astype(np.int64)
    n = len(rank)
    opens = np.ones(n, dtype=bool)
    if n > 1:
        # A call opens a block unless it starts before the furthest end so far on its
        # rank (ranks are made disjoint by an offset larger than any time).
        first = np.ones(n, dtype=bool)
        first[1:] = rank[1:] != rank[:-1]
        span = int(end.max()) - int(start.min()) + 1
        offset = np.cumsum(first) * span
        reach = np.maximum.accumulate(end - int(start.min()) + offset)
        opens[1:] = first[1:] | (start[1:] - int(start.min()) + offset[1:] >= reach[:-1])
    if opens.all():
        return pl.DataFrame({"rank": rank, "start_ns": start, "end_ns": end, "inst": inst})
    heads = np.flatnonzero(opens)
    return pl.DataFrame({"rank": rank[heads], "start_ns": start[heads],
                         "end_ns": np.maximum.reduceat(end, heads), "inst": inst[heads]})


def _members(coll_id: I64, n_inst: int) -> list[I64]:
    """Block indices of each collective instance."""
    rows = np.flatnonzero(coll_id >= 0)
    order = rows[np.argsort(coll_id[rows], kind="stable")]
    bounds = np.searchsorted(coll_id[order], np.arange(n_inst + 1))
    return [order[bounds[c]:bounds[c + 1]] for c in range(n_inst)]


def _locate(rank: I64, start: I64, end: I64, who: npt.NDArray[np.int64],
            t: npt.NDArray[np.int64], *, inside_only: bool) -> I64:
    """Index of the last block of rank ``who`` starting at or before ``t`` (-1: none);
    with ``inside_only``, -1 unless ``t`` lies in that block ([start, end])."""
    if len(rank) == 0 or len(t) == 0:
        return np.full(len(t), -1, dtype=np.int64)
    # One sort of blocks and queries by (rank, time, block first on ties); the running
    # maximum of block indices (blocks are sorted by (rank, start)) is the last block at
    # or before each query; it must be on the query's rank.
    n = len(rank)
    all_rank = np.concatenate([rank, who.astype(np.int64)])
    all_t = np.concatenate([start, t.astype(np.int64)])
    # Ties: a send at a block's start is in that block; a receive ending where the next
    # call starts belongs to the call before (block after the query).
    block_kind = 1 if inside_only else 0
    kind = np.concatenate([np.full(n, block_kind, np.int8),
                           np.full(len(t), 1 - block_kind, np.int8)])
    order = np.lexsort((kind, all_t, all_rank))
    marks = np.where(order < n, order, -1)
    last = np.maximum.accumulate(marks)
    got = np.full(len(t), -1, dtype=np.int64)
    is_q = order >= n
    got[order[is_q] - n] = last[is_q]
    safe = np.maximum(got, 0)
    ok = (got >= 0) & (rank[safe] == who)
    if inside_only:
        ok &= t <= end[safe]
    return np.where(ok, got, -1)


def _ffill_by_group(idx: I64, seg_start: I64) -> I64:
    """Forward fill of non-negative values within groups starting at ``seg_start``."""
    n = len(idx)
    out = idx.copy()
    if n == 0:
        return out
    marker = np.zeros(n, dtype=np.int64)
    marker[seg_start] = 1
    group = np.cumsum(marker)
    pos = np.where(idx >= 0, np.arange(n), -1)
    filled = np.maximum.accumulate(pos)
    # A fill from an earlier group is not valid: reset to -1.
    group_first = seg_start[group - 1]
    out = np.where(filled >= group_first, idx[np.maximum(filled, 0)], -1)
    return out


def _sum_by(rank: I64, values: I64) -> tuple[I64, I64]:
    if len(rank) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    uniq, inv = np.unique(rank, return_inverse=True)
    return uniq, np.bincount(inv, weights=values).astype(np.int64)
