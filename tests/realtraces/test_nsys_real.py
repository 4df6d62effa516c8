"""Every real Nsight Systems SQLite export, ingested alone, against counts taken
independently from the file with the standard library's ``sqlite3``.

Expectations, per file:

* kernels (category kernel + comm_kernel), memcpy, memset, sync, runtime + driver and
  osrt intervals: one per row of CUPTI_ACTIVITY_KIND_KERNEL / _MEMCPY / _MEMSET /
  _SYNCHRONIZATION / _RUNTIME and OSRT_API;
* NVTX ranges: one interval per NVTX_EVENTS row whose eventType is a range. The real
  files hold eventType 59 (NvtxPushPopRange) only, plus 75 (NvtxDomainCreate) and 39
  (NvtxThread) rows that are not events; the count below takes 59, 60, 70 and 71
  (push/pop and start/end, NVTX and NVTXT). Ranges in the domain named ``MPI`` (how
  nsys 2022 traced MPI: saxpy has no MPI_* tables) are category mpi, the rest nvtx;
* comm_kernel: the kernels whose demangled name contains ``nccl`` (any case);
* ranks: one per process with events; the nsys-ai files hold two processes;
* times: the first kernel starts at min(start) + utcEpochNs - systemClockNs
  (systemClockNs 0 when the export has no such column: session-relative times).
"""

from __future__ import annotations

import csv
import json
import sqlite3
from functools import cache
from pathlib import Path
from typing import Any

import pytest

import traceatlas
from traceatlas.engine import LocalEngine

pytestmark = pytest.mark.realtrace

TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces"
NVTX_RANGES = (59, 60, 70, 71)
FILES = sorted(str(p.relative_to(TRACES)) for p in TRACES.glob("**/*.sqlite")) \
    if TRACES.is_dir() else []


def _q(db: sqlite3.Connection, sql: str) -> Any:
    return db.execute(sql).fetchone()[0]


def _has(db: sqlite3.Connection, table: str) -> bool:
    return bool(_q(db, f"SELECT count(*) FROM sqlite_master WHERE name = '{table}'"))


_HELD_VERSIONED = (
    "JOIN StringIds AS sv ON sv.id = v.nameId WHERE EXISTS (SELECT 1 FROM "
    "CUPTI_ACTIVITY_KIND_RUNTIME AS p JOIN StringIds AS sp ON sp.id = p.nameId "
    "WHERE sv.value GLOB sp.value || '_v[0-9]*' AND p.globalTid = v.globalTid "
    "AND p.correlationId = v.correlationId AND p.start <= v.start AND v.\"end\" <= p.\"end\")")


def _count(db: sqlite3.Connection, table: str, where: str = "") -> int:
    return int(_q(db, f"SELECT count(*) FROM {table} {where}")) if _has(db, table) else 0


@cache
def _ingested(rel: str, out: str) -> traceatlas.Trace:
    store = traceatlas.ingest(TRACES / rel, Path(out) / "store",
                              engine=LocalEngine(max_workers=1))
    return traceatlas.Trace(store)


@pytest.fixture
def case(request: pytest.FixtureRequest, traces_dir: Path,
         tmp_path_factory: pytest.TempPathFactory) -> tuple[sqlite3.Connection, Any]:
    rel = request.param
    db = sqlite3.connect(f"file:{traces_dir / rel}?mode=ro", uri=True)
    request.addfinalizer(db.close)
    return db, _ingested(rel, str(tmp_path_factory.getbasetemp() / rel.replace("/", "_")))


def _by_category(trace: traceatlas.Trace) -> dict[str, int]:
    rows = trace.sql("SELECT category, count(*) AS n FROM intervals GROUP BY 1").to_dicts()
    return {r["category"]: r["n"] for r in rows}


def test_files_found(traces_dir: Path) -> None:
    assert len(FILES) == 5, FILES


@pytest.mark.parametrize("case", FILES, indirect=True)
def test_counts_match_tables(case: tuple[sqlite3.Connection, traceatlas.Trace]) -> None:
    db, trace = case
    got = _by_category(trace)
    assert got.get("kernel", 0) + got.get("comm_kernel", 0) == _count(
        db, "CUPTI_ACTIVITY_KIND_KERNEL")
    assert got.get("memcpy", 0) == _count(db, "CUPTI_ACTIVITY_KIND_MEMCPY")
    assert got.get("memset", 0) == _count(db, "CUPTI_ACTIVITY_KIND_MEMSET")
    assert got.get("sync", 0) == _count(db, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
    # one per row, except a versioned record (cudaMemcpy_v3020) inside its public call
    # (cudaMemcpy: same thread and correlation): one call (test_nsys_versioned_real.py)
    held = _q(db, f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME AS v {_HELD_VERSIONED}") \
        if _has(db, "CUPTI_ACTIVITY_KIND_RUNTIME") else 0
    assert got.get("runtime", 0) + got.get("driver", 0) == _count(
        db, "CUPTI_ACTIVITY_KIND_RUNTIME") - held
    assert got.get("osrt", 0) == _count(db, "OSRT_API")
    nvtx_ranges = _count(db, "NVTX_EVENTS", f"WHERE eventType IN {NVTX_RANGES}")
    stored = trace.sql("SELECT count(*) AS n FROM intervals "
                       "WHERE source_category = 'NVTX_EVENTS'").to_dicts()[0]["n"]
    assert stored == nvtx_ranges
    mpi_domain = _count(db, "NVTX_EVENTS", f"WHERE eventType IN {NVTX_RANGES} AND domainId IN "
                        "(SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 "
                        "AND text = 'MPI')")
    assert got.get("nvtx", 0) == nvtx_ranges - mpi_domain
    bad = trace.sql("SELECT count(*) AS n FROM intervals WHERE end_ns < start_ns").to_dicts()
    assert bad == [{"n": 0}]


@pytest.mark.parametrize("case", FILES, indirect=True)
def test_ranks_comm_kernels_and_clock(case: tuple[sqlite3.Connection, traceatlas.Trace]) -> None:
    db, trace = case
    processes = _q(db, "SELECT count(DISTINCT globalPid >> 24) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    ranks = trace.sql("SELECT DISTINCT rank FROM intervals ORDER BY 1").to_dicts()
    assert [r["rank"] for r in ranks] == list(range(processes))
    nccl = _q(db, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL AS k JOIN StringIds AS s "
                  "ON s.id = k.demangledName WHERE s.value LIKE '%nccl%'")
    assert _by_category(trace).get("comm_kernel", 0) == nccl
    cols = [r[1] for r in db.execute("PRAGMA table_info(TARGET_INFO_SESSION_START_TIME)")]
    origin = _q(db, "SELECT systemClockNs FROM TARGET_INFO_SESSION_START_TIME") \
        if "systemClockNs" in cols else 0
    expected = _q(db, "SELECT min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL") + _q(
        db, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME") - origin
    first = trace.sql("SELECT min(start_ns) AS t FROM intervals "
                      "WHERE category IN ('kernel', 'comm_kernel')").to_dicts()[0]["t"]
    assert first == expected


@pytest.mark.parametrize("case", [f for f in FILES if f.startswith("nsys-ai/")], indirect=True)
def test_two_process_files_give_two_ranks(
    case: tuple[sqlite3.Connection, traceatlas.Trace]
) -> None:
    db, trace = case
    assert _q(db, "SELECT count(DISTINCT globalPid) FROM CUPTI_ACTIVITY_KIND_KERNEL") == 2
    per_rank = trace.sql("SELECT rank, min(device) AS d0, max(device) AS d1 FROM intervals "
                         "WHERE device IS NOT NULL GROUP BY 1 ORDER BY 1").to_dicts()
    assert [(r["rank"], r["d0"], r["d1"]) for r in per_rank] == [(0, 0, 0), (1, 1, 1)]


@pytest.mark.parametrize("case", ["pipit/saxpy-mpi-cuda_nsys_perlmutter0.sqlite"],
                         indirect=True)
def test_saxpy_mpi_calls(case: tuple[sqlite3.Connection, traceatlas.Trace]) -> None:
    db, trace = case
    expected = db.execute(
        "SELECT s.value, count(*) FROM NVTX_EVENTS AS n JOIN StringIds AS s ON s.id = n.textId "
        "WHERE n.eventType = 59 AND n.domainId = (SELECT domainId FROM NVTX_EVENTS "
        "WHERE eventType = 75 AND text = 'MPI') GROUP BY 1 ORDER BY 1").fetchall()
    got = trace.sql("SELECT name, count(*) AS n FROM intervals WHERE category = 'mpi' "
                    "GROUP BY 1 ORDER BY 1").to_dicts()
    assert [(r["name"], r["n"]) for r in got] == expected
    assert {name for name, _ in expected} == {"MPI_Init", "MPI_Send", "MPI_Recv",
                                              "MPI_Finalize"}
    ranks = trace.sql("SELECT DISTINCT rank FROM tracks").to_dicts()
    assert ranks == [{"rank": 0}]  # the thread nsys named 'MPI Rank 0'


def test_nsys_stats_nvtx_csv(traces_dir: Path, tmp_path: Path) -> None:
    """The ``nsys stats`` NVTX push/pop CSV (bonus reader): one nvtx interval per row,
    times as written, depth equal to the report's own ``Lvl``."""
    path = traces_dir / "pipit" / "nbody-nvtx" / "trace.csv"
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    store = traceatlas.ingest(path, tmp_path / "store", engine=LocalEngine(max_workers=1))
    got = traceatlas.Trace(store).sql(
        "SELECT start_ns, end_ns, name, category, depth, args FROM intervals "
        "ORDER BY start_ns, end_ns DESC").to_dicts()
    expected = sorted(rows, key=lambda r: (int(r["Start (ns)"]), -int(r["End (ns)"])))
    assert len(got) == len(rows) == 131
    for g, r in zip(got, expected, strict=True):
        assert (g["start_ns"], g["end_ns"], g["name"], g["category"], g["depth"]) == (
            int(r["Start (ns)"]), int(r["End (ns)"]), r["Name"], "nvtx", int(r["Lvl"]))
        assert json.loads(g["args"])["RangeId"] == int(r["RangeId"])
