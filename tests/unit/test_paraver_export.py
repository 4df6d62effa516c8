"""Paraver exporter: files, codes, ordering, atomic writes, and round trips
(ingest -> export -> ingest keeps interval counts per category and exact ns times)."""

from __future__ import annotations

import re
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceatlas
from traceatlas.errors import DataQualityWarning
from traceatlas.export.paraver import ParaverExporter
from traceatlas.export.registry import get_exporter
from traceatlas.testing import TraceBuilder
from traceatlas.testing.paraver_text import MPI_COLLECTIVE, PAPI_TOT_INS_PCF, mpi_events, pcf

BASE = 1_700_000_000_000_000_000


def _builder_trace(tmp: Path) -> traceatlas.Trace:
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    b.step(1, 0, 100_000)
    b.cpu_op("aten::mm", 1_000, 10_000)
    b.cpu_op("aten::inner", 2_000, 2_000)  # zero length, nested, starts with a launch
    b.launch("gemm_a", 2_000, 3_000, 20_000, 5_000)
    # Overlapping kernels on the same stream: they need two Paraver threads.
    b.launch("gemm_b", 11_000, 1_000, 22_000, 6_000)
    b.launch("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 13_000, 1_000, 30_000, 8_000,
             stream=20)
    b.launch("Memcpy HtoD (Pageable -> Device)", 14_000, 1_000, 40_000, 2_000,
             kind="memcpy", nbytes=4096)
    b.cpu_op("aten::add", 10_000, 12_000)  # starts when aten::mm ends
    b.instant("marker", 50_000)
    src = b.write(tmp / "rank-0.json")
    return traceatlas.open(traceatlas.ingest(src, tmp / "store"))


def _intervals(trace: traceatlas.Trace) -> list[tuple[Any, ...]]:
    frame = trace.intervals.select(
        "rank", pl.col("category").cast(pl.String), "start_ns", "end_ns"
    ).collect()
    return sorted(frame.iter_rows())


def _by_category(trace: traceatlas.Trace) -> dict[str, int]:
    frame = trace.intervals.group_by(pl.col("category").cast(pl.String)).len().collect()
    return dict(frame.iter_rows())


def _round_trip(trace: traceatlas.Trace, tmp: Path) -> tuple[list[Path], traceatlas.Trace]:
    flows = trace.scan("flows").collect().height
    with pytest.warns(DataQualityWarning, match="flow") if flows else nullcontext():
        files = ParaverExporter().write(trace, tmp / "exported")
    back = traceatlas.open(traceatlas.ingest(files[0], tmp / "back"))
    return files, back


def test_round_trip_builder_trace(tmp_path: Path) -> None:
    trace = _builder_trace(tmp_path)
    files, back = _round_trip(trace, tmp_path)
    assert [f.name for f in files] == ["exported.prv", "exported.pcf", "exported.row"]
    assert _by_category(back) == _by_category(trace)
    assert _intervals(back) == _intervals(trace)
    inst = back.instants.select("ts_ns", pl.col("name").cast(pl.String)).collect().rows()
    assert inst == [(BASE + 50_000, "marker")]
    # The two overlapping kernels went to separate threads named after the stream.
    row = files[2].read_text()
    assert "GPU 0 stream 7" in row and "GPU 0 stream 7 row 1" in row
    kinds = back.tracks.filter(pl.col("name").str.starts_with("GPU 0 stream 7")).select(
        pl.col("kind").cast(pl.String), "device", "stream").collect().rows()
    assert kinds == [("gpu_stream", 0, 7), ("gpu_stream", 0, 7)]
    # No temporary files are left beside the outputs.
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_prv_header_codes_and_order(tmp_path: Path) -> None:
    trace = _builder_trace(tmp_path)
    files, _ = _round_trip(trace, tmp_path)
    lines = files[0].read_text().splitlines()
    header = re.match(r"^#Paraver \([^)]*\):(\d+)_ns:0:1:1\((\d+):1\)$", lines[0])
    assert header is not None, lines[0]
    assert lines[1] == f"# traceatlas time_origin_ns={BASE}"  # step starts at builder 0
    assert int(header.group(1)) == 100_000  # the step ends last, 100 us after the origin
    records = [line.split(":") for line in lines[2:]]
    times = [int(r[5]) for r in records if r[0] in ("1", "2")]
    assert times == sorted(times)
    types = {int(r[6]) for r in records if r[0] == "2"}
    # nsys2prv 0.5.8 codes: CUDA kernel, CUDA library call, memcpy, NCCL kernel
    assert {63_000_006, 63_000_000, 63_000_001, 63_000_007} <= types
    assert 91_000_000 in types  # cpu_op = 91000000 + CATEGORIES.index("cpu_op")
    # Derived Running states: the step covers everything on the host thread.
    states = [r for r in records if r[0] == "1"]
    assert [(int(s[5]), int(s[6]), s[7]) for s in states] == [(0, 100_000, "1")]
    pcf = files[1].read_text()
    assert "63000006    CUDA kernel" in pcf and "63000007    NCCL kernel" in pcf
    assert "91000000    traceatlas category cpu_op" in pcf
    assert "91000999    traceatlas derived states" in pcf


def test_out_with_prv_suffix_and_registry(tmp_path: Path) -> None:
    trace = _builder_trace(tmp_path)
    exporter = get_exporter("paraver")
    with pytest.warns(DataQualityWarning, match="4 flow link"):
        files = exporter.write(trace, tmp_path / "x.prv")
    assert [f.name for f in files] == ["x.prv", "x.pcf", "x.row"]
    assert all(f.is_file() for f in files)


def test_atomic_nothing_left_on_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _builder_trace(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    calls = {"n": 0}
    original = Path.write_text

    def failing(self: Path, *args: Any, **kw: Any) -> int:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full")
        return original(self, *args, **kw)

    monkeypatch.setattr(Path, "write_text", failing)
    with pytest.raises(OSError, match="disk full"), pytest.warns(DataQualityWarning):
        ParaverExporter().write(trace, out / "t")
    assert list(out.iterdir()) == []


PRV = """#Paraver (01/02/2024 at 10:00):100_ns:0:1:2(1:1,1:1)
1:0:1:1:1:0:50:1
1:0:1:2:1:0:60:3
2:0:1:1:1:5:50000002:10
2:0:1:1:1:10:42000050:1000
2:0:1:1:1:20:50000002:0:42000050:2500
3:0:1:1:1:30:31:0:1:2:1:40:45:64:3
"""
PCF = pcf({1: "Running", 3: "Waiting a message"},
          mpi_events(MPI_COLLECTIVE, {10: "MPI_Allreduce"}), PAPI_TOT_INS_PCF)


def test_round_trip_paraver_states_counters_messages(tmp_path: Path) -> None:
    (tmp_path / "p.prv").write_text(PRV)
    (tmp_path / "p.pcf").write_text(PCF)
    trace = traceatlas.open(traceatlas.ingest(tmp_path / "p.prv", tmp_path / "store"))
    _, back = _round_trip(trace, tmp_path)
    assert _intervals(back) == _intervals(trace) == [
        (0, "mpi", 5, 20), (0, "state", 0, 50), (1, "state", 0, 60)]
    names = back.intervals.select(pl.col("name").cast(pl.String)).collect()["name"]
    assert sorted(names) == ["MPI_Allreduce", "Running", "Waiting a message"]
    counters = back.counters.select("ts_ns", pl.col("name").cast(pl.String), "value")
    assert counters.sort("ts_ns").collect().rows() == [(10, "PAPI_TOT_INS", 1000.0),
                                                       (20, "PAPI_TOT_INS", 2500.0)]
    msg = back.messages.select("rank", "src_rank", "dst_rank", "send_start_ns",
                               "send_end_ns", "recv_start_ns", "recv_end_ns", "bytes",
                               "tag").collect().rows()
    assert msg == [(0, 0, 1, 30, 31, 40, 45, 64, 3)]
