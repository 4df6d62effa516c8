"""Paraver export with Extrae's and nsys2prv's codes, so that Paraver configuration files
keep working: MPI calls with Extrae's event types and values, the states Extrae writes
inside MPI calls, CUDA activity with nsys2prv's types, and a Paraver source's own codes
kept through ingest -> export.

Expected values are written by hand below from the small inputs built in each test
(Extrae's values: ``MPI_EventEncoding.h`` / the real LULESH ``.pcf``, e.g. MPI_Allreduce =
50000002 value 10; Extrae's states: 4 Blocking Send for MPI_Send, 3 Waiting a message
for MPI_Recv, 13 Group Communication for collectives, 15 Others for MPI_Init)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import polars as pl

import traceatlas
from traceatlas.engine import LocalEngine
from traceatlas.export.paraver import ParaverExporter
from traceatlas.export.paraver_codes import MPI_CALLS, Codebook, mpi_code
from traceatlas.export.paraver_states import derived_states
from traceatlas.testing import TraceBuilder
from traceatlas.testing.otf2 import write_otf2
from traceatlas.testing.paraver_cfg import event_pairs, pcf_values, state_records
from traceatlas.testing.paraver_text import (
    MPI_COLLECTIVE,
    MPI_P2P,
    PAPI_TOT_INS_PCF,
    USER_FUNCTION,
    mpi_events,
    pcf,
    pcf_events,
)


def _ingest(src: Path, out: Path) -> traceatlas.Trace:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return traceatlas.open(traceatlas.ingest(src, out, engine=LocalEngine(max_workers=1)))


def _export(trace: traceatlas.Trace, out: Path) -> list[Path]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ParaverExporter().write(trace, out)


def _events(prv: Path) -> list[tuple[int, int, int, int]]:
    """(task, time, type, value) of every event, plain text parse."""
    out = []
    for line in prv.read_text().splitlines():
        if line.startswith("2:"):
            f = [int(x) for x in line.split(":")]
            out += [(f[3], f[5], t, v) for t, v in zip(f[6::2], f[7::2], strict=True)]
    return out


def test_otf2_mpi_calls_get_extrae_codes_and_states(tmp_path: Path) -> None:
    calls = {
        0: [("main", 0, 1000), ("MPI_Init", 10, 50), ("MPI_Comm_size", 20, 30),
            ("MPI_Send", 100, 200), ("MPI_Allreduce", 300, 400), ("MPI_Foo_bar", 500, 510)],
        1: [("main", 0, 1000), ("MPI_Recv", 150, 250), ("MPI_Allreduce", 300, 420)],
    }
    trace = _ingest(write_otf2(tmp_path / "otf2", calls), tmp_path / "store")
    files = _export(trace, tmp_path / "out")
    states = state_records(files[0])
    # MPI_Comm_size inside MPI_Init: the outer call's state (15 Others) covers both.
    assert states[(1, 1)] == [(0, 10, 1), (10, 50, 15), (50, 100, 1), (100, 200, 4),
                              (200, 300, 1), (300, 400, 13), (400, 500, 1), (500, 510, 15),
                              (510, 1000, 1)]
    assert states[(1, 2)] == [(0, 150, 1), (150, 250, 3), (250, 300, 1), (300, 420, 13),
                              (420, 1000, 1)]
    events = [e for e in _events(files[0]) if e[2] // 1_000_000 == 50]
    assert sorted(events) == sorted([
        (1, 10, 50_000_003, 31), (1, 50, 50_000_003, 0),      # MPI_Init
        (1, 20, 50_000_003, 20), (1, 30, 50_000_003, 0),      # MPI_Comm_size
        (1, 100, 50_000_001, 1), (1, 200, 50_000_001, 0),     # MPI_Send
        (1, 300, 50_000_002, 10), (1, 400, 50_000_002, 0),    # MPI_Allreduce
        (1, 500, 50_000_003, 1000), (1, 510, 50_000_003, 0),  # unknown: first free value
        (2, 150, 50_000_001, 2), (2, 250, 50_000_001, 0),     # MPI_Recv
        (2, 300, 50_000_002, 10), (2, 420, 50_000_002, 0),
    ])
    pcf = files[1]
    assert pcf_values(pcf, 50_000_002) == {"Outside MPI": 0, "MPI_Allreduce": 10}
    assert pcf_values(pcf, 50_000_003)["MPI_Foo_bar"] == 1000
    assert "9    50000001    MPI Point-to-point" in pcf.read_text()
    # Read back: the MPI calls are intervals again, the derived states are not.
    back = _ingest(files[0], tmp_path / "back")
    got = back.intervals.select("rank", pl.col("name").cast(pl.String), "start_ns", "end_ns",
                                pl.col("category").cast(pl.String)).sort("rank", "start_ns")
    want = trace.intervals.select("rank", pl.col("name").cast(pl.String), "start_ns",
                                  "end_ns", pl.col("category").cast(pl.String)
                                  ).sort("rank", "start_ns")
    assert got.collect().rows() == want.collect().rows()


PRV = """#Paraver (01/02/2024 at 10:00):1000_ns:0:1:2(1:1,1:1)
1:0:1:1:1:0:100:1
1:0:1:1:1:100:200:13
1:0:1:1:1:200:1000:1
1:0:1:2:1:0:1000:8
2:0:1:1:1:5:50000001:0
2:0:1:1:1:50:60000019:7
2:0:1:1:1:100:50000002:10:42000050:1200
2:0:1:1:1:200:50000002:0:40000001:1
2:0:1:1:1:300:60000019:0
2:0:1:1:1:400:60000019:9
2:0:1:2:1:10:50000001:5:42000050:77
2:0:1:2:1:90:50000001:0
"""
PCF = pcf({1: "Running", 8: "Wait/WaitAll", 13: "Group Communication"},
          mpi_events(MPI_P2P, {5: "MPI_Wait"}),
          mpi_events(MPI_COLLECTIVE, {10: "MPI_Allreduce"}),
          pcf_events(USER_FUNCTION, "User function", {0: "End", 7: "solve", 9: "output"}),
          pcf_events(40_000_001, "Application", {0: "End", 1: "Begin"}, gradient=6),
          PAPI_TOT_INS_PCF)


def test_paraver_round_trip_keeps_types_values_and_states(tmp_path: Path) -> None:
    """Every (type, value) and state record of a hand-written Extrae-like trace comes
    back: an end without a begin (5: 50000001 0), a region left open at the end
    (400: 60000019 9, no end written), a counter and an instant."""
    (tmp_path / "t.prv").write_text(PRV)
    (tmp_path / "t.pcf").write_text(PCF)
    trace = _ingest(tmp_path / "t.prv", tmp_path / "store")
    files = _export(trace, tmp_path / "out")
    assert event_pairs(files[0]) == event_pairs(tmp_path / "t.prv")
    assert state_records(files[0]) == state_records(tmp_path / "t.prv")  # origin 0
    assert pcf_values(files[1], 60_000_019) == {"End": 0, "solve": 7, "output": 9}
    assert "7    42000050    PAPI_TOT_INS" in files[1].read_text()
    header = files[0].read_text().splitlines()[0]
    assert header.split("):")[1].startswith("1000_ns:")  # the open region ends at 1000


def test_cuda_codes_of_nsys2prv_and_round_trip(tmp_path: Path) -> None:
    b = TraceBuilder(0, 1, base_time_ns=1_700_000_000_000_000_000, profiler_markers=False)
    b.cpu_op("aten::mm", 0, 10_000)
    b.launch("gemm", 1_000, 1_000, 20_000, 5_000)
    b.launch("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 3_000, 1_000, 30_000, 8_000,
             stream=20)
    b.launch("Memcpy HtoD (Pageable -> Device)", 5_000, 1_000, 40_000, 2_000,
             kind="memcpy", nbytes=64)
    b.launch("Memset (Device)", 7_000, 1_000, 45_000, 1_000, kind="memset", nbytes=64)
    trace = _ingest(b.write(tmp_path / "r.json"), tmp_path / "store")
    files = _export(trace, tmp_path / "out")
    begins = {(t, v) for _task, _time, t, v in _events(files[0]) if v}
    types = {t for t, _ in begins}
    assert {63_000_000, 63_000_006, 63_000_007, 63_000_001} <= types
    kernels = pcf_values(files[1], 63_000_006)
    assert set(kernels) == {"End", "gemm"}
    assert set(pcf_values(files[1], 63_000_007)) == {
        "End", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"}
    assert set(pcf_values(files[1], 63_000_001)) == {
        "End", "Memcpy HtoD (Pageable -> Device)", "Memset (Device)"}
    back = _ingest(files[0], tmp_path / "back")

    def cats(t: traceatlas.Trace) -> list[tuple[str, str]]:
        frame = t.intervals.select(pl.col("name").cast(pl.String),
                                   pl.col("category").cast(pl.String)).collect()
        return sorted(frame.rows())

    assert cats(back) == cats(trace)  # memset and NCCL kernel keep their category


def test_codebook_keeps_source_values_and_numbers_the_rest() -> None:
    book = Codebook()
    book.declare(63_000_006, 0, "CUDA kernel")
    book.keep(63_000_006, 1, "kept_kernel")
    book.keep(63_000_006, 3, "other_kept")
    assert book.label_id(63_000_006, "new_kernel") == 2  # 1 is taken
    assert book.label_id(63_000_000, "cudaMalloc") == 4  # 3 is taken too
    assert book.label_id(63_000_006, "new_kernel") == 2  # one id per label
    assert book.values[63_000_006] == {1: "kept_kernel", 2: "new_kernel", 3: "other_kept"}


def test_mpi_code_table() -> None:
    # Values and types of the calls in the real LULESH .pcf (profet-paraver).
    real = {"mpi_isend": (50_000_001, 3), "mpi_irecv": (50_000_001, 4),
            "mpi_wait": (50_000_001, 5), "mpi_waitall": (50_000_001, 6),
            "mpi_barrier": (50_000_002, 8), "mpi_reduce": (50_000_002, 9),
            "mpi_allreduce": (50_000_002, 10), "mpi_comm_rank": (50_000_003, 19),
            "mpi_comm_size": (50_000_003, 20), "mpi_init": (50_000_003, 31),
            "mpi_finalize": (50_000_003, 32)}
    assert {k: (MPI_CALLS[k].etype, MPI_CALLS[k].value) for k in real} == real
    assert len({c.value for c in MPI_CALLS.values()}) == len(MPI_CALLS) == 215
    unknown: dict[str, int] = {}
    assert mpi_code("MPI_Isendrecv", unknown).value == 1000
    assert mpi_code("MPI_Foo", unknown).value == 1001
    assert mpi_code("MPI_Isendrecv", unknown).value == 1000
    assert mpi_code("mpi_allreduce", unknown).label == "MPI_Allreduce"


def test_derived_states_nested_and_crossing_calls() -> None:
    # one track: host intervals [0, 100) main, MPI a [10, 40) with a nested MPI b
    # [20, 30), MPI c [35, 60) crossing a; a second track with MPI d [0, 5) only.
    key = np.array([1, 1, 1, 1, 2], dtype=np.int64)
    start = np.array([0, 10, 20, 35, 0], dtype=np.int64)
    end = np.array([100, 40, 30, 60, 5], dtype=np.int64)
    mpi = np.array([False, True, True, True, True])
    state = np.array([0, 4, 13, 3, 8], dtype=np.int64)
    k, s, e, v = derived_states(key, start, end, mpi, state)
    got = list(zip(k.tolist(), s.tolist(), e.tolist(), v.tolist(), strict=True))
    # a, b and c merge into one call [10, 60) with the first call's state
    assert got == [(1, 0, 10, 1), (1, 10, 60, 4), (1, 60, 100, 1), (2, 0, 5, 8)]
