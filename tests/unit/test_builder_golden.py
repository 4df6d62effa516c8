"""Golden tests: small Kineto traces built in code, ingested, checked against hand values.

Every expected number below is worked out by hand from the builder calls in the same test
(``start_ns = BASE + builder ns``), never copied from library output.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas.cli.main import app
from traceatlas.testing import Collective, TraceBuilder, write_multi_rank

BASE = 1_700_000_000_000_000_000
"""baseTimeNanoseconds used by every builder here."""


def _builder(rank: int | None = 0, world_size: int = 1, **kw: Any) -> TraceBuilder:
    return TraceBuilder(rank, world_size, base_time_ns=BASE, profiler_markers=False, **kw)


def _ingest(tmp_path: Path, b: TraceBuilder, name: str = "rank-0.json") -> traceatlas.Trace:
    src = b.write(tmp_path / name)
    return traceatlas.open(traceatlas.ingest(src, tmp_path / "store"))


def _rows(trace: traceatlas.Trace, **where: Any) -> list[dict[str, Any]]:
    frame = trace.intervals.with_columns(
        pl.col("name", "category", "source_category").cast(pl.String)
    )
    for column, value in where.items():
        frame = frame.filter(pl.col(column) == value)
    return frame.sort("start_ns", "name").collect().to_dicts()


def _one(trace: traceatlas.Trace, **where: Any) -> dict[str, Any]:
    found = _rows(trace, **where)
    assert len(found) == 1, f"expected one interval with {where}, got {len(found)}"
    return found[0]


def _by_category(trace: traceatlas.Trace) -> dict[str, int]:
    frame = (
        trace.intervals.group_by(pl.col("category").cast(pl.String))
        .agg(pl.len().alias("n"))
        .collect()
    )
    return dict(zip(frame["category"].to_list(), frame["n"].to_list(), strict=True))


def _track(trace: traceatlas.Trace, track_id: int) -> dict[str, Any]:
    frame = trace.tracks.filter(pl.col("track_id") == track_id).with_columns(
        pl.col("kind").cast(pl.String)
    )
    found = frame.collect().to_dicts()
    assert len(found) == 1
    return found[0]


# -- categories --------------------------------------------------------------------------


def test_categories_kernel_vs_comm_kernel_memcpy_memset_sync(tmp_path: Path) -> None:
    b = _builder()
    b.step(1, 0, 100_000)
    b.cpu_op("aten::mm", 1_000, 10_000)
    b.launch("void gemm_kernel<float>(float*)", 2_000, 3_000, 20_000, 5_000)
    b.launch("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
             11_000, 2_000, 30_000, 8_000, stream=20)
    b.launch("void my_NCCL_wrapper_kernel()", 13_500, 400, 39_000, 500, stream=20)
    b.launch("Memcpy HtoD (Pageable -> Device)", 14_000, 1_000, 40_000, 2_000,
             kind="memcpy", nbytes=1_048_576)
    b.launch("Memset (Device)", 16_000, 1_000, 43_000, 500, kind="memset", nbytes=4_096)
    b.sync(18_000, 4_000, 45_000, 3_000)
    trace = _ingest(tmp_path, b)

    # 1 step, 1 cpu op, 5 launches + 1 sync = 6 runtime calls; "nccl" in any case -> comm.
    assert _by_category(trace) == {
        "step": 1, "cpu_op": 1, "runtime": 6, "kernel": 1, "comm_kernel": 2,
        "memcpy": 1, "memset": 1, "sync": 1,
    }
    memcpy = _one(trace, category="memcpy")
    assert memcpy["bytes"] == 1_048_576
    assert memcpy["memcpy_kind"] == "HtoD"
    assert memcpy["source_category"] == "gpu_memcpy"
    assert _one(trace, category="memset")["bytes"] == 4_096
    assert _one(trace, category="kernel")["source_category"] == "kernel"
    runtimes = {r["name"] for r in _rows(trace, category="runtime")}
    assert runtimes == {"cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync",
                        "cudaStreamSynchronize"}
    assert _one(trace, category="step")["name"] == "ProfilerStep#1"


# -- exact times -------------------------------------------------------------------------


def test_times_exact_to_the_nanosecond(tmp_path: Path) -> None:
    b = _builder()
    b.cpu_op("aten::add", 1_234, 5_678)                 # ts 1.234 us, dur 4.444 us
    b.cpu_op("aten::mul", 999_999, 1_000_001)           # ts 999.999 us, dur 0.002 us
    # ~50 minutes after the base: far from the rest, but inside the run (an event more
    # than an hour from the bulk is set aside as a timestamp that cannot be right)
    far = 3_000_123_398_728
    b.cpu_op("aten::sub", far, far + 1_601)             # ts 3000123398.728 us
    b.launch("void k()", 2_000, 1_001, 7_007, 3)        # kernel 7.007 us, dur 0.003 us
    text = b.to_json()
    assert '"ts": 1.234, "dur": 4.444' in text
    assert '"ts": 3000123398.728, "dur": 1.601' in text
    trace = _ingest(tmp_path, b)

    add = _one(trace, name="aten::add")
    assert (add["start_ns"], add["end_ns"], add["dur_ns"]) == (
        1_700_000_000_000_001_234, 1_700_000_000_000_005_678, 4_444)
    mul = _one(trace, name="aten::mul")
    assert (mul["start_ns"], mul["end_ns"], mul["dur_ns"]) == (
        1_700_000_000_000_999_999, 1_700_000_000_001_000_001, 2)
    sub = _one(trace, name="aten::sub")
    assert (sub["start_ns"], sub["end_ns"], sub["dur_ns"]) == (
        1_700_003_000_123_398_728, 1_700_003_000_123_400_329, 1_601)
    kernel = _one(trace, name="void k()")
    assert (kernel["start_ns"], kernel["end_ns"]) == (
        1_700_000_000_000_007_007, 1_700_000_000_000_007_010)
    launch = _one(trace, name="cudaLaunchKernel")
    assert (launch["start_ns"], launch["end_ns"]) == (
        1_700_000_000_000_002_000, 1_700_000_000_000_003_001)


def test_gzip_and_plain_json_ingest_the_same(tmp_path: Path) -> None:
    b = _builder()
    b.step(1, 0, 50_000)
    b.launch("void k()", 1_111, 2_222, 3_333, 4_444)
    plain = traceatlas.ingest(b.write(tmp_path / "rank-0.json"), tmp_path / "s1")
    gz = traceatlas.ingest(b.write(tmp_path / "rank-0.json.gz"), tmp_path / "s2")
    cols = ["track_id", "start_ns", "end_ns", "name", "category", "depth", "step"]
    one = traceatlas.open(plain).intervals.select(cols).sort("start_ns").collect()
    two = traceatlas.open(gz).intervals.select(cols).sort("start_ns").collect()
    assert one.equals(two)
    assert one.height == 3


# -- steps -------------------------------------------------------------------------------


def test_step_assignment_host_and_device(tmp_path: Path) -> None:
    b = _builder()
    b.step(3, 100_000, 200_000)
    b.step(4, 200_000, 300_000)
    b.cpu_op("before_any_step", 50_000, 60_000)                 # host, outside -> -1
    b.cpu_op("last_ns_of_step3", 199_999, 200_500)              # starts in step 3
    b.cpu_op("first_ns_of_step4", 200_000, 200_400)             # [start, end): step 4
    # Launched in step 3, runs after step 3's host range has ended (inside step 4's).
    late = b.launch("void late_kernel()", 150_000, 2_000, 250_000, 30_000)
    # Launched after every step: host and device -1.
    after = b.launch("void after_kernel()", 310_000, 2_000, 320_000, 5_000)
    trace = _ingest(tmp_path, b)

    assert _one(trace, name="before_any_step")["step"] == -1
    assert _one(trace, name="last_ns_of_step3")["step"] == 3
    assert _one(trace, name="first_ns_of_step4")["step"] == 4
    assert _one(trace, name="ProfilerStep#3")["step"] == 3
    assert _one(trace, name="ProfilerStep#4")["step"] == 4
    assert _one(trace, name="void late_kernel()")["step"] == 3
    assert _one(trace, correlation=late, category="runtime")["step"] == 3
    assert _one(trace, name="void after_kernel()")["step"] == -1
    assert _one(trace, correlation=after, category="runtime")["step"] == -1


# -- depth -------------------------------------------------------------------------------


def test_depth_of_nested_cpu_ops_and_overlapping_kernels(tmp_path: Path) -> None:
    b = _builder()
    b.cpu_op("A", 0, 100_000)                    # depth 0
    b.cpu_op("B", 10_000, 50_000)                # in A -> 1
    b.cpu_op("C", 20_000, 30_000)                # in B -> 2
    b.cpu_op("D", 60_000, 70_000)                # back in A only -> 1
    b.cpu_op("E", 200_000, 210_000)              # top level again -> 0
    b.launch("K1", 22_000, 3_000, 300_000, 100_000)   # runtime in C -> 3
    b.launch("K2", 62_000, 1_000, 350_000, 100_000)   # overlaps K1, not nested in it
    b.launch("K3", 64_000, 1_000, 460_000, 10_000)    # after both: top level
    b.launch("K4", 65_000, 1_000, 500_000, 10_000)    # K4 and K5: identical ranges
    b.launch("K5", 66_000, 1_000, 500_000, 10_000)
    trace = _ingest(tmp_path, b)

    depth = {r["name"]: r["depth"] for r in _rows(trace, category="cpu_op")}
    assert depth == {"A": 0, "B": 1, "C": 2, "D": 1, "E": 0}
    launches = _rows(trace, category="runtime")
    assert [r["depth"] for r in launches] == [3, 2, 2, 2, 2]  # in C, then four in D
    kernels = {r["name"]: r["depth"] for r in _rows(trace, category="kernel")}
    assert len(kernels) == 5                     # overlapping kernels are all kept
    assert kernels["K1"] == 0
    assert kernels["K2"] == 1                    # K1 still running -> its own row
    assert kernels["K3"] == 0
    assert {kernels["K4"], kernels["K5"]} == {0, 1}


# -- correlation, flows, tracks ----------------------------------------------------------


def test_correlation_flows_and_tracks(tmp_path: Path) -> None:
    b = _builder(rank=0, device=3, pid=777)
    mm = b.cpu_op("aten::mm", 1_000, 20_000)
    corr = b.launch("void gemm()", 5_000, 2_000, 30_000, 10_000, stream=7)
    corr20 = b.launch("void other()", 8_000, 1_000, 32_000, 4_000, stream=20)
    trace = _ingest(tmp_path, b)

    kernel = _one(trace, name="void gemm()")
    launch = _one(trace, category="runtime", correlation=corr)
    assert kernel["correlation"] == launch["correlation"] == corr
    assert kernel["external_id"] == launch["external_id"] == mm
    assert (kernel["device"], kernel["stream"]) == (3, 7)
    assert (launch["device"], launch["stream"]) == (None, None)

    host = _track(trace, launch["track_id"])
    assert (host["kind"], host["device"], host["stream"]) == ("host_thread", -1, -1)
    assert (host["pid"], host["tid"]) == (777, 777)
    gpu = _track(trace, kernel["track_id"])
    assert (gpu["kind"], gpu["device"], gpu["stream"]) == ("gpu_stream", 3, 7)
    other = _track(trace, _one(trace, name="void other()")["track_id"])
    assert (other["kind"], other["device"], other["stream"]) == ("gpu_stream", 3, 20)
    assert _one(trace, name="aten::mm")["track_id"] == host["track_id"]

    flows = trace.flows.with_columns(pl.col("name").cast(pl.String)).collect()
    assert flows.height == 2
    flow = flows.filter(pl.col("flow_id") == str(corr)).to_dicts()[0]
    assert flow["name"] == "ac2g"
    assert (flow["src_track_id"], flow["src_ts_ns"]) == (host["track_id"], BASE + 5_000)
    assert (flow["dst_track_id"], flow["dst_ts_ns"]) == (gpu["track_id"], BASE + 30_000)
    flow20 = flows.filter(pl.col("flow_id") == str(corr20)).to_dicts()[0]
    assert flow20["dst_track_id"] == other["track_id"]


def test_launch_outside_any_op_has_no_external_id(tmp_path: Path) -> None:
    b = _builder()
    b.launch("void k()", 1_000, 1_000, 5_000, 1_000)
    trace = _ingest(tmp_path, b)
    assert _one(trace, category="kernel")["external_id"] is None
    assert _one(trace, category="runtime")["external_id"] is None


def test_collective_args_on_kernel_and_record_param_comms(tmp_path: Path) -> None:
    coll = Collective("allreduce", in_msg_nelems=1_024, out_msg_nelems=1_024,
                      dtype="Float", group_ranks=(0, 1), pg_name="0")
    b = _builder(rank=1, world_size=2)
    b.cpu_op("record_param_comms", 1_000, 9_000, collective=coll)
    b.launch("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", 2_000, 1_000,
             10_000, 50_000, stream=20, collective=coll)
    trace = _ingest(tmp_path, b)
    for row in (_one(trace, category="comm_kernel"), _one(trace, category="cpu_op")):
        assert row["collective"] == "allreduce"
        assert row["process_group"] == "0"
        assert row["group_ranks"] == "[0, 1]"
        assert (row["in_msg_nelems"], row["out_msg_nelems"]) == (1_024, 1_024)
        assert row["dtype"] == "Float"
        assert json.loads(row["args"])["Group size"] == 2
    assert trace.ranks == [1]


def test_gpu_annotation_spans_its_kernels_per_stream(tmp_path: Path) -> None:
    b = _builder()
    fwd = b.annotation("## forward ##", 1_000, 50_000, gpu=True)
    b.launch("k1", 2_000, 1_000, 60_000, 10_000)                 # stream 7
    b.launch("k2", 4_000, 1_000, 75_000, 15_000)                 # stream 7
    b.launch("k3", 6_000, 1_000, 65_000, 5_000, stream=20)       # stream 20
    b.launch("k_after", 51_000, 1_000, 95_000, 1_000)            # launched outside
    trace = _ingest(tmp_path, b)

    gpu = _rows(trace, category="gpu_annotation")
    assert len(gpu) == 2
    s7, s20 = sorted(gpu, key=lambda r: int(_track(trace, r["track_id"])["stream"]))
    # Kineto's display fix: 1 ns before the first kernel, 1 ns after the last one.
    assert (s7["start_ns"], s7["end_ns"]) == (BASE + 59_999, BASE + 90_001)
    assert (s20["start_ns"], s20["end_ns"]) == (BASE + 64_999, BASE + 70_001)
    assert s7["external_id"] == s20["external_id"] == fwd
    assert s7["depth"] == 0
    assert {r["name"]: r["depth"] for r in _rows(trace, category="kernel")} == {
        "k1": 1, "k2": 1, "k3": 1, "k_after": 0}
    assert _one(trace, category="annotation")["name"] == "## forward ##"


def test_profiler_markers(tmp_path: Path) -> None:
    b = TraceBuilder(0, 1, base_time_ns=BASE)      # markers on (the default)
    b.step(1, 5_000, 40_000)
    b.launch("void k()", 6_000, 1_000, 30_000, 20_000)   # device end 50_000 is the last
    trace = _ingest(tmp_path, b)
    span = _one(trace, category="other")
    assert span["name"] == "PyTorch Profiler (0)"
    assert (span["start_ns"], span["end_ns"]) == (BASE + 5_000, BASE + 50_000)
    instants = (trace.instants.with_columns(pl.col("name").cast(pl.String))
                .sort("ts_ns").collect())
    assert instants["name"].to_list() == ["Iteration Start: PyTorch Profiler",
                                          "Record Window End"]
    assert instants["ts_ns"].to_list() == [BASE + 5_000, BASE + 50_000]
    summary = traceatlas.summarize(trace)
    assert summary["span_ns"] == 45_000
    assert summary["by_category"] == {"runtime": 1, "kernel": 1, "step": 1, "other": 1}


# -- ranks -------------------------------------------------------------------------------


def _three_ranks(directory: Path) -> list[Path]:
    builders = []
    for rank in range(3):
        b = _builder(rank, 3)
        b.step(1, rank * 1_000, 1_000_000 + rank * 1_000)
        for k in range(rank + 1):                      # rank r launches r + 1 kernels
            b.launch(f"void k{k}()", 10_000 + k * 10_000, 1_000,
                     100_000 * (k + 1), 10_000)
        builders.append(b)
    return write_multi_rank(directory, builders)


def test_multi_rank_counts(tmp_path: Path) -> None:
    paths = _three_ranks(tmp_path / "run")
    assert [p.name for p in paths] == ["rank-0.json.gz", "rank-1.json.gz", "rank-2.json.gz"]
    trace = traceatlas.open(traceatlas.ingest(tmp_path / "run", tmp_path / "store"))
    assert trace.ranks == [0, 1, 2]
    summary = traceatlas.summarize(trace)
    assert summary["source_format"] == "kineto"
    assert summary["ranks"] == [0, 1, 2]
    # rank r: 1 step + (r + 1) launches + (r + 1) kernels = 2r + 3 -> 3, 5, 7.
    assert summary["intervals"] == 15
    assert summary["by_category"] == {"runtime": 6, "kernel": 6, "step": 3}
    assert summary["per_rank"] == [
        {"rank": r, "intervals": 2 * r + 3,
         "by_category": {"runtime": r + 1, "kernel": r + 1, "step": 1}}
        for r in range(3)
    ]
    # earliest start: rank 0's step at 0; latest end: rank 2's step at 1_002_000.
    assert summary["span_ns"] == 1_002_000
    per_rank_steps = trace.sql(
        "SELECT rank, min(start_ns) AS s FROM intervals WHERE category = 'step' "
        "GROUP BY rank ORDER BY rank")
    assert per_rank_steps["s"].to_list() == [BASE, BASE + 1_000, BASE + 2_000]


def test_rank_from_file_name_warns(tmp_path: Path) -> None:
    b = _builder(rank=None)                       # no distributedInfo in the file
    b.step(1, 0, 10_000)
    b.launch("void k()", 1_000, 1_000, 2_000, 1_000)
    src = b.write(tmp_path / "worker5.json")
    assert "distributedInfo" not in json.loads(src.read_text())
    with pytest.warns(traceatlas.DataQualityWarning, match="rank 5"):
        store = traceatlas.ingest(src, tmp_path / "store")
    trace = traceatlas.open(store)
    assert trace.ranks == [5]
    assert trace.intervals.select(pl.col("rank").unique()).collect()["rank"].to_list() == [5]


def test_two_files_same_rank_conflict(tmp_path: Path) -> None:
    a, c = _builder(rank=0, world_size=2), _builder(rank=0, world_size=2)
    a.step(1, 0, 10_000)
    c.step(1, 0, 10_000)
    (tmp_path / "run").mkdir()
    a.write(tmp_path / "run" / "rank-0.json")
    c.write(tmp_path / "run" / "other.json")
    out = tmp_path / "store"
    with pytest.raises(traceatlas.RankConflictError):
        traceatlas.ingest(tmp_path / "run", out)
    assert not out.exists()                       # atomic: nothing left behind


# -- CLI ---------------------------------------------------------------------------------


def test_cli_ingest_info_json_and_sql(tmp_path: Path) -> None:
    _three_ranks(tmp_path / "run")
    runner = CliRunner()
    store = tmp_path / "store"
    done = runner.invoke(app, ["ingest", str(tmp_path / "run"), "-o", str(store)])
    assert done.exit_code == 0, done.output

    info = runner.invoke(app, ["info", str(store), "--format", "json"])
    assert info.exit_code == 0, info.output
    summary = json.loads(info.stdout)
    for key in ("ranks", "intervals", "by_category", "per_rank", "span_ns", "source_format"):
        assert key in summary
    assert summary["ranks"] == [0, 1, 2]
    assert summary["intervals"] == 15
    assert summary["by_category"] == {"runtime": 6, "kernel": 6, "step": 3}
    assert [r["intervals"] for r in summary["per_rank"]] == [3, 5, 7]
    assert summary["span_ns"] == 1_002_000
    assert summary["source_format"] == "kineto"

    sql = runner.invoke(app, ["sql", str(store), "SELECT rank, count(*) AS n FROM intervals "
                              "WHERE category = 'kernel' GROUP BY rank ORDER BY rank",
                              "--format", "csv"])
    assert sql.exit_code == 0, sql.output
    assert sql.stdout.split() == ["rank,n", "0,1", "1,2", "2,3"]


def test_cli_info_reports_bad_input_with_exit_code_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["info", str(tmp_path / "missing.json")])
    assert result.exit_code == 2
