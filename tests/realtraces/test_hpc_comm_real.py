"""Communication analyses on the real HPC traces.

- pipit/ping-pong-otf2 (-papi): the numbers Pipit's own tests publish for this trace
  (hpcgroup/pipit, ``pipit/tests/trace.py``: ``test_comm_matrix``,
  ``test_comm_over_time``, ``test_comm_by_process``; the same matrix in
  ``pipit/tests/comm_matrix.py``: ``test_comm_matrix``).
- profet-paraver LULESH: comm_matrix and comm_by_rank against a plain parse of the .prv
  type-3 records; mpi_collectives and mpi_wait consistency with plain loops.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

import traceatlas
from traceatlas import analysis

pytestmark = pytest.mark.realtrace

PING_PONG = ("pipit/ping-pong-otf2", "pipit/ping-pong-otf2-papi")
LULESH = ("profet-paraver/lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv",
          "profet-paraver/lulesh_7+1_with_uncores_sockets1+2.chop8.prv")
PIPIT_BYTES = 4_177_920
"""Pipit tests/trace.py test_comm_matrix: "8 sends from each process (total of 4177920
bytes ~ 3.984 mebibytes)": size_comm_matrix[0][1] == size_comm_matrix[1][0] == 4177920,
count_comm_matrix[0][1] == count_comm_matrix[1][0] == 8, diagonal 0."""


def _open(path: Path, tmp: Path) -> traceatlas.Trace:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return traceatlas.open(traceatlas.ingest(path, tmp / "store"))


@pytest.mark.parametrize("rel", PING_PONG)
def test_ping_pong_matches_pipits_tests(traces_dir: Path, tmp_path: Path, rel: str) -> None:
    trace = _open(traces_dir / rel, tmp_path)
    # test_comm_matrix: 2 x 2, diagonal 0 (no rows here), 8 messages and 4177920 bytes
    # each way
    matrix = analysis.run("comm_matrix", trace).table
    assert matrix.rows() == [(0, 1, 8, PIPIT_BYTES), (1, 0, 8, PIPIT_BYTES)]
    # test_comm_by_process: Sent == Received == 4177920 bytes and 8 messages per rank
    by_rank = analysis.run("comm_by_rank", trace).table
    assert by_rank.rows() == [(0, 8, PIPIT_BYTES, 8, PIPIT_BYTES),
                              (1, 8, PIPIT_BYTES, 8, PIPIT_BYTES)]
    # test_comm_over_time: 5 bins (6 edges); hist[0:3] == 0; sends: hist[4] == 4177920 * 2
    # bytes; receives: hist[4] == 8 * 2 messages
    sends = analysis.run("comm_over_time", trace, {"bins": "5"}).table
    assert sends.height == 5
    assert sends["bytes"].to_list()[:3] == [0, 0, 0]
    assert sends["bytes"][4] == PIPIT_BYTES * 2
    recvs = analysis.run("comm_over_time", trace, {"bins": "5", "by": "recv"}).table
    assert recvs["count"].to_list()[:3] == [0, 0, 0]
    assert recvs["count"][4] == 8 * 2
    # message sizes: 16 KiB doubling to 2 MiB, once each way (2 x 8 messages)
    hist = analysis.run("message_histogram", trace).table
    assert hist.height == 20 and hist["count"].sum() == 16
    assert hist["bin_lo_bytes"][0] == 16_384 and hist["bin_hi_bytes"][19] == 2_097_152


@pytest.mark.parametrize("rel", PING_PONG[:1])
def test_ping_pong_wait_states_match_a_plain_loop(traces_dir: Path, tmp_path: Path,
                                                  rel: str) -> None:
    """Blocking MPI_Send/MPI_Recv only: each call is its message's blocking call, so late
    sender = max(0, min(send start, recv end) - recv start) on the receiver and late
    receiver = recv start - send start when the receive is posted while MPI_Send runs."""
    trace = _open(traces_dir / rel, tmp_path)
    ls: Counter[int] = Counter()
    ls_n: Counter[int] = Counter()
    lr: Counter[int] = Counter()
    lr_n: Counter[int] = Counter()
    for m in trace.messages.collect().iter_rows(named=True):
        wait = min(m["send_start_ns"], m["recv_end_ns"]) - m["recv_start_ns"]
        if wait > 0:
            ls[m["dst_rank"]] += wait
            ls_n[m["dst_rank"]] += 1
        if m["send_start_ns"] < m["recv_start_ns"] < m["send_end_ns"]:
            lr[m["src_rank"]] += m["recv_start_ns"] - m["send_start_ns"]
            lr_n[m["src_rank"]] += 1
    expected = [(r, ls[r], ls_n[r], lr[r], lr_n[r]) for r in (0, 1)]
    assert analysis.run("mpi_wait", trace).table.rows() == expected
    assert sum(ls_n.values()) + sum(lr_n.values()) > 0


def _prv_messages(prv: Path) -> list[tuple[int, int, int]]:
    """(src rank, dst rank, bytes) of each type-3 record, by a plain text parse: rank =
    offset of the application (tasks of earlier applications) + task - 1."""
    with prv.open() as f:
        header = f.readline()
        rest = re.sub(r"^#Paraver \([^)]*\):", "", header.strip())
        apps = rest.split(":", 3)[3]
        tasks = [int(n) for n in re.findall(r"(\d+)\([^)]*\)", apps)]
        offsets = [sum(tasks[:i]) for i in range(len(tasks))]
        out = []
        for line in f:
            if line.startswith("3:"):
                p = line.split(":")
                src = offsets[int(p[2]) - 1] + int(p[3]) - 1
                dst = offsets[int(p[8]) - 1] + int(p[9]) - 1
                out.append((src, dst, int(p[13])))
    return out


@pytest.mark.parametrize("rel", LULESH)
def test_lulesh_comm_matrix_matches_the_prv_records(traces_dir: Path, tmp_path: Path,
                                                    rel: str) -> None:
    records = _prv_messages(traces_dir / rel)
    count: Counter[tuple[int, int]] = Counter()
    size: Counter[tuple[int, int]] = Counter()
    for src, dst, n in records:
        count[(src, dst)] += 1
        size[(src, dst)] += n
    trace = _open(traces_dir / rel, tmp_path)
    matrix = analysis.run("comm_matrix", trace).table
    assert matrix.rows() == [(s, d, count[(s, d)], size[(s, d)]) for s, d in sorted(count)]
    assert matrix["count"].sum() == len(records)
    by_rank = {r[0]: r[1:] for r in analysis.run("comm_by_rank", trace).table.rows()}
    for rank in trace.ranks:
        sent = [n for s, _, n in records if s == rank]
        recv = [n for _, d, n in records if d == rank]
        assert by_rank[rank] == (len(sent), sum(sent), len(recv), sum(recv))
    hist = analysis.run("message_histogram", trace, {"scale": "log"}).table
    assert hist["count"].sum() == len(records)
    over_time = analysis.run("comm_over_time", trace).table
    assert over_time["count"].sum() == len(records)
    assert over_time["bytes"].sum() == sum(n for *_, n in records)


@pytest.mark.parametrize("rel", LULESH)
def test_lulesh_collectives_and_waits(traces_dir: Path, tmp_path: Path, rel: str) -> None:
    trace = _open(traces_dir / rel, tmp_path)
    calls = (trace.intervals.filter(pl.col("name").cast(pl.String) == "MPI_Allreduce")
             .select("rank", "start_ns", "end_ns").sort("rank", "start_ns").collect())
    result = analysis.run("mpi_collectives", trace)
    per = result.extra["per_rank"]
    assert per.height == calls.height > 0
    assert set(result.table["op"].to_list()) == {"allreduce"}
    # plain loop: k-th MPI_Allreduce of every rank is instance k
    by_rank: dict[int, list[tuple[int, int]]] = {}
    for rank, start, end in calls.iter_rows():
        by_rank.setdefault(rank, []).append((start, end))
    n = max(len(v) for v in by_rank.values())
    total = []
    for k in range(n):
        members = [v[k] for v in by_rank.values() if len(v) > k]
        last = max(s for s, _ in members)
        total.append(sum(min(last, e) - s for s, e in members))
    assert sorted(result.table["total_wait_ns"].to_list()) == sorted(total)

    wait = analysis.run("mpi_wait", trace)
    per_msg = wait.extra["messages"]
    assert per_msg.height == len(_prv_messages(traces_dir / rel))
    assert (per_msg["late_sender_ns"] >= 0).all() and (per_msg["late_receiver_ns"] >= 0).all()
    # a late sender never exceeds the receiver's blocking call
    blocked = per_msg.filter(pl.col("late_sender_ns") > 0)
    assert (blocked["late_sender_ns"]
            <= blocked["recv_block_end_ns"] - blocked["recv_block_start_ns"]).all()
    assert wait.table["late_sender_ns"].sum() > 0
