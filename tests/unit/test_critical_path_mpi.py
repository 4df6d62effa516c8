"""``critical_path`` on MPI traces written here as Paraver records (times in ms; the
reader keeps them as ns): a ping-pong with a late sender and an allreduce with one late
rank. Every expected path, length, breakdown, wait and what-if gain is worked out by hand
in the docstrings from the construction."""

from __future__ import annotations

from pathlib import Path

import polars as pl

import traceatlas
from traceatlas import analysis
from traceatlas.testing.paraver_text import (
    MPI_COLLECTIVE,
    MPI_P2P,
    MS,
    USER_FUNCTION,
    message,
    mpi_call,
    mpi_events,
    pcf,
    pcf_events,
    write_prv,
)

SEND, RECV, ALLREDUCE = 1, 2, 10
WORK, REPLY, PREP, LATE = 1, 2, 3, 4
PCF = pcf({1: "Running"}, mpi_events(MPI_P2P, {SEND: "MPI_Send", RECV: "MPI_Recv"}),
          mpi_events(MPI_COLLECTIVE, {ALLREDUCE: "MPI_Allreduce"}),
          pcf_events(USER_FUNCTION, "User function",
                     {WORK: "work", REPLY: "reply", PREP: "prep", LATE: "late_work"}))


def _user(task: int, value: int, start_ms: float, end_ms: float) -> str:
    return mpi_call(task, value, start_ms, end_ms, USER_FUNCTION)


def _open(tmp_path: Path, body: str, tasks: int) -> traceatlas.Trace:
    lines = sorted(body.splitlines(), key=lambda line: int(line.split(":")[5]))
    prv = write_prv(tmp_path, "\n".join(lines) + "\n", PCF, tasks)
    return traceatlas.open(traceatlas.ingest(prv, tmp_path / "store"))


def _ping_pong(tmp_path: Path) -> traceatlas.Trace:
    """Rank 0 (the late sender): work [0,5], MPI_Send [5,5.5], MPI_Recv [5.5,8]. Rank 1:
    prep [0,1], MPI_Recv [1,6] (posted 4 ms before the send), reply [6,7], MPI_Send
    [7,7.5]. Ping sent at 5, received at 6; pong sent at 7, received at 8.
    Path: work (rank 0, cpu 5) -> ping (comm 1, owned by rank 1's receive) -> reply
    (rank 1, cpu 1) -> pong (comm 1, rank 0's receive). Length 8 ms."""
    body = (_user(1, WORK, 0, 5) + mpi_call(1, SEND, 5, 5.5) + mpi_call(1, RECV, 5.5, 8)
            + _user(2, PREP, 0, 1) + mpi_call(2, RECV, 1, 6) + _user(2, REPLY, 6, 7)
            + mpi_call(2, SEND, 7, 7.5)
            + message(0, 1, 5, 5.2, 1, 6, 8) + message(1, 0, 7, 7.2, 5.5, 8, 8))
    return _open(tmp_path, body, 2)


def test_ping_pong_late_sender(tmp_path: Path) -> None:
    trace = _ping_pong(tmp_path)
    res = analysis.run("critical_path", trace)
    t = res.table
    assert t.select("rank", "name", "bound", "start_ns", "end_ns").rows() == [
        (0, "work", "cpu", 0, 5 * MS), (1, "MPI_Recv", "comm", 5 * MS, 6 * MS),
        (1, "reply", "cpu", 6 * MS, 7 * MS), (0, "MPI_Recv", "comm", 7 * MS, 8 * MS)]
    by_bound = dict(res.extra["by_bound"].filter(pl.col("ns") > 0)
                    .select("bound", "ns").iter_rows())
    assert by_bound == {"cpu": 6 * MS, "comm": 2 * MS}
    by_rank = dict(res.extra["by_rank"].select("rank", "ns").iter_rows())
    assert by_rank == {0: 6 * MS, 1: 2 * MS}
    assert dict(res.extra["dependencies"].iter_rows())["messages"] == 2
    # beside the path: rank 1 waited 1 -> 5 for the ping, rank 0 5.5 -> 7 for the pong
    waits = res.extra["waits"].select("rank", "kind", "instances", "wait_ns").rows()
    assert waits == [(0, "message", 1, 1_500_000), (1, "message", 1, 4 * MS)]


def test_ping_pong_whatif(tmp_path: Path) -> None:
    """work twice as fast: the ping leaves at 2.5, arrives 3.5, reply to 4.5, pong
    arrives 5.5: 2.5 ms gained (all of it). prep (off the path: rank 1 waits for the
    ping anyway) and the reply's sender-side MPI_Send (its own time is off the path):
    nothing."""
    trace = _ping_pong(tmp_path)

    def gain(sp: str) -> int:
        w = analysis.run("critical_path", trace, {"speedup": sp}).extra["whatif"]
        assert w["length_before_ns"][0] == 8 * MS
        return int(w["gain_ns"][0])

    assert gain("^work$:2") == 2_500_000
    assert gain("^prep$:2") == 0
    assert gain("^reply$:4") == 750_000
    assert gain("^MPI_Send$:2") == 0


def _allreduce(tmp_path: Path) -> traceatlas.Trace:
    """Three ranks, two iterations of compute then MPI_Allreduce; iteration i starts at
    7i ms. Compute: rank 0 work 2 ms, rank 1 work 3 ms, rank 2 late_work 6 ms; every
    allreduce ends 1 ms after the last arrival (rank 2's, at 7i + 6).
    Path: late_work 6 (cpu, rank 2), allreduce 1 (comm), twice: 14 ms, cpu 12, comm 2;
    rank 2 last at both instances. Waits beside the path: rank 0 4 ms, rank 1 3 ms per
    instance, rank 2 none."""
    body = ""
    for i in range(2):
        base = 7 * i
        for task, value, dur in ((1, WORK, 2), (2, WORK, 3), (3, LATE, 6)):
            body += _user(task, value, base, base + dur)
            body += mpi_call(task, ALLREDUCE, base + dur, base + 7, MPI_COLLECTIVE)
    return _open(tmp_path, body, 3)


def test_allreduce_one_late_rank(tmp_path: Path) -> None:
    trace = _allreduce(tmp_path)
    res = analysis.run("critical_path", trace)
    t = res.table
    assert t["on_path_ns"].sum() == 14 * MS
    by_bound = dict(res.extra["by_bound"].filter(pl.col("ns") > 0)
                    .select("bound", "ns").iter_rows())
    assert by_bound == {"cpu": 12 * MS, "comm": 2 * MS}
    assert t.filter(pl.col("bound") == "cpu")["name"].unique().to_list() == ["late_work"]
    assert (t.filter(pl.col("bound") == "cpu")["rank"] == 2).all()
    by_rank = {r["rank"]: r for r in res.extra["by_rank"].iter_rows(named=True)}
    assert by_rank[2]["arrivals_last"] == 2 and by_rank[2]["arrivals_last_all"] == 2
    assert by_rank[0]["arrivals_last_all"] == by_rank[1]["arrivals_last_all"] == 0
    assert dict(res.extra["dependencies"].iter_rows())["mpi_collectives"] == 2
    waits = res.extra["waits"].select("rank", "kind", "instances", "wait_ns").rows()
    assert waits == [(0, "collective", 2, 8 * MS), (1, "collective", 2, 6 * MS),
                     (2, "collective", 2, 0)]


def test_allreduce_whatif(tmp_path: Path) -> None:
    """late_work twice as fast (3 ms): rank 1 (3 ms) and rank 2 arrive together, each
    iteration takes 4 ms: 14 -> 8. Four times as fast (1.5 ms): rank 1 is now last at
    3 ms, still 8: the gain stops at the next rank. The early ranks' work: 0."""
    trace = _allreduce(tmp_path)

    def gain(sp: str) -> int:
        return int(analysis.run("critical_path", trace, {"speedup": sp})
                   .extra["whatif"]["gain_ns"][0])

    assert gain("^late_work$:2") == 6 * MS
    assert gain("^late_work$:4") == 6 * MS
    assert gain("^work$:2") == 0
