"""Golden tests of ``annotations``: small traces built here, expected values by hand."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas import analysis
from traceatlas.cli.main import app
from traceatlas.errors import InputError
from traceatlas.testing import TraceBuilder

BASE = 1_700_000_000_000_000_000


def _builder() -> TraceBuilder:
    return TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)


def _ingest(tmp_path: Path, b: TraceBuilder) -> traceatlas.Trace:
    return traceatlas.open(traceatlas.ingest(b.write(tmp_path / "rank-0.json"),
                                             tmp_path / "store"))


@pytest.fixture
def trace(tmp_path: Path) -> traceatlas.Trace:
    b = _builder()
    b.annotation("outer", 0, 100_000)                    # host 100_000
    b.annotation("inner", 10_000, 30_000)                # inner #1
    b.annotation("inner", 50_000, 60_000)                # inner #2: host 20_000 + 10_000
    b.annotation("solo", 200_000, 210_000)               # nothing launched inside
    b.launch("k1", 12_000, 1_000, 500_000, 10_000)       # inner#1 < outer; [500k, 510k)
    b.launch("k2", 20_000, 1_000, 505_000, 10_000, stream=8)  # inner#1; [505k, 515k)
    b.launch("k3", 55_000, 1_000, 520_000, 5_000)        # inner#2; [520k, 525k)
    b.launch("k4", 70_000, 1_000, 530_000, 2_000)        # outer only
    b.launch("Memcpy HtoD (Pageable -> Device)", 80_000, 1_000, 545_000, 3_000,
             kind="memcpy", nbytes=1024)                 # outer only
    b.launch("k6", 30_000, 500, 550_000, 1_000)          # at inner#1's end: outer only
    b.launch("k5", 150_000, 1_000, 540_000, 1_000)       # in no annotation
    b.launch("k9", 15_000, 1_000, 560_000, 1_000, tid=999)  # other thread: none
    b.annotation("phase", 300_000, 320_000, gpu=True)    # + gpu_user_annotation on stream 7
    b.launch("k7", 305_000, 1_000, 600_000, 4_000)       # [600k, 604k)
    b.launch("k8", 310_000, 1_000, 606_000, 4_000)       # [606k, 610k)
    return _ingest(tmp_path, b)


def _rows(trace: traceatlas.Trace, **params: Any) -> dict[tuple[str, str], tuple[Any, ...]]:
    table = analysis.run("annotations", trace, params).table
    return {(r["category"], r["name"]): (r["count"], r["host_ns"], r["device_ns"], r["kernels"])
            for r in table.to_dicts()}


def test_host_and_device_time_per_annotation(trace: traceatlas.Trace) -> None:
    rows = _rows(trace)
    # outer: k1 u k2 = [500k, 515k) 15_000 + k3 5_000 + k4 2_000 + memcpy 3_000 + k6 1_000
    assert rows[("annotation", "outer")] == (1, 100_000, 26_000, 6)
    # inner: #1 holds k1, k2 (union 15_000); #2 holds k3 (5_000)
    assert rows[("annotation", "inner")] == (2, 30_000, 20_000, 3)
    assert rows[("annotation", "solo")] == (1, 10_000, 0, 0)
    assert rows[("annotation", "phase")] == (1, 20_000, 8_000, 2)
    # gpu_user_annotation: no host side; k7 and k8 run inside it on stream 7
    assert rows[("gpu_annotation", "phase")] == (1, None, 8_000, 2)
    assert len(rows) == 5


def test_innermost_and_outermost(trace: traceatlas.Trace) -> None:
    kernels = analysis.run("annotations", trace).extra["kernels"]
    got = {r["name"]: (r["innermost"], r["outermost"]) for r in kernels.to_dicts()}
    assert got == {
        "k1": ("inner", "outer"), "k2": ("inner", "outer"), "k3": ("inner", "outer"),
        "k4": ("outer", "outer"), "Memcpy HtoD (Pageable -> Device)": ("outer", "outer"),
        "k6": ("outer", "outer"), "k5": (None, None), "k9": (None, None),
        "k7": ("phase", "phase"), "k8": ("phase", "phase"),
    }


def test_categories_param(trace: traceatlas.Trace) -> None:
    rows = _rows(trace, categories="gpu_annotation")
    assert rows == {("gpu_annotation", "phase"): (1, None, 8_000, 2)}
    with pytest.raises(InputError):
        analysis.run("annotations", trace, {"categories": "cpu_op"})


def test_selection_view(trace: traceatlas.Trace) -> None:
    # A name selection keeps only the "inner" rows and no launches: no device time.
    rows = _rows(trace.select(name="^inner$"))
    assert rows == {("annotation", "inner"): (2, 30_000, 0, 0)}


def _nsys(path: Path) -> Path:
    """A default-domain range ``fwd`` and a range ``allreduce`` in domain ``NCCL`` on one
    thread, one runtime launch at +2_000 inside both, its kernel at [20_000, 25_000)."""
    sys_ns, utc = 5_000_000_000, BASE
    gpid = (1 << 48) | (100 << 24)
    gtid = gpid | 100
    con = sqlite3.connect(path)

    def table(name: str, cols: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
        con.execute(f"CREATE TABLE {name} ({', '.join(cols)})")
        con.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(cols))})", rows)

    table("StringIds", ("id", "value"), [(1, "cudaLaunchKernel_v7000"), (2, "gemm")])
    table("META_DATA_EXPORT", ("name", "value"), [("EXPORT_SCHEMA_VERSION", "3.25.0")])
    table("TARGET_INFO_SESSION_START_TIME", ("utcEpochNs", "utcTime", "localTime",
                                             "systemClockNs"),
          [(utc, "2023-11-14T22:13:20", "2023-11-14T22:13:20", sys_ns)])
    table("PROCESSES", ("globalPid", "pid", "name"), [(gpid, 100, "python3")])
    table("MPI_RANKS", ("globalTid", "rank"), [(gtid, 0)])
    table("CUPTI_ACTIVITY_KIND_KERNEL",
          ("start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid",
           "demangledName", "shortName", "registersPerThread", "gridX", "gridY", "gridZ",
           "blockX", "blockY", "blockZ", "staticSharedMemory", "dynamicSharedMemory"),
          [(sys_ns + 20_000, sys_ns + 25_000, 0, 1, 7, 11, gpid, 2, 2, 32, 1, 1, 1, 128, 1,
            1, 0, 0)])
    table("CUPTI_ACTIVITY_KIND_RUNTIME",
          ("start", "end", "eventClass", "globalTid", "correlationId", "nameId",
           "returnValue"), [(sys_ns + 2_000, sys_ns + 2_500, 0, gtid, 11, 1, 0)])
    table("NVTX_EVENTS",
          ("start", "end", "eventType", "text", "globalTid", "textId", "domainId",
           "jsonText"),
          [(sys_ns + 1, None, 75, "NCCL", gtid, None, 1, None),
           (sys_ns + 0, sys_ns + 10_000, 59, "fwd", gtid, None, 0, None),
           (sys_ns + 1_000, sys_ns + 5_000, 59, "allreduce", gtid, None, 1, None)])
    con.commit()
    con.close()
    return path


def test_nvtx_domains(tmp_path: Path) -> None:
    trace = traceatlas.open(traceatlas.ingest(_nsys(tmp_path / "n.sqlite"), tmp_path / "s"))
    result = analysis.run("annotations", trace)
    rows = {(r["domain"], r["name"]): (r["count"], r["host_ns"], r["device_ns"], r["kernels"])
            for r in result.table.to_dicts()}
    assert rows == {(None, "fwd"): (1, 10_000, 5_000, 1),
                    ("NCCL", "allreduce"): (1, 4_000, 5_000, 1)}
    (kernel,) = result.extra["kernels"].to_dicts()
    assert (kernel["innermost"], kernel["outermost"]) == ("allreduce", "fwd")


def test_no_annotations_cli_exit_2(tmp_path: Path) -> None:
    b = _builder()
    b.cpu_op("aten::mm", 0, 10_000)
    b.launch("k", 1_000, 1_000, 20_000, 1_000)
    store = traceatlas.ingest(b.write(tmp_path / "rank-0.json"), tmp_path / "store")
    result = CliRunner().invoke(app, ["analyze", "annotations", str(store)])
    assert result.exit_code == 2
    assert "no annotations" in result.output
