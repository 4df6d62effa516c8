"""The test builder writes the genuine Kineto 2022+ JSON layout (checked on the raw JSON)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from traceatlas.testing import Collective, TraceBuilder, micros, write_multi_rank


def _events(b: TraceBuilder) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = json.loads(b.to_json())["traceEvents"]
    return events


def test_micros_has_three_decimals() -> None:
    assert micros(0) == "0.000"
    assert micros(5) == "0.005"
    assert micros(1_234) == "1.234"
    assert micros(1_000_000) == "1000.000"
    assert micros(1_365_627_865_398_728) == "1365627865398.728"
    with pytest.raises(ValueError):
        micros(-1)


def test_bad_ranges_are_rejected() -> None:
    b = TraceBuilder()
    with pytest.raises(ValueError):
        b.cpu_op("x", 10, 5)
    with pytest.raises(ValueError):
        b.launch("k", -1, 1, 0, 1)


def test_top_level_keys() -> None:
    b = TraceBuilder(rank=1, world_size=4, base_time_ns=123_000, backend="nccl", device=1)
    top = json.loads(b.to_json())
    keys = list(top)
    assert keys[:3] == ["schemaVersion", "deviceProperties", "distributedInfo"]
    assert keys.index("displayTimeUnit") < keys.index("baseTimeNanoseconds") < keys.index(
        "traceEvents")
    assert top["schemaVersion"] == 1
    assert top["displayTimeUnit"] == "ms"
    assert top["baseTimeNanoseconds"] == 123_000
    dist = top["distributedInfo"]
    assert (dist["backend"], dist["rank"], dist["world_size"]) == ("nccl", 1, 4)
    assert [p["id"] for p in top["deviceProperties"]] == [0, 1]


def test_no_distributed_info_without_rank() -> None:
    assert "distributedInfo" not in json.loads(TraceBuilder(rank=None).to_json())


def test_launch_writes_runtime_device_event_and_ac2g_pair() -> None:
    b = TraceBuilder(rank=0, pid=100, device=2, profiler_markers=False)
    op = b.cpu_op("aten::mm", 0, 10_000)
    corr = b.launch("void gemm()", 1_500, 2_250, 20_000, 3_001, stream=9,
                    grid=(4, 2, 1), block=(256, 1, 1))
    ev = _events(b)
    runtime = [e for e in ev if e.get("cat") == "cuda_runtime"]
    kernel = [e for e in ev if e.get("cat") == "kernel"]
    assert len(runtime) == len(kernel) == 1
    assert runtime[0]["name"] == "cudaLaunchKernel"
    assert (runtime[0]["pid"], runtime[0]["tid"]) == (100, 100)
    assert (runtime[0]["ts"], runtime[0]["dur"]) == (1.5, 2.25)
    assert runtime[0]["args"] == {"External id": op, "cbid": 211, "correlation": corr}
    k = kernel[0]
    assert (k["pid"], k["tid"], k["ts"], k["dur"]) == (2, 9, 20.0, 3.001)
    assert k["args"]["correlation"] == corr
    assert k["args"]["External id"] == op
    assert (k["args"]["device"], k["args"]["stream"]) == (2, 9)
    assert (k["args"]["grid"], k["args"]["block"]) == ([4, 2, 1], [256, 1, 1])
    flows = [e for e in ev if e.get("cat") == "ac2g"]
    start = next(e for e in flows if e["ph"] == "s")
    end = next(e for e in flows if e["ph"] == "f")
    assert (start["id"], start["pid"], start["tid"], start["ts"]) == (corr, 100, 100, 1.5)
    assert "bp" not in start
    assert (end["id"], end["pid"], end["tid"], end["ts"], end["bp"]) == (corr, 2, 9, 20.0, "e")


def test_phases_categories_and_metadata() -> None:
    b = TraceBuilder(rank=0, device=0)
    coll = Collective("allreduce", 8, 8, group_ranks=(0, 1))
    b.step(1, 0, 100_000)
    b.annotation("## forward ##", 1_000, 40_000, gpu=True)
    b.cpu_op("aten::mm", 2_000, 9_000)
    b.launch("void gemm()", 3_000, 1_000, 10_000, 5_000)
    b.cpu_op("record_param_comms", 41_000, 49_000, collective=coll)
    b.launch("ncclKernel_AllReduce", 42_000, 1_000, 50_000, 9_000, stream=20, collective=coll)
    b.launch("Memcpy HtoD (Pageable -> Device)", 60_000, 1_000, 61_000, 1_000,
             kind="memcpy", nbytes=64)
    b.launch("Memset (Device)", 62_000, 1_000, 63_000, 1_000, kind="memset", nbytes=32)
    b.sync(70_000, 5_000, 71_000, 3_000)
    b.instant("marker", 80_000)
    ev = _events(b)
    assert {e["ph"] for e in ev} == {"X", "s", "f", "M", "i"}
    cats = {e.get("cat") for e in ev if e["ph"] == "X"}
    assert cats == {"cpu_op", "user_annotation", "gpu_user_annotation", "cuda_runtime",
                    "kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "Trace"}
    meta = {(e["name"], e["pid"], e["tid"]): e["args"] for e in ev if e["ph"] == "M"}
    assert meta[("process_labels", 0, 0)] == {"labels": "GPU 0"}
    assert meta[("process_labels", 4242, 0)] == {"labels": "CPU"}
    assert meta[("thread_name", 0, 7)] == {"name": "stream 7 "}
    assert meta[("thread_name", 4242, 4242)] == {"name": "thread 4242 (python)"}
    nccl = next(e for e in ev if e["name"] == "ncclKernel_AllReduce")
    rpc = next(e for e in ev if e["name"] == "record_param_comms")
    for args in (nccl["args"], rpc["args"]):
        assert args["Collective name"] == "allreduce"
        assert (args["In msg nelems"], args["Out msg nelems"]) == (8, 8)
        assert args["Group size"] == 2
        assert args["Process Group Ranks"] == "[0, 1]"
        assert args["Process Group Name"] == "0"
        assert args["dtype"] == "Float"
    memcpy = next(e for e in ev if e.get("cat") == "gpu_memcpy")
    assert memcpy["args"]["bytes"] == 64
    sync = next(e for e in ev if e.get("cat") == "cuda_sync")
    assert sync["tid"] == 1_000_007                      # Kineto's Stream Sync row
    assert not any(e["ph"] in "sf" and e["id"] == sync["args"]["correlation"] for e in ev)
    step = next(e for e in ev if e["name"] == "ProfilerStep#1")
    assert step["cat"] == "user_annotation"


def test_correlation_ids_are_fresh() -> None:
    b = TraceBuilder()
    ids = [b.launch("k", i * 10, 1, i * 10 + 5, 1) for i in range(5)]
    assert len(set(ids)) == 5


def test_write_gzip_and_multi_rank(tmp_path: Path) -> None:
    builders = [TraceBuilder(rank=r, world_size=2) for r in range(2)]
    for b in builders:
        b.step(1, 0, 1_000)
    paths = write_multi_rank(tmp_path, builders)
    assert [p.name for p in paths] == ["rank-0.json.gz", "rank-1.json.gz"]
    raw = paths[1].read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    assert json.loads(gzip.decompress(raw))["distributedInfo"]["rank"] == 1
    plain = write_multi_rank(tmp_path / "plain", builders, gz=False)
    assert plain[0].name == "rank-0.json"
    json.loads(plain[0].read_text())
    with pytest.raises(ValueError):
        write_multi_rank(tmp_path, [TraceBuilder(rank=None)])
