"""``phases`` golden tests, the ``--step`` fallback to phases, and the synthetic MPI trace
generator. Every expected value is worked out by hand from the regions written below
(times in us in the comments; the trace is written in ns)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas.analysis import run
from traceatlas.analysis.phases import Loop, detect_loop
from traceatlas.cli.main import app
from traceatlas.errors import InputError, MissingDataError
from traceatlas.testing import write_mpi_trace, write_paraver
from traceatlas.testing.mpi import Regions

US = 1_000
NAMES = ["main", "MPI_Init", "setup", "compute", "MPI_Send", "MPI_Allreduce", "MPI_Finalize"]
MAIN, INIT, SETUP, COMPUTE, SEND, ALLRED, FIN = range(len(NAMES))


def _golden_regions() -> list[tuple[int, int, int, int]]:
    """(rank, name, start us, end us)."""
    rows = [(0, MAIN, 0, 1000), (0, INIT, 10, 20), (0, SETUP, 20, 40)]  # depth 0 / 1 / 1
    for k in range(4):  # rank 0, depth 1: 4 x [compute, Send, Allreduce], b = 100 + 200 k
        b = 100 + 200 * k
        rows += [(0, COMPUTE, b, b + 100), (0, SEND, b + 100, b + 110),
                 (0, ALLRED, b + 120, b + 150)]
    rows.append((0, FIN, 950, 960))
    for k in range(3):  # rank 1, depth 0: 3 x [compute, Allreduce], b = 50 + 300 k
        b = 50 + 300 * k
        rows += [(1, COMPUTE, b, b + 200), (1, ALLRED, b + 200, b + 250)]
    rows += [(2, COMPUTE, 0, 100), (2, SEND, 100, 110), (2, ALLRED, 120, 150)]  # no loop
    return rows


def _write(path: Path, rows: list[tuple[int, int, int, int]], n_ranks: int) -> Path:
    a = np.asarray(rows, dtype=np.int64)
    return write_paraver(path, n_ranks, NAMES, Regions(a[:, 0], a[:, 1], a[:, 2] * US,
                                                       a[:, 3] * US))


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> traceatlas.Trace:
    tmp = tmp_path_factory.mktemp("phases")
    prv = _write(tmp / "golden.prv", _golden_regions(), 3)
    return traceatlas.open(traceatlas.ingest(prv, tmp / "store"))


def _us(table: pl.DataFrame) -> list[tuple[int, ...]]:
    return [(r, p, s // US, e // US, d // US, n) for r, p, s, e, d, n in table.iter_rows()]


def test_detect_loop_sequences() -> None:
    seq = np.asarray
    # prologue 7, 8; loop [1, 2, 3] x 5; epilogue 4
    assert detect_loop(seq([7, 8] + [1, 2, 3] * 5 + [4]), 3) == Loop(2, 3, 5)
    # inner repetition (1, 1, 1) must not win over the whole iteration [1, 1, 1, 2]
    assert detect_loop(seq([1, 1, 1, 2] * 4), 3) == Loop(0, 4, 4)
    # a prologue ending like an iteration ends rotates the boundary (documented)
    assert detect_loop(seq([7, 3] + [1, 2, 3] * 5), 3) == Loop(1, 3, 5)
    assert detect_loop(seq([1, 2, 3, 4, 5]), 3) is None  # nothing repeats
    assert detect_loop(seq([1, 2] * 2), 3) is None  # 2 repeats < min_repeats
    assert detect_loop(seq([5] * 6), 3) == Loop(0, 1, 6)


def test_golden_phases(golden: traceatlas.Trace) -> None:
    result = run("phases", golden)
    assert result.table.columns == ["rank", "phase", "start_ns", "end_ns", "dur_ns", "events"]
    assert _us(result.table) == [
        # rank 0: iteration k from compute start 100 + 200 k to the next one; the last
        # ends at its Allreduce end 700 + 150 = 850
        (0, 0, 100, 300, 200, 3), (0, 1, 300, 500, 200, 3), (0, 2, 500, 700, 200, 3),
        (0, 3, 700, 850, 150, 3),
        # rank 1: 50 + 300 k; the last ends at 650 + 250 = 900
        (1, 0, 50, 350, 300, 2), (1, 1, 350, 650, 300, 2), (1, 2, 650, 900, 250, 2),
    ]
    s = result.extra["structure"].sort("rank").to_dicts()
    assert [(d["rank"], d["level"], d["period"], d["repeats"], d["prologue_events"],
             d["epilogue_events"], d["events"]) for d in s] == [
        (0, 1, 3, 4, 2, 1, 15),  # main alone at depth 0; Init, setup | 4 x 3 | Finalize
        (1, 0, 2, 3, 0, 0, 6),
    ]
    assert s[0]["pattern"] == "compute, MPI_Send, MPI_Allreduce"
    assert any("no repetition found on 1 rank(s): 2" in n for n in result.notes)


def test_level_and_names(golden: traceatlas.Trace) -> None:
    # depth 0: rank 0 has only `main`, rank 1 its loop
    assert [r[:2] for r in _us(run("phases", golden, {"level": 0}).table)] == [
        (1, 0), (1, 1), (1, 2)]
    # one Allreduce per iteration: rank 0 at 100 + 200 k + 120, rank 1 at 50 + 300 k + 200
    table = run("phases", golden, {"names": "^MPI_Allreduce$"}).table
    assert _us(table) == [
        (0, 0, 220, 420, 200, 1), (0, 1, 420, 620, 200, 1), (0, 2, 620, 820, 200, 1),
        (0, 3, 820, 850, 30, 1),
        (1, 0, 250, 550, 300, 1), (1, 1, 550, 850, 300, 1), (1, 2, 850, 900, 50, 1),
    ]


def test_no_repetition_is_a_clear_error(golden: traceatlas.Trace, tmp_path: Path) -> None:
    with pytest.raises(MissingDataError, match="repeats at least 5 times on any rank"):
        run("phases", golden, {"min_repeats": 5})  # rank 0 has 4, rank 1 has 3
    prv = _write(tmp_path / "flat.prv", [(0, COMPUTE, 0, 100), (0, SEND, 100, 110),
                                         (0, ALLRED, 120, 150)], 1)
    flat = traceatlas.open(traceatlas.ingest(prv, tmp_path / "s"))
    with pytest.raises(MissingDataError, match=r"no sequence of region/MPI calls at any "
                       r"depth repeats at least 3 times on any rank \(3 candidate events\)"):
        run("phases", flat)
    with pytest.raises(InputError, match="the trace has no step markers and no sequence"):
        flat.select(step=0)


def test_select_step_falls_back_to_phases(golden: traceatlas.Trace) -> None:
    view = golden.select(step=1)
    rows = view.intervals.select("rank", pl.col("name").cast(pl.String), "start_ns") \
        .sort("rank", "start_ns").collect()
    assert [(r, n, s // US) for r, n, s in rows.iter_rows()] == [
        # rank 0, span [300, 500): main [0, 1000) overlaps; compute, Send, Allreduce
        (0, "main", 0), (0, "compute", 300), (0, "MPI_Send", 400), (0, "MPI_Allreduce", 420),
        # rank 1, span [350, 650): compute [350, 550), Allreduce [550, 600)
        (1, "compute", 350), (1, "MPI_Allreduce", 550),
        # rank 2 has no iteration 1: nothing kept
    ]
    with pytest.raises(InputError, match="no step 4: the trace has no step markers and the "
                       "phases analysis found iterations 0-3"):
        golden.select(step=4)


def test_filter_cli_step_fallback(golden: traceatlas.Trace, tmp_path: Path) -> None:
    out = tmp_path / "cut"
    res = CliRunner().invoke(app, ["filter", str(golden.path), "--step", "3", "-o", str(out)])
    assert res.exit_code == 0, res.output
    cut = traceatlas.open(out)
    names = cut.intervals.select("rank", pl.col("name").cast(pl.String)).sort(
        "rank", "name").collect().rows()
    # rank 0 span [700, 850): main, compute, Send, Allreduce; rank 1 has no iteration 3
    assert names == [(0, "MPI_Allreduce"), (0, "MPI_Send"), (0, "compute"), (0, "main")]


def test_step_markers_keep_their_meaning(tmp_path: Path) -> None:
    from traceatlas.testing import TraceBuilder

    b = TraceBuilder(rank=0)
    for k in range(4):  # ProfilerStep#k [10k, 10k + 10) ms, each with a repeating op
        b.step(k, k * 10_000_000, (k + 1) * 10_000_000)
        b.cpu_op("aten::mm", k * 10_000_000 + 1_000_000, k * 10_000_000 + 2_000_000)
    trace = traceatlas.open(traceatlas.ingest(b.write(tmp_path / "t.json"), tmp_path / "s"))
    ops = pl.col("name").cast(pl.String) == "aten::mm"
    kept = trace.select(step=2).intervals.filter(ops).select("start_ns").collect().item()
    first = trace.intervals.select(pl.col("start_ns").min()).collect().item()
    assert kept - first == 21_000_000  # the op in the marker's span [20, 30) ms
    with pytest.raises(InputError, match=r"no step 7 in the trace \(steps: 0, 1, 2, 3\)"):
        trace.select(step=7)


def test_generator_counts_and_phases(tmp_path: Path) -> None:
    gen = write_mpi_trace(tmp_path / "g.prv", ranks=3, iterations=4, imbalance=0.5,
                          compute_ns=1_000_000, send_ns=10_000, recv_ns=20_000,
                          allreduce_ns=30_000, gap_ns=5_000, message_bytes=(100, 200))
    # By hand: 3 ranks x (4 iterations x 4 regions + MPI_Init + MPI_Finalize) = 54
    # intervals; 3 x 4 = 12 messages; bytes per rank 100 + 200 + 100 + 200 = 600 -> 1800.
    assert gen.counts == {"ranks": 3, "intervals": 54, "messages": 12, "events": 66,
                          "message_bytes": 1800}
    # Plain text parse of the .prv: begin pairs (value != 0), type-3 records, sizes.
    lines = gen.path.read_text().splitlines()
    assert lines[0].endswith(":1:3(1:1,1:1,1:1)")
    begins = sum(1 for ln in lines if ln.startswith("2:") and ln.split(":")[7] != "0")
    comms = [ln.split(":") for ln in lines if ln.startswith("3:")]
    assert (begins, len(comms), sum(int(c[13]) for c in comms)) == (54, 12, 1800)
    times = [int(ln.split(":")[5]) for ln in lines[1:]]
    assert times == sorted(times)  # Paraver order

    trace = traceatlas.open(traceatlas.ingest(gen.path, tmp_path / "s"))
    assert trace.ranks == [0, 1, 2]
    assert trace.intervals.select(pl.len()).collect().item() == 54
    msgs = trace.messages.group_by("src_rank", "dst_rank").agg(pl.len(), pl.col("bytes").sum()
                                                               ).sort("src_rank").collect()
    assert msgs.rows() == [(0, 1, 4, 600), (1, 2, 4, 600), (2, 0, 4, 600)]  # the ring
    compute = trace.intervals.filter(pl.col("name").cast(pl.String) == "compute") \
        .group_by("rank").agg(pl.col("dur_ns").unique()).sort("rank").collect()
    assert compute["dur_ns"].to_list() == [[1_500_000], [1_000_000], [1_000_000]]

    # Iteration length by hand: rank 1's receive waits for rank 0's send at 1.5 ms:
    # rank 0 recv ends max(1.51, 1.0) + 0.02 = 1.53 ms (latest); allreduce ends 1.56 ms;
    # + 5 us gap = 1.565 ms. Loop starts after MPI_Init (100 us).
    result = run("phases", trace)
    assert result.table.filter(pl.col("rank") == 0).select(
        "phase", "start_ns", "dur_ns").rows() == [
        (0, 100_000, 1_565_000), (1, 1_665_000, 1_565_000), (2, 3_230_000, 1_565_000),
        (3, 4_795_000, 1_560_000)]  # the last ends at its Allreduce end (no gap)
    s = result.extra["structure"].to_dicts()
    assert {(d["period"], d["repeats"], d["prologue_events"], d["epilogue_events"])
            for d in s} == {(4, 4, 1, 1)}
