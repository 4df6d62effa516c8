"""``analyze roofline`` on real H100 Kineto traces with recorded shapes (h100-planted,
TraceLens h100).

- GEMM FLOPs and achieved TFLOP/s per shape equal (within 1 %) an independent
  computation straight from the trace JSON: a plain loop over the events (op -> launch
  by External id -> kernels by correlation), 2·M·K·N per mm/addmm from ``Input Dims``.
- No matmul / conv / attention group is above its roof; a memory-bound group may be,
  by at most what the H100's 50 MB L2 cache explains (the byte count is DRAM traffic
  without cache reuse: an input still in L2 is read faster than HBM allows, so at most
  bytes / (bytes - 50 MB) x 100 %).
- The heaviest bf16 mm/addmm groups run at a plausible fraction of the 989 TFLOP/s peak.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest

import traceatlas
from traceatlas import analysis

H100 = [
    "h100-planted/healthy/rank-0.json.gz",
    "h100-planted/regress/rank-0.json.gz",
    "tracelens/traces/h100/facebook_timesformer-base-finetuned-k400__1016002.json.gz",
    "tracelens/traces/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz",
    "tracelens/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "tracelens/traces/h100/Falconsai_nsfw_image_detection__1016002.json.gz",
]
L2_BYTES = 50e6
"""H100 SXM5 L2 cache: 50 MB (NVIDIA H100 Tensor Core GPU Architecture whitepaper)."""


@pytest.fixture(scope="module")
def results(traces_dir: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> dict[str, analysis.Result]:
    out = {}
    for name in H100:
        tmp = tmp_path_factory.mktemp("rl")
        trace = traceatlas.open(traceatlas.ingest(traces_dir / name, tmp / "s"))
        out[name] = analysis.run("roofline", trace, {"convention": "torch"})
    return out


def _independent_gemms(path: Path) -> dict[tuple[str, str], tuple[float, int]]:
    """(op, dims) -> (FLOPs, kernel ns) of mm/addmm from the raw events."""
    with gzip.open(path) as f:
        events = json.loads(f.read())["traceEvents"]
    ops = {e["args"]["External id"]: e for e in events
           if e.get("cat") == "cpu_op" and e["name"] in ("aten::mm", "aten::addmm")}
    op_of_corr = {e["args"]["correlation"]: e["args"].get("External id") for e in events
                  if e.get("cat") in ("cuda_runtime", "cuda_driver") and "args" in e
                  and "correlation" in e["args"]}
    ns: dict[int, float] = defaultdict(float)
    for e in events:
        if e.get("cat") == "kernel":
            ext = op_of_corr.get(e["args"].get("correlation"))
            if ext in ops:
                ns[ext] += e["dur"] * 1000
    out: dict[tuple[str, str], tuple[float, int]] = {}
    for ext, op in ops.items():
        if ext not in ns:
            continue
        dims = op["args"]["Input Dims"]
        (m, k), (_, n) = (dims[0], dims[1]) if op["name"] == "aten::mm" else (dims[1], dims[2])
        key = (op["name"], json.dumps(dims, separators=(",", ":")))
        flops, t = out.get(key, (0.0, 0))
        out[key] = (flops + 2.0 * m * k * n, t + round(ns[ext]))
    return out


@pytest.mark.parametrize("name", [H100[0], H100[2]])
def test_gemm_flops_and_tflops_match_an_independent_count(
        traces_dir: Path, results: dict[str, analysis.Result], name: str) -> None:
    expected = _independent_gemms(traces_dir / name)
    table = results[name].table.filter(pl.col("op").is_in(["aten::mm", "aten::addmm"]))
    got = {}
    for row in table.iter_rows(named=True):
        key = (row["op"], json.dumps(json.loads(row["input_dims"]), separators=(",", ":")))
        got[key] = (row["flops"], row["device_ns"], row["achieved_tflops"])
    assert set(got) == set(expected) and len(got) >= 5
    for key, (flops, t) in expected.items():
        assert got[key][0] == pytest.approx(flops, rel=0.01), key
        assert got[key][1] == pytest.approx(t, rel=0.01, abs=2 * 1000), key
        assert got[key][2] == pytest.approx(flops / t / 1e3, rel=0.01), key


@pytest.mark.parametrize("name", H100)
def test_no_group_above_its_roof_unless_it_fits_in_l2(
        results: dict[str, analysis.Result], name: str) -> None:
    table = results[name].table
    assert table.height > 0 and table["peak_tflops"].null_count() == 0
    over = table.filter(pl.col("pct_of_roof") > 100)
    for row in over.iter_rows(named=True):
        assert row["bound"] == "memory", row
        per_call = row["bytes"] / row["count"]
        if per_call > L2_BYTES:   # at most L2_BYTES of it can come from the cache
            assert row["pct_of_roof"] <= 100 * per_call / (per_call - L2_BYTES), row
    matrix = table.filter(pl.col("family").is_in(["matmul", "conv", "attention"]))
    assert matrix["pct_of_roof"].max() <= 100   # type: ignore[operator]


@pytest.mark.parametrize("name", H100[2:5])
def test_heaviest_matmuls_run_at_a_plausible_rate(
        results: dict[str, analysis.Result], name: str) -> None:
    # mm / addmm (weights): bmm here is attention scores, memory-bound (s x s outputs)
    mats = (results[name].table.filter(pl.col("op").is_in(["aten::mm", "aten::addmm"])
                                       & (pl.col("dtype") == "bf16"))
            .sort("device_ns", descending=True).head(3))
    assert mats.height == 3
    for row in mats.iter_rows(named=True):
        assert 200 <= row["achieved_tflops"] <= 989.4, row
        assert row["bound"] == "compute"
