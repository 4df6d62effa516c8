"""mpi_collectives in rank batches (``partial`` per batch, one ``merge``) equals today's
whole-trace code kept frozen (``testing/frozen_mpi_collectives.py``) on Paraver traces
written here: random collectives on 2-4 ranks of 2 threads each, with ties (equal enters
across ranks; two calls of one op with the same enter and exit on one rank, told apart
by their Extrae send size), Extrae send-size and communicator events (ids the same on
every rank, or not), ranks without any call, and rank / window selections. The expected
value is the frozen whole-trace run (a second code path: no partial, no merge)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

import traceatlas
from traceatlas.analysis import registry
from traceatlas.analysis.base import Result
from traceatlas.analysis.mpi_collectives import MpiCollectives
from traceatlas.analysis.partitioned import is_partitioned, rank_batches, run_partitioned
from traceatlas.engine import LocalEngine
from traceatlas.testing.frozen_mpi_collectives import FrozenMpiCollectives

PCF = """STATES
1    Running

EVENT_TYPE
9    50000002    MPI Collective Comm
VALUES
0   Outside MPI
7   MPI_Bcast
8   MPI_Barrier
10  MPI_Allreduce

EVENT_TYPE
0    50100001    Send Size in MPI Global OP
0    50100004    Communicator in MPI Global OP
"""
OPS = (7, 8, 10)

# one call: (op value, gap before it us, duration us, send size or None, comm id or None)
Call = tuple[int, int, int, int | None, int | None]
call = st.tuples(st.sampled_from(OPS), st.integers(0, 3), st.integers(0, 3),
                 st.one_of(st.none(), st.sampled_from((8, 64))),
                 st.one_of(st.none(), st.sampled_from((1, 2))))
thread_calls = st.lists(call, max_size=4)
ranks_calls = st.lists(st.tuples(thread_calls, thread_calls), min_size=2, max_size=4)


def write(root: Path, ranks: list[tuple[list[Call], list[Call]]]) -> traceatlas.Trace:
    """A Paraver trace: task r+1 = rank r, 2 threads; calls back to back from 10 us."""
    records: list[tuple[int, int, str]] = []
    for r, threads in enumerate(ranks):
        task = r + 1
        for thread, calls in enumerate(threads, start=1):
            t = 10
            for op, gap, dur, size, comm in calls:
                t += gap
                extra = "".join(f":{k}:{v}" for k, v in ((50100001, size), (50100004, comm))
                                if v is not None)
                head = f"2:{task}:1:{task}:{thread}"
                records.append((t, 1, f"{head}:{t}:50000002:{op}{extra}"))
                t += dur
                records.append((t, 0, f"{head}:{t}:50000002:0"))
    records.sort(key=lambda rec: (rec[0], rec[1]))  # an end before a begin at one time
    prv = root / "t.prv"
    layout = ",".join("2:0" for _ in ranks)
    prv.write_text(f"#Paraver (01/02/2024 at 10:00):100:0:1:{len(ranks)}({layout})\n"
                   + "".join(line + "\n" for _, _, line in records))
    (root / "t.pcf").write_text(PCF)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return traceatlas.open(traceatlas.ingest(prv, root / "s", engine=LocalEngine(1)))


def assert_same(got: Result, want: Result) -> None:
    assert_frame_equal(got.table, want.table)
    assert sorted(got.extra) == sorted(want.extra)
    for key, frame in want.extra.items():
        assert_frame_equal(got.extra[key], frame)
    assert got.notes == want.notes


def batched(trace: traceatlas.Trace, size: int) -> Result:
    """The map step on batches of ``size`` ranks of the view, then the merge."""
    analysis = MpiCollectives()
    partials = [analysis.partial(trace.select(ranks=list(batch)), {})
                for batch in rank_batches(trace.ranks, size)]
    return analysis.merge(partials, {})


def check(trace: traceatlas.Trace) -> None:
    want = FrozenMpiCollectives().run(trace, {})
    assert_same(MpiCollectives().run(trace, {}), want)
    for size in (1, 2):
        assert_same(batched(trace, size), want)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ranks=ranks_calls)
def test_batches_equal_frozen(tmp_path_factory: pytest.TempPathFactory,
                              ranks: list[tuple[list[Call], list[Call]]]) -> None:
    trace = write(tmp_path_factory.mktemp("coll"), ranks)
    check(trace)
    if len(trace.ranks) > 1:
        check(trace.select(ranks=trace.ranks[1:]))
        check(trace.select(window="12us:"))


# rank 0: thread 1 and 2 each an allreduce at 10-12 us (same enter and exit: the tie),
# sizes 64 and 8; rank 1: one allreduce 11-12 us, a barrier; rank 2: no call at all.
# Communicator ids 1 on rank 0 only (rank 1 saw none: still the same ids everywhere).
TIES = [([(10, 0, 2, 64, 1)], [(10, 0, 2, 8, None)]),
        ([(10, 1, 1, None, None), (8, 0, 1, None, None)], []),
        ([], [])]


@pytest.fixture(scope="module")
def ties(tmp_path_factory: pytest.TempPathFactory) -> traceatlas.Trace:
    return write(tmp_path_factory.mktemp("ties"), TIES)


def test_ties_by_hand(ties: traceatlas.Trace) -> None:
    check(ties)
    result = MpiCollectives().run(ties, {})
    us = 1_000
    # Extrae events match by rank (either thread): both rank-0 calls start at 10 us, where
    # the send-size events are 64 and 8: the smallest (8) fills both; comm id 1 names
    # "comm 1" on rank 0's calls, rank 1's calls have no communicator ("": its own key).
    rows = result.table.select("op", "communicator", "occurrence", "ranks", "bytes",
                               "skew_ns", "late_rank").rows()
    assert sorted(rows, key=str) == sorted([
        ("allreduce", "comm 1", 0, 1, 8, 0, None), ("allreduce", "comm 1", 1, 1, 8, 0, None),
        ("allreduce", None, 0, 1, None, 0, None), ("barrier", None, 0, 1, None, 0, None),
    ], key=str)
    assert result.extra["by_rank"].select("rank", "instances").rows() == [(0, 2), (1, 2)]
    per = result.extra["per_rank"].filter(rank=1)
    assert per["enter_ns"].to_list() == [11 * us, 12 * us]


def test_engine_runs_batches(ties: traceatlas.Trace) -> None:
    analysis = registry.get_analysis("mpi_collectives")
    assert is_partitioned(analysis, {})
    want = FrozenMpiCollectives().run(ties, {})
    for engine in (LocalEngine(1), LocalEngine(2)):
        assert_same(run_partitioned(analysis, ties, {}, engine, ranks_per_task=1), want)
    assert_same(registry.run("mpi_collectives", ties, engine=LocalEngine(2)), want)
