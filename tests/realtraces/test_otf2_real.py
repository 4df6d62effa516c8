"""OTF2 reader on real Score-P archives (pipit ping-pong, with and without PAPI; fastotf2
MI300 HIP run). Expected numbers come from SOURCES.md (pipit's Vampir-derived ground
truth) and from an independent plain ``otf2.reader`` loop over the same archive."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import otf2  # type: ignore[import-untyped]
import pytest

import traceatlas
from traceatlas.io.otf2 import Otf2Reader
from traceatlas.io.sources import Source

pytestmark = pytest.mark.realtrace


def _plain_counts(anchor: Path) -> dict[str, Any]:
    """Independent counts with the otf2 library alone."""
    enters: Counter[str] = Counter()
    metric_values = 0
    sent: Counter[str] = Counter()
    sends: Counter[str] = Counter()
    with otf2.reader.open(str(anchor)) as reader:
        for location, event in reader.events:
            kind = type(event).__name__
            group = location.group.name
            if kind == "Enter":
                enters[group] += 1
            elif kind == "Metric":
                metric_values += len(event.values)
            elif kind == "MpiSend":
                sends[group] += 1
                sent[group] += event.msg_length
    return {"enters": enters, "metric_values": metric_values, "sends": sends, "sent": sent}


def test_ping_pong(traces_dir: Path) -> None:
    folder = traces_dir / "pipit" / "ping-pong-otf2"
    plain = _plain_counts(folder / "traces.otf2")
    trace = traceatlas.open(str(folder))  # the directory: its traces.otf2 is found
    assert trace.sql("SELECT DISTINCT rank FROM tracks ORDER BY 1").rows() == [(0,), (1,)]
    per_direction = trace.sql(
        "SELECT src_rank, dst_rank, count(*), sum(bytes), count(recv_end_ns) "
        "FROM messages GROUP BY 1, 2 ORDER BY 1, 2").rows()
    # SOURCES.md: 8 messages each way, 4,177,920 bytes each direction.
    assert per_direction == [(0, 1, 8, 4_177_920, 8), (1, 0, 8, 4_177_920, 8)]
    assert plain["sent"] == {"MPI Rank 0": 4_177_920, "MPI Rank 1": 4_177_920}
    # Each message is stored once, with its sender.
    assert trace.sql("SELECT count(*) FROM messages WHERE rank <> src_rank").rows() == [(0,)]
    per_rank = trace.sql("SELECT rank, count(*) FROM intervals GROUP BY 1 ORDER BY 1").rows()
    assert per_rank == [(0, plain["enters"]["MPI Rank 0"]), (1, plain["enters"]["MPI Rank 1"])]
    assert sum(n for _, n in per_rank) == 42  # SOURCES.md: 42 Enter events
    assert trace.sql(
        "SELECT count(*) FROM intervals WHERE name IN ('MPI_Send', 'MPI_Recv') "
        "AND category = 'mpi'").rows() == [(32,)]
    # Message times lie within the MPI regions they came from.
    assert trace.sql(
        "SELECT count(*) FROM messages WHERE send_start_ns > send_end_ns "
        "OR recv_start_ns > recv_end_ns").rows() == [(0,)]


def test_ping_pong_clock(traces_dir: Path) -> None:
    anchor = traces_dir / "pipit" / "ping-pong-otf2" / "traces.otf2"
    ranks = Otf2Reader().read(Source(str(anchor)))
    assert [(r.rank, r.world_size, r.host) for r in ranks] == [(0, 2, "quartz10"),
                                                                 (1, 2, "quartz10")]
    assert ranks[0].clock["method"] == "none (OTF2 without realtime timestamp)"
    with otf2.reader.open(str(anchor)) as reader:
        props = reader.definitions.clock_properties
        offset, resolution = props.global_offset, props.timer_resolution
        times = [(loc._ref, type(e).__name__, e.time) for loc, e in reader.events]
    assert times[0][2] == offset
    # The first Enter of rank 0 (location 0): main.
    main_enter = next(t for ref, kind, t in times if ref == 0 and kind == "Enter")
    starts = ranks[0].tables["intervals"]["start_ns"].to_pylist()
    assert min(starts) == round((main_enter - offset) * 10**9 / resolution)


def test_ping_pong_papi_counters(traces_dir: Path) -> None:
    anchor = traces_dir / "pipit" / "ping-pong-otf2-papi" / "traces.otf2"
    plain = _plain_counts(anchor)
    trace = traceatlas.open(str(anchor))
    names = trace.sql("SELECT DISTINCT name FROM counters ORDER BY 1").rows()
    assert names == [("PAPI_BR_MSP",), ("PAPI_L2_TCM",), ("PAPI_TOT_CYC",)]
    assert trace.sql("SELECT count(*) FROM counters").rows() == [(plain["metric_values"],)]
    assert plain["metric_values"] == 84 * 3  # SOURCES.md: 84 Metric events, 3 members
    kinds = trace.sql(
        "SELECT DISTINCT t.kind FROM counters c JOIN tracks t USING (rank, track_id)").rows()
    assert kinds == [("counter",)]
    assert trace.sql("SELECT count(*) FROM intervals").rows() == [(sum(plain["enters"].values()),)]


def test_mi300_gpu_and_metrics(traces_dir: Path) -> None:
    anchor = traces_dir / "fastotf2" / "simple-mi300-example-run" / "traces.otf2"
    plain = _plain_counts(anchor)
    trace = traceatlas.open(str(anchor))
    assert trace.sql("SELECT DISTINCT rank FROM tracks").rows() == [(0,)]
    gpu = trace.sql(
        "SELECT name, device, stream FROM tracks WHERE kind = 'gpu_stream' ORDER BY 1").rows()
    assert gpu == [("HIP[0:0]", 0, 0), ("HIP[1:0]", 1, 0)]
    kernels = trace.sql(
        "SELECT i.name, i.device FROM intervals i JOIN tracks t USING (rank, track_id) "
        "WHERE t.kind = 'gpu_stream' ORDER BY 2").rows()
    assert kernels == [("heavy_kernel(float*, float const*)", 0),
                       ("light_kernel(float*, float const*)", 1)]
    assert trace.sql(
        "SELECT DISTINCT category FROM intervals i JOIN tracks t USING (rank, track_id) "
        "WHERE t.kind = 'gpu_stream'").rows() == [("kernel",)]
    assert trace.sql("SELECT count(*) FROM counters").rows() == [(plain["metric_values"],)]
    assert plain["metric_values"] == 72_584  # SOURCES.md: 72,584 Metric events
    assert trace.sql(
        "SELECT count(*) FROM counters WHERE name LIKE '%rocm_smi:::busy_percent%'"
    ).rows()[0][0] > 0
    assert trace.sql("SELECT count(*) FROM intervals").rows() == [(sum(plain["enters"].values()),)]
    assert sum(plain["enters"].values()) == 40
    hip_api = trace.sql(
        "SELECT count(*) FROM intervals WHERE name LIKE 'hip%' AND category = 'runtime'").rows()
    assert hip_api[0][0] > 0
