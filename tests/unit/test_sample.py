"""The shipped sample (examples/sample_trace) matches its generator and its description."""

from __future__ import annotations

import gzip
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import polars as pl

import traceatlas

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SAMPLE = EXAMPLES / "sample_trace"


def _make_sample() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_sample", EXAMPLES / "make_sample.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_sample_is_what_the_script_writes(tmp_path: Path) -> None:
    paths = _make_sample().main(tmp_path)
    assert [p.name for p in paths] == ["rank-0.json.gz", "rank-1.json.gz"]
    for path in paths:
        shipped = SAMPLE / path.name
        assert shipped.stat().st_size < 50_000
        assert gzip.decompress(shipped.read_bytes()) == gzip.decompress(path.read_bytes())


def test_sample_contents(tmp_path: Path) -> None:
    trace = traceatlas.open(traceatlas.ingest(SAMPLE, tmp_path / "store"))
    summary = traceatlas.summarize(trace)
    assert summary["ranks"] == [0, 1]
    # Per rank and step: copy_ + 28 layer ops + 2 sgd ops + record_param_comms = 32 cpu ops;
    # 30 kernel + 1 nccl + 1 memcpy launches + 1 sync = 33 runtime calls; 4 annotations
    # (forward, backward, nccl:all_reduce, optimizer); forward and backward on the GPU.
    per_rank = {"cpu_op": 96, "annotation": 12, "gpu_annotation": 6, "runtime": 99,
                "kernel": 90, "comm_kernel": 3, "memcpy": 3, "sync": 3, "step": 3,
                "other": 1}
    for entry in summary["per_rank"]:
        assert entry["by_category"] == per_rank
        assert entry["intervals"] == sum(per_rank.values())

    device = (
        trace.intervals.filter(pl.col("category").cast(pl.String).is_in(
            ["kernel", "comm_kernel"]))
        .group_by("rank", "step", pl.col("category").cast(pl.String))
        .agg(pl.len().alias("n"), pl.col("dur_ns").sum().alias("busy"))
        .collect()
    )
    kernels = device.filter(pl.col("category") == "kernel")
    assert sorted(kernels["n"].to_list()) == [30] * 6
    comm = device.filter(pl.col("category") == "comm_kernel").sort("rank", "step")
    rank0 = comm.filter(pl.col("rank") == 0)["busy"].to_list()
    rank1 = comm.filter(pl.col("rank") == 1)["busy"].to_list()
    assert comm["step"].to_list() == [1, 2, 3, 1, 2, 3]
    assert all(a > b for a, b in zip(rank0, rank1, strict=True))  # rank 0 waits for rank 1

    # Step 2's 2.5 ms host stall: stream 7 idles from the end of the batch copy (~0.15 ms
    # after the stall began) to the first forward kernel, so more than 2 ms, on every rank.
    stream7 = trace.sql(
        "SELECT i.rank, i.start_ns, i.end_ns FROM intervals i JOIN tracks t "
        "ON i.rank = t.rank AND i.track_id = t.track_id "
        "WHERE t.stream = 7 AND i.category IN ('kernel', 'memcpy') AND i.step = 2 "
        "ORDER BY i.rank, i.start_ns")
    for rank in (0, 1):
        rows = stream7.filter(pl.col("rank") == rank)
        gaps = (rows["start_ns"][1:] - rows["end_ns"][:-1]).to_list()
        assert 2_000_000 < max(gaps) < 2_500_000
