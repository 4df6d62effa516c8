"""The Nsight Systems SQLite reader on small exports built here with ``sqlite3``.

Every expected value is computed by hand from the rows written below: times are raw
session-clock ns, so on the epoch they are ``t - SYS + UTC``; processes are
``globalPid >> 24``; ranks come from MPI_RANKS.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import stat
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas.cli.main import app
from traceatlas.engine import LocalEngine
from traceatlas.errors import DataQualityWarning
from traceatlas.io.nsys import NsysReader
from traceatlas.io.reading import RankData
from traceatlas.io.registry import detect
from traceatlas.io.sources import Source

VM = 1 << 48
SYS = 5_000_000_000  # TARGET_INFO_SESSION_START_TIME.systemClockNs
UTC = 1_700_000_000_000_000_000  # ... .utcEpochNs
A, B = 100, 200  # OS pids; A has threads 100 and 101, B thread 200


def gpid(pid: int) -> int:
    return VM | (pid << 24)


def gtid(pid: int, tid: int) -> int:
    return gpid(pid) | tid


def epoch(t: int) -> int:
    """A raw time written below, on the unix epoch."""
    return t - SYS + UTC


STRINGS = {
    1: "cudaLaunchKernel_v7000", 2: "cudaMemcpyAsync_v3020", 3: "void gemm<float>(float *, int)",
    4: "gemm", 5: "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    6: "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 7: "python3", 8: "worker", 9: "MPI_Send",
    10: "MPI_Recv", 11: "forward", 12: "cuLaunchKernel", 15: "pthread_mutex_lock",
}
KERNEL_COLS = ("start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid",
               "demangledName", "shortName", "registersPerThread", "gridX", "gridY", "gridZ",
               "blockX", "blockY", "blockZ", "staticSharedMemory", "dynamicSharedMemory")
KERNELS = [
    (SYS + 1_000_000, SYS + 1_050_000, 0, 1, 7, 11, gpid(A), 3, 4, 32, 128, 2, 1, 256, 1, 1,
     1024, 2048),
    (SYS + 2_000_000, SYS + 2_500_000, 0, 1, 7, 12, gpid(A), 5, 6, 96, 4, 1, 1, 512, 1, 1, 0, 0),
    (SYS + 1_100_000, SYS + 1_200_000, 1, 1, 13, 21, gpid(B), 3, 4, 32, 64, 1, 1, 128, 1, 1,
     1024, 0),
]


def _table(con: sqlite3.Connection, name: str, cols: Iterable[str],
           rows: Iterable[tuple[Any, ...]]) -> None:
    cols = list(cols)
    con.execute(f"CREATE TABLE {name} ({', '.join(repr(c) for c in cols)})")
    con.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(cols))})", list(rows))


def make_export(path: Path, *, kernel_cols: tuple[str, ...] = KERNEL_COLS,
                extra_kernel_col: str | None = None, session: str = "system",
                gpu_metrics: bool = False, profiler_step: bool = False) -> Path:
    """Two processes (A: rank 1, B: rank 0) with kernels (one NCCL), a memcpy, a memset,
    a sync, runtime/driver calls, NVTX ranges (default and NCCL domain) and a mark, an OS
    runtime call and one MPI send/recv pair. ``session``: system (times on the system
    clock, systemClockNs given), relative (no systemClockNs: times from 0) or none."""
    shift = 0 if session == "system" else -SYS  # relative exports write t - SYS
    con = sqlite3.connect(path)
    _table(con, "StringIds", ("id", "value"), STRINGS.items())
    _table(con, "META_DATA_EXPORT", ("name", "value"), [("EXPORT_SCHEMA_VERSION", "3.25.0")])
    if session == "system":
        _table(con, "TARGET_INFO_SESSION_START_TIME",
               ("utcEpochNs", "utcTime", "localTime", "systemClockNs"),
               [(UTC, "2023-11-14T22:13:20", "2023-11-14T22:13:20", SYS)])
    elif session == "relative":
        _table(con, "TARGET_INFO_SESSION_START_TIME", ("utcEpochNs", "utcTime", "localTime"),
               [(UTC, "2023-11-14T22:13:20", "2023-11-14T22:13:20")])
    _table(con, "TARGET_INFO_SYSTEM_ENV", ("globalVid", "devStateName", "name", "nameEnum",
                                           "value"), [(VM, "", "Hostname", 1, "node01")])
    _table(con, "ThreadNames", ("nameId", "priority", "globalTid"),
           [(7, 0, gtid(A, A)), (8, 0, gtid(A, 101)), (7, 0, gtid(B, B))])
    _table(con, "PROCESSES", ("globalPid", "pid", "name"), [(gpid(A), A, "python3"),
                                                            (gpid(B), B, "python3")])
    _table(con, "ENUM_CUDA_MEMCPY_OPER", ("id", "name", "label"),
           [(1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device")])
    keep = [KERNEL_COLS.index(c) for c in kernel_cols]
    rows = [tuple(k[i] for i in keep) for k in KERNELS]
    cols = list(kernel_cols)
    if extra_kernel_col:
        cols.append(extra_kernel_col)
        rows = [(*r, 42) for r in rows]
    _table(con, "CUPTI_ACTIVITY_KIND_KERNEL", cols, [_shift(r, shift) for r in rows])
    _table(con, "CUPTI_ACTIVITY_KIND_MEMCPY",
           ("start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid",
            "bytes", "copyKind"),
           [_shift((SYS + 3_000_000, SYS + 3_100_000, 0, 1, 7, 13, gpid(A), 4096, 1), shift)])
    _table(con, "CUPTI_ACTIVITY_KIND_MEMSET",
           ("start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid",
            "value", "bytes"),
           [_shift((SYS + 3_200_000, SYS + 3_210_000, 0, 1, 7, 14, gpid(A), 0, 512), shift)])
    _table(con, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
           ("start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid",
            "syncType"),
           [_shift(r, shift) for r in (
               (SYS + 3_300_000, SYS + 3_400_000, 0, 1, 7, 15, gpid(A), 3),
               # deviceId 0 as the real exports write it; B's context 1 is on device 1
               (SYS + 1_300_000, SYS + 1_310_000, 0, 1, 13, 22, gpid(B), 3),
           )])
    _table(con, "CUPTI_ACTIVITY_KIND_RUNTIME",
           ("start", "end", "eventClass", "globalTid", "correlationId", "nameId", "returnValue"),
           [_shift(r, shift) for r in (
               (SYS + 900_000, SYS + 950_000, 0, gtid(A, A), 11, 1, 0),
               (SYS + 1_900_000, SYS + 1_950_000, 1, gtid(A, A), 12, 12, 0),
               (SYS + 2_900_000, SYS + 2_950_000, 0, gtid(A, A), 13, 2, 0),
               (SYS + 1_000_000, SYS + 1_050_000, 0, gtid(B, B), 21, 1, 0),
           )])
    _table(con, "NVTX_EVENTS",
           ("start", "end", "eventType", "text", "globalTid", "textId", "domainId", "jsonText"),
           [_shift(r, shift) for r in (
               (SYS + 100, None, 75, "NCCL", gtid(A, A), None, 1, None),
               (SYS + 800_000, SYS + 3_300_000, 59, None, gtid(A, A), 11, 0, None),
               (SYS + 1_850_000, SYS + 1_960_000, 59, "ncclAllReduce", gtid(A, A), None, 1,
                '{"size": 8}'),
               (SYS + 3_250_000, None, 34, "checkpoint", gtid(A, A), None, 0, None),
               (SYS + 500_000, SYS + 600_000, 60, "io", gtid(B, B), None, 0, None),
           ) + ((SYS + 850_000, SYS + 2_000_000, 59, "ProfilerStep#3", gtid(A, A), None, 0,
                 None),) * profiler_step])
    _table(con, "OSRT_API", ("start", "end", "eventClass", "globalTid", "nameId", "returnValue"),
           [_shift((SYS + 5_000, SYS + 9_000, 27, gtid(A, 101), 15, 0), shift)])
    _table(con, "MPI_P2P_EVENTS",
           ("start", "end", "globalTid", "textId", "tag", "remoteRank", "size"),
           [_shift(r, shift) for r in (
               (SYS + 4_000_000, SYS + 4_100_000, gtid(A, A), 9, 7, 0, 1024),
               (SYS + 4_000_500, SYS + 4_200_000, gtid(B, B), 10, 7, 1, 1024),
           )])
    _table(con, "MPI_RANKS", ("globalTid", "rank"), [(gtid(A, A), 1), (gtid(B, B), 0)])
    if gpu_metrics:
        _table(con, "TARGET_INFO_GPU_METRICS",
               ("typeId", "sourceId", "typeName", "metricId", "metricName"),
               [(0x101, 0, "GA100", 1, "SMs Active"), (0x101, 0, "GA100", 2, "DRAM Read")])
        _table(con, "GPU_METRICS", ("timestamp", "typeId", "metricId", "value"),
               [(SYS + 1_000, 0x101, 1, 50), (SYS + 1_000, 0x101, 2, 7),
                (SYS + 2_000, 0x101, 1, 75)])
    con.commit()
    con.close()
    return path


def _shift(row: tuple[Any, ...], shift: int) -> tuple[Any, ...]:
    """Shift the first two fields (start, end) when they are set."""
    return tuple(v + shift if i < 2 and v is not None else v for i, v in enumerate(row))


def _read(path: Path) -> list[RankData]:
    return NsysReader().read(Source(str(path)), threads=1)


def _rows(rank: RankData, table: str, **where: Any) -> list[dict[str, Any]]:
    rows = rank.tables[table].to_pylist()
    return [r for r in rows if all(r[k] == v for k, v in where.items())]


def _counts(rank: RankData) -> dict[str, int]:
    out: dict[str, int] = {}
    for cat in rank.tables["intervals"].column("category").to_pylist():
        out[cat] = out.get(cat, 0) + 1
    return out


@pytest.fixture
def export(tmp_path: Path) -> Path:
    return make_export(tmp_path / "job.sqlite")


def test_detected_and_ranks_per_process(export: Path) -> None:
    assert detect(Source(str(export))).name == "nsys"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a complete export reads without warnings
        ranks = _read(export)
    assert [(r.rank, r.rank_source) for r in ranks] == [(0, "MPI_RANKS"), (1, "MPI_RANKS")]
    b, a = ranks
    assert _counts(a) == {"kernel": 1, "comm_kernel": 1, "memcpy": 1, "memset": 1, "sync": 1,
                          "runtime": 2, "driver": 1, "nvtx": 2, "osrt": 1, "mpi": 1}
    assert _counts(b) == {"kernel": 1, "runtime": 1, "nvtx": 1, "mpi": 1, "sync": 1}
    for r in ranks:
        assert r.host == "node01"
        assert r.clock == {"method": "TARGET_INFO_SESSION_START_TIME", "base_ns": UTC - SYS,
                           "offset_ns": 0}
        meta = dict(zip(r.tables["metadata"]["key"].to_pylist(),
                        r.tables["metadata"]["value"].to_pylist(), strict=True))
        assert json.loads(meta["EXPORT_SCHEMA_VERSION"]) == "3.25.0"


def test_tracks(export: Path) -> None:
    b, a = _read(export)
    tracks = [(t["track_id"], t["kind"], t["name"], t["pid"], t["tid"], t["device"],
               t["stream"], t["host"]) for t in a.tables["tracks"].to_pylist()]
    assert tracks == [
        (0, "host_thread", "python3", A, A, -1, -1, "node01"),
        (1, "host_thread", "worker", A, 101, -1, -1, "node01"),
        (2, "gpu_stream", "GPU 0 stream 7", A, 7, 0, 7, "node01"),
        (3, "device", "GPU 0 stream 7 sync", A, 7, 0, 7, "node01"),
    ]
    assert [(t["kind"], t["pid"], t["tid"], t["device"], t["stream"])
            for t in b.tables["tracks"].to_pylist()] == [
        ("host_thread", B, B, -1, -1), ("gpu_stream", B, 13, 1, 13), ("device", B, 13, 1, 13)]


def test_kernels_times_geometry_and_correlation(export: Path) -> None:
    b, a = _read(export)
    (k1,) = _rows(a, "intervals", category="kernel")
    assert (k1["start_ns"], k1["end_ns"], k1["dur_ns"]) == (
        UTC + 1_000_000, UTC + 1_050_000, 50_000)
    assert k1["name"] == "void gemm<float>(float *, int)"  # demangledName preferred
    assert (k1["grid"], k1["block"]) == ([128, 2, 1], [256, 1, 1])
    assert (k1["device"], k1["stream"], k1["track_id"], k1["correlation"]) == (0, 7, 2, 11)
    args = json.loads(k1["args"])
    assert {k: args[k] for k in ("shortName", "registersPerThread", "staticSharedMemory",
                                 "dynamicSharedMemory", "contextId")} == {
        "shortName": "gemm", "registersPerThread": 32, "staticSharedMemory": 1024,
        "dynamicSharedMemory": 2048, "contextId": 1}
    (launch,) = _rows(a, "intervals", correlation=11, category="runtime")
    assert (launch["name"], launch["start_ns"], launch["track_id"]) == (
        "cudaLaunchKernel", UTC + 900_000, 0)
    (nccl,) = _rows(a, "intervals", category="comm_kernel")
    assert (nccl["collective"], nccl["dtype"], nccl["correlation"]) == ("allreduce", "f32", 12)
    (driver,) = _rows(a, "intervals", correlation=12, category="driver")
    assert driver["name"] == "cuLaunchKernel"
    (kb,) = _rows(b, "intervals", category="kernel")
    assert (kb["start_ns"], kb["device"], kb["stream"], kb["correlation"]) == (
        UTC + 1_100_000, 1, 13, 21)


def test_memcpy_memset_sync_osrt(export: Path) -> None:
    b, a = _read(export)
    (cp,) = _rows(a, "intervals", category="memcpy")
    assert (cp["name"], cp["memcpy_kind"], cp["bytes"], cp["start_ns"], cp["correlation"]) == (
        "[CUDA memcpy Host-to-Device]", "HtoD", 4096, UTC + 3_000_000, 13)
    (ms,) = _rows(a, "intervals", category="memset")
    assert (ms["bytes"], ms["dur_ns"], json.loads(ms["args"])["value"]) == (512, 10_000, 0)
    (sy,) = _rows(a, "intervals", category="sync")
    assert (sy["name"], sy["track_id"], sy["correlation"]) == ("Stream sync", 3, 15)
    (sb,) = _rows(b, "intervals", category="sync")
    assert (sb["device"], sb["stream"], sb["start_ns"]) == (1, 13, UTC + 1_300_000)
    (os_,) = _rows(a, "intervals", category="osrt")
    assert (os_["name"], os_["track_id"], os_["start_ns"]) == ("pthread_mutex_lock", 1,
                                                                 UTC + 5_000)


def test_nvtx_domains_depth_and_marks(export: Path) -> None:
    b, a = _read(export)
    (fwd,) = _rows(a, "intervals", name="forward")
    (nr,) = _rows(a, "intervals", name="ncclAllReduce")
    (drv,) = _rows(a, "intervals", category="driver")
    (rt,) = _rows(a, "intervals", correlation=11, category="runtime")
    assert (fwd["category"], fwd["depth"], fwd["end_ns"]) == ("nvtx", 0, UTC + 3_300_000)
    assert (nr["category"], nr["depth"], drv["depth"], rt["depth"]) == ("nvtx", 1, 2, 1)
    args = json.loads(nr["args"])
    assert (args["domain"], args["domainId"], args["jsonText"]) == ("NCCL", 1, {"size": 8})
    assert "domain" not in json.loads(fwd["args"])  # default domain has no name
    (mark,) = a.tables["instants"].to_pylist()
    assert (mark["name"], mark["ts_ns"], mark["track_id"], mark["category"]) == (
        "checkpoint", UTC + 3_250_000, 0, "nvtx")
    (io,) = _rows(b, "intervals", category="nvtx")
    assert (io["name"], io["start_ns"], io["dur_ns"]) == ("io", UTC + 500_000, 100_000)
    assert all(s == -1 for s in a.tables["intervals"]["step"].to_pylist())


def test_mpi_messages_local_side_only(export: Path) -> None:
    b, a = _read(export)
    (send,) = a.tables["messages"].to_pylist()
    assert send == {"src_rank": 1, "dst_rank": 0, "send_start_ns": UTC + 4_000_000,
                    "send_end_ns": UTC + 4_100_000, "recv_start_ns": None,
                    "recv_end_ns": None, "bytes": 1024, "tag": 7, "communicator": None}
    (recv,) = b.tables["messages"].to_pylist()
    assert (recv["src_rank"], recv["dst_rank"], recv["send_start_ns"], recv["recv_start_ns"],
            recv["recv_end_ns"]) == (1, 0, None, UTC + 4_000_500, UTC + 4_200_000)
    (mpi,) = _rows(a, "intervals", category="mpi")
    assert mpi["name"] == "MPI_Send"
    assert json.loads(mpi["args"]) == {"tag": 7, "remoteRank": 0, "size": 1024}


def test_ingest_store(export: Path, tmp_path: Path) -> None:
    store = traceatlas.ingest(export, tmp_path / "store", engine=LocalEngine(max_workers=1))
    trace = traceatlas.Trace(store)
    got = trace.sql("SELECT rank, category, count(*) AS n FROM intervals "
                    "GROUP BY ALL ORDER BY ALL").to_dicts()
    assert {(r["rank"], r["category"]): r["n"] for r in got} == {
        (0, "kernel"): 1, (0, "runtime"): 1, (0, "nvtx"): 1, (0, "mpi"): 1, (0, "sync"): 1,
        (1, "kernel"): 1, (1, "comm_kernel"): 1, (1, "memcpy"): 1, (1, "memset"): 1,
        (1, "sync"): 1, (1, "runtime"): 2, (1, "driver"): 1, (1, "nvtx"): 2, (1, "osrt"): 1,
        (1, "mpi"): 1}
    assert trace.sql("SELECT count(*) AS n FROM messages").to_dicts() == [{"n": 2}]


def test_session_relative_times(tmp_path: Path) -> None:
    """No systemClockNs (schemas 2.x/3.13): times are from the session start."""
    _b, a = _read(make_export(tmp_path / "rel.sqlite", session="relative"))
    assert a.clock["base_ns"] == UTC
    (k1,) = _rows(a, "intervals", category="kernel")
    assert k1["start_ns"] == UTC + 1_000_000


def test_no_session_start(tmp_path: Path) -> None:
    _b, a = _read(make_export(tmp_path / "none.sqlite", session="none"))
    assert str(a.clock["method"]).startswith("none")
    (k1,) = _rows(a, "intervals", category="kernel")
    assert k1["start_ns"] == 1_000_000  # as written (t - SYS)


def test_profiler_step_ranges(tmp_path: Path) -> None:
    """A ProfilerStep#3 range over the first launch: it is category step; host rows
    starting inside take step 3, the kernel takes the step of its launch (corr 11)."""
    _b, a = _read(make_export(tmp_path / "step.sqlite", profiler_step=True))
    (step,) = _rows(a, "intervals", category="step")
    assert (step["name"], step["step"]) == ("ProfilerStep#3", 3)
    steps = {(r["name"], r["category"]): r["step"] for r in a.tables["intervals"].to_pylist()}
    assert steps[("cudaLaunchKernel", "runtime")] == 3  # starts at +900_000
    assert steps[("void gemm<float>(float *, int)", "kernel")] == 3  # launched at +900_000
    assert steps[("cudaMemcpyAsync", "runtime")] == -1  # starts at +2_900_000, after it
    assert steps[("forward", "nvtx")] == -1  # starts at +800_000, before it


def test_missing_and_unknown_columns(tmp_path: Path) -> None:
    cols = tuple(c for c in KERNEL_COLS if c != "correlationId")
    path = make_export(tmp_path / "old.sqlite", kernel_cols=cols, extra_kernel_col="fancyNew")
    with pytest.warns(DataQualityWarning) as record:
        ranks = _read(path)
    messages = [str(w.message) for w in record]
    assert any(str(path) in m and "CUPTI_ACTIVITY_KIND_KERNEL" in m and "correlationId" in m
               for m in messages), messages
    assert any("fancyNew" in m and "CUPTI_ACTIVITY_KIND_KERNEL" in m for m in messages)
    for r in ranks:
        kernels = [row for row in r.tables["intervals"].to_pylist()
                   if row["category"] in ("kernel", "comm_kernel")]
        assert kernels and all(k["correlation"] is None for k in kernels)
        assert all(json.loads(k["args"])["fancyNew"] == 42 for k in kernels)


def test_gpu_metrics_counters(tmp_path: Path) -> None:
    b, a = _read(make_export(tmp_path / "gm.sqlite", gpu_metrics=True))
    (track,) = _rows(b, "tracks", kind="counter")  # device 1 = 0x101 & 0xFF: process B's GPU
    assert (track["device"], track["name"]) == (1, "GPU 1 metrics")
    rows = [(c["track_id"], c["ts_ns"], c["name"], c["value"])
            for c in b.tables["counters"].to_pylist()]
    tid = track["track_id"]
    assert rows == [(tid, UTC + 1_000, "DRAM Read", 7.0), (tid, UTC + 1_000, "SMs Active", 50.0),
                    (tid, UTC + 2_000, "SMs Active", 75.0)]
    assert a.tables["counters"].num_rows == 0


# ---- bad input -------------------------------------------------------------------


def _corrupt(tmp: Path) -> Path:
    path = tmp / "corrupt.sqlite"
    path.write_bytes(b"SQLite format 3\x00" + random.Random(0).randbytes(8192))
    return path


def _not_nsys(tmp: Path) -> Path:
    path = tmp / "other.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE foo (a)")
    con.commit()
    con.close()
    return path


def _report(tmp: Path) -> Path:
    path = tmp / "run.nsys-rep"
    path.write_bytes(b"\x00not really a report")
    return path


BAD = [
    ("corrupt", _corrupt, traceatlas.CorruptTraceError, "SQLite"),
    ("not-nsys", _not_nsys, traceatlas.UnsupportedFormatError, "not an Nsight Systems export"),
    ("nsys-rep-without-nsys", _report, traceatlas.UnsupportedFormatError, "needs `nsys` on PATH"),
]


@pytest.fixture
def no_nsys_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


@pytest.mark.usefixtures("no_nsys_path")
@pytest.mark.parametrize(("case", "build", "error", "words"), BAD, ids=[c[0] for c in BAD])
def test_cli_bad_input(tmp_path: Path, case: str, build: Any, error: type[Exception],
                       words: str) -> None:
    (tmp_path / "in").mkdir()
    path = build(tmp_path / "in")
    result = CliRunner().invoke(app, ["info", str(path)])
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and str(path) in lines[0] and words in lines[0]
    cache = Path(os.environ["TRACEATLAS_CACHE_DIR"])
    assert not any(cache.rglob("*.tastore")) and not any(cache.rglob("manifest.json"))
    out = tmp_path / "work" / "out"
    with pytest.raises(error, match=str(path)):
        traceatlas.ingest(path, out, engine=LocalEngine(max_workers=1))
    assert not out.exists() and not (out.parent.exists() and any(out.parent.iterdir()))


def test_nsys_rep_exported_with_nsys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``nsys`` on PATH the report is exported to a temporary .sqlite (a stand-in
    ``nsys`` copies a prepared export to the ``-o`` path) and read from there."""
    prepared = make_export(tmp_path / "prepared.sqlite")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nsys"
    fake.write_text('#!/bin/sh\n'
                    'while [ $# -gt 0 ]; do [ "$1" = "-o" ] && out="$2"; shift; done\n'
                    f'cp "{prepared}" "$out"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    report = _report(tmp_path)
    assert detect(Source(str(report))).name == "nsys"
    ranks = _read(report)
    assert [r.rank for r in ranks] == [0, 1]
    meta = dict(zip(ranks[0].tables["metadata"]["key"].to_pylist(),
                    ranks[0].tables["metadata"]["value"].to_pylist(), strict=True))
    assert json.loads(meta["source_file"]) == str(report)
    assert isinstance(ranks[0].tables["intervals"], pa.Table)
