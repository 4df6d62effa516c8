"""``phases`` and the ``--step`` fallback on the Paraver LULESH trace cut to 5 iterations
(``chop_5it``), checked against a plain parse of the .prv text: per task, the MPI call
records (types 50000001-50000005, value != 0 opens, 0 closes; times in the header's ns)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest

import traceatlas
from traceatlas.analysis import run

pytestmark = pytest.mark.realtrace
ITERATIONS = 5  # the file name: chop_5it
MPI_TYPES = range(50_000_001, 50_000_006)
ALLREDUCE = (50_000_002, 10)  # .pcf: "10   MPI_Allreduce" under 50000002


def _plain(prv: Path) -> dict[int, dict[str, list[int]]]:
    """rank (task - 1 of application 1) -> begin times, end times, Allreduce begins."""
    out: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    open_calls: dict[tuple[int, int], int] = defaultdict(int)
    for line in prv.read_text().splitlines():  # records are in time order
        f = line.split(":")
        if f[0] != "2" or f[2] != "1":
            continue
        rank, t = int(f[3]) - 1, int(f[5])
        for etype, value in zip(f[6::2], f[7::2], strict=True):
            if int(etype) not in MPI_TYPES:
                continue
            if int(value):
                out[rank]["begin"].append(t)
                open_calls[rank, int(etype)] += 1
                if (int(etype), int(value)) == ALLREDUCE:
                    out[rank]["allreduce"].append(t)
            elif open_calls[rank, int(etype)]:  # ends without a begin: the chop's cuts
                out[rank]["end"].append(t)
                open_calls[rank, int(etype)] -= 1
    return out


@pytest.fixture(scope="module")
def lulesh(traces_dir: Path, tmp_path_factory: pytest.TempPathFactory
           ) -> tuple[traceatlas.Trace, dict[int, dict[str, list[int]]]]:
    prv = traces_dir / "profet-paraver" / "lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv"
    store = traceatlas.ingest(prv, tmp_path_factory.mktemp("lulesh") / "s")
    return traceatlas.open(store), _plain(prv)


def test_five_iterations_per_mpi_rank(
        lulesh: tuple[traceatlas.Trace, dict[int, dict[str, list[int]]]]) -> None:
    trace, plain = lulesh
    result = run("phases", trace)
    structure = {d["rank"]: d for d in result.extra["structure"].to_dicts()}
    assert sorted(structure) == sorted(plain)  # the 8 MPI ranks; uncore tasks have no calls
    for rank, rec in plain.items():
        calls = len(rec["begin"])
        assert calls % ITERATIONS == 0
        s = structure[rank]
        assert (s["period"], s["repeats"], s["prologue_events"], s["epilogue_events"]) == (
            calls // ITERATIONS, ITERATIONS, 0, 0)
        rows = result.table.filter(pl.col("rank") == rank).sort("phase")
        assert rows["phase"].to_list() == list(range(ITERATIONS))
        # the loop covers every MPI call: first call's start to the last call's end
        assert rows["start_ns"][0] == min(rec["begin"])
        assert rows["end_ns"][-1] == max(rec["end"])
        # one Allreduce per iteration, the k-th inside phase k
        allreduce = sorted(rec["allreduce"])
        assert len(allreduce) == ITERATIONS
        for k, t in enumerate(allreduce):
            assert rows["start_ns"][k] <= t < rows["end_ns"][k]


def test_step_cuts_one_iteration(
        lulesh: tuple[traceatlas.Trace, dict[int, dict[str, list[int]]]]) -> None:
    trace, plain = lulesh
    view = trace.select(step=2, ranks=[0], categories=["mpi"])
    kept = view.intervals.collect()
    assert kept.height == len(plain[0]["begin"]) // ITERATIONS  # one period of calls
    third = sorted(plain[0]["allreduce"])[2]
    assert third in kept["start_ns"].to_list()
