"""``analyze roofline`` on traces built here: kernel time per op, achieved TFLOP/s and
TB/s, % of the roof, no-model listing, overrides, the advisor rule.

Expected numbers are computed in the test from the shapes it writes (2·M·K·N FLOPs,
element counts x 2 bytes for bf16) and the H100 SXM datasheet peaks the builder's device
name selects (989.4 TFLOP/s bf16 dense, 3.35 TB/s).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas import analysis
from traceatlas.advisor import roofline as rule
from traceatlas.advisor.base import Context
from traceatlas.analysis import gpu_peaks
from traceatlas.cli.main import app
from traceatlas.errors import MissingDataError
from traceatlas.testing import TraceBuilder

BF16 = "c10::BFloat16"
N = 1024
MM_FLOPS = 2 * N**3
MM_BYTES = 3 * N * N * 2
ADD_ELEMS = 4096 * 1024


def _shapes(dims: list[object], types: list[str]) -> dict[str, object]:
    return {"Input Dims": dims, "Input type": types,
            "Concrete Inputs": [""] * len(dims)}


def _build(shapes: bool = True) -> TraceBuilder:
    b = TraceBuilder(rank=0)
    mm = _shapes([[N, N], [N, N]], [BF16, BF16]) if shapes else {}
    add = _shapes([[4096, 1024], [4096, 1024], []], [BF16, BF16, "Scalar"]) if shapes else {}
    b.cpu_op("aten::mm", 0, 50_000, args=mm)
    b.launch("sm90_gemm", 10_000, 5_000, 100_000, 10_000)           # 10 us
    b.cpu_op("aten::mm", 60_000, 110_000, args=mm)
    b.launch("sm90_gemm", 70_000, 5_000, 200_000, 30_000)           # 30 us
    b.cpu_op("aten::add", 120_000, 170_000, args=add)
    b.launch("elementwise_a", 130_000, 5_000, 300_000, 20_000)      # two kernels: 20 + 30 us
    b.launch("elementwise_b", 140_000, 5_000, 330_000, 30_000)
    b.cpu_op("aten::embedding", 180_000, 220_000,
             args=_shapes([[10, 4], [3]], ["float", "long int"]) if shapes else {})
    b.launch("gather", 190_000, 5_000, 400_000, 7_000)
    b.launch("orphan", 230_000, 5_000, 500_000, 3_000)              # outside any op
    return b


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> traceatlas.Trace:
    tmp = tmp_path_factory.mktemp("roofline")
    path = _build().write(tmp / "rank-0.json")
    return traceatlas.open(traceatlas.ingest(path, tmp / "store"))


def _row(result: analysis.Result, op: str) -> dict[str, object]:
    rows = [r for r in result.table.iter_rows(named=True) if r["op"] == op]
    assert len(rows) == 1, rows
    return rows[0]


def test_matmul_group_exact_achieved_and_roof(trace: traceatlas.Trace) -> None:
    res = analysis.run("roofline", trace)
    mm = _row(res, "aten::mm")
    assert (mm["count"], mm["kernels"], mm["device_ns"]) == (2, 2, 40_000)
    assert mm["flops"] == 2 * MM_FLOPS and mm["bytes"] == 2 * MM_BYTES
    assert mm["achieved_tflops"] == pytest.approx(2 * MM_FLOPS / 40_000e-9 / 1e12)
    assert mm["achieved_tbps"] == pytest.approx(2 * MM_BYTES / 40_000e-9 / 1e12)
    assert mm["intensity"] == pytest.approx(MM_FLOPS / MM_BYTES)
    assert (mm["peak_kind"], mm["peak_tflops"], mm["peak_tbps"]) == ("bf16", 989.4, 3.35)
    assert mm["bound"] == "compute"                  # 341 flop/B > ridge 295
    roof_s = max(2 * MM_FLOPS / 989.4e12, 2 * MM_BYTES / 3.35e12)
    assert mm["roof_ns"] == pytest.approx(roof_s * 1e9)
    assert mm["pct_of_roof"] == pytest.approx(100 * roof_s / 40_000e-9)
    assert mm["lost_ns"] == pytest.approx(40_000 - roof_s * 1e9, abs=1)
    assert mm["attainable_tflops"] == pytest.approx(989.4)


def test_elementwise_group_sums_both_kernels_and_is_memory_bound(
        trace: traceatlas.Trace) -> None:
    add = _row(analysis.run("roofline", trace), "aten::add")
    assert (add["kernels"], add["device_ns"]) == (2, 50_000)
    assert add["flops"] == ADD_ELEMS and add["bytes"] == 3 * ADD_ELEMS * 2
    assert add["peak_kind"] == "fp32" and add["peak_tflops"] == 67.0
    assert add["bound"] == "memory"
    assert add["attainable_tflops"] == pytest.approx(ADD_ELEMS / (6 * ADD_ELEMS) * 3.35)
    assert add["pct_of_roof"] == pytest.approx(
        100 * (6 * ADD_ELEMS / 3.35e12) / 50_000e-9)


def test_ops_without_a_model_and_kernels_without_an_op_are_listed(
        trace: traceatlas.Trace) -> None:
    res = analysis.run("roofline", trace)
    missing = {r["op"]: r["device_ns"] for r in res.extra["no_model"].iter_rows(named=True)}
    assert missing == {"aten::embedding": 7_000, "(no launching op)": 3_000}
    assert "aten::embedding" not in res.table["op"].to_list()
    modelled = 90_000
    assert any(f"{modelled / 100_000:.1%}" in n for n in res.notes)
    shares = {r["op"]: r["share_pct"] for r in res.table.iter_rows(named=True)}
    assert shares["aten::mm"] == pytest.approx(40.0)


def test_peak_override_and_per_rank_grouping(trace: traceatlas.Trace) -> None:
    res = analysis.run("roofline", trace, {"peak_tflops": "100", "peak_tbps": "1",
                                           "by": "rank"})
    mm = _row(res, "aten::mm")
    assert mm["rank"] == 0 and mm["peak_tflops"] == 100.0 and mm["peak_tbps"] == 1.0
    assert mm["ridge"] == pytest.approx(100.0)
    assert mm["bound"] == "compute"
    assert set(res.extra["peaks"]["source"]) == {"override"}


def test_unknown_device_has_null_peaks_and_a_note(tmp_path: Path) -> None:
    b = _build()
    text = b.to_json().replace("NVIDIA H100 80GB HBM3", "Mystery GPU 9000")
    (tmp_path / "r.json").write_text(text)
    t = traceatlas.open(traceatlas.ingest(tmp_path / "r.json", tmp_path / "s"))
    res = analysis.run("roofline", t)
    assert _row(res, "aten::mm")["pct_of_roof"] is None
    assert _row(res, "aten::mm")["flops"] == 2 * MM_FLOPS
    assert any("Mystery GPU 9000" in n and "peak_tflops" in n for n in res.notes)


def test_trace_without_shapes_is_missing_data(tmp_path: Path) -> None:
    path = _build(shapes=False).write(tmp_path / "r.json")
    t = traceatlas.open(traceatlas.ingest(path, tmp_path / "s"))
    with pytest.raises(MissingDataError, match="record_shapes"):
        analysis.run("roofline", t)


def test_cli_json_and_bad_param(trace: traceatlas.Trace) -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["analyze", "roofline", str(trace.path), "-f", "json",
                             "-p", "top=1"])
    assert ok.exit_code == 0, ok.output
    rows = json.loads(ok.stdout[ok.stdout.index("["):])
    assert [r["op"] for r in rows] == ["aten::add"]          # most device time first
    bad = runner.invoke(app, ["analyze", "roofline", str(trace.path), "-p",
                              "peak_tbps=-1"])
    assert bad.exit_code == 2 and "peak_tbps" in bad.output


def test_gpu_table_lookup() -> None:
    assert gpu_peaks.lookup("NVIDIA H100 80GB HBM3").label == "H100 SXM5"  # type: ignore[union-attr]
    assert gpu_peaks.lookup("NVIDIA H100 PCIe").label == "H100 PCIe"  # type: ignore[union-attr]
    a100 = gpu_peaks.lookup("NVIDIA A100-SXM4-80GB", 85e9)
    assert a100 is not None and a100.tbps == 2.039
    assert gpu_peaks.lookup("NVIDIA A100-SXM4-40GB", 42e9).tbps == 1.555  # type: ignore[union-attr]
    assert gpu_peaks.lookup("AMD Instinct MI300X VF").tflops["bf16"] == 1307.4  # type: ignore[union-attr]
    assert gpu_peaks.lookup("Tesla V100-SXM2-32GB").tflops["fp16"] == 125.0  # type: ignore[union-attr]
    assert gpu_peaks.lookup("") is None and gpu_peaks.lookup("GeForce RTX 2080 Ti") is None
    for gpu in gpu_peaks.GPUS:
        assert gpu.source.startswith("https://") and gpu.tbps > 0
        assert set(gpu.tflops) <= set(gpu_peaks.KINDS)


def test_advisor_rule_flags_the_heavy_op_far_below_its_roof(
        trace: traceatlas.Trace) -> None:
    findings = rule.check(Context(trace, path="run dir/x.json"))
    assert findings, "the add group runs at ~15% of its roof with 50% of the kernel time"
    top = findings[0]
    add = _row(analysis.run("roofline", trace), "aten::add")
    assert top.where["op"] == "aten::add"
    assert top.cost_ns == round(float(add["lost_ns"]))  # type: ignore[arg-type]
    assert "memory-bound" in top.statement and "fusion" in top.next_step
    assert top.command == "traceatlas analyze roofline 'run dir/x.json'"
    assert top.cause == "below_roofline"
    # the mm group (10.9 % of roof, 40 % of time) is flagged too, with matmul advice
    mm = [f for f in findings if f.where["op"] == "aten::mm"]
    assert mm and "compute-bound" in mm[0].statement
