"""Several Nsight Systems reports (one per rank, on different hosts) form one trace.

Each report is built here with ``sqlite3``. Host ``node<r>``'s clock is off by SKEW[r]:
its ``utcEpochNs`` reads UTC + SKEW[r] for the same true session start, so an event at
true time T is stored at T + SKEW[r] on the epoch. MPI_Init and MPI_Barrier end at the
same true time on every rank (up to JITTER), so alignment must recover -SKEW[r].
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import polars as pl

import traceatlas

SYS = 1_000_000_000
UTC = 1_700_000_000_000_000_000
SKEW = {0: 0, 1: 2_500_000, 2: -7_250_000}
JITTER = {0: 0, 1: 300, 2: -200}
INIT_END, BARRIER_END = 50_000_000, 90_000_000
"""True end times (ns after the session start) of MPI_Init and MPI_Barrier."""


def _report(path: Path, rank: int) -> Path:
    pid = 1000 + rank
    gtid = (pid << 24) | pid
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE StringIds (id, value)")
    con.executemany("INSERT INTO StringIds VALUES (?, ?)",
                    [(1, "MPI_Init"), (2, "MPI_Barrier"), (3, "python3"), (4, "compute")])
    con.execute("CREATE TABLE META_DATA_EXPORT (name, value)")
    con.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.25.0')")
    con.execute("CREATE TABLE TARGET_INFO_SESSION_START_TIME "
                "(utcEpochNs, utcTime, localTime, systemClockNs)")
    con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, '', '', ?)",
                (UTC + SKEW[rank], SYS))
    con.execute("CREATE TABLE TARGET_INFO_SYSTEM_ENV (globalVid, devStateName, name, "
                "nameEnum, value)")
    con.execute("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (0, '', 'Hostname', 1, ?)",
                (f"node{rank}",))
    con.execute("CREATE TABLE ThreadNames (nameId, priority, globalTid)")
    con.execute("INSERT INTO ThreadNames VALUES (3, 0, ?)", (gtid,))
    con.execute("CREATE TABLE MPI_RANKS (globalTid, rank)")
    con.execute("INSERT INTO MPI_RANKS VALUES (?, ?)", (gtid, rank))
    con.execute("CREATE TABLE MPI_OTHER_EVENTS (start, end, globalTid, textId)")
    con.execute("CREATE TABLE MPI_COLLECTIVES_EVENTS (start, end, globalTid, textId, size, "
                "recvSize, rootRank)")
    j = JITTER[rank]
    # Ranks enter at different times; they leave together (+ jitter).
    con.execute("INSERT INTO MPI_OTHER_EVENTS VALUES (?, ?, ?, 1)",
                (SYS + 1_000_000 * (rank + 1), SYS + INIT_END + j, gtid))
    con.execute("INSERT INTO MPI_COLLECTIVES_EVENTS VALUES (?, ?, ?, 2, 0, 0, 0)",
                (SYS + 80_000_000 + 100_000 * rank, SYS + BARRIER_END - j, gtid))
    con.execute("CREATE TABLE NVTX_EVENTS (start, end, eventType, text, globalTid, textId, "
                "domainId)")
    con.execute("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, NULL, ?, 4, 0)",
                (SYS + 60_000_000, SYS + 70_000_000, gtid))
    con.commit()
    con.close()
    return path


def test_reports_on_three_hosts_align_on_mpi_ends(tmp_path: Path) -> None:
    paths = [_report(tmp_path / f"report{r}.sqlite", r) for r in (2, 0, 1)]
    trace = traceatlas.open(traceatlas.ingest(paths, tmp_path / "store"))
    assert trace.ranks == [0, 1, 2]
    clock = trace.manifest["clock"]
    for r in (1, 2):
        assert clock[str(r)]["method"].startswith("TARGET_INFO_SESSION_START_TIME + MPI")
        assert abs(clock[str(r)]["offset_ns"] + SKEW[r]) <= 1_000, clock[str(r)]
    iv = trace.intervals.with_columns(pl.col("name").cast(pl.String)).collect()
    for name, true_end in (("MPI_Init", INIT_END), ("MPI_Barrier", BARRIER_END)):
        ends = iv.filter(pl.col("name") == name)["end_ns"].to_list()
        assert len(ends) == 3
        assert all(abs(e - (UTC + true_end)) <= 1_000 for e in ends), ends
    # The user's NVTX range moves with its rank: true start 60 ms on every rank.
    starts = iv.filter(pl.col("name") == "compute")["start_ns"].to_list()
    assert all(abs(s - (UTC + 60_000_000)) <= 1_000 for s in starts), starts
